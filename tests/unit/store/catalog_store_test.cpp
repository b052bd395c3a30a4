// The Store's catalogs, run against both implementations as store_test.cpp's specification is:
// bundles, datasets, snapshots, models, lineage, comparisons, endpoints, pipelines, analyses,
// sessions, curation scores, distillation chunks, API tokens, the audit log and job reports:
// one row per id, listing order and filters, and what survives a reopen.
#include "store/store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "store_databases.h"

namespace trainer::store {
namespace {

class CatalogStoreTest : public StoreFixture {};

INSTANTIATE_TEST_SUITE_P(Sqlite, CatalogStoreTest, ::testing::Values(Kind::kSqlite), kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, CatalogStoreTest, ::testing::Values(Kind::kPostgres), kind_name);

TEST_P(CatalogStoreTest, BundleVersionsAreKeptPerNameInVersionOrder) {
  auto s = open();
  ASSERT_TRUE(s->insert_bundle_version({{"name", "scoring"}, {"version", 2}, {"sha", "bb"}}).is_ok());
  ASSERT_TRUE(s->insert_bundle_version({{"name", "scoring"}, {"version", 1}, {"sha", "aa"}}).is_ok());
  ASSERT_TRUE(s->insert_bundle_version({{"name", "other"}, {"version", 1}, {"sha", "aa"}}).is_ok());
  Status again = s->insert_bundle_version({{"name", "scoring"}, {"version", 1}, {"sha", "cc"}});
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  auto all = s->list_bundle_versions();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0]["name"], "other");
  EXPECT_EQ((*all)[1]["sha"], "aa");
  EXPECT_EQ((*all)[2]["version"], 2);
}

TEST_P(CatalogStoreTest, DatasetsAreInsertedOnceAndAliasesMove) {
  auto s = open();
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_FALSE(*s->insert_dataset({{"hash", "abc1"}, {"rows", 1}}));
  EXPECT_TRUE(*s->insert_dataset({{"hash", "abd2"}, {"rows", 2}}));
  ASSERT_TRUE(s->set_alias("train", "abc1").is_ok());
  ASSERT_TRUE(s->set_alias("train", "abd2").is_ok());
  EXPECT_EQ(**s->get_alias("train"), "abd2");
  EXPECT_EQ(s->datasets_with_prefix("ab")->size(), 2u);
  EXPECT_EQ(s->datasets_with_prefix("abc")->size(), 1u);
  EXPECT_EQ((*s->list_datasets())[0]["hash"], "abd2");                    // newest first
  EXPECT_EQ(s->set_alias("x", "nothing").code(), StatusCode::kInternal);  // a dangling alias is refused
}

TEST_P(CatalogStoreTest, SnapshotCatalogKeepsOneRowPerIdAndListsARunsCommittedSnapshotsNewestFirst) {
  auto s = open();
  auto snap = [](const std::string& id, const std::string& run, int64_t step, const std::string& state) {
    return json{{"snapshotId", id}, {"runId", run}, {"savedStep", step}, {"state", state}};
  };
  ASSERT_TRUE(s->insert_snapshot(snap("aa01", "r1", 2, "committed")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("aa02", "r1", 4, "reserved")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("bb01", "r1", 6, "committed")).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("cc01", "r2", 2, "committed")).is_ok());
  EXPECT_EQ(s->insert_snapshot(snap("aa01", "r1", 2, "reserved")).code(), StatusCode::kAlreadyExists);

  auto committed = s->list_snapshots("r1", "committed", 50, 0);
  ASSERT_TRUE(committed.is_ok());
  ASSERT_EQ(committed->total, 2);
  EXPECT_EQ(committed->snapshots[0]["snapshotId"], "bb01");
  EXPECT_EQ(committed->snapshots[1]["snapshotId"], "aa01");
  auto any = s->list_snapshots("r1", "", 1, 1);
  ASSERT_TRUE(any.is_ok());
  EXPECT_EQ(any->total, 3);
  ASSERT_EQ(any->snapshots.size(), 1u);
  EXPECT_EQ(any->snapshots[0]["snapshotId"], "aa02");

  ASSERT_TRUE(s->update_snapshot(snap("aa02", "r1", 4, "committed")).is_ok());
  EXPECT_EQ(s->list_snapshots("r1", "committed", 50, 0)->total, 3);
  EXPECT_EQ(s->update_snapshot(snap("zz", "r1", 4, "committed")).code(), StatusCode::kNotFound);

  auto ids = s->snapshot_ids_with_prefix("aa", 10);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"aa01", "aa02"}));
  EXPECT_EQ((*s->get_snapshot("cc01"))->at("runId"), "r2");
  EXPECT_FALSE(s->get_snapshot("nope")->has_value());
}

