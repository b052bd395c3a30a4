#include "backend/command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace trainer::backend {

Result<CommandResult> run_command(const std::vector<std::string>& argv,
                                  const std::vector<std::pair<std::string, std::string>>& env, int timeout_s) {
  if (argv.empty()) return invalid_argument("run_command: no command");
  char out_tpl[] = "/tmp/trainerd-cmd-out-XXXXXX";
  char err_tpl[] = "/tmp/trainerd-cmd-err-XXXXXX";
  int out_fd = ::mkstemp(out_tpl);
  int err_fd = ::mkstemp(err_tpl);
  auto slurp = [](const char* path) {
    std::ifstream in(path, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ::unlink(path);
    return s;
  };
  if (out_fd < 0 || err_fd < 0) {
    if (out_fd >= 0) ::close(out_fd), ::unlink(out_tpl);
    if (err_fd >= 0) ::close(err_fd), ::unlink(err_tpl);
    return internal_error(std::string("cannot create a temporary file: ") + std::strerror(errno));
  }
  // Everything the child needs is built before fork: it only calls async-signal-safe functions.
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    bool overridden = false;
    for (const auto& [k, v] : env) {
      if (entry.size() > k.size() && entry.compare(0, k.size(), k) == 0 && entry[k.size()] == '=') overridden = true;
    }
    if (!overridden) envp.push_back(*e);
  }
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(cargv[0], cargv.data(), envp.data());
    _exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  if (pid < 0) {
    const int err = errno;
    slurp(out_tpl);
    slurp(err_tpl);
    return unavailable(argv[0] + ": fork failed: " + std::strerror(err));
  }
  int wstatus = 0;
  bool timed_out = true;
  for (int i = 0; i < timeout_s * 100; ++i) {
    if (::waitpid(pid, &wstatus, WNOHANG) == pid) {
      timed_out = false;
      break;
    }
    ::usleep(10000);
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
  }
  CommandResult r;
  r.out = slurp(out_tpl);
  r.err = slurp(err_tpl);
  if (timed_out) return unavailable(argv[0] + " ran past " + std::to_string(timeout_s) + "s");
  r.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  if (r.exit_code == 127 && r.out.empty() && r.err.empty()) {
    return unavailable(argv[0] + ": command not found (or not executable)");
  }
  return r;
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
