// Status and Result<T>: the error values of the control plane and the store.
//
// A small closed set of codes, each mapping one-to-one to an HTTP status (see http_status()).
// Messages name what was wrong and, where possible, what to do. Both types must be used.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace trainer {

enum class StatusCode {
  kOk,
  kInvalidArgument,     // bad user input: 400
  kNotFound,            // 404
  kAlreadyExists,       // 409
  kFailedPrecondition,  // the request is valid but the current state forbids it: 409
  kResourceExhausted,   // quota or size limit: 413/429 depending on context, 429 here
  kUnavailable,         // a dependency is not answering, retry later: 503
  kInternal,            // broken invariant or unexpected failure: 500
  kCancelled,           // the operation was cancelled: 499
  kUnauthenticated,     // no token, or one that is unknown, revoked or expired: 401
  kPermissionDenied,    // a known token whose roles do not allow the request: 403
};

const char* status_code_name(StatusCode code);  // stable snake_case name, e.g. "invalid_argument"
int http_status(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  // A status blaming one field of the input (a dotted path such as "config.learningRate" or
  // "messages[2].role"); the message does not repeat it (to_string() and the API add it).
  Status(StatusCode code, std::string field, std::string message)
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The input field this status blames; empty when it blames none.
  const std::string& field() const { return field_; }
  // "field: message" when a field is blamed, else the message.
  std::string describe() const;
  // Returns this status blaming `field` (kept when it already blames one deeper inside:
  // with_field("plan") of a status blaming "config.lr" blames "plan.config.lr").
  Status with_field(const std::string& field) const;

  // Returns this status with `context` prefixed to the message ("context: message").
  Status with_context(const std::string& context) const;
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string field_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status already_exists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status permission_denied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
// Bad user input in one field: the API reports `field` separately from the message.
inline Status invalid_field(std::string field, std::string m) {
  return {StatusCode::kInvalidArgument, std::move(field), std::move(m)};
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                     // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}             // NOLINT: must not be ok
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace trainer

// Propagates a non-ok Status from an expression that yields a Status.
#define TRAINER_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::trainer::Status _st = (expr);          \
    if (!_st.is_ok()) return _st;            \
  } while (0)

#define TRAINER_CONCAT_INNER_(a, b) a##b
#define TRAINER_CONCAT_(a, b) TRAINER_CONCAT_INNER_(a, b)

// `TRAINER_ASSIGN_OR_RETURN(auto x, expr);` evaluates `expr` (a Result<T>); on failure returns its
// Status from the enclosing function, else moves the value into the declaration `lhs`.
#define TRAINER_ASSIGN_OR_RETURN(lhs, expr) \
  TRAINER_ASSIGN_OR_RETURN_IMPL_(TRAINER_CONCAT_(_trainer_result_, __LINE__), lhs, expr)
#define TRAINER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