TEST_P(CatalogStoreTest, ModelRegistryKeepsOneRowPerIdAndListsByWorkloadBaseModelAndStatus) {
  auto model = [](const std::string& id, const json& workload, const std::string& base,
                  const std::string& status) {
    return json{{"modelId", id}, {"workload", workload}, {"baseModel", {{"name", base}}}, {"status", status}};
  };
  const json w1 = {{"id", "w1"}, {"name", "one"}};
  {
    auto s = open();
    ASSERT_TRUE(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("ab02", nullptr, "tiny", "REGISTERED")).is_ok());
    ASSERT_TRUE(s->insert_trained_model(model("cd01", w1, "other", "COPYING")).is_ok());
    EXPECT_EQ(s->insert_trained_model(model("ab01", w1, "tiny", "PENDING")).code(),
              StatusCode::kAlreadyExists);
    EXPECT_EQ(s->update_trained_model(model("zz", w1, "tiny", "FAILED")).code(), StatusCode::kNotFound);
    ASSERT_TRUE(s->update_trained_model(model("ab01", w1, "tiny", "REGISTERED")).is_ok());
  }
  auto s = open();  // durable across reopening
  auto ids = [](const Result<std::vector<json>>& r) {
    std::vector<std::string> out;
    for (const auto& m : *r) out.push_back(m["modelId"]);
    return out;
  };
  EXPECT_EQ(ids(s->list_trained_models("", "", {})), (std::vector<std::string>{"cd01", "ab02", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("w1", "", {})), (std::vector<std::string>{"cd01", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("", "tiny", {"REGISTERED"})),
            (std::vector<std::string>{"ab02", "ab01"}));
  EXPECT_EQ(ids(s->list_trained_models("", "", {"PENDING", "COPYING"})), (std::vector<std::string>{"cd01"}));
  EXPECT_EQ((*s->get_trained_model("ab01"))->at("status"), "REGISTERED");
  EXPECT_FALSE(s->get_trained_model("ab")->has_value());
  EXPECT_EQ(*s->trained_model_ids_with_prefix("ab", 10), (std::vector<std::string>{"ab01", "ab02"}));
}

TEST_P(CatalogStoreTest, LineageListsAParentsChildrenNewestFirstAndGivesEachChildOneParent) {
  {
    auto s = open();
    ASSERT_TRUE(s->insert_child("c1", "p").is_ok());
    ASSERT_TRUE(s->insert_child("c2", "p").is_ok());
    ASSERT_TRUE(s->insert_child("g1", "c1").is_ok());
    EXPECT_EQ(s->insert_child("c1", "other").code(), StatusCode::kAlreadyExists);
  }
  auto s = open();  // durable across a reopen
  auto page = s->run_children("p", 50, 0);
  ASSERT_TRUE(page.is_ok());
  EXPECT_EQ(page->total, 2);
  EXPECT_EQ(page->run_ids, (std::vector<std::string>{"c2", "c1"}));
  auto second = s->run_children("p", 1, 1);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->total, 2);
  EXPECT_EQ(second->run_ids, (std::vector<std::string>{"c1"}));
  EXPECT_EQ(s->run_children("c1", 50, 0)->run_ids, (std::vector<std::string>{"g1"}));
  EXPECT_EQ(s->run_children("nobody", 50, 0)->total, 0);
}

