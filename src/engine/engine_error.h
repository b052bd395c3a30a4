// The engine's internal error: thrown inside src/engine, caught at the public boundary
// (engine.h functions) and returned as a Status. Never escapes the engine.
#pragma once

#include <stdexcept>
#include <string>

#include "common/status.h"

namespace trainer::engine {

class EngineError : public std::runtime_error {
 public:
  EngineError(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit EngineError(const Status& status) : std::runtime_error(status.message()), code_(status.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Throws the status as an EngineError unless it is ok.
inline void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw EngineError(status);
}

template <typename T>
T value_or_throw(Result<T> result) {
  if (!result.is_ok()) throw EngineError(result.status());
  return std::move(result).value();
}

}  // namespace trainer::engine
