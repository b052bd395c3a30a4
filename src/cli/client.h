// The CLI's HTTP client of trainerd (docs/api.md).
//
// Every call returns the parsed JSON body, or a Status whose message is the one line the user
// sees: the service's own error message for an error answer, or, when nothing answered,
// "cannot reach the trainer service at URL (reason); start it with `trainerd` or set
// --trainer-url/TRAINER_URL". Not thread-safe: one client per thread.
#pragma once

#include <memory>
#include <string>

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
  std::string field;       // from the error body, when one field is to blame
};

class Client {
 public:
  // `base_url` like "http://localhost:9001" (a trailing slash is ignored).
  explicit Client(std::string base_url);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& base_url() const { return base_url_; }

  // `read_timeout_seconds` bounds the wait for the answer (long polls pass more).
  bool get(const std::string& path, Response* out, CallError* err, int read_timeout_seconds = 30);
  bool post(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);
  bool put(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);
  bool patch(const std::string& path, const nlohmann::json& body, Response* out, CallError* err);

  // Percent-encodes one path segment or query value.
  static std::string escape(const std::string& segment);

 private:
  bool call(const std::string& method, const std::string& path, const nlohmann::json* body,
            Response* out, CallError* err, int read_timeout_seconds);
  std::string unreachable_message(const std::string& reason) const;

  std::string base_url_;
  std::unique_ptr<httplib::Client> http_;
};

// The service address from --trainer-url, else $TRAINER_URL, else http://localhost:9001.
std::string resolve_trainer_url(const std::string& flag_value, bool flag_given);

}  // namespace trainer::cli