TEST_P(CatalogStoreTest, ComparisonsKeepOneRowPerIdAndListBySourceAndPhaseNewestFirst) {
  auto comparison = [](const std::string& id, const std::string& source, const std::string& phase) {
    return json{{"comparisonId", id}, {"source", {{"snapshotId", source}}}, {"phase", phase}};
  };
  auto ids = [](const Result<ComparisonPage>& page) {
    std::vector<std::string> out;
    for (const auto& c : page->comparisons) out.push_back(c["comparisonId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->insert_comparison(comparison("c1", "s1", "PREPARING")).is_ok());
    ASSERT_TRUE(s->insert_comparison(comparison("c2", "s2", "RUNNING")).is_ok());
    ASSERT_TRUE(s->insert_comparison(comparison("c3", "s1", "PREPARING")).is_ok());
    EXPECT_EQ(s->insert_comparison(comparison("c1", "s1", "PREPARING")).code(), StatusCode::kAlreadyExists);
    ASSERT_TRUE(s->update_comparison(comparison("c1", "s1", "COMPLETED")).is_ok());
    EXPECT_EQ(s->update_comparison(comparison("zz", "s1", "COMPLETED")).code(), StatusCode::kNotFound);
  }
  auto s = open();  // durable across a reopen
  auto all = s->list_comparisons("", {}, 100, 0);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->total, 3);
  EXPECT_EQ(ids(all), (std::vector<std::string>{"c3", "c2", "c1"}));
  auto second = s->list_comparisons("", {}, 1, 1);
  EXPECT_EQ(second->total, 3);
  EXPECT_EQ(ids(second), (std::vector<std::string>{"c2"}));
  EXPECT_EQ(ids(s->list_comparisons("s1", {}, 100, 0)), (std::vector<std::string>{"c3", "c1"}));
  EXPECT_EQ(ids(s->list_comparisons("", {"PREPARING", "RUNNING"}, 100, 0)),
            (std::vector<std::string>{"c3", "c2"}));
  EXPECT_EQ(s->list_comparisons("s1", {"PREPARING"}, 100, 0)->total, 1);
  EXPECT_EQ((*s->get_comparison("c1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_comparison("c")->has_value());
  EXPECT_EQ(*s->comparison_ids_with_prefix("c", 2), (std::vector<std::string>{"c1", "c2"}));
}

TEST_P(CatalogStoreTest, EndpointsKeepOneRowPerIdAndListByPhaseNewestFirst) {
  auto endpoint = [](const std::string& id, const std::string& phase) {
    return json{{"endpointId", id}, {"phase", phase}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["endpointId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_endpoint(endpoint("e1", "STARTING")).is_ok());
    ASSERT_TRUE(s->put_endpoint(endpoint("e2", "READY")).is_ok());
    ASSERT_TRUE(s->put_endpoint(endpoint("e1", "DELETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_endpoints({})), (std::vector<std::string>{"e2", "e1"}));
  EXPECT_EQ(ids(s->list_endpoints({"READY", "STARTING"})), (std::vector<std::string>{"e2"}));
  EXPECT_EQ((*s->get_endpoint("e1"))->at("phase"), "DELETED");
  EXPECT_FALSE(s->get_endpoint("e")->has_value());
  EXPECT_EQ(*s->endpoint_ids_with_prefix("e", 5), (std::vector<std::string>{"e1", "e2"}));
}

TEST_P(CatalogStoreTest, PipelinesKeepOneRowPerIdAndListByPhaseNewestFirst) {
  auto pipeline = [](const std::string& id, const std::string& phase) {
    return json{{"pipelineId", id}, {"phase", phase}, {"stages", json::array()}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["pipelineId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_pipeline(pipeline("p1", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_pipeline(pipeline("p2", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_pipeline(pipeline("p1", "COMPLETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_pipelines({})), (std::vector<std::string>{"p2", "p1"}));
  EXPECT_EQ(ids(s->list_pipelines({"RUNNING"})), (std::vector<std::string>{"p2"}));
  EXPECT_EQ((*s->get_pipeline("p1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_pipeline("p")->has_value());
  EXPECT_EQ(*s->pipeline_ids_with_prefix("p", 5), (std::vector<std::string>{"p1", "p2"}));
}

TEST_P(CatalogStoreTest, DatasetAnalysesKeepOneRowPerIdAndListADatasetsNewestFirst) {
  auto analysis = [](const std::string& id, const std::string& hash, const std::string& phase) {
    return json{{"analysisId", id}, {"dataset", {{"hash", hash}}}, {"phase", phase}};
  };
  auto ids = [](const Result<std::vector<json>>& docs) {
    std::vector<std::string> out;
    for (const auto& d : *docs) out.push_back(d["analysisId"].get<std::string>());
    return out;
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a1", "h1", "PENDING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a2", "h2", "PENDING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a3", "h1", "RUNNING")).is_ok());
    ASSERT_TRUE(s->put_dataset_analysis(analysis("a1", "h1", "COMPLETED")).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  EXPECT_EQ(ids(s->list_dataset_analyses("h1")), (std::vector<std::string>{"a3", "a1"}));
  EXPECT_EQ(ids(s->list_dataset_analyses("h2")), (std::vector<std::string>{"a2"}));
  EXPECT_TRUE(s->list_dataset_analyses("h3")->empty());
  EXPECT_EQ((*s->get_dataset_analysis("a1"))->at("phase"), "COMPLETED");
  EXPECT_FALSE(s->get_dataset_analysis("a")->has_value());
  // A document without its keyed fields is refused, not stored half.
  EXPECT_FALSE(s->put_dataset_analysis(json{{"analysisId", "a4"}, {"phase", "PENDING"}}).is_ok());
  EXPECT_FALSE(s->get_dataset_analysis("a4")->has_value());
}

TEST_P(CatalogStoreTest, SessionsAreKeptOncePerHash) {
  {
    auto s = open();
    EXPECT_TRUE(*s->insert_session(json{{"hash", "h1"}, {"source", "oasst1"}}));
    EXPECT_FALSE(*s->insert_session(json{{"hash", "h1"}, {"source", "otel"}}));  // the first one stays
  }
  auto s = open();
  EXPECT_EQ((*s->get_session("h1"))->at("source"), "oasst1");
  EXPECT_FALSE(s->get_session("h2")->has_value());
}

TEST_P(CatalogStoreTest, CurationScoresAreKeptOncePerCandidateAcrossAReopen) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c1"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c2"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_curation(json{{"curationId", "c1"}, {"phase", "JUDGING"}}).is_ok());  // replaced
    EXPECT_TRUE(*s->put_curation_score("c1", json{{"candidate", 2}, {"score", 0.5}}));
    EXPECT_TRUE(*s->put_curation_score("c1", json{{"candidate", 0}, {"score", 0.9}}));
    EXPECT_FALSE(*s->put_curation_score("c1", json{{"candidate", 2}, {"score", 0.1}}));  // judged once
    EXPECT_TRUE(*s->put_curation_score("c2", json{{"candidate", 2}, {"score", 0.3}}));
  }
  auto s = open();
  auto curations = s->list_curations();
  ASSERT_TRUE(curations.is_ok());
  ASSERT_EQ(curations->size(), 2u);
  EXPECT_EQ((*curations)[0]["curationId"], "c2");  // newest first
  EXPECT_EQ((*s->get_curation("c1"))->at("phase"), "JUDGING");
  auto scores = s->list_curation_scores("c1");
  ASSERT_TRUE(scores.is_ok());
  ASSERT_EQ(scores->size(), 2u);
  EXPECT_EQ((*scores)[0]["candidate"], 0);
  EXPECT_EQ((*scores)[1]["score"], 0.5);
  EXPECT_FALSE(s->put_curation_score("c1", json{{"score", 1}}).is_ok());  // no candidate index
  EXPECT_FALSE(s->put_curation(json{{"phase", "PENDING"}}).is_ok());
}

TEST_P(CatalogStoreTest, DistillationChunksAreStoredOnceEachAcrossAReopen) {
  {
    auto s = open();
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d1"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d2"}, {"phase", "PENDING"}}).is_ok());
    ASSERT_TRUE(s->put_distillation(json{{"distillationId", "d1"}, {"phase", "PAUSED"}}).is_ok());  // replaced
    EXPECT_TRUE(*s->put_distillation_chunk("d1", json{{"chunk", 1}, {"answers", json::array({1})}}));
    EXPECT_TRUE(*s->put_distillation_chunk("d1", json{{"chunk", 0}, {"answers", json::array()}}));
    EXPECT_FALSE(*s->put_distillation_chunk("d1", json{{"chunk", 1}, {"answers", json::array({2})}}));  // once
    EXPECT_TRUE(*s->put_distillation_chunk("d2", json{{"chunk", 1}}));
  }
  auto s = open();
  auto all = s->list_distillations();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0]["distillationId"], "d2");  // newest first
  EXPECT_EQ((*s->get_distillation("d1"))->at("phase"), "PAUSED");
  EXPECT_FALSE(s->get_distillation("d3")->has_value());
  auto chunks = s->list_distillation_chunks("d1");
  ASSERT_TRUE(chunks.is_ok());
  ASSERT_EQ(chunks->size(), 2u);
  EXPECT_EQ((*chunks)[0]["chunk"], 0);
  EXPECT_EQ((*chunks)[1]["answers"], json::array({1}));  // the first write stays
  EXPECT_FALSE(s->put_distillation_chunk("d1", json{{"answers", 1}}).is_ok());  // no chunk index
  EXPECT_FALSE(s->put_distillation(json{{"phase", "PENDING"}}).is_ok());
}

TEST_P(CatalogStoreTest, ApiTokensAreFoundByTheirHashAndListedOldestFirst) {
  auto token = [](const std::string& id, const std::string& hash, const std::string& role) {
    return json{{"tokenId", id}, {"hash", hash}, {"role", role}};
  };
  {
    auto s = open();
    ASSERT_TRUE(s->put_api_token(token("t1", "h1", "admin")).is_ok());
    ASSERT_TRUE(s->put_api_token(token("t2", "h2", "read")).is_ok());
    json revoked = token("t1", "h1", "admin");
    revoked["revokedAt"] = "2026-12-05T00:00:00Z";
    ASSERT_TRUE(s->put_api_token(revoked).is_ok());  // replaced, keeps its place
  }
  auto s = open();  // durable across a reopen
  auto all = s->list_api_tokens();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0]["tokenId"], "t1");
  EXPECT_EQ((*all)[0]["revokedAt"], "2026-12-05T00:00:00Z");
  EXPECT_EQ((*all)[1]["tokenId"], "t2");
  EXPECT_EQ((*s->find_api_token("h2"))->at("role"), "read");
  EXPECT_FALSE(s->find_api_token("h3")->has_value());
  // Another token with a hash already taken is refused: one secret names one token.
  EXPECT_FALSE(s->put_api_token(token("t3", "h2", "admin")).is_ok());
  EXPECT_FALSE(s->put_api_token(json{{"tokenId", "t4"}}).is_ok());
  EXPECT_EQ(s->list_api_tokens()->size(), 2u);
}

TEST_P(CatalogStoreTest, AuditLogListsTheNewestMatchingEntriesFirstAndKeepsThemAcrossAReopen) {
  auto entry = [](const std::string& token_id, const std::string& name, const std::string& workload,
                  const std::string& path) {
    return json{{"tokenId", token_id}, {"tokenName", name}, {"workload", workload}, {"path", path}};
  };
  {
    auto s = open();
    ASSERT_TRUE(s->append_audit(100.0, entry("t1", "alice", "w1", "/a")).is_ok());
    ASSERT_TRUE(s->append_audit(200.5, entry("t2", "bob", "w2", "/b")).is_ok());
    ASSERT_TRUE(s->append_audit(300.0, entry("t1", "alice", "", "/c")).is_ok());
  }
  auto s = open();  // durable across a reopen
  auto paths = [&](const AuditQuery& q) {
    std::vector<std::string> out;
    auto rows = s->list_audit(q);
    EXPECT_TRUE(rows.is_ok()) << rows.status().describe();
    if (rows.is_ok()) {
      for (const json& r : *rows) out.push_back(r.value("path", std::string()));
    }
    return out;
  };
  auto query = [](double since, const std::string& token, const std::string& workload, int64_t limit) {
    AuditQuery q;
    q.since = since;
    q.token = token;
    q.workload = workload;
    q.limit = limit;
    return q;
  };
  EXPECT_EQ(paths(query(0, "", "", 100)), (std::vector<std::string>{"/c", "/b", "/a"}));
  EXPECT_EQ(paths(query(200.5, "", "", 100)), (std::vector<std::string>{"/c", "/b"}));
  EXPECT_EQ(paths(query(0, "t1", "", 100)), (std::vector<std::string>{"/c", "/a"}));
  EXPECT_EQ(paths(query(0, "bob", "", 100)), (std::vector<std::string>{"/b"}));  // by name too
  EXPECT_EQ(paths(query(0, "", "w1", 100)), (std::vector<std::string>{"/a"}));
  EXPECT_EQ(paths(query(0, "", "", 2)), (std::vector<std::string>{"/c", "/b"}));
  EXPECT_TRUE(paths(query(0, "nobody", "", 100)).empty());
}

TEST_P(CatalogStoreTest, SnapshotsWithAReservedKindAreListedOldestFirst) {
  auto s = open();
  auto snap = [](const std::string& id, const json& kinds) {
    return json{
        {"snapshotId", id}, {"runId", "r1"}, {"savedStep", 1}, {"state", "reserved"}, {"kinds", kinds}};
  };
  ASSERT_TRUE(s->insert_snapshot(snap("s2", {{"adapter", {{"state", "reserved"}}}})).is_ok());
  ASSERT_TRUE(s->insert_snapshot(snap("s1", {{"adapter", {{"state", "committed"}}}})).is_ok());
  ASSERT_TRUE(s->insert_snapshot(
                   snap("s0", {{"adapter", {{"state", "committed"}}}, {"training", {{"state", "reserved"}}}}))
                  .is_ok());
  auto found = s->snapshots_with_reserved_kinds(10);
  ASSERT_TRUE(found.is_ok()) << found.status().to_string();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0]["snapshotId"], "s2");
  EXPECT_EQ((*found)[1]["snapshotId"], "s0");
  EXPECT_EQ(s->snapshots_with_reserved_kinds(1)->size(), 1u);
}

TEST_P(CatalogStoreTest, JobReportsAreStoredOncePerSeqAndReadBackInOrder) {
  auto s = open();
  auto first = s->register_job_attempt({"RUN-1", "run", "run1", "secret"});
  ASSERT_TRUE(first.is_ok());
  auto again = s->register_job_attempt({"RUN-1", "run", "run1", "other"});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->token, "secret") << "an attempt registered before keeps its token";
  EXPECT_FALSE(s->get_job_attempt("RUN-2")->has_value());
  EXPECT_EQ(*s->put_job_events("RUN-1", {{1, "a"}, {2, "b"}}), 2);
  EXPECT_EQ(*s->put_job_events("RUN-1", {{2, "changed"}, {3, "c"}}), 1);
  auto events = s->job_events("RUN-1", 1, 10);
  ASSERT_TRUE(events.is_ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].text, "b");
  EXPECT_EQ((*events)[1].seq, 3);
  EXPECT_EQ(*s->put_job_log_lines("RUN-1", {{1, "l1"}, {2, "l2"}, {3, "l3"}}), 3);
  auto tail = s->job_log_tail("RUN-1", 2);
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_EQ((*tail)[0].text, "l2");
  EXPECT_EQ((*tail)[1].text, "l3");
}

}  // namespace
}  // namespace trainer::store
