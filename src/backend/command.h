// Running a short command (sbatch, squeue, a trainer-job tool) and collecting what it printed,
// over the process seam (common/subprocess.h). Internal to src/backend.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer::backend {

struct CommandResult {
  int exit_code = 0;   // exit code, or 128 + signal number
  std::string out;     // standard output
  std::string err;     // standard error
};

// Runs argv[0] (searched in PATH when it has no '/') with `argv`, this process's environment
// plus `env` (which overrides), standard input from /dev/null, in its own session. Fails with
// unavailable when it cannot be started or runs past `timeout_s` (it is then killed).
Result<CommandResult> run_command(const std::vector<std::string>& argv,
                                  const std::vector<std::pair<std::string, std::string>>& env, int timeout_s);

// Backend::run_tool of every backend: `job_binary` with `args`, run beside trainerd (tools read
// files trainerd holds and run for seconds: they are not jobs). Its standard output; unavailable
// when it cannot be started or runs past `timeout_s`, failed_precondition with its standard
// error when it exits non-zero.
Result<std::string> run_tool(const std::string& job_binary, const std::vector<std::string>& args, int timeout_s);

// This host's name ("" when it cannot be read).
std::string host_name();

// `s` quoted for a POSIX shell ('...' with embedded quotes escaped).
std::string shell_quote(const std::string& s);

// `s` without leading and trailing whitespace.
std::string trim(std::string s);

}  // namespace trainer::backend
