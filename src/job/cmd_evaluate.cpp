// trainer-job evaluate: a model (and adapter) answers a dataset's prompts; each answer is graded
// against the row's final assistant message (docs/evaluations.md).
//
// The evaluation is described by a JSON file (--spec) so that trainerd can write it as it writes
// a run's plan; trainerd starts it through its backend like a training job (job kind `evaluate`,
// protocol/job_request.h). The rows go to OUTPUT/rows.jsonl and the report to OUTPUT/report.json
// (each written whole, atomically). Its events (docs/job-protocol.md) go to --events FILE (stdout
// when absent): `hello`, `evaluation_progress` after each batch, then `evaluation_report`, or
// `failed` / `cancelled`; trainerd follows them. Errors go to standard error (--log FILE: appended
// to FILE instead). SIGTERM or SIGINT stops between batches: nothing is written, exit 143.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/json_parse.h"
#include "common/version.h"
#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"
#include "job/heartbeat.h"
#include "job/input_fetch.h"
#include "job/job_events.h"
#include "job/stop_signals.h"
#include "protocol/inputs.h"
#include "protocol/job_request.h"
#include "storage/storage.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: trainer-job evaluate --spec FILE.json --output DIR [--events FILE] [--log FILE]\n"
    "The spec: {\"baseModel\": DIR, \"adapter\": DIR (optional), \"dataset\": FILE.jsonl,\n"
    "  \"grader\": {\"kind\": \"json-label-match\"} (a reward term: rule:, bundle:, http:, model:),\n"
    "  \"maxNewTokens\": 256, \"greedy\": true, \"temperature\": 1.0, \"seed\": 0, \"batchSize\": 8,\n"
    "  \"maxSeqLength\": 2048, \"gpus\": 0, \"precision\": \"FP32\"|\"BF16\"}.\n"
    "Writes DIR/rows.jsonl (one graded answer per row) and DIR/report.json. Job protocol events go\n"
    "to --events (stdout when absent): evaluation_progress per batch, then evaluation_report.\n"
    "--log: errors go there.\n"
    "SIGTERM stops between batches (exit 143).\n";

// Reads the spec into `req`; errors name the spec's field.
Status read_spec(const json& spec, engine::EvaluateRequest* req) {
  if (!spec.is_object()) return invalid_field("spec", "must be a JSON object");
  static const char* const kKnown[] = {"baseModel", "adapter", "dataset", "grader", "maxNewTokens", "greedy",
                                        "temperature", "seed", "batchSize", "maxSeqLength", "gpus", "precision"};
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    if (std::find(std::begin(kKnown), std::end(kKnown), it.key()) == std::end(kKnown)) {
      return invalid_field(it.key(), "is not a field of an evaluation spec");
    }
  }
  auto string_field = [&](const char* name, bool required, std::string* out) -> Status {
    if (!spec.contains(name) || spec[name].is_null()) {
      return required ? invalid_field(name, "is required") : Status::ok();
    }
    if (!spec[name].is_string() || spec[name].get<std::string>().empty()) {
      return invalid_field(name, "must be a non-empty string, got " + spec[name].dump());
    }
    *out = spec[name].get<std::string>();
    return Status::ok();
  };
  auto int_field = [&](const char* name, int64_t lo, int64_t hi, auto* out) -> Status {
    if (!spec.contains(name)) return Status::ok();
    if (!spec[name].is_number_integer() || spec[name].get<int64_t>() < lo || spec[name].get<int64_t>() > hi) {
      return invalid_field(name, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                     spec[name].dump());
    }
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(spec[name].get<int64_t>());
    return Status::ok();
  };
  TRAINER_RETURN_IF_ERROR(string_field("baseModel", true, &req->model_dir));
  TRAINER_RETURN_IF_ERROR(string_field("adapter", false, &req->adapter_dir));
  TRAINER_RETURN_IF_ERROR(string_field("dataset", true, &req->data_path));
  json grader = spec.value("grader", json{{"kind", "json-label-match"}});
  auto term = plan::parse_reward_term(grader, "grader");
  if (!term.is_ok()) return term.status();
  req->grader = *term;
  TRAINER_RETURN_IF_ERROR(int_field("maxNewTokens", 1, 32768, &req->max_new_tokens));
  TRAINER_RETURN_IF_ERROR(int_field("seed", 0, INT64_MAX, &req->seed));
  TRAINER_RETURN_IF_ERROR(int_field("batchSize", 1, 1024, &req->batch_size));
  TRAINER_RETURN_IF_ERROR(int_field("maxSeqLength", 2, 1 << 20, &req->max_seq_length));
  TRAINER_RETURN_IF_ERROR(int_field("gpus", 0, 64, &req->gpus));
  if (req->max_new_tokens >= req->max_seq_length) {
    return invalid_field("maxNewTokens", "must be below maxSeqLength (" + std::to_string(req->max_seq_length) +
                                             ") to leave room for a prompt");
  }
  if (spec.contains("greedy")) {
    if (!spec["greedy"].is_boolean()) return invalid_field("greedy", "must be true or false, got " + spec["greedy"].dump());
    req->greedy = spec["greedy"].get<bool>();
  }
  if (spec.contains("temperature")) {
    const json& t = spec["temperature"];
    if (!t.is_number() || t.get<double>() <= 0 || t.get<double>() > 10) {
      return invalid_field("temperature", "must be a number in (0, 10], got " + t.dump());
    }
    req->temperature = t.get<double>();
  }
  std::string precision = "FP32";
  TRAINER_RETURN_IF_ERROR(string_field("precision", false, &precision));
  if (precision == "BF16") {
    req->precision = plan::Precision::kBf16;
  } else if (precision != "FP32") {
    return invalid_field("precision", "must be FP32 or BF16, got \"" + precision + "\"");
  }
  return Status::ok();
}

}  // namespace

