// One HTTP call with a deadline, over libcurl: http:// and https:// (trust from the system's CA
// store, or from a CA file given per call). The transport's failures are told apart, so callers
// can map them onto their own causes (a reward term's timeout / unreachable, docs/graders.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainer {

struct OutboundPolicy;  // common/outbound.h

// Why no HTTP answer came.
enum class HttpFailure {
  kNone,     // an answer came (any status)
  kRefused,  // not reached: connection refused or reset, no such host, closed before answering
  kTimeout,  // no complete answer within the deadline
  kTls,      // the TLS handshake failed: an untrusted or mismatched certificate, an unreadable CA file
  kBadUrl,   // not an http:// or https:// URL
};

struct HttpRequest {
  std::string method = "POST";  // "GET", "POST" or "DELETE"
  std::string url = {};         // http(s)://HOST[:PORT]/PATH
  std::vector<std::pair<std::string, std::string>> headers = {};  // sent as given, besides Content-Type
  std::string body = {};        // POST only: sent as application/json
  double timeout_seconds = 30;  // the whole call, connection included; > 0
  std::string ca_file = {};     // PEM file of the CAs trusted for https; "" = the system's store
  // When set, the answer's body goes here piece by piece as it arrives (with the answer's status)
  // instead of into HttpResponse::body; returning false stops the call and closes its connection.
  std::function<bool(int status, std::string_view bytes)> on_body = {};
  // When set, asked about once a second while the call runs; returning false stops it likewise.
  std::function<bool()> keep_going = {};
  // When set (a URL a user's plan names), the call is checked against it (common/outbound.h): as
  // it connects, on the address it connects to, or, when the policy names a proxy, on the URL's
  // host before the call, which then goes through that proxy. A refused one fails kRefused, its
  // detail saying why. Not owned; outlives the call.
  const OutboundPolicy* outbound = nullptr;
  // "http://HOST:PORT": the HTTP proxy an unchecked call (an operator's own address: a declared
  // judge, a teacher) goes through, CONNECT for https://. "" = directly. The environment's
  // http_proxy, HTTPS_PROXY and NO_PROXY are never read: a call goes through a proxy only where
  // trainerd's configuration (outbound.proxy) says so.
  std::string proxy = {};
};

struct HttpResponse {
  int status = 0;                          // the HTTP status; 0 when failure is set
  std::string body;                        // the answer's body
  HttpFailure failure = HttpFailure::kNone;
  std::string detail;                      // the failure in words, naming the URL; "" when none
  bool stopped = false;                    // on_body or keep_going stopped it (failure kRefused)
  bool outbound_refused = false;           // the outbound policy refused the address (failure kRefused)
};

// Performs `request`. Thread-safe: each call has its own connection.
HttpResponse http_call(const HttpRequest& request);

}  // namespace trainer
