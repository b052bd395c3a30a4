#include "cli/client.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <httplib.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#include "cli/format.h"
#include "common/token_file.h"

namespace trainer::cli {
namespace {

constexpr int kConnectTimeoutSeconds = 5;
constexpr int kProbeTimeoutMillis = 2000;
constexpr double kDefaultReadTimeoutSeconds = 30;
constexpr double kDefaultWriteTimeoutSeconds = 60;
// A read error after this share of the read timeout is the timeout itself.
constexpr double kTimedOutFraction = 0.9;
// A body larger than this is announced before it is sent (preflight_body).
constexpr size_t kPreflightBytes = 64 << 10;
// The most of a preflight's answer read (its head and an error body).
constexpr size_t kMaxPreflightAnswer = 64 << 10;

// {whole seconds, microseconds} of `seconds`, as httplib takes its timeouts.
std::pair<time_t, time_t> split_seconds(double seconds) {
  const auto whole = static_cast<time_t>(seconds);
  return {whole, static_cast<time_t>((seconds - static_cast<double>(whole)) * 1e6)};
}

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
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
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

// Ignores SIGPIPE while it lives: a service that stops reading a body (it refused it) makes the
// send fail with EPIPE, which the call reports, instead of ending the CLI by the signal.
class SigpipeIgnored {
 public:
  SigpipeIgnored() {
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &saved_);
  }
  ~SigpipeIgnored() { ::sigaction(SIGPIPE, &saved_, nullptr); }
  SigpipeIgnored(const SigpipeIgnored&) = delete;
  SigpipeIgnored& operator=(const SigpipeIgnored&) = delete;

 private:
  struct sigaction saved_{};
};

// A service's answer to a request head alone: 100 (send the body), a final status and its body,
// or 0 when nothing answered (the request itself then finds out why).
struct PreflightAnswer {
  int http_status = 0;
  std::string body;
};

// One connection of a preflight: a socket, with TLS over it for an https:// service. The
// certificate is verified as the request itself verifies it (the CA file, else the system's
// store, and the address's host); a connection that does not verify is not used (the request
// itself then says why).
class PreflightConnection {
 public:
  PreflightConnection() = default;
  ~PreflightConnection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  PreflightConnection(const PreflightConnection&) = delete;
  PreflightConnection& operator=(const PreflightConnection&) = delete;

  // Connects to `host`:`port` (TLS when `tls`); false when it could not.
  bool open(const std::string& host, const std::string& port, bool tls, const std::string& ca_file,
            double timeout_seconds) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) return false;
    timeval limit{};
    limit.tv_sec = static_cast<time_t>(timeout_seconds);
    limit.tv_usec = static_cast<suseconds_t>((timeout_seconds - static_cast<double>(limit.tv_sec)) * 1e6);
    for (addrinfo* ai = found; ai && fd_ < 0; ai = ai->ai_next) {
      fd_ = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd_ < 0) continue;
      ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      if (::connect(fd_, ai->ai_addr, ai->ai_addrlen) != 0) {
        ::close(fd_);
        fd_ = -1;
      }
    }
    freeaddrinfo(found);
    if (fd_ < 0) return false;
    return !tls || handshake(host, ca_file);
  }

  bool send_all(const std::string& bytes) {
    if (ssl_ != nullptr) {
      return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) == static_cast<int>(bytes.size());
    }
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }

  // Bytes read into `buf`; <= 0 at the end, on a timeout or an error.
  ssize_t receive(char* buf, size_t size) {
    if (ssl_ != nullptr) return SSL_read(ssl_, buf, static_cast<int>(size));
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, size, 0);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

 private:
  bool handshake(const std::string& host, const std::string& ca_file) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) return false;
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    const int loaded = ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx_)
                                       : SSL_CTX_load_verify_locations(ctx_, ca_file.c_str(), nullptr);
    if (loaded != 1) return false;
    ssl_ = SSL_new(ctx_);
    if (ssl_ == nullptr) return false;
    in6_addr v6{};
    in_addr v4{};
    const bool numeric = inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    if (numeric) {
      if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) return false;
    } else {
      if (SSL_set_tlsext_host_name(ssl_, host.c_str()) != 1 || SSL_set1_host(ssl_, host.c_str()) != 1) return false;
    }
    if (SSL_set_fd(ssl_, fd_) != 1) return false;
    return SSL_connect(ssl_) == 1 && SSL_get_verify_result(ssl_) == X509_V_OK;
  }

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

