// HTTP calls over libcurl (declared in common/http_client.h).
#include "common/http_client.h"

#include "common/outbound.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

namespace trainer {
namespace {

size_t collect(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// The answer's body as it arrives, to HttpRequest::on_body.
struct Relay {
  CURL* curl = nullptr;
  const HttpRequest* request = nullptr;
  bool stopped = false;
};

size_t relay(char* data, size_t size, size_t count, void* out) {
  auto* r = static_cast<Relay*>(out);
  long status = 0;
  curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
  if (r->request->on_body(static_cast<int>(status), std::string_view(data, size * count))) return size * count;
  r->stopped = true;
  return 0;  // CURLE_WRITE_ERROR
}

int progress(void* out, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* r = static_cast<Relay*>(out);
  if (r->request->keep_going()) return 0;
  r->stopped = true;
  return 1;  // CURLE_ABORTED_BY_CALLBACK
}

HttpFailure failure_of(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return HttpFailure::kNone;
    case CURLE_OPERATION_TIMEDOUT:
      return HttpFailure::kTimeout;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return HttpFailure::kBadUrl;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
      return HttpFailure::kTls;
    default:
      return HttpFailure::kRefused;
  }
}

// What the connection check of a call with an outbound policy needs, and what it found.
struct ConnectCheck {
  const OutboundPolicy* policy;
  std::string host;
  int port;
  std::string refusal;  // why the address was refused; "" when none was
};

curl_socket_t open_checked(void* data, curlsocktype purpose, curl_sockaddr* address) {
  auto* check = static_cast<ConnectCheck*>(data);
  if (purpose == CURLSOCKTYPE_IPCXN) {
    std::string why = outbound_refusal_at_connect(*check->policy, check->host, check->port, &address->addr);
    if (!why.empty()) {
      check->refusal = std::move(why);
      return CURL_SOCKET_BAD;
    }
  }
  return socket(address->family, address->socktype, address->protocol);
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

}  // namespace

HttpResponse http_call(const HttpRequest& request) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResponse out;
  const bool https = request.url.rfind("https://", 0) == 0;
  if (!https && request.url.rfind("http://", 0) != 0) {
    out.failure = HttpFailure::kBadUrl;
    out.detail = "'" + request.url + "' is not an http:// or https:// URL";
    return out;
  }
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  std::unique_ptr<curl_slist, ListDeleter> headers;
  auto add_header = [&headers](const std::string& line) {
    curl_slist* grown = curl_slist_append(headers.get(), line.c_str());
    if (grown != nullptr) {
      (void)headers.release();
      headers.reset(grown);
    }
  };
  for (const auto& [name, value] : request.headers) add_header(name + ": " + value);
  CURL* c = curl.get();
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // several threads call at once
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  const long limit_ms = std::max(1L, static_cast<long>(std::ceil(request.timeout_seconds * 1000)));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, limit_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, limit_ms);
  if (!request.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
  // Through a proxy only where the caller says (never the environment's *_proxy variables).
  const std::string& proxy = request.outbound != nullptr ? request.outbound->proxy : request.proxy;
  curl_easy_setopt(c, CURLOPT_PROXY, proxy.c_str());
  curl_easy_setopt(c, CURLOPT_NOPROXY, "");
  ConnectCheck check{request.outbound, "", 0, ""};
  std::unique_ptr<curl_slist, ListDeleter> resolve;
  if (request.outbound != nullptr && !url_host_port(request.url, &check.host, &check.port)) {
    out.failure = HttpFailure::kBadUrl;
    out.detail = "'" + request.url + "' is not an http:// or https:// URL with a host";
    return out;
  }
  if (request.outbound != nullptr && !proxy.empty()) {
    // The proxy connects to the target: its host and port are checked here, before the call,
    // and the proxy is not contacted when they are refused.
    const Status allowed = check_outbound_url(*request.outbound, request.url, "url");
    if (!allowed.is_ok()) {
      out.failure = HttpFailure::kRefused;
      out.outbound_refused = true;
      out.detail = request.url + ": " + allowed.message();
      return out;
    }
  } else if (request.outbound != nullptr) {
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &check);
    for (const auto& entry : test_resolve_entries(check.port)) {
      curl_slist* grown = curl_slist_append(resolve.get(), entry.c_str());
      if (grown != nullptr) {
        (void)resolve.release();
        resolve.reset(grown);
      }
    }
    if (resolve) curl_easy_setopt(c, CURLOPT_RESOLVE, resolve.get());
  }
  if (request.method == "POST") {
    add_header("Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "DELETE") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  add_header("Expect:");  // no 100-continue round trip before a large body
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  Relay relay_to{c, &request, false};
  if (request.on_body) {
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, relay);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &relay_to);
  } else {
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
  }
  if (request.keep_going) {
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &relay_to);
  }
  const CURLcode code = curl_easy_perform(c);
  out.failure = failure_of(code);
  out.stopped = relay_to.stopped;
  if (out.failure == HttpFailure::kNone) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    out.status = static_cast<int>(status);
    return out;
  }
  out.body.clear();
  if (!check.refusal.empty()) {
    out.failure = HttpFailure::kRefused;
    out.outbound_refused = true;
    out.detail = request.url + ": " + check.refusal;
    return out;
  }
  const std::string why = error[0] != '\0' ? std::string(error) : std::string(curl_easy_strerror(code));
  switch (out.failure) {
    case HttpFailure::kTimeout:
      out.detail = "no answer from " + request.url + " within " + std::to_string(request.timeout_seconds) + " s";
      break;
    case HttpFailure::kTls:
      out.detail = "TLS failure with " + request.url + ": " + why +
                   (request.ca_file.empty() ? " (trusted: the system's CA store)" : " (trusted: CA file " + request.ca_file + ")");
      break;
    default:
      out.detail = request.url + ": " + (out.stopped ? std::string("stopped by the caller") : why);
  }
  return out;
}

}  // namespace trainer
