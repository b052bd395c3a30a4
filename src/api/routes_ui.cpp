// The web dashboard (docs/dashboard.md): every page path answers the one page (index.html), whose
// script reads the path and draws the view from the JSON API, so a view's address can be pasted;
// /ui/{file} serves the page's script, style and chart library, compiled into trainerd (src/ui).
#include <string>

#include "api/route_support.h"
#include "ui/assets.h"

namespace trainer::api {
namespace {

using http::Outcome;
using http::Request;
using http::Response;

// The dashboard's views (app.js draws each): the runs, one run, the workloads, one workload and
// its score table, the capacity.
constexpr const char* kPages[] = {"/", "/runs", "/runs/{id}", "/workloads", "/workloads/{name}", "/capacity"};

// The asset with its entity tag; a browser asks again each time (no-cache) and gets a bodiless
// 304 while the tag holds, so a new trainerd's dashboard is never hidden by a cached one.
Response asset_response(const Request& req, const ui::Asset& asset) {
  Response r;
  r.headers = {{"ETag", std::string(asset.etag)}, {"Cache-Control", "no-cache"}};
  if (header_value(req, "If-None-Match") == asset.etag) {
    r.status = 304;
    r.content_type = "";
    return r;
  }
  r.content_type = std::string(asset.content_type);
  r.body = std::string(asset.bytes);
  return r;
}

Outcome ui_file(const Request& req) {
  const ui::Asset* asset = ui::find_asset(req.params[0]);
  if (asset == nullptr) {
    return error_response(not_found("the dashboard has no file '" + req.params[0] + "'").with_field("file"));
  }
  return asset_response(req, *asset);
}

}  // namespace

void install_ui_routes(http::Router& router, const service::Limits& limits) {
  const size_t max = limits.max_request_bytes;
  for (const char* page : kPages) {
    router.add("GET", page, max,
               [](const Request& req) -> Outcome { return asset_response(req, ui::index_page()); });
  }
  router.add("GET", "/ui/{file}", max, [](const Request& req) { return ui_file(req); });
}

}  // namespace trainer::api
