// The dashboard's routes (routes_ui.cpp) and the metrics stream's event framing: every view's
// address answers the one page, the page's files come with their content types and entity tags,
// a browser that holds the file gets a bodiless 304, and an unknown file is a 404 naming it.
#include <gtest/gtest.h>

#include "api/metrics_stream.h"
#include "api/route_support.h"
#include "ui/assets.h"

namespace trainer::api {
namespace {

class UiRoutes : public ::testing::Test {
 protected:
  UiRoutes() { install_ui_routes(router_, service::Limits{}); }

  http::Response get(const std::string& path, std::vector<std::pair<std::string, std::string>> headers = {}) {
    http::Request req;
    req.method = "GET";
    req.path = path;
    req.headers = std::move(headers);
    http::Outcome out = router_.dispatch(req);
    EXPECT_TRUE(std::holds_alternative<http::Response>(out)) << path;
    return std::get<http::Response>(out);
  }

  static std::string header(const http::Response& r, const std::string& name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }

  http::Router router_;
};

TEST_F(UiRoutes, EveryViewsAddressAnswersThePage) {
  const ui::Asset& page = ui::index_page();
  for (const char* path : {"/", "/runs", "/runs/3f2a9c71", "/workloads", "/workloads/triage", "/capacity"}) {
    http::Response r = get(path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8") << path;
    EXPECT_EQ(r.body, page.bytes) << path;
    EXPECT_EQ(header(r, "Cache-Control"), "no-cache") << path;
  }
  EXPECT_NE(page.bytes.find("/ui/app.js"), std::string_view::npos);
  EXPECT_NE(page.bytes.find("/ui/uPlot.iife.min.js"), std::string_view::npos);
}

TEST_F(UiRoutes, FilesComeWithTheirContentTypes) {
  EXPECT_EQ(get("/ui/app.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(get("/ui/style.css").content_type, "text/css; charset=utf-8");
  http::Response chart = get("/ui/uPlot.iife.min.js");
  EXPECT_EQ(chart.status, 200);
  EXPECT_EQ(chart.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(chart.body.find("uPlot"), std::string::npos);  // the npm package's file, embedded whole
  EXPECT_EQ(get("/ui/uPlot.min.css").content_type, "text/css; charset=utf-8");
}

TEST_F(UiRoutes, AFileTheBrowserHoldsIsABodiless304) {
  http::Response first = get("/ui/app.js");
  const std::string tag = header(first, "ETag");
  ASSERT_EQ(tag.size(), 66u);  // a quoted SHA-256
  http::Response again = get("/ui/app.js", {{"If-None-Match", tag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(header(again, "ETag"), tag);
  EXPECT_EQ(get("/ui/app.js", {{"If-None-Match", "\"old\""}}).status, 200);
}

TEST_F(UiRoutes, AnUnknownFileIsA404NamingIt) {
  http::Response r = get("/ui/no-such.js");
  EXPECT_EQ(r.status, 404);
  const json body = json::parse(r.body);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["field"], "file");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("'no-such.js'"), std::string::npos);
}

TEST(SseEvent, IsOneEventLineAndOneDataLine) {
  EXPECT_EQ(sse_event("points", json{{"steps", json::array()}, {"note", "two\nlines"}}),
            "event: points\ndata: {\"note\":\"two\\nlines\",\"steps\":[]}\n\n");
}

}  // namespace
}  // namespace trainer::api
