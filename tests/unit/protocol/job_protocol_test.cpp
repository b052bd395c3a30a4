// The job protocol (src/protocol/job_protocol.h): every event survives a round trip through its
// line; readers skip what they do not know and refuse what is malformed or nested too deep.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "protocol/job_protocol.h"
#include "protocol/snapshot.h"

namespace trainer::protocol {
namespace {

using nlohmann::json;

Step full_step() {
  Step s{.step = 3, .total_steps = 10, .epoch = 1, .loss = 1.25, .learning_rate = 1e-4, .grad_norm = 0.5,
         .token_accuracy = 0.75, .tokens_per_second = 1234.5, .batch_tokens = 96, .trained_tokens = 40,
         .step_seconds = 0.5, .input_seconds = 0.01, .forward_backward_seconds = 0.4, .optimizer_seconds = 0.09};
  s.padding_share = 0.125;
  s.mfu = 0.31;
  s.useful_flops = 2.5e9;
  s.useful_mfu = 0.125;
  StepMemory m;
  m.allocated_peak_bytes = 1 << 30;
  m.reserved_peak_bytes = 3 << 29;
  m.usage.weights = 1000;
  m.usage.adapter = 10;
  m.usage.gradients = 10;
  m.usage.optimizer_state = 20;
  m.usage.activations = 500;
  m.usage.other_tensors = 5;
  m.usage.allocator_cache = 7;
  m.usage.outside_allocator = 300;
  m.usage.free = 80000;
  s.memory = m;
  return s;
}

// Every event type, its optional fields set.
std::vector<Event> every_event() {
  return {
      Hello{.protocol_version = 1, .job_version = "trainer-job 0.1.0", .run_id = "run-1", .attempt = 2},
      Phase{.phase = "TRAINING", .total_steps = 10, .device = "cuda:0", .startup_seconds = 2.5},
      Phase{.phase = "PREPARING"},
      Preparing{.rows_done = 5, .rows_total = 64},
      DataFit{.rows = 64, .truncated = 2, .exact = 1, .dropped = 3},
      DataSplit{.train_rows = 55, .validation_rows = 6, .held_out = true},
      Devices{{Device{.index = 0, .kind = "cuda", .name = "NVIDIA H100 PCIe", .uuid = "GPU-1234"},
               Device{.index = 1, .kind = "cpu"}}},
      Resolved{.config = json{{"method", "sft"}, {"lora", {{"rank", 8}}}}, .settings_sha = "abc"},
      full_step(),
      Validation{.step = 3, .validation_loss = 1.5, .tokens = 400, .evaluation_seconds = 0.2},
      Checkpoint{.step = 3, .adapter_dir = "/out/checkpoints/step-00000003/adapter", .checkpoint_seconds = 0.1},
      Completed{.adapter_dir = "/out/adapter", .final_loss = 0.9, .steps = 10, .final_validation_loss = 1.1,
                .export_seconds = 0.3},
      Failed{.reason = "config.dataset: no rows"},
      Cancelled{.steps = 4},
      Paused{.step = 6, .snapshot_id = std::string(64, 'a')},
      Warning{.field = "execution.gpus", .message = "grpo trains on one device"},
      EvaluationProgress{.done = 8, .total = 32},
      EvaluationReport{.report = json{{"rows", 32}, {"meanScore", 0.75}}},
      Heartbeat{.step = 7, .uptime_seconds = 12.5},
      Smoke{.passed = false, .check = "loss", .reason = "step 3 of 4: the loss is nan", .steps = 4, .rows = 16,
            .loss = 2.5, .restored_loss = 2.5, .seconds = 1.5},
      EngineConfig{.engine = "native", .config = json{{"adam_beta1", 0.9}, {"lora_r", 8}}},
      EngineRuntime{.engine = "native", .report = json{{"memory", {{"afterLoad", {{"allocatedBytes", 1024}}}}}}},
  };
}

TEST(JobProtocol, EveryEventRoundTripsThroughItsLine) {
  for (const Event& event : every_event()) {
    const std::string line = to_line(event);
    auto back = decode_event(line);
    ASSERT_TRUE(back.is_ok()) << line << ": " << back.status().describe();
    ASSERT_TRUE(back->has_value()) << line;
    EXPECT_EQ(event_type(**back), event_type(event));
    EXPECT_EQ(to_json(**back), to_json(event)) << line;
  }
}

// The wire format readers rely on (the service, the CLI, Python tests): key names, null vs
// absent, and integers vs numbers, byte for byte (keys come out sorted).
TEST(JobProtocol, LinesAreByteForByteTheWireFormat) {
  Step rl_step{.step = 2, .loss = std::numeric_limits<double>::quiet_NaN()};
  rl_step.memory = StepMemory{};
  rl_step.rl = json{{"reward", 1.5}};
  const std::vector<std::pair<Event, std::string>> cases = {
      {Hello{.job_version = "trainer-job 0.1.0", .run_id = "run-1", .attempt = 2},
       R"({"attempt":2,"jobVersion":"trainer-job 0.1.0","protocolVersion":1,"runId":"run-1","type":"hello"})"},
      {Hello{.job_version = ""}, R"({"jobVersion":"","protocolVersion":1,"type":"hello"})"},
      {Devices{{Device{.index = 0, .kind = "cuda", .uuid = "GPU-1"}}},
       R"({"devices":[{"index":0,"kind":"cuda","uuid":"GPU-1"}],"type":"devices"})"},
      {full_step(),
       R"({"batchTokens":96,"epoch":1,"forwardBackwardSeconds":0.4,"gradNorm":0.5,"inputSeconds":0.01,)"
       R"("learningRate":0.0001,"loss":1.25,"memory":{"allocatedPeakBytes":1073741824,"reservedPeakBytes":1610612736,)"
       R"("usage":{"activations":500,"adapter":10,"allocatorCache":7,"free":80000,"gradients":10,"optimizerState":20,)"
       R"("otherTensors":5,"outsideAllocator":300,"weights":1000}},"mfu":0.31,"optimizerSeconds":0.09,)"
       R"("paddingShare":0.125,"step":3,"stepSeconds":0.5,"tokenAccuracy":0.75,"tokensPerSecond":1234.5,)"
       R"("totalSteps":10,"trainedTokens":40,"type":"step","usefulFlops":2500000000.0,"usefulMfu":0.125})"},
      {rl_step,
       R"({"batchTokens":0,"epoch":0,"forwardBackwardSeconds":0.0,"gradNorm":0.0,"inputSeconds":0.0,)"
       R"("learningRate":0.0,"loss":null,"memory":{},"optimizerSeconds":0.0,"rl":{"reward":1.5},"step":2,)"
       R"("stepSeconds":0.0,"tokenAccuracy":0.0,"tokensPerSecond":0.0,"totalSteps":0,"trainedTokens":0,"type":"step"})"},
      {Checkpoint{.step = 3, .adapter_dir = "/o", .state_dir = "/s"},
       R"({"adapterDir":"/o","checkpointSeconds":0.0,"stateDir":"/s","step":3,"type":"checkpoint"})"},
      {Completed{}, R"({"adapterDir":"","exportSeconds":0.0,"finalLoss":0.0,"steps":0,"type":"completed"})"},
      {Cancelled{}, R"({"type":"cancelled"})"},
      {Warning{.message = "m"}, R"({"message":"m","type":"warning"})"},
      {EvaluationProgress{.done = 8, .total = 32}, R"({"done":8,"total":32,"type":"evaluation_progress"})"},
      {EvaluationReport{.report = json{{"rows", 2}}}, R"({"report":{"rows":2},"type":"evaluation_report"})"},
      {Heartbeat{.uptime_seconds = 2.0}, R"({"type":"heartbeat","uptimeSeconds":2.0})"},
      {Smoke{.passed = true, .steps = 4, .rows = 16, .loss = 1.5, .restored_loss = 1.5, .seconds = 0.5},
       R"({"loss":1.5,"passed":true,"restoredLoss":1.5,"rows":16,"seconds":0.5,"steps":4,"type":"smoke"})"},
      {Smoke{.check = "load", .reason = "config.dataset: d cannot be read"},
       R"({"check":"load","passed":false,"reason":"config.dataset: d cannot be read","rows":0,"seconds":0.0,"steps":0,)"
       R"("type":"smoke"})"},
      {EngineConfig{.engine = "trl", .config = json{{"adam_beta1", 0.9}}},
       R"({"config":{"adam_beta1":0.9},"engine":"trl","type":"engine_config"})"},
      {EngineRuntime{.engine = "native", .report = json{{"rolloutEngine", nullptr}}},
       R"({"engine":"native","report":{"rolloutEngine":null},"type":"engine_runtime"})"},
  };
  for (const auto& [event, line] : cases) EXPECT_EQ(to_line(event), line);
}

// Reading gives the same errors for every struct: a wrong type or a missing field, named.
TEST(JobProtocol, NestedFieldsAreNamedInTheirErrors) {
  const std::pair<const char*, std::pair<const char*, const char*>> cases[] = {
      {R"({"type":"step","step":1,"loss":1,"memory":{"usage":{"weights":"x"}}})",
       {"step.memory.usage.weights", "must be an integer"}},
      {R"({"type":"step","step":1,"loss":1,"memory":{"usage":3}})", {"step.memory.usage", "must be an object"}},
      {R"({"type":"devices","devices":[3]})", {"devices.devices[0]", "must be an object"}},
      {R"({"type":"devices","devices":{}})", {"devices.devices", "must be an array"}},
      {R"({"type":"hello"})", {"hello.protocolVersion", "required"}},
      {R"({"type":"resolved","config":[],"settingsSha":"x"})", {"resolved.config", "must be an object"}},
      {R"({"type":"data_split","trainRows":1,"validationRows":2,"heldOut":1})",
       {"data_split.heldOut", "must be true or false"}},
      {R"({"type":"validation","step":1,"validationLoss":"x"})", {"validation.validationLoss", "must be a number"}},
      {R"({"type":"evaluation_progress","done":1})", {"evaluation_progress.total", "required"}},
      {R"({"type":"evaluation_report","report":[]})", {"evaluation_report.report", "must be an object"}},
      {R"({"type":"smoke","check":"loss"})", {"smoke.passed", "required"}},
  };
  for (const auto& [line, expected] : cases) {
    auto decoded = decode_event(line);
    ASSERT_FALSE(decoded.is_ok()) << line;
    EXPECT_EQ(decoded.status().field(), expected.first) << line;
    EXPECT_EQ(decoded.status().message(), expected.second) << line;
  }
  // An integral float is an integer; null is absent; an `rl` that is not an object is ignored.
  auto lenient = parse_event(R"({"type":"step","step":2.0,"loss":1,"mfu":null,"epoch":null,"rl":[1]})");
  ASSERT_TRUE(lenient);
  EXPECT_EQ(std::get<Step>(*lenient).step, 2);
  EXPECT_FALSE(std::get<Step>(*lenient).mfu);
  EXPECT_TRUE(std::get<Step>(*lenient).rl.is_null());
}

TEST(JobProtocol, EveryEventTypeIsCovered) {
  // A new alternative of Event needs a case in every_event().
  std::set<std::string_view> types;
  for (const Event& event : every_event()) types.insert(event_type(event));
  EXPECT_EQ(types.size(), std::variant_size_v<Event>);
}

TEST(JobProtocol, StepFieldsKeepTheirNamesAndValues) {
  const json j = to_json(Event(full_step()));
  EXPECT_EQ(j["type"], "step");
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["totalSteps"], 10);
  EXPECT_EQ(j["learningRate"], 1e-4);
  EXPECT_EQ(j["forwardBackwardSeconds"], 0.4);
  EXPECT_EQ(j["memory"]["allocatedPeakBytes"], 1 << 30);
  EXPECT_EQ(j["memory"]["usage"]["optimizerState"], 20);
  EXPECT_EQ(j["memory"]["usage"]["outsideAllocator"], 300);
  auto back = parse_event(j.dump());
  ASSERT_TRUE(back);
  EXPECT_EQ(std::get<Step>(*back).memory, full_step().memory);
}

TEST(JobProtocol, AStepWrittenBeforeUsefulFlopsReadsWithoutIt) {
  auto old = parse_event(R"({"type":"step","step":1,"loss":1.5,"mfu":0.2,"batchTokens":8})");
  ASSERT_TRUE(old);
  const Step& s = std::get<Step>(*old);
  EXPECT_FALSE(s.useful_flops.has_value());
  EXPECT_FALSE(s.useful_mfu.has_value());
  EXPECT_FALSE(to_json(Event(s)).contains("usefulFlops"));
  auto now = parse_event(R"({"type":"step","step":1,"loss":1.5,"usefulFlops":1e12,"usefulMfu":0.5})");
  ASSERT_TRUE(now);
  EXPECT_EQ(std::get<Step>(*now).useful_flops, 1e12);
  EXPECT_EQ(std::get<Step>(*now).useful_mfu, 0.5);
}

TEST(JobProtocol, OptionalFieldsAreLeftOutWhenAbsent) {
  EXPECT_EQ(to_json(Event(Phase{.phase = "PREPARING"})), json({{"type", "phase"}, {"phase", "PREPARING"}}));
  EXPECT_EQ(to_json(Event(Cancelled{})), json({{"type", "cancelled"}}));
  Step bare{.step = 1, .loss = 2};
  const json j = to_json(Event(bare));
  EXPECT_FALSE(j.contains("mfu"));
  EXPECT_FALSE(j.contains("paddingShare"));
  EXPECT_FALSE(j.contains("memory"));
}

TEST(JobProtocol, AnUnknownTypeIsSkippedNotAnError) {
  auto decoded = decode_event(R"({"type":"gpu_temperature","celsius":71})");
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().describe();
  EXPECT_FALSE(decoded->has_value());
  EXPECT_FALSE(parse_event(R"({"type":"gpu_temperature"})"));
}

TEST(JobProtocol, UnknownFieldsOfAKnownTypeAreIgnored) {
  auto e = parse_event(R"({"type":"validation","step":4,"validationLoss":0.5,"perplexity":1.6})");
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<Validation>(*e).step, 4);
}

