// The CLI's HTTP client of trainerd (docs/api.md).
//
// Every call returns the parsed JSON body, or a Status whose message is the one line the user
// sees: the service's own error message for an error answer, or, when nothing answered,
// "cannot reach the trainer service at URL (reason); start it with `trainerd` or set
// --trainer-url/TRAINER_URL". Not thread-safe: one client per thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace trainer::cli {

// What a call returned: the HTTP status and the JSON body (null when empty).
struct Response {
  int http_status = 0;
  nlohmann::json body;
};

// Why a call failed, beyond the user-facing message: whether anything answered at all (a
// dropped connection is worth retrying; an error answer is not), and the field to blame.
struct CallError {
  Status status;
  bool transport = false;  // no HTTP answer: refused, dropped, timed out
  bool timed_out = false;  // no answer within the call's timeout (also `transport`)
  std::string field;       // from the error body, when one field is to blame
  int retry_after_seconds = 0;  // a 429's Retry-After: when the service takes the request again; 0 = none
};

class Client {
 public:
  // `base_url` like "http://localhost:9001" (a trailing slash is ignored).
  explicit Client(std::string base_url);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& base_url() const { return base_url_; }

  // Bounds each call (connecting, sending, waiting for the answer) to `seconds` (> 0), as
  // `--timeout` asks. Unset, reads wait 30 s and changes 60 s for their answer.
  void set_call_timeout(double seconds) { call_timeout_seconds_ = seconds; }
  // The PEM CA bundle an https:// service's certificate is verified with, and where it was given
  // (resolve_ca_file()'s source); "" = the system's CA store.
  void set_ca_file(const std::string& file, const std::string& source);
  const std::string& ca_file() const { return ca_file_; }
  const std::string& ca_file_source() const { return ca_file_source_; }
  // The API token every call sends (Authorization: Bearer); "" sends none.
  void set_token(std::string token) { token_ = std::move(token); }
  const std::string& token() const { return token_; }
  // When set, every change (POST, PUT, PATCH, DELETE) fails with this message and is not sent.
  void refuse_changes(std::string message) { refuse_changes_ = std::move(message); }
  // The --timeout given, or nullopt when none was.
  std::optional<double> call_timeout() const {
    return call_timeout_seconds_ > 0 ? std::optional<double>(call_timeout_seconds_) : std::nullopt;
  }

  // `read_timeout_seconds` bounds the wait for the answer; long polls pass more than their wait.
  // Left at -1, the call timeout applies.
  bool get(const std::string& path, Response* out, CallError* err, int read_timeout_seconds = -1);
  // A GET whose answer is not JSON (a file): its body's bytes in `bytes`; errors as get().
  bool get_bytes(const std::string& path, std::string* bytes, CallError* err);
  bool post(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);
  bool put(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);
  bool patch(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);
  bool del(const std::string& path, Response* out, CallError* err);  // DELETE

  // Percent-encodes one path segment or query value.
  static std::string escape(const std::string& segment);

 private:
  bool call(const std::string& method, const std::string& path, const nlohmann::json* body,
            Response* out, CallError* err, double read_timeout_seconds, std::string* raw_body = nullptr);
  // The result of an HTTP answer `http_status` with body `text`: true with *out for 2xx, else
  // false with *err holding the service's message (and what to do, for some statuses).
  bool answered(const std::string& method, const std::string& path, int http_status, const std::string& text,
                Response* out, CallError* err);
  std::string unreachable_message(const std::string& reason) const;

  std::string base_url_;
  double call_timeout_seconds_ = 0;  // 0: the defaults (30 s reads, 60 s changes)
  std::string refuse_changes_;       // non-empty: changes fail with this message, unsent
  std::string token_;                // the API token sent with every call; "" none
  std::string ca_file_;              // set_ca_file(); "" the system's store
  std::string ca_file_source_;       // resolve_ca_file()'s source
  std::unique_ptr<httplib::Client> http_;
};

// The service address and where it came from: "--trainer-url", "TRAINER_URL" or "default".
struct ServiceAddress {
  std::string url;
  std::string source;
};

// The service address from --trainer-url, else $TRAINER_URL, else http://localhost:9001.
ServiceAddress resolve_trainer_address(const std::string& flag_value, bool flag_given);
inline std::string resolve_trainer_url(const std::string& flag_value, bool flag_given) {
  return resolve_trainer_address(flag_value, flag_given).url;
}

// The CA file from --ca-file (when `flag_given`), else $TRAINER_CA_FILE, else the one `trainer
// login` kept in the token file for the service at `url`, with where it came from ("--ca-file",
// "TRAINER_CA_FILE", "the token file PATH", or "" when none).
std::pair<std::string, std::string> resolve_ca_file(const std::string& flag_value, bool flag_given,
                                                    const std::string& url);

// The API token for the service at `url`: $TRAINER_TOKEN, else the token file's entry for the
// address (`trainer login`, or the one trainerd wrote at its first start); "" when neither.
// `source` says which ("TRAINER_TOKEN", the file's path, or "").
std::string resolve_token(const std::string& url, std::string* source = nullptr);

// The numeric addresses ("127.0.0.1:9001", "[::1]:9001") a call to `url` tries, in order;
// empty when the host does not resolve (`error` then says why).
std::vector<std::string> resolve_addresses(const std::string& url, std::string* error);

}  // namespace trainer::cli
