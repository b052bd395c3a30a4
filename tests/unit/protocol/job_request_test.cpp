// The job request (src/protocol/job_request.h): one writer gives the TRAINER_* environment a
// backend sets, one reader gives the request back; a malformed variable is named.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "protocol/job_request.h"

namespace trainer::protocol {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

Getenv getenv_of(const Env& env) {
  auto values = std::make_shared<std::map<std::string, std::string>>(env.begin(), env.end());
  return [values](const char* name) -> const char* {
    auto it = values->find(name);
    return it == values->end() ? nullptr : it->second.c_str();
  };
}

JobRequest full_request() {
  JobRequest r;
  r.run_id = "run-7f3a";
  r.attempt = 2;
  r.identity = {.workload = "sentiment", .method = "sft", .base_model = "Qwen/Qwen3-0.6B", .base_model_sha = "ab12",
                .profile = "cpu", .pipeline_id = "5e2b7c90a1b2c3d4", .pipeline_stage = "judge"};
  r.otlp_endpoint = "http://127.0.0.1:9001/otlp";
  r.otlp_interval_ms = 1000;
  r.otlp_traces_endpoint = "http://127.0.0.1:4318/v1/traces";
  r.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  r.catalog_url = "https://127.0.0.1:8080";
  r.catalog_ca_file = "/etc/trainer/ca.pem";
  r.job_id = "run-7f3a-2";
  r.job_token = "t0k";
  r.launch_fence = 7;
  r.artifact_root = "s3://bucket/prefix";
  r.store = {.s3_endpoint = "http://127.0.0.1:8333", .region = "us-east-1", .access_key_id = "AK",
             .secret_access_key = "SK", .input_cache = "/cache", .publish_deadline_seconds = 300};
  r.resume_snapshot = std::string(64, 'a');
  r.branch_snapshot = std::string(64, 'b');
  r.branch_restore = kRestoreTrainingState;
  r.serve_secret = "s3cret";
  return r;
}

TEST(JobRequest, TheEnvironmentNamesEveryFieldInItsFixedOrder) {
  EXPECT_EQ(job_environment(full_request()),
            (Env{{"TRAINER_RUN_ID", "run-7f3a"},
                 {"TRAINER_ATTEMPT", "2"},
                 {"TRAINER_WORKLOAD", "sentiment"},
                 {"TRAINER_METHOD", "sft"},
                 {"TRAINER_BASE_MODEL", "Qwen/Qwen3-0.6B"},
                 {"TRAINER_BASE_MODEL_SHA", "ab12"},
                 {"TRAINER_PROFILE", "cpu"},
                 {"TRAINER_PIPELINE_ID", "5e2b7c90a1b2c3d4"},
                 {"TRAINER_PIPELINE_STAGE", "judge"},
                 {"TRAINER_OTLP_ENDPOINT", "http://127.0.0.1:9001/otlp"},
                 {"TRAINER_OTLP_INTERVAL_MS", "1000"},
                 {"TRAINER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"},
                 {"TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                 {"TRAINER_CATALOG_URL", "https://127.0.0.1:8080"},
                 {"TRAINER_CATALOG_CA_FILE", "/etc/trainer/ca.pem"},
                 {"TRAINER_JOB_ID", "run-7f3a-2"},
                 {"TRAINER_JOB_TOKEN", "t0k"},
                 {"TRAINER_LAUNCH_FENCE", "7"},
                 {"TRAINER_ARTIFACT_ROOT", "s3://bucket/prefix"},
                 {"TRAINER_S3_ENDPOINT", "http://127.0.0.1:8333"},
                 {"AWS_REGION", "us-east-1"},
                 {"AWS_ACCESS_KEY_ID", "AK"},
                 {"AWS_SECRET_ACCESS_KEY", "SK"},
                 {"TRAINER_INPUT_CACHE", "/cache"},
                 {"TRAINER_PUBLISH_DEADLINE_SECONDS", "300"},
                 {"TRAINER_RESUME_SNAPSHOT", std::string(64, 'a')},
                 {"TRAINER_BRANCH_SNAPSHOT", std::string(64, 'b')},
                 {"TRAINER_BRANCH_RESTORE", "trainingState"},
                 {"TRAINER_SERVE_SECRET", "s3cret"}}));
}

TEST(JobRequest, EmptyFieldsAreNotPassedButTheRunAndAttemptAlwaysAre) {
  JobRequest r;
  r.run_id = "r1";
  r.otlp_interval_ms = 250;  // without an endpoint: not passed
  r.plan_path = "/runs/r1/plan.json";  // the paths are arguments, not variables
  EXPECT_EQ(job_environment(r), (Env{{"TRAINER_RUN_ID", "r1"}, {"TRAINER_ATTEMPT", "1"}}));
  r.kind = JobKind::kEvaluate;
  EXPECT_EQ(job_environment(r), (Env{{"TRAINER_RUN_ID", "r1"}, {"TRAINER_ATTEMPT", "1"}, {"TRAINER_JOB_KIND", "evaluate"}}));
}

TEST(JobRequest, TheReaderGivesBackWhatTheWriterWrote) {
  for (JobKind kind : {JobKind::kTrain, JobKind::kEvaluate, JobKind::kServe, JobKind::kCurate}) {
    JobRequest r = full_request();
    r.kind = kind;
    auto back = job_request_from_environment(getenv_of(job_environment(r)));
    ASSERT_TRUE(back.is_ok()) << back.status().describe();
    EXPECT_EQ(back->kind, kind);
    EXPECT_EQ(back->attempt, 2);
    EXPECT_EQ(back->identity.base_model_sha, "ab12");
    EXPECT_EQ(back->identity.pipeline_stage, "judge");
    EXPECT_EQ(back->store.publish_deadline_seconds, 300);
    EXPECT_EQ(back->launch_fence, 7);
    EXPECT_EQ(job_environment(*back), job_environment(r));
  }
}

TEST(JobRequest, ALocalRunSetsNothing) {
  auto r = job_request_from_environment(getenv_of({}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->kind, JobKind::kTrain);
  EXPECT_EQ(r->run_id, "");
  EXPECT_EQ(r->attempt, 1);
  EXPECT_EQ(r->otlp_interval_ms, 5000);
  EXPECT_EQ(r->branch_restore, "");
}

TEST(JobRequest, ABranchRestoresTheWeightsUnlessItSaysOtherwise) {
  auto r = job_request_from_environment(getenv_of({{"TRAINER_BRANCH_SNAPSHOT", "s"}}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->branch_restore, kRestoreWeights);
}

TEST(JobRequest, TheKindNamesTheJobsCommand) {
  JobRequest r;
  r.plan_path = "/d/plan.json";
  r.output_dir = "/d/output";
  r.events_path = "/d/events.jsonl";
  EXPECT_EQ(job_arguments(r), (std::vector<std::string>{"run", "--plan", "/d/plan.json", "--output", "/d/output",
                                                        "--events", "/d/events.jsonl"}));
  r.kind = JobKind::kEvaluate;
  EXPECT_EQ(job_arguments(r), (std::vector<std::string>{"evaluate", "--spec", "/d/plan.json", "--output", "/d/output",
                                                        "--events", "/d/events.jsonl"}));
  r.kind = JobKind::kServe;
  EXPECT_EQ(job_arguments(r), (std::vector<std::string>{"serve", "--spec", "/d/plan.json", "--events", "/d/events.jsonl"}));
  r.events_path.clear();
  EXPECT_EQ(job_arguments(r), (std::vector<std::string>{"serve", "--spec", "/d/plan.json"}));
}

TEST(JobRequest, AMalformedVariableIsNamed) {
  const std::pair<Env, std::string> cases[] = {
      {{{"TRAINER_ATTEMPT", "first"}}, "TRAINER_ATTEMPT: 'first' is not a positive integer"},
      {{{"TRAINER_ATTEMPT", "0"}}, "TRAINER_ATTEMPT: '0' is not a positive integer"},
      {{{"TRAINER_OTLP_INTERVAL_MS", "-5"}}, "TRAINER_OTLP_INTERVAL_MS: '-5' is not a positive integer"},
      {{{"TRAINER_PUBLISH_DEADLINE_SECONDS", "soon"}}, "TRAINER_PUBLISH_DEADLINE_SECONDS: 'soon' is not a positive integer"},
      {{{"TRAINER_BRANCH_SNAPSHOT", "s"}, {"TRAINER_BRANCH_RESTORE", "optimizer"}},
       "TRAINER_BRANCH_RESTORE: 'optimizer' is not weights or trainingState"},
      {{{"TRAINER_JOB_KIND", "bake"}}, "TRAINER_JOB_KIND: 'bake' is not a job kind; use train, evaluate, serve or curate"},
  };
  for (const auto& [env, message] : cases) {
    auto r = job_request_from_environment(getenv_of(env));
    ASSERT_FALSE(r.is_ok()) << message;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().describe(), message);
  }
}

}  // namespace
}  // namespace trainer::protocol
