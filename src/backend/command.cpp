#include "backend/command.h"

#include <unistd.h>

#include <chrono>

#include "common/subprocess.h"

namespace trainer::backend {

Result<CommandResult> run_command(const std::vector<std::string>& argv,
                                  const std::vector<std::pair<std::string, std::string>>& env, int timeout_s) {
  if (argv.empty()) return invalid_argument("run_command: no command");
  SpawnOptions options;
  options.argv = argv;
  options.search_path = true;
  options.env = env;
  options.stdin_stream = ChildStream::null();
  options.group = ChildGroup::kNewSession;
  options.unblock_signals = true;
  CaptureOptions capture;
  capture.timeout = std::chrono::seconds(timeout_s);
  TRAINER_ASSIGN_OR_RETURN(CapturedRun run, run_captured(options, capture));
  if (run.timed_out) return unavailable(argv[0] + " ran past " + std::to_string(timeout_s) + "s");
  CommandResult r;
  r.exit_code = run.exit_code;
  r.out = std::move(run.out);
  r.err = std::move(run.err);
  if (r.exit_code == 127 && r.out.empty() && r.err.empty()) {
    return unavailable(argv[0] + ": command not found (or not executable)");
  }
  return r;
}

Result<std::string> run_tool(const std::string& job_binary, const std::vector<std::string>& args, int timeout_s) {
  std::vector<std::string> argv = {job_binary};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, {}, timeout_s);
  if (!r.is_ok()) return unavailable("trainer-job " + args[0] + ": " + r.status().message());
  if (r->exit_code != 0) {
    std::string err = trim(r->err);
    return failed_precondition("trainer-job " + args[0] + " failed: " + (err.empty() ? "no message" : err));
  }
  return r->out;
}

std::string host_name() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  const size_t end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

}  // namespace trainer::backend
