// The role table (authorization.cpp, docs/security.md): every route trainerd installs has an
// entry, so a new route cannot slip in unprotected, and the table names no route that is gone.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "api/api.h"
#include "api/authorization.h"
#include "api/request_guard.h"
#include "backend/backend.h"
#include "service/config.h"
#include "store/store.h"

namespace trainer::api {
namespace {

namespace fs = std::filesystem;

// A service over a fresh SQLite store (never started: the routes only hold a reference to it).
std::unique_ptr<service::Service> unstarted_service(const fs::path& dir) {
  service::ServiceOptions o;
  o.data_dir = (dir / "data").string();
  o.config = service::default_config();
  o.instance = "test";
  auto store = store::open_sqlite_store((dir / "state.db").string());
  EXPECT_TRUE(store.is_ok());
  auto backend = backend::make_backend(o.config.compute);
  EXPECT_TRUE(backend.is_ok());
  auto made = service::make_service(std::move(o), std::move(*store), std::move(*backend));
  EXPECT_TRUE(made.is_ok()) << made.status().message();
  return std::move(*made);
}

class RoleTable : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("role-table-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    service_ = unstarted_service(dir_);
    install_routes(router_, *service_, service::Limits{});
  }
  void TearDown() override {
    service_.reset();
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::unique_ptr<service::Service> service_;
  http::Router router_;
};

TEST_F(RoleTable, EveryInstalledRouteHasAnEntry) {
  EXPECT_EQ(routes_without_rule(router_), std::vector<std::string>{})
      << "add each route to role_table() in src/api/authorization.cpp (and docs/security.md)";
}

TEST_F(RoleTable, EveryEntryNamesAnInstalledRouteOnce) {
  std::set<std::pair<std::string, std::string>> installed;
  for (const auto& route : router_.routes()) installed.insert(route);
  std::set<std::pair<std::string, std::string>> seen;
  for (const RouteRule& rule : role_table()) {
    EXPECT_TRUE(installed.count({rule.method, rule.pattern})) << rule.method << " " << rule.pattern << " is not a route";
    EXPECT_TRUE(seen.insert({rule.method, rule.pattern}).second) << rule.method << " " << rule.pattern << " twice";
  }
}

TEST_F(RoleTable, ARouteWithoutAnEntryIsRefused) {
  http::Router router;
  router.add("GET", "/v1/unlisted", 1024, [](const http::Request&) -> http::Outcome { return http::Response{}; });
  install_request_guard(router, *service_, service::Limits{});
  http::Request req;
  req.method = "GET";
  req.path = "/v1/unlisted";
  auto out = router.dispatch(req);
  ASSERT_TRUE(std::holds_alternative<http::Response>(out));
  EXPECT_EQ(std::get<http::Response>(out).status, 403);
  EXPECT_NE(std::get<http::Response>(out).body.find("no entry in the role table"), std::string::npos);
}

TEST_F(RoleTable, AJobsRoutesAndThePublicOnesNeedNoApiToken) {
  EXPECT_EQ(find_rule("POST", "/v1/jobs/{id}/events")->need, Need::kJob);
  EXPECT_EQ(find_rule("POST", "/v1/snapshots/{ref}/commit")->need, Need::kJob);
  EXPECT_EQ(find_rule("GET", "/v1/info")->need, Need::kPublic);
  EXPECT_EQ(find_rule("POST", "/v1/runs/{ref}/cancel")->need, Need::kSubmit);
  EXPECT_EQ(find_rule("PATCH", "/v1/workloads/{ref}")->need, Need::kAdmin);
  EXPECT_EQ(find_rule("POST", "/v1/capacity/scan")->need, Need::kControl);
}

TEST(ListFilter, ALimitedTokensDistillationsAreThoseOfItsWorkloadsByName) {
  Caller caller;
  caller.filtered = true;
  caller.only_workloads = {"w-a-id"};
  caller.only_workload_names = {"wl-a"};
  http::Response r;
  r.status = 200;
  r.body = R"({"distillations": [{"distillationId": "1", "workload": "wl-a"},
                                 {"distillationId": "2", "workload": "wl-b"},
                                 {"distillationId": "3"}]})";
  filter_to_workloads(caller, "/v1/distillations", r);
  EXPECT_EQ(nlohmann::json::parse(r.body)["distillations"],
            nlohmann::json::parse(R"([{"distillationId": "1", "workload": "wl-a"}])"));
}

TEST(ListFilter, APipelineIsShownWhenEveryStagesWorkloadIsTheTokens) {
  Caller caller;
  caller.filtered = true;
  caller.only_workloads = {"w-a-id"};
  caller.only_workload_names = {"wl-a"};
  http::Response r;
  r.status = 200;
  r.body = R"({"pipelines": [
      {"pipelineId": "a", "plan": {"stages": [{"workload": "wl-a"}, {"workload": "w-a-id"}]}},
      {"pipelineId": "ab", "plan": {"stages": [{"workload": "wl-a"}, {"distillation": {"workload": "wl-b"}}]}},
      {"pipelineId": "none", "plan": {"stages": [{"curation": {"dataset": "d"}}]}}]})";
  filter_to_workloads(caller, "/v1/pipelines", r);
  const auto kept = nlohmann::json::parse(r.body)["pipelines"];
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0]["pipelineId"], "a");
}

}  // namespace
}  // namespace trainer::api