// Asks the service at `url` (http:// or https://, verified with `ca_file` as the request is)
// whether it takes a body of `length` bytes for `method path`, before any of it is sent: the
// request head with Expect: 100-continue. A service refuses a body over its limit at once (413,
// naming the limit), so an upload over it ends with that answer instead of a connection reset
// mid-send.
PreflightAnswer preflight_body(const std::string& url, const std::string& method, const std::string& path,
                               size_t length, double timeout_seconds, const std::string& token,
                               const std::string& ca_file) {
  PreflightAnswer none;
  std::string host, port;
  const bool tls = url.rfind("https://", 0) == 0;
  if ((!tls && url.rfind("http://", 0) != 0) || !host_and_port(url, &host, &port)) return none;
  PreflightConnection connection;
  if (!connection.open(host, port, tls, ca_file, timeout_seconds)) return none;
  const std::string head = method + " " + path + " HTTP/1.1\r\nHost: " + host + ":" + port +
                           "\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: " +
                           std::to_string(length) + "\r\nExpect: 100-continue\r\nConnection: close\r\n" +
                           (token.empty() ? std::string() : "Authorization: Bearer " + token + "\r\n") + "\r\n";
  bool sent = connection.send_all(head);
  std::string answer;
  size_t head_end = std::string::npos;
  while (sent && answer.size() < kMaxPreflightAnswer) {
    char buf[4096];
    const ssize_t n = connection.receive(buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
    if (head_end == std::string::npos) head_end = answer.find("\r\n\r\n");
    if (head_end == std::string::npos) continue;
    // "HTTP/1.1 413 ...": 100 needs nothing more; a final answer is read to its Content-Length.
    const int status = answer.size() > 12 ? std::atoi(answer.c_str() + 9) : 0;
    if (status == 100) break;
    std::string lower = answer.substr(0, head_end);
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = lower.find("\r\ncontent-length:");
    const size_t want = at == std::string::npos ? 0 : std::strtoull(lower.c_str() + at + 17, nullptr, 10);
    if (answer.size() >= head_end + 4 + want) break;
  }
  if (head_end == std::string::npos) return none;
  PreflightAnswer out;
  out.http_status = std::atoi(answer.c_str() + 9);
  out.body = answer.substr(head_end + 4);
  return out;
}

}  // namespace

ServiceAddress resolve_trainer_address(const std::string& flag_value, bool flag_given) {
  if (flag_given && !flag_value.empty()) return {flag_value, "--trainer-url"};
  const char* env = std::getenv("TRAINER_URL");
  if (env && *env) return {env, "TRAINER_URL"};
  return {"http://localhost:9001", "default"};
}

std::pair<std::string, std::string> resolve_ca_file(const std::string& flag_value, bool flag_given,
                                                    const std::string& url) {
  if (flag_given && !flag_value.empty()) return {flag_value, "--ca-file"};
  if (const char* env = std::getenv("TRAINER_CA_FILE"); env && *env) return {env, "TRAINER_CA_FILE"};
  const std::string base = url.find("://") == std::string::npos ? "http://" + url : url;
  if (auto kept = read_ca_file_entry(base)) return {*kept, "the token file " + token_file_path() + ", from `trainer login`"};
  return {"", ""};
}

std::string resolve_token(const std::string& url, std::string* source) {
  if (const char* env = std::getenv("TRAINER_TOKEN"); env && *env) {
    if (source) *source = "TRAINER_TOKEN";
    return env;
  }
  std::string base = url.find("://") == std::string::npos ? "http://" + url : url;
  if (auto token = read_token_file(base)) {
    if (source) *source = token_file_path();
    return *token;
  }
  if (source) source->clear();
  return "";
}

std::vector<std::string> resolve_addresses(const std::string& url, std::string* error) {
  std::vector<std::string> out;
  std::string host, port;
  if (!host_and_port(url, &host, &port)) {
    *error = "not a valid URL";
    return out;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || !found) {
    *error = "no such host " + host + " (" + gai_strerror(rc) + ")";
    return out;
  }
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    char name[NI_MAXHOST] = {0};
    char service[NI_MAXSERV] = {0};
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, name, sizeof name, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      continue;
    }
    const std::string text = ai->ai_family == AF_INET6 ? "[" + std::string(name) + "]:" + service
                                                        : std::string(name) + ":" + service;
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
  }
  freeaddrinfo(found);
  return out;
}

