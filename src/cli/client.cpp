#include "cli/client.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

namespace trainer::cli {
namespace {

constexpr int kConnectTimeoutSeconds = 5;
constexpr int kProbeTimeoutMillis = 2000;

// Splits "http://host:port/prefix" into host and port for the reachability probe.
bool host_and_port(const std::string& url, std::string* host, std::string* port) {
  std::string rest = url;
  auto scheme = rest.find("://");
  std::string default_port = "80";
  if (scheme != std::string::npos) {
    if (rest.substr(0, scheme) == "https") default_port = "443";
    rest = rest.substr(scheme + 3);
  }
  rest = rest.substr(0, rest.find('/'));
  if (rest.empty()) return false;
  if (rest[0] == '[') {  // [v6]:port
    auto close = rest.find(']');
    if (close == std::string::npos) return false;
    *host = rest.substr(1, close - 1);
    *port = close + 2 <= rest.size() && rest[close + 1] == ':' ? rest.substr(close + 2) : default_port;
    return true;
  }
  auto colon = rest.rfind(':');
  *host = rest.substr(0, colon);
  *port = colon == std::string::npos ? default_port : rest.substr(colon + 1);
  return true;
}

// Why nothing answers at `url`, in a few words ("connection refused", "no such host").
std::string probe_reason(const std::string& url) {
  std::string host, port;
  if (!host_and_port(url, &host, &port)) return "not a valid URL";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) return "no such host";
  std::string reason = "no answer";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    int error = 0;
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, kProbeTimeoutMillis) == 1) {
        socklen_t len = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      } else {
        error = ETIMEDOUT;
      }
    } else if (rc != 0) {
      error = errno;
    }
    ::close(fd);
    if (error == 0) {
      reason = "it accepted the connection but did not answer";
      break;
    }
    if (error == ECONNREFUSED) reason = "connection refused";
    else if (error == ETIMEDOUT) reason = "connection timed out";
    else reason = std::strerror(error);
  }
  freeaddrinfo(found);
  for (auto& c : reason) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return reason;
}

}  // namespace

std::string resolve_trainer_url(const std::string& flag_value, bool flag_given) {
  if (flag_given && !flag_value.empty()) return flag_value;
  const char* env = std::getenv("TRAINER_URL");
  if (env && *env) return env;
  return "http://localhost:9001";
}

Client::Client(std::string base_url) : base_url_(std::move(base_url)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  if (base_url_.find("://") == std::string::npos) base_url_ = "http://" + base_url_;
  http_ = std::make_unique<httplib::Client>(base_url_);
  http_->set_connection_timeout(kConnectTimeoutSeconds, 0);
  http_->set_keep_alive(true);
}

Client::~Client() = default;

std::string Client::escape(const std::string& segment) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : segment) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string Client::unreachable_message(const std::string& reason) const {
  return "cannot reach the trainer service at " + base_url_ + " (" + reason +
         "); start it with `trainerd` or set --trainer-url/TRAINER_URL";
}

bool Client::get(const std::string& path, Response* out, CallError* err, int read_timeout_seconds) {
  return call("GET", path, nullptr, out, err, read_timeout_seconds);
}
bool Client::post(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("POST", path, &body, out, err, 60);
}
bool Client::put(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("PUT", path, &body, out, err, 60);
}
bool Client::patch(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("PATCH", path, &body, out, err, 60);
}

bool Client::call(const std::string& method, const std::string& path, const nlohmann::json* body,
                  Response* out, CallError* err, int read_timeout_seconds) {
  http_->set_read_timeout(read_timeout_seconds, 0);
  const std::string content_type = "application/json";
  const std::string text = body ? body->dump() : std::string();
  httplib::Headers headers = {{"Accept", "application/json"}};
  httplib::Result res = method == "GET"    ? http_->Get(path, headers)
                        : method == "POST" ? http_->Post(path, headers, text, content_type)
                        : method == "PUT"  ? http_->Put(path, headers, text, content_type)
                                           : http_->Patch(path, headers, text, content_type);
  if (!res) {
    err->transport = true;
    const httplib::Error e = res.error();
    std::string reason;
    if (e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout) {
      reason = probe_reason(base_url_);
    } else if (e == httplib::Error::Read) {
      reason = "the connection dropped before an answer came";
    } else if (e == httplib::Error::Write) {
      reason = "the connection dropped while sending";
    } else {
      reason = httplib::to_string(e);
    }
    err->status = unavailable(unreachable_message(reason));
    return false;
  }
  Response response;
  response.http_status = res->status;
  if (!res->body.empty()) {
    response.body = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (response.body.is_discarded()) {
      if (res->status >= 200 && res->status < 300) {
        err->status = internal_error("the service at " + base_url_ + " answered " + method + " " +
                                     path + " with a body that is not JSON");
        return false;
      }
      response.body = nullptr;
    }
  }
  if (res->status >= 200 && res->status < 300) {
    *out = std::move(response);
    return true;
  }
  // An error answer: the service's message when it sent one, else the HTTP status.
  err->transport = false;
  const nlohmann::json& e = response.body;
  std::string message;
  StatusCode code = StatusCode::kInternal;
  if (e.is_object() && e.contains("error") && e["error"].is_object()) {
    message = e["error"].value("message", "");
    err->field = e["error"].value("field", "");
    const std::string name = e["error"].value("code", "");
    for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kNotFound,
                         StatusCode::kAlreadyExists, StatusCode::kFailedPrecondition,
                         StatusCode::kResourceExhausted, StatusCode::kUnavailable,
                         StatusCode::kInternal, StatusCode::kCancelled}) {
      if (name == status_code_name(c)) code = c;
    }
  }
  if (message.empty()) {
    if (res->status == 404) {
      message = method + " " + path + " is not a route of the service at " + base_url_ +
                " (HTTP 404); is --trainer-url pointing at trainerd?";
      code = StatusCode::kNotFound;
    } else if (res->status == 503) {
      message = "the trainer service at " + base_url_ + " is not ready (HTTP 503); see `trainer info`";
      code = StatusCode::kUnavailable;
    } else {
      message = "the service at " + base_url_ + " answered " + method + " " + path + " with HTTP " +
                std::to_string(res->status);
    }
  }
  err->status = Status(code, message);
  out->http_status = res->status;
  out->body = response.body;
  return false;
}

}  // namespace trainer::cli
