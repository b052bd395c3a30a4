// `--jq EXPR`: a jq program (the real jq library, libjq) run over a command's JSON document.
//
// Output follows `jq -r`: a string result prints as its raw text (so `--jq .runId` can feed
// another command), any other result as JSON, indented unless compact. Each result is one line
// (or one indented block).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

struct jq_state;

namespace trainer::cli {

class JqFilter {
 public:
  // Compiles `expr`; on a compile error returns null and sets `error` to jq's own message.
  static std::unique_ptr<JqFilter> compile(const std::string& expr, std::string* error);
  ~JqFilter();
  JqFilter(const JqFilter&) = delete;
  JqFilter& operator=(const JqFilter&) = delete;

  const std::string& expression() const { return expr_; }

  // Runs the program on `input`. Returns the text to print (every result followed by a newline),
  // or nullopt with `error` set to jq's message when the program fails on this input.
  std::optional<std::string> run(const nlohmann::json& input, bool compact, std::string* error);

 private:
  JqFilter(jq_state* state, std::string expr) : state_(state), expr_(std::move(expr)) {}
  jq_state* state_;
  std::string expr_;
};

}  // namespace trainer::cli
