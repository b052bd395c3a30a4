// The routes of docs/api.md. Each handler parses and checks the request, calls the service,
// and writes its result or its Status as the JSON error body. Handlers never throw.
#include <regex>
#include <string>

#include "api/api.h"

namespace trainer::api {
namespace {

using json = nlohmann::json;
using service::Service;

// The field a message blames: the text before the first ": " when it is a dotted path.
std::string field_of(const std::string& message) {
  static const std::regex kPath("^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z0-9_]+|\\[[0-9]+\\])*$");
  size_t colon = message.find(": ");
  if (colon == std::string::npos) return "";
  std::string head = message.substr(0, colon);
  return std::regex_match(head, kPath) ? head : "";
}

void write_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}

void write_error(httplib::Response& res, const Status& st, int status_override = 0) {
  json err = {{"code", status_code_name(st.code())}, {"message", st.describe()}};
  std::string field = st.field().empty() ? field_of(st.message()) : st.field();
  if (!field.empty()) err["field"] = field;
  write_json(res, status_override ? status_override : http_status(st.code()), {{"error", err}});
}

template <typename T>
bool failed(const Result<T>& r, httplib::Response& res) {
  if (r.is_ok()) return false;
  write_error(res, r.status());
  return true;
}

// Parses the body as a JSON object within `limit` bytes.
Result<json> body_json(const httplib::Request& req, size_t limit) {
  if (req.body.size() > limit) {
    return resource_exhausted("body: " + std::to_string(req.body.size()) + " bytes is over the limit of " +
                              std::to_string(limit) + " bytes");
  }
  if (req.body.empty()) return invalid_argument("body: empty; send a JSON object");
  json doc = json::parse(req.body, nullptr, false);
  if (doc.is_discarded()) {
    try {
      json ignored = json::parse(req.body);
      (void)ignored;
    } catch (const json::parse_error& e) {
      return invalid_argument(std::string("body: not valid JSON: ") + e.what());
    }
    return invalid_argument("body: not valid JSON");
  }
  if (!doc.is_object()) return invalid_argument("body: must be a JSON object, got " + std::string(doc.type_name()));
  return doc;
}

void reply_body_error(httplib::Response& res, const Status& st) {
  write_error(res, st, st.code() == StatusCode::kResourceExhausted ? 413 : 0);
}

Result<int64_t> int_param(const httplib::Request& req, const std::string& name, int64_t fallback) {
  if (!req.has_param(name.c_str())) return fallback;
  std::string v = req.get_param_value(name.c_str());
  static const std::regex kInt("^-?[0-9]{1,12}$");
  if (!std::regex_match(v, kInt)) return invalid_argument(name + ": must be an integer, got '" + v + "'");
  return std::stoll(v);
}

Result<bool> bool_param(const httplib::Request& req, const std::string& name) {
  if (!req.has_param(name.c_str())) return false;
  std::string v = req.get_param_value(name.c_str());
  if (v == "true" || v == "1" || v.empty()) return true;
  if (v == "false" || v == "0") return false;
  return invalid_argument(name + ": must be true or false, got '" + v + "'");
}

}  // namespace