Client::Client(std::string base_url) : base_url_(std::move(base_url)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  if (base_url_.find("://") == std::string::npos) base_url_ = "http://" + base_url_;
  http_ = std::make_unique<httplib::Client>(base_url_);
  http_->set_keep_alive(true);
}

Client::~Client() = default;

void Client::set_ca_file(const std::string& file, const std::string& source) {
  ca_file_ = file;
  ca_file_source_ = source;
  if (!file.empty()) http_->set_ca_cert_path(file);
}

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
  const double timeout = read_timeout_seconds > 0 ? read_timeout_seconds
                         : call_timeout_seconds_ > 0 ? call_timeout_seconds_
                                                     : kDefaultReadTimeoutSeconds;
  return call("GET", path, nullptr, out, err, timeout);
}
bool Client::get_bytes(const std::string& path, std::string* bytes, CallError* err) {
  Response unused;
  return call("GET", path, nullptr, &unused, err,
              call_timeout_seconds_ > 0 ? call_timeout_seconds_ : kDefaultReadTimeoutSeconds, bytes);
}
bool Client::post(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("POST", path, &body, out, err, call_timeout_seconds_ > 0 ? call_timeout_seconds_ : kDefaultWriteTimeoutSeconds);
}
bool Client::put(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("PUT", path, &body, out, err, call_timeout_seconds_ > 0 ? call_timeout_seconds_ : kDefaultWriteTimeoutSeconds);
}
bool Client::patch(const std::string& path, const nlohmann::json& body, Response* out, CallError* err) {
  return call("PATCH", path, &body, out, err, call_timeout_seconds_ > 0 ? call_timeout_seconds_ : kDefaultWriteTimeoutSeconds);
}

bool Client::del(const std::string& path, Response* out, CallError* err) {
  return call("DELETE", path, nullptr, out, err, call_timeout_seconds_ > 0 ? call_timeout_seconds_ : kDefaultWriteTimeoutSeconds);
}

bool Client::call(const std::string& method, const std::string& path, const nlohmann::json* body,
                  Response* out, CallError* err, double read_timeout_seconds, std::string* raw_body) {
  if (method != "GET" && !refuse_changes_.empty()) {
    err->transport = false;
    err->status = invalid_argument(refuse_changes_);
    return false;
  }
  const auto [seconds, micros] = split_seconds(read_timeout_seconds);
  http_->set_read_timeout(seconds, micros);
  http_->set_write_timeout(seconds, micros);
  const double connect = call_timeout_seconds_ > 0 ? std::min<double>(call_timeout_seconds_, kConnectTimeoutSeconds)
                                                   : kConnectTimeoutSeconds;
  const auto [connect_seconds, connect_micros] = split_seconds(connect);
  http_->set_connection_timeout(connect_seconds, connect_micros);
  const auto started = std::chrono::steady_clock::now();
  const std::string content_type = "application/json";
  const std::string text = body ? body->dump() : std::string();
  httplib::Headers headers = {{"Accept", raw_body ? "*/*" : "application/json"}};
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  SigpipeIgnored sigpipe_ignored;  // a TLS write to a closed connection raises it too
  if (text.size() > kPreflightBytes) {
    // A large body is announced first: a refusal (413 over the limit) is read before it is sent.
    PreflightAnswer pre = preflight_body(base_url_, method, path, text.size(), read_timeout_seconds, token_, ca_file_);
    if (pre.http_status >= 400) return answered(method, path, pre.http_status, pre.body, out, err);
  }
  httplib::Result res = method == "GET"    ? http_->Get(path, headers)
                        : method == "POST" ? http_->Post(path, headers, text, content_type)
                        : method == "PUT"  ? http_->Put(path, headers, text, content_type)
                        : method == "DELETE" ? http_->Delete(path, headers)
                                           : http_->Patch(path, headers, text, content_type);
  if (!res) {
    err->transport = true;
    const httplib::Error e = res.error();
    std::string reason;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (e == httplib::Error::Read && waited >= read_timeout_seconds * kTimedOutFraction) {
      // httplib reports a read that timed out as a read error: the time waited tells them apart.
      err->status = unavailable("no answer from " + base_url_ + " to " + method + " " + path + " within " +
                                format_duration(read_timeout_seconds) + " (the client timeout" +
                                (call_timeout_seconds_ > 0 ? ", --timeout" : "") +
                                "); the service may be stuck or overloaded: `trainer status` checks it, "
                                "--timeout waits longer");
      err->timed_out = true;
      return false;
    }
    if (e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout) {
      reason = probe_reason(base_url_);
    } else if (e == httplib::Error::Read) {
      reason = "the connection dropped before an answer came";
    } else if (e == httplib::Error::Write) {
      reason = "the connection dropped while sending " + std::to_string(text.size()) + " bytes";
    } else if (e == httplib::Error::SSLServerVerification) {
      // Said whole: starting trainerd is not the fix.
      err->status = unavailable(
          "the trainer service at " + base_url_ + " answered, but its TLS certificate did not verify against " +
          (ca_file_.empty() ? std::string("the system's CA store")
                            : "the CA file " + ca_file_ + " (" + ca_file_source_ + ")") +
          " (or does not name the address's host); pass the CA that signed it with --ca-file FILE or "
          "TRAINER_CA_FILE");
      return false;
    } else if (e == httplib::Error::SSLLoadingCerts) {
      err->status = unavailable("cannot load the CA file " + ca_file_ + " (" + ca_file_source_ +
                                "): not a readable PEM file of CA certificates");
      return false;
    } else if (e == httplib::Error::SSLConnection) {
      reason = "the TLS handshake failed: is it serving HTTPS there? An http:// service needs an http:// URL";
    } else {
      reason = httplib::to_string(e);
    }
    err->status = unavailable(unreachable_message(reason));
    return false;
  }
  if (raw_body && res->status >= 200 && res->status < 300) {
    *raw_body = std::move(res->body);
    out->http_status = res->status;
    return true;
  }
  if (res->status == 429) err->retry_after_seconds = std::max(0, std::atoi(res->get_header_value("Retry-After").c_str()));
  return answered(method, path, res->status, res->body, out, err);
}

