// The typed run record: what the service stores for a run, read back and validated.
#include <gtest/gtest.h>

#include <string>

#include "service/run_record.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

RunRecord sample() {
  RunRecord r;
  r.id = "0123456789abcdef";
  r.workload_id = "w1";
  r.workload_name = "sentiment";
  r.base_model = "tiny";
  r.phase = Phase::kTraining;
  r.attempt = 2;
  r.view = {{"progress", {{"step", 3}}}, {"latest", json::object()}, {"plan", {{"kind", "run"}}},
            {"phaseHistory", json::array()}};
  r.request = "{}";
  r.pool = "cpu";
  r.devices = 1;
  r.created_at = 100.5;
  r.entered_at = 101.0;
  r.dataset_key = "datasets/x.jsonl";
  r.rows = 12;
  JobRecord job;
  job.handle.value = R"({"pid":42,"startTime":7})";
  job.started_at = 102;
  job.events_path = "/r/events.jsonl";
  job.log_path = "/r/job.log";
  job.output_dir = "/r/output";
  job.offset = 99;
  r.job = job;
  r.cancel_requested = true;
  r.stop_sent_at = 103.0;
  r.terminal = Phase::kCancelled;
  return r;
}

TEST(RunRecord, RoundTripsThroughItsStoredDocument) {
  RunRecord r = sample();
  auto back = parse_run_record(r.to_json().dump(), r.id);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), r.to_json());
  EXPECT_EQ(back->phase, Phase::kTraining);
  EXPECT_EQ(back->job->handle.value, R"({"pid":42,"startTime":7})");
  EXPECT_EQ(back->job->offset, 99);
  EXPECT_EQ(*back->terminal, Phase::kCancelled);
}

TEST(RunRecord, AttemptBookkeepingRoundTrips) {
  RunRecord r = sample();
  r.attempt = 3;
  r.attempt_base = 2;
  r.next_attempt_at = 110.5;
  r.job->heard_at = 104.0;
  r.job->hung_at = 105.0;
  auto back = parse_run_record(r.to_json().dump(), r.id);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->attempt_base, 2);
  EXPECT_EQ(*back->next_attempt_at, 110.5);
  EXPECT_EQ(*back->job->heard_at, 104.0);
  EXPECT_EQ(*back->job->hung_at, 105.0);
  EXPECT_EQ(back->to_json(), r.to_json());
}

TEST(RunRecord, TheEnginesReportsRoundTripHiddenFromThePublicDocument) {
  RunRecord r = sample();
  r.engine_config = {{"engine", "native"}, {"config", {{"adam_beta1", 0.9}}}, {"attempt", 2}};
  r.engine_runtime = {{"engine", "native"}, {"attempt", 2}, {"memory", {{"afterLoad", {{"allocatedBytes", 7}}}}}};
  auto back = parse_run_record(r.to_json().dump(), r.id);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->engine_config, r.engine_config);
  EXPECT_EQ(back->engine_runtime, r.engine_runtime);
  EXPECT_FALSE(r.public_json().contains("engineConfig"));
  // A record written before engines has neither.
  auto before = parse_run_record(sample().to_json().dump(), r.id);
  ASSERT_TRUE(before.is_ok());
  EXPECT_TRUE(before->engine_config.is_null() && before->engine_runtime.is_null());
  json bad = r.to_json();
  bad["_"]["engineRuntime"] = 3;
  auto refused = parse_run_record(bad.dump(), r.id);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("_.engineRuntime: must be an object"), std::string::npos)
      << refused.status().message();
}

TEST(RunRecord, ThePublicDocumentHidesTheBookkeeping) {
  json shown = sample().public_json();
  EXPECT_FALSE(shown.contains("_"));
  EXPECT_EQ(shown["phase"], "TRAINING");
  EXPECT_EQ(shown["workload"], json({{"id", "w1"}, {"name", "sentiment"}}));
  EXPECT_EQ(shown["progress"]["step"], 3);
}

TEST(RunRecord, ReadsADocumentWrittenBeforeHandlesWereOpaque) {
  json doc = sample().to_json();
  doc["_"]["job"].erase("handle");
  doc["_"]["job"]["pid"] = 42;
  doc["_"]["job"]["startTime"] = 7;
  auto back = RunRecord::from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(json::parse(back->job->handle.value), json({{"pid", 42}, {"startTime", 7}}));
}