void install_routes(httplib::Server& server, Service& svc, const service::Limits& limits) {
  const size_t max_request = limits.max_request_bytes;
  const size_t max_dataset = limits.max_dataset_bytes;

  server.set_pre_routing_handler([&svc](const httplib::Request& req, httplib::Response& res) {
    if (svc.ready() || req.path == "/v1/info" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    write_error(res, unavailable("trainerd is starting; not ready yet (see GET /v1/info)"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib answers some errors itself (no route, body over its limit): give them our body.
  server.set_error_handler(httplib::Server::HandlerWithResponse([max_dataset](const httplib::Request& req,
                                                                             httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      write_error(res, not_found("path: no route " + req.method + " " + req.path + " (see docs/api.md)"));
    } else if (res.status == 413) {
      write_error(res, resource_exhausted("body: over the limit of " + std::to_string(max_dataset) + " bytes"), 413);
    } else if (res.status == 405) {
      write_error(res, invalid_argument("method: " + req.method + " is not allowed on " + req.path), 405);
    } else {
      write_error(res, invalid_argument("request: could not be read (HTTP " + std::to_string(res.status) + ")"),
                  res.status);
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    write_error(res, internal_error("unexpected error: " + what));
  });

  // ---- info and telemetry
  server.Get("/v1/info", [&svc](const httplib::Request&, httplib::Response& res) {
    write_json(res, svc.ready() ? 200 : 503, svc.info());
  });
  server.Get("/metrics", [&svc](const httplib::Request&, httplib::Response& res) {
    res.set_content(svc.metrics_text(), "text/plain; version=0.0.4");
  });
  server.Get("/v1/capacity", [&svc](const httplib::Request&, httplib::Response& res) {
    auto r = svc.capacity();
    if (!failed(r, res)) write_json(res, 200, *r);
  });

  // ---- base models
  server.Get("/v1/base-models", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto all = bool_param(req, "all");
    if (failed(all, res)) return;
    auto r = svc.list_base_models(*all);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Post("/v1/base-models/select", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "name") return write_error(res, invalid_argument(k + ": unknown field"));
    }
    if (!body->contains("name") || !(*body)["name"].is_string()) {
      return write_error(res, invalid_argument("name: required: the base model to select"));
    }
    auto r = svc.select_base_model((*body)["name"].get<std::string>());
    if (!failed(r, res)) write_json(res, 202, *r);
  });
  server.Get(R"(/v1/base-models/(.+))", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.get_base_model(req.matches[1]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });

  // ---- datasets
  server.Post("/v1/datasets", [&svc, max_dataset](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_dataset);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "name" && k != "rows") return write_error(res, invalid_argument(k + ": unknown field"));
    }
    if (!body->contains("rows") || !(*body)["rows"].is_string()) {
      return write_error(res, invalid_argument("rows: required: the dataset's chat JSONL as one string"));
    }
    std::optional<std::string> name;
    if (body->contains("name") && !(*body)["name"].is_null()) {
      if (!(*body)["name"].is_string()) return write_error(res, invalid_argument("name: must be a string"));
      name = (*body)["name"].get<std::string>();
    }
    auto r = svc.register_dataset(name, (*body)["rows"].get<std::string>());
    if (!failed(r, res)) write_json(res, r->second ? 201 : 200, r->first);
  });
  server.Get("/v1/datasets", [&svc](const httplib::Request&, httplib::Response& res) {
    auto r = svc.list_datasets();
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Post(R"(/v1/datasets/([^/]+)/measure)", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    for (const auto& [k, v] : body->items()) {
      if (k != "baseModel" && k != "maxSeqLength") return write_error(res, invalid_argument(k + ": unknown field"));
    }
    if (!body->contains("baseModel") || !(*body)["baseModel"].is_string()) {
      return write_error(res, invalid_argument("baseModel: required: the base model whose tokenizer measures"));
    }
    std::optional<int> max_len;
    if (body->contains("maxSeqLength")) {
      const json& v = (*body)["maxSeqLength"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1048576) {
        return write_error(res, invalid_argument("maxSeqLength: must be an integer between 1 and 1048576"));
      }
      max_len = static_cast<int>(v.get<int64_t>());
    }
    auto r = svc.measure_dataset(req.matches[1], (*body)["baseModel"].get<std::string>(), max_len);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Get(R"(/v1/datasets/([^/]+))", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.get_dataset(req.matches[1]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });

  // ---- workloads
  server.Post("/v1/workloads", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.create_workload(*body);
    if (!failed(r, res)) write_json(res, 201, *r);
  });
  server.Get("/v1/workloads", [&svc](const httplib::Request&, httplib::Response& res) {
    auto r = svc.list_workloads();
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Get(R"(/v1/workloads/([^/]+))", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.get_workload(req.matches[1]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Patch(R"(/v1/workloads/([^/]+))", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.update_workload(req.matches[1], *body);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Put(R"(/v1/workloads/([^/]+)/evaluation)", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.set_evaluation(req.matches[1], *body);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Get(R"(/v1/workloads/([^/]+)/refs/([^/]+))", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.get_ref(req.matches[1], req.matches[2]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Put(R"(/v1/workloads/([^/]+)/refs/([^/]+))", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.set_ref(req.matches[1], req.matches[2], *body);
    if (!failed(r, res)) write_json(res, 200, *r);
  });

  // ---- runs
  server.Post("/v1/runs", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto dry = bool_param(req, "dryRun");
    if (failed(dry, res)) return;
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.submit_run(*body, *dry);
    if (failed(r, res)) return;
    write_json(res, *dry ? 200 : (r->second ? 201 : 200), r->first);
  });
  server.Get("/v1/runs", [&svc](const httplib::Request& req, httplib::Response& res) {
    service::RunListQuery q;
    q.phase = req.get_param_value("phase");
    q.workload = req.get_param_value("workload");
    auto limit = int_param(req, "limit", 50);
    if (failed(limit, res)) return;
    auto offset = int_param(req, "offset", 0);
    if (failed(offset, res)) return;
    q.limit = *limit;
    q.offset = *offset;
    auto r = svc.list_runs_text(q);
    if (failed(r, res)) return;
    res.status = 200;
    res.set_content(*r + "\n", "application/json");
  });
  server.Get(R"(/v1/runs/([^/]+)/events)", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto after = int_param(req, "after", 0);
    if (failed(after, res)) return;
    auto wait = int_param(req, "waitSeconds", 0);
    if (failed(wait, res)) return;
    if (*wait < 0 || *wait > 60) return write_error(res, invalid_argument("waitSeconds: must be between 0 and 60"));
    auto r = svc.run_events(req.matches[1], *after, std::chrono::seconds(*wait));
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Post(R"(/v1/runs/([^/]+)/cancel)", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.cancel_run(req.matches[1]);
    if (!failed(r, res)) write_json(res, 202, *r);
  });
  server.Get(R"(/v1/runs/([^/]+)/metrics)", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto limit = int_param(req, "limit", 100000);
    if (failed(limit, res)) return;
    auto r = svc.run_metrics(req.matches[1], *limit);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Get(R"(/v1/runs/([^/]+)/hparams)", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.run_hparams(req.matches[1]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Patch(R"(/v1/runs/([^/]+))", [&svc, max_request](const httplib::Request& req, httplib::Response& res) {
    auto body = body_json(req, max_request);
    if (!body.is_ok()) return reply_body_error(res, body.status());
    auto r = svc.annotate_run(req.matches[1], *body);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
  server.Get(R"(/v1/runs/([^/]+))", [&svc](const httplib::Request& req, httplib::Response& res) {
    auto r = svc.get_run(req.matches[1]);
    if (!failed(r, res)) write_json(res, 200, *r);
  });
}

}  // namespace trainer::api