TEST(JobProtocol, MalformedLinesAreSkippedAndTheirErrorNamesTheField) {
  EXPECT_FALSE(parse_event("{\"type\":\"step\",\"step\":"));  // cut short
  EXPECT_FALSE(parse_event("[1,2]"));
  EXPECT_FALSE(parse_event(""));
  EXPECT_FALSE(parse_event(R"({"phase":"TRAINING"})"));  // no type

  auto no_type = decode_event(R"({"phase":"TRAINING"})");
  ASSERT_FALSE(no_type.is_ok());
  EXPECT_EQ(no_type.status().field(), "type");

  auto bad_field = decode_event(R"({"type":"step","step":"three","loss":1})");
  ASSERT_FALSE(bad_field.is_ok());
  EXPECT_EQ(bad_field.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_field.status().field(), "step.step");
  EXPECT_EQ(bad_field.status().message(), "must be an integer");

  auto missing = decode_event(R"({"type":"checkpoint","step":2})");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().field(), "checkpoint.adapterDir");

  auto bad_device = decode_event(R"({"type":"devices","devices":[{"index":0}]})");
  ASSERT_FALSE(bad_device.is_ok());
  EXPECT_EQ(bad_device.status().field(), "devices.devices[0].kind");
}

TEST(JobProtocol, DeepNestingIsRefusedBeforeItIsBuilt) {
  std::string deep = R"({"type":"resolved","settingsSha":"x","config":)";
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  deep += "}";
  auto decoded = decode_event(deep);
  ASSERT_FALSE(decoded.is_ok());
  EXPECT_NE(decoded.status().message().find("nest"), std::string::npos) << decoded.status().message();
  EXPECT_FALSE(parse_event(deep));
}