TEST(RunRecord, ReadsADocumentThatNamedFilesOfTheDataFolder) {
  // Written before stored documents named storage keys: the key is the path's last two parts.
  json doc = sample().to_json();
  doc["_"].erase("datasetKey");
  doc["_"].erase("validationKey");
  doc["_"]["datasetPath"] = "/srv/trainer/data/datasets/abc.jsonl";
  doc["_"]["validationPath"] = "/srv/trainer/data/datasets/def.jsonl";
  doc["_"]["baseModelPath"] = "/srv/trainer/data/models/123";
  auto back = RunRecord::from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->dataset_key, "datasets/abc.jsonl");
  EXPECT_EQ(*back->validation_key, "datasets/def.jsonl");
  EXPECT_FALSE(back->to_json()["_"].contains("baseModelPath"));
}

TEST(RunRecord, AnEmptyDatasetKeyRoundTrips) {
  // A run failed before its dataset was resolved (a damaged document) keeps an empty key.
  RunRecord r = sample();
  r.dataset_key.clear();
  auto back = RunRecord::from_json(r.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), r.to_json());
}

TEST(RunRecord, ItsTraceRoundTrips) {
  RunRecord r = sample();
  r.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  r.root_span_id = "00f067aa0ba902b7";
  r.link_trace_id = "0af7651916cd43dd8448eb211c80319c";
  r.link_span_id = "b9c7c989f97918e1";
  auto back = parse_run_record(r.to_json().dump(), r.id);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->trace_id, r.trace_id);
  EXPECT_EQ(back->root_span_id, r.root_span_id);
  EXPECT_EQ(back->link_trace_id, r.link_trace_id);
  EXPECT_EQ(back->link_span_id, r.link_span_id);
  EXPECT_FALSE(r.public_json().contains("_"));  // bookkeeping, never shown
  EXPECT_FALSE(sample().to_json()["_"].contains("trace"));  // an untraced run stores none
}

TEST(RunRecord, ADamagedDocumentIsAnErrorNamingTheField) {
  struct Case {
    const char* path;
    json value;
    const char* field;
  } cases[] = {
      {"/phase", "RUNNING", "phase"},
      {"/phase", 3, "phase"},
      {"/workload", "w1", "workload"},
      {"/_/devices", "one", "_.devices"},
      {"/_/job/offset", -2, "_.job.offset"},
      {"/_/job/eventsPath", nullptr, "_.job.eventsPath"},
      {"/_/jobOutcome", "exploded", "_.jobOutcome"},
      {"/progress", json::array(), "progress"},
      {"/_", json::array(), "_"},
      {"/_/attemptBase", 5, "_.attemptBase"},  // past the run's attempt (2)
      {"/_/job/heardAt", "now", "_.job.heardAt"},
      {"/_/trace", "abc", "_.trace"},
      {"/_/trace", {{"traceId", 7}, {"rootSpanId", "00f067aa0ba902b7"}}, "_.trace.traceId"},
  };
  for (const auto& c : cases) {
    json doc = sample().to_json();
    doc[json::json_pointer(c.path)] = c.value;
    auto r = RunRecord::from_json(doc);
    ASSERT_FALSE(r.is_ok()) << c.path;
    EXPECT_EQ(r.status().field(), c.field) << r.status().to_string();
  }
}

TEST(RunRecord, ATextThatIsNotARunNamesTheRun) {
  auto garbage = parse_run_record("garbage", "0123456789abcdef");
  ASSERT_FALSE(garbage.is_ok());
  EXPECT_NE(garbage.status().message().find("the stored document of run 0123456789abcdef"), std::string::npos);
  std::string deep(10000, '[');
  deep += std::string(10000, ']');
  auto nested = parse_run_record(deep, "0123456789abcdef");
  ASSERT_FALSE(nested.is_ok());
  EXPECT_NE(nested.status().message().find("nested more than"), std::string::npos) << nested.status().message();
  auto other = parse_run_record(sample().to_json().dump(), "fedcba9876543210");
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("is not the run's id"), std::string::npos);
}

}  // namespace
}  // namespace trainer::service
