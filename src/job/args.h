// A small parser for the subcommands' `--name value` and `--flag` arguments.
#pragma once

#include <map>
#include <set>
#include <string>

namespace trainer::job {

struct Args {
  std::map<std::string, std::string> values;  // --name value
  std::set<std::string> flags;                // --flag
  std::string error;                          // non-empty when the arguments were malformed

  bool has(const std::string& name) const { return values.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
};

// Parses argv[1..argc) (argv[0] is the subcommand). `with_value` and `flag_names` list the
// accepted options (without dashes); anything else is an error naming it.
Args parse_args(int argc, char** argv, const std::set<std::string>& with_value, const std::set<std::string>& flag_names);

}  // namespace trainer::job
