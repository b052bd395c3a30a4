#include "cli/jq_filter.h"

extern "C" {
#include <jq.h>
#include <jv.h>
}

namespace trainer::cli {
namespace {

// The text of a jv message (consumes it).
std::string message_text(jv message) {
  if (!jv_is_valid(message)) {
    jv_free(message);
    return "";
  }
  std::string text;
  if (jv_get_kind(message) == JV_KIND_STRING) {
    text = jv_string_value(message);
  } else {
    jv dumped = jv_dump_string(jv_copy(message), 0);
    text = jv_string_value(dumped);
    jv_free(dumped);
  }
  jv_free(message);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c == '\n') c = ' ';  // jq quotes the program on a second line: keep the message one line
  }
  return text;
}

// Collects the messages jq reports while compiling ("jq: error: syntax error, ...").
void collect_message(void* data, jv message) {
  auto* messages = static_cast<std::string*>(data);
  const std::string text = message_text(message);
  if (text.empty()) return;
  if (!messages->empty()) *messages += "; ";
  *messages += text;
}

}  // namespace

std::unique_ptr<JqFilter> JqFilter::compile(const std::string& expr, std::string* error) {
  jq_state* state = jq_init();
  if (!state) {
    *error = "jq could not start (out of memory)";
    return nullptr;
  }
  std::string messages;
  jq_set_error_cb(state, collect_message, &messages);
  if (!jq_compile(state, expr.c_str())) {
    jq_teardown(&state);
    *error = messages.empty() ? "jq could not compile the expression" : messages;
    return nullptr;
  }
  jq_set_error_cb(state, nullptr, nullptr);
  return std::unique_ptr<JqFilter>(new JqFilter(state, expr));
}

JqFilter::~JqFilter() { jq_teardown(&state_); }

std::optional<std::string> JqFilter::run(const nlohmann::json& input, bool compact, std::string* error) {
  const std::string text = input.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  jv value = jv_parse_sized(text.data(), static_cast<int>(text.size()));
  if (!jv_is_valid(value)) {
    *error = "jq could not read the document: " + message_text(jv_invalid_get_msg(value));
    return std::nullopt;
  }
  jq_start(state_, value, 0);
  const int flags = compact ? 0 : JV_PRINT_INDENT_FLAGS(2);
  std::string out;
  while (true) {
    jv result = jq_next(state_);
    if (!jv_is_valid(result)) {
      if (jv_invalid_has_msg(jv_copy(result))) {
        *error = "jq: error: " + message_text(jv_invalid_get_msg(result));
        return std::nullopt;
      }
      jv_free(result);
      break;
    }
    if (jv_get_kind(result) == JV_KIND_STRING) {
      out += jv_string_value(result);
      jv_free(result);
    } else {
      jv dumped = jv_dump_string(result, flags);
      out += jv_string_value(dumped);
      jv_free(dumped);
    }
    out += '\n';
  }
  if (jq_halted(state_)) {
    jv code = jq_get_exit_code(state_);
    const bool failed = jv_is_valid(code) && jv_get_kind(code) == JV_KIND_NUMBER && jv_number_value(code) != 0;
    jv_free(code);
    if (failed) {
      *error = "jq: halted with an error: " + message_text(jq_get_error_message(state_));
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace trainer::cli
