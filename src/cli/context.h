// What every command handler works with: its parsed invocation, the service client, the
// output format, and whether the terminal takes colours and redrawn lines.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/jq_filter.h"
#include "common/status.h"

namespace trainer::cli {

enum class OutputFormat { kText, kJson, kJsonCompact };

class Context {
 public:
  // Reads the global flags of `inv`; `usage_error` is set when one of them is wrong (an unknown
  // -o format, a --timeout that is not a duration, a --jq program that does not compile, ...):
  // the command must then not run, so nothing reaches the service.
  explicit Context(Invocation& inv);

  Invocation& inv;
  ServiceAddress address;   // the service's URL and where it came from
  Client client;
  OutputFormat format = OutputFormat::kText;  // --jq and --json imply json
  bool color = false;       // ANSI colours on stdout
  bool redraw = false;      // stdout is a terminal that takes a redrawn progress line
  bool stdin_tty = false;
  bool quiet = false;       // -q: waits print no progress, only their outcome
  std::string usage_error;

  bool text() const { return format == OutputFormat::kText; }
  // Whether a wait streams its events as JSON lines before the final document: with -o json,
  // unless -q, --jq or --json ask for the final document alone.
  bool stream_events() const { return !text() && !quiet && !jq_ && !json_fields_; }
  // The exit code after the command returned `code`: a failure to print its output (--jq failed
  // on the answer, --json named a field it lacks) turns success into that failure.
  int exit_code(int code) const { return code == 0 && output_failure_ ? output_failure_ : code; }

  // When set, names where a field the service blames is written ("plan.yaml:7:5"); failed
  // calls then start their line with it. `runs start` sets it to the plan file's position.
  std::function<std::string(const std::string& field)> locate_field;

  // When set, appended to the line of a failed call that got no answer (the change may have
  // happened): how to repeat it safely, e.g. with the submission id it sent.
  std::string retry_hint;

  // Calls the service; on failure prints the one-line error and returns nullopt.
  std::optional<nlohmann::json> get(const std::string& path, int read_timeout_seconds = -1);  // -1: the call timeout
  // A GET of a file's bytes (not JSON); on failure prints the one-line error and returns nullopt.
  std::optional<std::string> get_bytes(const std::string& path);
  std::optional<nlohmann::json> post(const std::string& path, const nlohmann::json& body);
  std::optional<nlohmann::json> put(const std::string& path, const nlohmann::json& body);
  std::optional<nlohmann::json> patch(const std::string& path, const nlohmann::json& body);
  std::optional<nlohmann::json> del(const std::string& path);  // DELETE

  // Prints "trainer: MESSAGE" on stderr and returns the exit code for it.
  int fail(const std::string& message, int exit_code);
  // The exit code of the last failed call (unreachable vs. refused), after it was printed.
  int last_failure_code() const { return last_failure_code_; }

  // Prints `doc` as the -o format asks (text mode prints it as YAML-like text).
  void print_document(const nlohmann::json& doc);
  // Prints `doc` in JSON (pretty or compact by -o); for text mode callers print themselves.
  // Every JSON document a command prints goes through here: --json selects its fields, then
  // --jq filters it.
  void print_json(const nlohmann::json& doc);

  // Wraps `text` in the ANSI colour `code` ("1" bold, "32" green, ...) when colours are on.
  std::string paint(const std::string& text, const char* code) const;

 private:
  std::optional<nlohmann::json> finish(bool ok, Response& response, CallError& error, const std::string& path,
                                      const nlohmann::json* body);
  void read_output_flags();
  // Before a call that changes something: `--json=` lists fields and must change nothing.
  bool refuse_change(const std::string& method, const std::string& path);
  int last_failure_code_ = 1;
  int output_failure_ = 0;
  std::unique_ptr<JqFilter> jq_;                       // --jq
  std::optional<std::vector<std::string>> json_fields_;  // --json (empty: list the fields)
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
