// The command tree of `trainer` and its argument parser.
//
// One table is the single source of each command's flags: the parser reads them, and the
// `--help` text is generated from them. Flags may come anywhere after the command words;
// global flags (--trainer-url, -o, --jq, --json, -q, --timeout, --no-color, --help) are accepted
// on every level; a command's own flag of the same name (a wait's --timeout) takes precedence.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainer::cli {

struct Flag {
  std::string name;          // long name without dashes: "exit-status"
  char short_name = 0;       // one-letter alias ('f' for -f), 0 when none
  std::string value_name;    // empty for a boolean flag; else how --help names the value ("FILE")
  std::string help;          // one line
  std::string requires_flag;  // another flag this one only works with ("wait"); --help says so and
                              // the parser refuses it alone
};

// One line of a command's Examples section: a runnable command line and what it does.
struct Example {
  std::string what;          // "check a plan and print every default" (shown as a # comment)
  std::string line;          // "trainer runs start -f examples/sentiment/run.yaml --dry-run"
};

class Context;
using Handler = std::function<int(Context&)>;  // returns the exit code

struct Command {
  std::string name;                  // "runs"
  std::vector<std::string> aliases;  // {"run"}
  std::string summary;               // one line, shown in the parent's list
  std::string args;                  // positional arguments for the usage line: "RUN"
  std::string description;           // paragraphs shown by --help (may be empty)
  std::vector<Flag> flags;           // this command's own flags
  std::vector<Command> children;     // subcommands (a group has children and no handler)
  Handler run;                       // null for a group
  int min_args = 0;                  // positional arguments required
  int max_args = 0;                  // positional arguments allowed (-1 = any)
  std::vector<Example> examples;     // the Examples section of --help (every command has some)
};

// What the parser found: the command path, its flags and positional arguments.
class Invocation {
 public:
  std::vector<std::string> path;               // {"runs", "wait"}
  std::vector<std::string> positionals;
  std::map<std::string, std::string> values;   // flag name -> value ("" for a set boolean)
  // Every value of each flag that takes one, in the order given (`values` keeps the last):
  // what a repeatable flag reads (`comparisons create --branch A --branch B`).
  std::map<std::string, std::vector<std::string>> repeated;
  const Command* command = nullptr;

  bool has(const std::string& flag) const { return values.count(flag) > 0; }
  std::optional<std::string> get(const std::string& flag) const;
  std::string get_or(const std::string& flag, const std::string& fallback) const;
  std::string command_line() const;  // "trainer runs wait"
};

// The flags every command accepts.
const std::vector<Flag>& global_flags();

// Outcome of parsing: either an invocation to run, or text to print and an exit code
// (help, usage errors).
struct ParseResult {
  std::optional<Invocation> invocation;
  std::string output;    // help text (stdout) or error line (stderr)
  bool is_error = false;
  int exit_code = 0;
};

// `trainer help COMMAND [SUB]` prints what `trainer COMMAND [SUB] --help` prints.
ParseResult parse_command_line(const Command& root, const std::vector<std::string>& argv);

// The --help text of `command`, reached by `path` ({"trainer", "runs", "wait"}).
std::string help_text(const Command& command, const std::vector<std::string>& path);

}  // namespace trainer::cli
