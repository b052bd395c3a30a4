#include "cli/context.h"

#include <cstdlib>
#include <unistd.h>

#include "cli/exit_codes.h"
#include "cli/format.h"

namespace trainer::cli {

Context::Context(Invocation& invocation)
    : inv(invocation),
      client(resolve_trainer_url(invocation.get_or("trainer-url", ""), invocation.has("trainer-url"))) {
  const std::string output = inv.get_or("output", "text");
  if (output == "text") format = OutputFormat::kText;
  else if (output == "json") format = OutputFormat::kJson;
  else if (output == "json-compact") format = OutputFormat::kJsonCompact;
  else format_error = "unknown output format \"" + output + "\" for -o; use text, json or json-compact";
  const char* no_color = std::getenv("NO_COLOR");
  const bool colours_off = inv.has("no-color") || (no_color && *no_color);
  const char* term = std::getenv("TERM");
  const bool dumb = term && std::string(term) == "dumb";
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  color = tty && !colours_off && !dumb;
  redraw = tty && !colours_off && !dumb;
  stdin_tty = ::isatty(STDIN_FILENO) == 1;
}

std::string describe_failure(const CallError& error) { return error.status.message(); }

int Context::fail(const std::string& message, int exit_code) {
  std::fflush(stdout);
  std::fprintf(stderr, "trainer: %s\n", message.c_str());
  return exit_code;
}

std::optional<nlohmann::json> Context::finish(bool ok, Response& response, CallError& error) {
  if (ok) return std::move(response.body);
  last_failure_code_ = error.transport ? kExitUnreachable : kExitError;
  fail(describe_failure(error), last_failure_code_);
  return std::nullopt;
}

std::optional<nlohmann::json> Context::get(const std::string& path, int read_timeout_seconds) {
  Response r;
  CallError e;
  bool ok = client.get(path, &r, &e, read_timeout_seconds);
  return finish(ok, r, e);
}

std::optional<nlohmann::json> Context::post(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.post(path, body, &r, &e);
  return finish(ok, r, e);
}

std::optional<nlohmann::json> Context::put(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.put(path, body, &r, &e);
  return finish(ok, r, e);
}

std::optional<nlohmann::json> Context::patch(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.patch(path, body, &r, &e);
  return finish(ok, r, e);
}

void Context::print_json(const nlohmann::json& doc) {
  const std::string text = format == OutputFormat::kJsonCompact ? doc.dump() : doc.dump(2);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

void Context::print_document(const nlohmann::json& doc) {
  if (!text()) {
    print_json(doc);
    return;
  }
  const std::string yaml = to_yaml_text(doc);
  std::fwrite(yaml.data(), 1, yaml.size(), stdout);
}

std::string Context::paint(const std::string& text, const char* code) const {
  if (!color) return text;
  return std::string("\033[") + code + "m" + text + "\033[0m";
}

}  // namespace trainer::cli
