// The request helpers and the route_json()/route_body() adapters every route file uses: the
// status each answer gets and the error body of a failed one.
#include "api/route_support.h"

#include <gtest/gtest.h>

namespace trainer::api {
namespace {

http::Response answer(const http::Handler& handler, const http::Request& req) {
  http::Outcome outcome = handler(req);
  EXPECT_TRUE(std::holds_alternative<http::Response>(outcome));
  return std::get<http::Response>(outcome);
}

http::Request request(std::string body = "", std::vector<std::pair<std::string, std::string>> query = {}) {
  http::Request req;
  req.method = "POST";
  req.path = "/v1/things";
  req.body = std::move(body);
  req.query = std::move(query);
  return req;
}

TEST(RouteJson, AnswersAValueWithItsStatus) {
  auto r = answer(route_json(202, [](const http::Request&) -> Result<json> { return json{{"id", "a"}}; }), request());
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{\"id\":\"a\"}\n");
}

TEST(RouteJson, CreatedOrExistingPicksTheStatus) {
  auto created = route_json(201, [](const http::Request&) -> Result<std::pair<json, bool>> {
    return std::pair<json, bool>{json{{"id", "a"}}, true};
  });
  auto existing = route_json(201, [](const http::Request&) -> Result<std::pair<json, bool>> {
    return std::pair<json, bool>{json{{"id", "a"}}, false};
  });
  EXPECT_EQ(answer(created, request()).status, 201);
  EXPECT_EQ(answer(existing, request()).status, 200);
  EXPECT_EQ(answer(existing, request()).body, "{\"id\":\"a\"}\n");
}

TEST(RouteJson, AnswersAFailureWithTheErrorBody) {
  auto r = answer(route_json(200, [](const http::Request&) -> Result<json> { return not_found("no run abc"); }),
                  request());
  EXPECT_EQ(r.status, 404);
  const json body = json::parse(r.body);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_FALSE(body["error"].contains("field"));
}

TEST(RouteBody, RefusesABadBodyBeforeTheHandlerRuns) {
  bool ran = false;
  auto handler = route_body(201, [&ran](const http::Request&, const json& body) -> Result<json> {
    ran = true;
    return body;
  });
  for (const char* bad : {"", "[1]", "{"}) {
    auto r = answer(handler, request(bad));
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(json::parse(r.body)["error"]["field"], "body") << bad;
  }
  EXPECT_FALSE(ran);
  auto ok = answer(handler, request("{\"a\":1}"));
  EXPECT_EQ(ok.status, 201);
  EXPECT_EQ(ok.body, "{\"a\":1}\n");
}

TEST(RouteParams, PageAndFlagsParseOrNameTheParameter) {
  auto page = page_params(request("", {{"limit", "5"}}), 50);
  ASSERT_TRUE(page.is_ok());
  EXPECT_EQ(page->limit, 5);
  EXPECT_EQ(page->offset, 0);
  auto bad = page_params(request("", {{"offset", "x"}}), 50);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().field(), "offset");
  EXPECT_TRUE(*bool_param(request("", {{"dryRun", ""}}), "dryRun"));
  EXPECT_FALSE(*bool_param(request(), "dryRun"));
  EXPECT_FALSE(bool_param(request("", {{"dryRun", "maybe"}}), "dryRun").is_ok());
  auto empty = optional_body_json(request());
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(*empty, json::object());
}

}  // namespace
}  // namespace trainer::api
