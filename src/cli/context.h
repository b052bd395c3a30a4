// What every command handler works with: its parsed invocation, the service client, the
// output format, and whether the terminal takes colours and redrawn lines.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/client.h"
#include "common/status.h"

namespace trainer::cli {

enum class OutputFormat { kText, kJson, kJsonCompact };

class Context {
 public:
  // Reads the global flags of `inv`; `format_error` is set when -o is not a known format.
  explicit Context(Invocation& inv);

  Invocation& inv;
  Client client;
  OutputFormat format = OutputFormat::kText;
  bool color = false;       // ANSI colours on stdout
  bool redraw = false;      // stdout is a terminal that takes a redrawn progress line
  bool stdin_tty = false;
  std::string format_error;

  bool text() const { return format == OutputFormat::kText; }

  // When set, names where a field the service blames is written ("plan.yaml:7:5"); failed
  // calls then start their line with it. `runs start` sets it to the plan file's position.
  std::function<std::string(const std::string& field)> locate_field;

  // Calls the service; on failure prints the one-line error and returns nullopt.
  std::optional<nlohmann::json> get(const std::string& path, int read_timeout_seconds = 30);
  std::optional<nlohmann::json> post(const std::string& path, const nlohmann::json& body);
  std::optional<nlohmann::json> put(const std::string& path, const nlohmann::json& body);
  std::optional<nlohmann::json> patch(const std::string& path, const nlohmann::json& body);

  // Prints "trainer: MESSAGE" on stderr and returns the exit code for it.
  int fail(const std::string& message, int exit_code);
  // The exit code of the last failed call (unreachable vs. refused), after it was printed.
  int last_failure_code() const { return last_failure_code_; }

  // Prints `doc` as the -o format asks (text mode prints it as YAML-like text).
  void print_document(const nlohmann::json& doc);
  // Prints `doc` in JSON (pretty or compact by -o); for text mode callers print themselves.
  void print_json(const nlohmann::json& doc);

  // Wraps `text` in the ANSI colour `code` ("1" bold, "32" green, ...) when colours are on.
  std::string paint(const std::string& text, const char* code) const;

 private:
  std::optional<nlohmann::json> finish(bool ok, Response& response, CallError& error, const std::string& path,
                                      const nlohmann::json* body);
  int last_failure_code_ = 1;
};

// The one line for a failed call: "field: message" when the service blamed a field its message
// does not already start with.
std::string describe_failure(const CallError& error);

// What to do next after a failed call, as a sentence to append ("; did you mean cli-tests?
// Create it with ..."): for a name the service does not know, the nearest known one and the
// command that lists or creates them; empty when there is nothing to add. `path` and `body`
// are the request's (the name looked up is read from them, never from the message).
std::string next_step(Context& ctx, const CallError& error, const std::string& path, const nlohmann::json* body);

}  // namespace trainer::cli
