// A child process over a socket pair (declared in common/subprocess.h). A socket rather than
// pipes so that writing to a child that died is an error (MSG_NOSIGNAL), never SIGPIPE.
#include "common/subprocess.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace trainer {

Subprocess::~Subprocess() { kill(); }

Status Subprocess::start(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env) {
  kill();
  if (argv.empty()) return Status(StatusCode::kInvalidArgument, "no program to start");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status(StatusCode::kUnavailable, "could not start " + argv[0] + ": socketpair: " + std::strerror(errno));
  }
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    bool overridden = false;
    for (const auto& [k, v] : env) overridden = overridden || entry.rfind(k + "=", 0) == 0;
    if (!overridden) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Status(StatusCode::kUnavailable, "could not start " + argv[0] + ": fork: " + std::strerror(err));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: kill() ends whatever it started too
    ::dup2(fds[1], STDIN_FILENO);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execvpe(args[0], args.data(), envp.data());
    static const char kMsg[] = "subprocess: exec failed\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from here, so kill() works even before the child ran
  ::close(fds[1]);
  pid_ = pid;
  to_child_ = fds[0];
  from_child_ = fds[0];
  buffered_.clear();
  return Status::ok();
}

Status Subprocess::write_line(const std::string& line) {
  if (pid_ <= 0) return Status(StatusCode::kUnavailable, "the process is not running");
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(to_child_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kUnavailable, std::string("writing to the process: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Subprocess::ReadResult Subprocess::read_line(std::chrono::steady_clock::time_point deadline, std::string* line) {
  for (;;) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      *line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return ReadResult::kLine;
    }
    if (pid_ <= 0) return ReadResult::kClosed;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return ReadResult::kTimeout;
    pollfd p{from_child_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000 * 60 * 60)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;  // the loop checks the deadline
    char buf[65536];
    const ssize_t n = ::recv(from_child_, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return ReadResult::kClosed;
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void Subprocess::kill() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(to_child_);
  pid_ = -1;
  to_child_ = -1;
  from_child_ = -1;
  buffered_.clear();
}

}  // namespace trainer