bool Client::answered(const std::string& method, const std::string& path, int http_status, const std::string& text,
                      Response* out, CallError* err) {
  Response response;
  response.http_status = http_status;
  if (!text.empty()) {
    response.body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (response.body.is_discarded()) {
      if (http_status >= 200 && http_status < 300) {
        err->status = internal_error("the service at " + base_url_ + " answered " + method + " " +
                                     path + " with a body that is not JSON");
        return false;
      }
      response.body = nullptr;
    }
  }
  if (http_status >= 200 && http_status < 300) {
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
                         StatusCode::kInternal, StatusCode::kCancelled,
                         StatusCode::kUnauthenticated, StatusCode::kPermissionDenied}) {
      if (name == status_code_name(c)) code = c;
    }
  }
  if (http_status == 413) {
    // The service names its limit; what to do about it is ours to say.
    if (message.empty()) message = method + " " + path + ": the request body is over the service's limit (HTTP 413)";
    message += ". Send less in one request (split a dataset into several files, leave large files out of a "
               "bundle), or have the operator raise limits.maxDatasetBytes (dataset and bundle uploads) or "
               "limits.maxRequestBytes (other requests) in trainerd's configuration; `trainer info -o json` shows "
               "them under configuration.limits";
  }
  if (http_status == 429) {
    // A request limit of the service (docs/security.md, "Request limits"): its message names which.
    message = "too many requests (HTTP 429), the service limits this token: " +
              (message.empty() ? method + " " + path + " was refused" : message);
  }
  if (message.empty()) {
    if (http_status == 404) {
      message = method + " " + path + " is not a route of the service at " + base_url_ +
                " (HTTP 404); is --trainer-url pointing at trainerd?";
      code = StatusCode::kNotFound;
    } else if (http_status == 503) {
      message = "the trainer service at " + base_url_ + " is not ready (HTTP 503); see `trainer info`";
      code = StatusCode::kUnavailable;
    } else {
      message = "the service at " + base_url_ + " answered " + method + " " + path + " with HTTP " +
                std::to_string(http_status);
    }
  }
  err->status = Status(code, message);
  out->http_status = http_status;
  out->body = response.body;
  return false;
}

}  // namespace trainer::cli