TEST(JobProtocol, AnOverlongLineIsRefused) {
  std::string line = R"({"type":"failed","reason":")" + std::string(kMaxEventLineBytes, 'x') + "\"}";
  EXPECT_FALSE(decode_event(line).is_ok());
}

TEST(JobProtocol, ANonFiniteLossIsWrittenAsNullAndReadAsNan) {
  Step s{.step = 1, .loss = std::numeric_limits<double>::quiet_NaN()};
  auto back = parse_event(to_line(s));
  ASSERT_TRUE(back);
  EXPECT_TRUE(std::isnan(std::get<Step>(*back).loss));
}

TEST(JobProtocol, AStreamWithoutHelloIsVersionOneAndNewerVersionsAreRecognised) {
  EXPECT_TRUE(supported_protocol_version(1));
  EXPECT_FALSE(supported_protocol_version(kProtocolVersion + 1));
  EXPECT_FALSE(supported_protocol_version(0));
  auto hello = parse_event(R"({"type":"hello","protocolVersion":2,"jobVersion":"trainer-job 9"})");
  ASSERT_TRUE(hello);
  EXPECT_EQ(std::get<Hello>(*hello).protocol_version, 2);
}

TEST(JobProtocol, AFailureWithoutReasonStillSaysSo) {
  auto e = parse_event(R"({"type":"failed"})");
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<Failed>(*e).reason, "the job reported a failure without a reason");
}