int cmd_evaluate(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"spec", "output", "log", "events"}, {"help"});
  if (args.flags.count("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.error.empty() || !args.has("spec") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job evaluate: %s\n%s",
                 args.error.empty() ? "--spec and --output are required" : args.error.c_str(), kUsage);
    return 2;
  }
  if (args.has("log") && std::freopen(args.get("log").c_str(), "a", stderr) == nullptr) {
    std::fprintf(stdout, "{\"error\": \"--log cannot be opened\"}\n");
    return 2;
  }
  std::ifstream in(args.get("spec"));
  if (!in) {
    std::fprintf(stderr, "trainer-job evaluate: --spec %s cannot be read\n", args.get("spec").c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto spec = parse_json(text.str(), args.get("spec"));
  engine::EvaluateRequest req;
  Status st = spec.is_ok() ? read_spec(*spec, &req) : spec.status();
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainer-job evaluate: %s: %s\n", args.get("spec").c_str(), st.describe().c_str());
    return 2;
  }
  EventWriter events;
  if (st = events.open(args.get("events")); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job evaluate: %s\n", st.message().c_str());
    return 1;
  }
  protocol::Hello hello{.job_version = std::string("trainer-job ") + version_string()};
  auto request = protocol::job_request_from_environment(std::getenv);
  if (request.is_ok() && !request->run_id.empty()) {
    hello.run_id = request->run_id;
    hello.attempt = request->attempt;
  }
  events.write(hello);
  // Its events and log go to trainerd over its API when it asks (the files stay the fallback).
  std::unique_ptr<PostedLog> posted_log = request.is_ok() ? report_to_trainerd(events, *request) : nullptr;
  // Alive between progress events (a model load, a long row): trainerd stops a silent job as hung.
  Heartbeat heartbeat(events, std::chrono::seconds(request.is_ok() ? request->heartbeat_seconds : 0));
  auto fail = [&](const std::string& reason) {
    events.write(protocol::Failed{reason});
    std::fprintf(stderr, "trainer-job evaluate: %s\n", reason.c_str());
    return 1;
  };
  // Inputs named by s3:// URIs (a cluster job with an S3 store): verified copies on this node.
  if (request.is_ok()) {
    std::vector<std::pair<std::string, std::string*>> inputs = {{"baseModel", &req.model_dir},
                                                                {"dataset", &req.data_path}};
    if (!req.adapter_dir.empty()) inputs.push_back({"adapter", &req.adapter_dir});
    if (Status fetched = fetch_inputs(inputs, input_fetch_options(*request)); !fetched.is_ok()) {
      return fail(fetched.describe());
    }
  }
  block_stop_signals();
  std::atomic<bool> stop{false};
  StopSignals signals([&](int sig) {
    if (sig != kPauseSignal) stop = true;
  });
  req.stop = &stop;
  auto result = engine::evaluate(
      req, [&](int64_t done, int64_t total) { events.write(protocol::EvaluationProgress{.done = done, .total = total}); });
  if (!result.is_ok()) return fail(result.status().describe());
  if (result->cancelled) {
    events.write(protocol::Cancelled{});
    std::fprintf(stderr, "trainer-job evaluate: stopped by a signal; nothing written\n");
    return kExitCancelled;
  }
  const std::filesystem::path dir = args.get("output");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string rows;
  for (const auto& r : result->rows) rows += r.dump() + "\n";
  json report = result->report;
  report["generationSeconds"] = result->generation_seconds;
  report["gradingSeconds"] = result->grading_seconds;
  st = write_file_atomic((dir / "rows.jsonl").string(), rows);
  if (st.is_ok()) st = write_file_atomic((dir / "report.json").string(), report.dump(2) + "\n");
  if (!st.is_ok()) return fail("--output " + dir.string() + ": " + st.message());
  // A cluster job's output folder is on its node: the rows go to the S3 store as well.
  if (request.is_ok() && request->artifact_root.rfind("s3://", 0) == 0) {
    auto store = storage::open_storage(request->artifact_root);
    st = store.is_ok() ? (*store)->put(protocol::evaluation_rows_key(request->run_id), rows) : store.status();
    if (!st.is_ok()) return fail("publishing the rows to " + request->artifact_root + ": " + st.message());
  }
  events.write(protocol::EvaluationReport{.report = report});
  return 0;
}

}  // namespace trainer::job
