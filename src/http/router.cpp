// Request helpers, the Router of server.h (matching `{placeholder}` patterns) and url_decode.
#include <algorithm>

#include "http/server.h"

namespace trainer::http {

// ---- Request

bool Request::has_query(const std::string& name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return true;
  }
  return false;
}

std::string Request::query_value(const std::string& name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return v;
  }
  return "";
}

// ---- Router

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 1;
  if (path.empty() || path[0] != '/') return out;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

bool is_placeholder(const std::string& s) { return s.size() >= 2 && s.front() == '{' && s.back() == '}'; }

}  // namespace

Router::Router() {
  render_ = [](int http_status, const Status& st) {
    Response r;
    r.status = http_status;
    r.content_type = "text/plain";
    r.body = st.describe() + "\n";
    return r;
  };
}

void Router::add(const std::string& method, const std::string& pattern, size_t max_body_bytes, Handler handler) {
  Route route;
  route.method = method;
  route.pattern = pattern;
  route.segments = split_path(pattern);
  if (!route.segments.empty()) {
    const std::string& last = route.segments.back();
    route.rest = is_placeholder(last) && last.size() > 5 && last.compare(last.size() - 4, 4, "...}") == 0;
  }
  route.max_body_bytes = max_body_bytes;
  route.handler = std::move(handler);
  routes_.push_back(std::move(route));
}

void Router::set_error_renderer(ErrorRenderer renderer) { render_ = std::move(renderer); }

void Router::set_gate(std::function<std::optional<Response>(const Request&)> gate) { gate_ = std::move(gate); }

void Router::set_guard(Guard guard) { guard_ = std::move(guard); }

std::vector<std::pair<std::string, std::string>> Router::routes() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : routes_) out.emplace_back(r.method, r.pattern);
  return out;
}

Router::Match Router::match(const std::string& method, const std::string& path) const {
  Match m;
  m.status = 404;
  if (path.empty() || path[0] != '/') return m;
  std::vector<std::string> parts = split_path(path);
  for (const auto& route : routes_) {
    std::vector<std::string> params;
    bool ok = false;
    if (route.rest) {
      size_t fixed = route.segments.size() - 1;
      if (parts.size() > fixed) {
        ok = true;
        for (size_t i = 0; i < fixed && ok; ++i) {
          if (is_placeholder(route.segments[i])) {
            if (parts[i].empty()) ok = false;
            params.push_back(parts[i]);
          } else if (parts[i] != route.segments[i]) {
            ok = false;
          }
        }
        if (ok) {
          std::string rest;
          for (size_t i = fixed; i < parts.size(); ++i) rest += (i > fixed ? "/" : "") + parts[i];
          if (rest.empty()) ok = false;
          params.push_back(rest);
        }
      }
    } else if (parts.size() == route.segments.size()) {
      ok = true;
      for (size_t i = 0; i < parts.size() && ok; ++i) {
        if (is_placeholder(route.segments[i])) {
          if (parts[i].empty()) ok = false;
          params.push_back(parts[i]);
        } else if (parts[i] != route.segments[i]) {
          ok = false;
        }
      }
    }
    if (!ok) continue;
    if (route.method != method) {
      m.status = 405;
      continue;
    }
    m.handler = &route.handler;
    m.status = 0;
    m.max_body_bytes = route.max_body_bytes;
    m.params = std::move(params);
    m.pattern = &route.pattern;
    return m;
  }
  return m;
}

Outcome Router::dispatch(Request& request) const {
  try {
    if (gate_) {
      if (auto r = gate_(request)) return *r;
    }
    Match m = match(request.method, request.path);
    if (!m.handler) {
      if (m.status == 405) {
        return error(405, invalid_field("method", request.method + " is not allowed on " + request.path));
      }
      return error(404, Status(StatusCode::kNotFound, "path",
                               "no route " + request.method + " " + request.path + " (see docs/api.md)"));
    }
    request.params = std::move(m.params);
    if (guard_) return guard_(request, *m.pattern, *m.handler);
    return (*m.handler)(request);
  } catch (const std::exception& e) {
    return error(500, internal_error(std::string("unexpected error: ") + e.what()));
  } catch (...) {
    return error(500, internal_error("unexpected error"));
  }
}

Response Router::error(int http_status, const Status& status) const { return render_(http_status, status); }

size_t Router::max_body_bytes() const {
  size_t most = 0;
  for (const auto& r : routes_) most = std::max(most, r.max_body_bytes);
  return most;
}

std::string url_decode(const std::string& text, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace trainer::http