TEST(SnapshotProtocol, TheIdDerivesFromRunStepAndDigestsAndManifestsRoundTrip) {
  const std::string d1(64, '1'), d2(64, '2');
  const std::string id = snapshot_id("run", 4, {{"weights", d1}});
  EXPECT_EQ(id.size(), 64u);
  EXPECT_EQ(id, snapshot_id("run", 4, {{"weights", d1}}));
  EXPECT_NE(id, snapshot_id("run", 5, {{"weights", d1}}));
  EXPECT_NE(id, snapshot_id("other", 4, {{"weights", d1}}));
  EXPECT_NE(id, snapshot_id("run", 4, {{"weights", d2}}));
  EXPECT_NE(id, snapshot_id("run", 4, {{"weights", d1}, {"trainingState", d2}}));
  Manifest m{.kind = "weights", .run_id = "run", .engine_step = 4, .epoch = 1, .base_model_sha = "abc"};
  m.files = {{.path = "a.safetensors", .bytes = 10, .sha256 = d1}};
  auto back = parse_manifest(manifest_text(m));
  ASSERT_TRUE(back.is_ok()) << back.status().describe();
  EXPECT_EQ(manifest_text(*back), manifest_text(m));
  auto bad = parse_manifest(R"({"format":1,"kind":"weights","runId":"r","engineStep":1,"epoch":0,"baseModelSha":"",)"
                            R"("files":[{"path":"../x","bytes":1,"sha256":")" + d1 + R"("}]})");
  EXPECT_EQ(bad.status().field(), "files[0].path");
  auto kind = parse_manifest(R"({"format":1,"kind":"optimizer","runId":"r","engineStep":1,"epoch":0,"baseModelSha":"","files":[]})");
  EXPECT_EQ(kind.status().field(), "kind");
  auto r = parse_reservation(json{{"snapshotId", id}, {"attempt", 0}, {"step", 4}, {"epoch", 0},
                                  {"kinds", {{"weights", {{"manifestDigest", d1}, {"bytes", 3}}}}}});
  EXPECT_EQ(r.status().field(), "attempt");
}

}  // namespace
}  // namespace trainer::protocol
