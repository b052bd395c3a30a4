// The CLI's scripting surface: --json field selection, --jq through the real jq library, and the
// global flags as the Context reads them (--timeout, --jq/--json implying JSON, usage errors).
#include <gtest/gtest.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/context.h"
#include "cli/format.h"
#include "cli/jq_filter.h"
#include "cli/json_fields.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

const json kRuns = json::parse(R"({"runs": [
  {"runId": "a1", "phase": "COMPLETED", "workload": {"name": "w"}, "modelId": "m1"},
  {"runId": "b2", "phase": "TRAINING", "workload": {"name": "w"}}], "nextOffset": 2})");
const std::vector<std::string> kRunsList = list_keys_for({"runs", "list"});
const std::vector<std::string> kRunsGet = list_keys_for({"runs", "get"});

TEST(CliJsonFields, TheListKeyIsNamedAfterTheCommandsWords) {
  EXPECT_EQ(list_keys_for({"base-models", "list"}), (std::vector<std::string>{"list", "baseModels"}));
  EXPECT_EQ(list_keys_for({"runs", "snapshots"}), (std::vector<std::string>{"snapshots", "runs"}));
}

TEST(CliJsonFields, ParsesACommaListAndRefusesAnEmptyName) {
  std::string error;
  EXPECT_EQ(*parse_field_list("runId, phase,runId", &error), (std::vector<std::string>{"runId", "phase"}));
  EXPECT_TRUE(parse_field_list("", &error)->empty());  // --json= lists the fields
  EXPECT_FALSE(parse_field_list("runId,,phase", &error));
  EXPECT_NE(error.find("empty field name"), std::string::npos) << error;
}

TEST(CliJsonFields, SelectsFromEachItemOfAList) {
  std::string error;
  auto out = select_fields(kRuns, {"runId", "modelId"}, kRunsList, &error);
  ASSERT_TRUE(out) << error;
  EXPECT_EQ(*out, json::parse(R"([{"runId": "a1", "modelId": "m1"}, {"runId": "b2", "modelId": null}])"));
  // A bare array is a list too.
  out = select_fields(kRuns["runs"], {"phase"}, {}, &error);
  ASSERT_TRUE(out) << error;
  EXPECT_EQ(*out, json::parse(R"([{"phase": "COMPLETED"}, {"phase": "TRAINING"}])"));
}

TEST(CliJsonFields, SelectsFromOneObjectAndFromAnObjectOfSeveralLists) {
  std::string error;
  // A run is one record, even though one of its members is an array.
  json run = kRuns["runs"][0];
  run["phaseHistory"] = json::array({{{"phase", "QUEUED"}}});
  auto out = select_fields(run, {"phase", "workload"}, kRunsGet, &error);
  ASSERT_TRUE(out) << error;
  EXPECT_EQ(*out, json::parse(R"({"phase": "COMPLETED", "workload": {"name": "w"}})"));
  const json capacity = {{"pools", json::array()}, {"claims", json::array()}, {"quotas", json::array()}};
  out = select_fields(capacity, {"pools"}, list_keys_for({"capacity"}), &error);
  ASSERT_TRUE(out) << error;
  EXPECT_EQ(*out, (json{{"pools", json::array()}}));
}

TEST(CliJsonFields, RefusesAnUnknownFieldByNameListingTheFieldsOffered) {
  std::string error;
  EXPECT_FALSE(select_fields(kRuns, {"runId", "phse"}, kRunsList, &error));
  EXPECT_NE(error.find("no field \"phse\""), std::string::npos) << error;
  EXPECT_NE(error.find("did you mean phase?"), std::string::npos) << error;
  EXPECT_NE(error.find("fields: modelId, phase, runId, workload"), std::string::npos) << error;
  EXPECT_FALSE(select_fields(json("text"), {"a"}, kRunsGet, &error));
  EXPECT_NE(error.find("not one"), std::string::npos) << error;
}

TEST(CliJsonFields, OffersTheKeysOfAnyItem) {
  // nlohmann::json keeps keys sorted: the fields come in that order.
  EXPECT_EQ(offered_fields(kRuns, kRunsList), (std::vector<std::string>{"modelId", "phase", "runId", "workload"}));
  EXPECT_EQ(offered_fields(kRuns, list_keys_for({"info"})), (std::vector<std::string>{"nextOffset", "runs"}));
  EXPECT_TRUE(offered_fields(json::parse(R"({"runs": []})"), kRunsList).empty());
}

TEST(CliJq, PrintsStringsRawAndOtherValuesAsJson) {
  std::string error;
  auto jq = JqFilter::compile(".runs[] | .runId", &error);
  ASSERT_TRUE(jq) << error;
  EXPECT_EQ(*jq->run(kRuns, false, &error), "a1\nb2\n");
  auto objects = JqFilter::compile(".runs[] | {id: .runId, n: 1}", &error);
  ASSERT_TRUE(objects) << error;
  EXPECT_EQ(*objects->run(kRuns, true, &error), "{\"id\":\"a1\",\"n\":1}\n{\"id\":\"b2\",\"n\":1}\n");
  EXPECT_EQ(*objects->run(kRuns, false, &error), "{\n  \"id\": \"a1\",\n  \"n\": 1\n}\n{\n  \"id\": \"b2\",\n  \"n\": 1\n}\n");
  auto filter = JqFilter::compile("[.runs[] | select(.phase == \"TRAINING\") | .runId] | length", &error);
  ASSERT_TRUE(filter) << error;
  EXPECT_EQ(*filter->run(kRuns, false, &error), "1\n");
}

TEST(CliJq, ACompileErrorCarriesJqsMessage) {
  std::string error;
  EXPECT_FALSE(JqFilter::compile(".runs[", &error));
  EXPECT_NE(error.find("syntax error"), std::string::npos) << error;
  EXPECT_FALSE(JqFilter::compile("nosuchfunction(1)", &error));
  EXPECT_NE(error.find("nosuchfunction/1 is not defined"), std::string::npos) << error;
}

TEST(CliJq, AnErrorOnTheAnswerIsReported) {
  std::string error;
  auto jq = JqFilter::compile(".runs.x", &error);
  ASSERT_TRUE(jq) << error;
  EXPECT_FALSE(jq->run(kRuns, false, &error));
  EXPECT_NE(error.find("Cannot index array"), std::string::npos) << error;
}

// The Context as the global flags set it (no call is made).
struct Parsed {
  ParseResult result;
  std::unique_ptr<Context> ctx;
};

Parsed context_for(std::vector<std::string> argv) {
  static const Command root = build_command_tree();
  Parsed p{parse_command_line(root, argv), nullptr};
  if (p.result.invocation) p.ctx = std::make_unique<Context>(*p.result.invocation);
  return p;
}

TEST(CliGlobalFlags, TimeoutBoundsEachCallUnlessTheCommandHasItsOwn) {
  auto p = context_for({"runs", "list", "--timeout", "2m"});
  ASSERT_TRUE(p.ctx);
  EXPECT_TRUE(p.ctx->usage_error.empty()) << p.ctx->usage_error;
  ASSERT_TRUE(p.ctx->client.call_timeout());
  EXPECT_DOUBLE_EQ(*p.ctx->client.call_timeout(), 120);
  EXPECT_DOUBLE_EQ(*context_for({"info", "--timeout", "500ms"}).ctx->client.call_timeout(), 0.5);
  // `runs wait --timeout` bounds the watching, not each call.
  auto wait = context_for({"runs", "wait", "abc", "--timeout", "90s"});
  ASSERT_TRUE(wait.ctx);
  EXPECT_FALSE(wait.ctx->client.call_timeout());
  EXPECT_FALSE(context_for({"runs", "list"}).ctx->client.call_timeout());
}

TEST(CliGlobalFlags, BadTimeoutAndJqAreUsageErrors) {
  EXPECT_NE(context_for({"runs", "list", "--timeout", "0"}).ctx->usage_error.find("--timeout \"0\""), std::string::npos);
  EXPECT_NE(context_for({"runs", "list", "--timeout", "10"}).ctx->usage_error.find("not a duration"), std::string::npos);
  const auto jq = context_for({"runs", "cancel", "abc", "--jq", ".["}).ctx->usage_error;
  EXPECT_NE(jq.find("--jq \".[\" does not compile: jq: error: syntax error"), std::string::npos) << jq;
  EXPECT_NE(context_for({"runs", "list", "--jq", ".", "-o", "text"}).ctx->usage_error.find("drop -o text"),
            std::string::npos);
}

TEST(CliGlobalFlags, JqAndJsonImplyJsonAndQuietStopsTheEventStream) {
  auto jq = context_for({"runs", "list", "--jq", ".runs"});
  EXPECT_EQ(jq.ctx->format, OutputFormat::kJson);
  EXPECT_FALSE(jq.ctx->stream_events());
  auto compact = context_for({"runs", "list", "--json", "runId", "-o", "json-compact"});
  EXPECT_EQ(compact.ctx->format, OutputFormat::kJsonCompact);
  EXPECT_TRUE(context_for({"runs", "wait", "abc", "-o", "json"}).ctx->stream_events());
  auto quiet = context_for({"runs", "wait", "abc", "-q", "-o", "json"});
  EXPECT_TRUE(quiet.ctx->quiet);
  EXPECT_FALSE(quiet.ctx->stream_events());
}

TEST(CliGlobalFlags, AWaitsOwnTimeoutReplacesTheGlobalOneInItsHelp) {
  static const Command root = build_command_tree();
  auto wait = parse_command_line(root, {"runs", "wait", "--help"});
  EXPECT_EQ(wait.output.find("bound each call"), std::string::npos) << wait.output;
  auto list = parse_command_line(root, {"runs", "list", "--help"});
  EXPECT_NE(list.output.find("--timeout DURATION"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("--jq EXPR"), std::string::npos) << list.output;
}

}  // namespace
}  // namespace trainer::cli
