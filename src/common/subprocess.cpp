// The process seam (declared in common/subprocess.h): spawn(), the one fork() of the project;
// run_captured() over it; and Subprocess, a child over a socket pair. A socket rather than pipes
// so that writing to a child that died is an error (MSG_NOSIGNAL), never SIGPIPE.
#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

extern char** environ;

namespace trainer {
namespace {

// How often run_captured looks whether its child ended.
constexpr std::chrono::milliseconds kWaitPollInterval{5};
// Where a child without close_range stops closing descriptors (RLIMIT_NOFILE when lower).
constexpr int kMaxFdToClose = 1 << 16;

// What the child does between fork and exec, all of it prepared before the fork: the child only
// reads this and makes async-signal-safe calls.
struct ChildPlan {
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  bool search_path = false;
  const char* working_dir = nullptr;  // nullptr = stay
  int sources[3] = {-1, -1, -1};      // what becomes stdin, stdout, stderr; -1 = inherited
  ChildGroup group = ChildGroup::kInherit;
  bool unblock_signals = false, restore_sigpipe = false, die_with_parent = false;
  int max_fd = 0;  // the highest descriptor to close when close_range is not there
  pid_t parent = 0;
  const char* note = nullptr;  // written to stderr when exec fails
  size_t note_size = 0;
};

[[noreturn]] void exec_child(const ChildPlan& p) {
  if (p.group == ChildGroup::kNewSession) ::setsid();
  if (p.group == ChildGroup::kNewGroup) ::setpgid(0, 0);
  if (p.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != p.parent) ::_exit(1);  // the parent died before the line above took effect
  }
  for (int target = 0; target < 3; ++target) {
    const int source = p.sources[target];
    if (source < 0) continue;
    if (source != target) {
      ::dup2(source, target);  // the copy does not inherit O_CLOEXEC
    } else {
      const int flags = ::fcntl(source, F_GETFD);
      if (flags >= 0) ::fcntl(source, F_SETFD, flags & ~FD_CLOEXEC);
    }
  }
  const bool moved = p.working_dir == nullptr || ::chdir(p.working_dir) == 0;
  // Every descriptor above the standard streams: the child inherits none of ours.
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd <= p.max_fd; ++fd) ::close(fd);  // a kernel before 5.9
  }
  if (p.unblock_signals) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
  if (p.restore_sigpipe) ::signal(SIGPIPE, SIG_DFL);
  if (moved) {
    if (p.search_path) {
      ::execvpe(p.argv[0], p.argv, p.envp);
    } else {
      ::execve(p.argv[0], p.argv, p.envp);
    }
  }
  if (p.note_size > 0) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, p.note, p.note_size);
  }
  ::_exit(127);
}

bool replaced(std::string_view entry, const std::vector<std::pair<std::string, std::string>>& env) {
  for (const auto& [k, v] : env) {
    if (entry.size() > k.size() && entry.compare(0, k.size(), k) == 0 && entry[k.size()] == '=') return true;
  }
  return false;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A temporary file that is unlinked as soon as it is made: only its descriptor names it, so
// nothing is left behind whatever happens. Closed on destruction.
class AnonymousFile {
 public:
  AnonymousFile() = default;
  AnonymousFile(const AnonymousFile&) = delete;
  AnonymousFile& operator=(const AnonymousFile&) = delete;
  ~AnonymousFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] Status open() {
    char path[] = "/tmp/trainer-capture-XXXXXX";
    fd_ = ::mkostemp(path, O_CLOEXEC);
    if (fd_ < 0) return internal_error(std::string("cannot create a temporary file: ") + std::strerror(errno));
    ::unlink(path);
    return Status::ok();
  }

  [[nodiscard]] Status write_all(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return internal_error(std::string("cannot write a temporary file: ") + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    return Status::ok();
  }

  // Everything in the file, from its start.
  std::string read_all() const {
    std::string out;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, static_cast<off_t>(out.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace

Result<pid_t> spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return Status(StatusCode::kInvalidArgument, "no program to start");
  const std::string& program = options.argv[0];
  std::vector<std::string> args = options.argv;
  std::vector<std::string> env_strings;
  if (!options.clear_env) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (!replaced(*e, options.env)) env_strings.emplace_back(*e);
    }
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv = pointers(args), envp = pointers(env_strings);

  const ChildStream* streams[3] = {&options.stdin_stream, &options.stdout_stream, &options.stderr_stream};
  int null_fd = -1;
  if (std::any_of(std::begin(streams), std::end(streams), [](const ChildStream* s) { return s->kind == ChildStream::Kind::kNull; })) {
    null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) return internal_error("could not start " + program + ": /dev/null: " + std::strerror(errno));
  }
  ChildPlan plan;
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.search_path = options.search_path;
  plan.working_dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  for (int i = 0; i < 3; ++i) {
    if (streams[i]->kind == ChildStream::Kind::kNull) plan.sources[i] = null_fd;
    if (streams[i]->kind == ChildStream::Kind::kFd) plan.sources[i] = streams[i]->fd;
  }
  plan.group = options.group;
  rlimit files{};
  plan.max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                    ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, kMaxFdToClose))
                    : kMaxFdToClose;
  plan.unblock_signals = options.unblock_signals;
  plan.restore_sigpipe = options.restore_sigpipe;
  plan.die_with_parent = options.die_with_parent;
  plan.parent = ::getpid();
  plan.note = options.exec_failure_note.data();
  plan.note_size = options.exec_failure_note.size();

  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan);
  const int fork_errno = errno;
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) return Status(StatusCode::kUnavailable, "could not start " + program + ": fork: " + std::strerror(fork_errno));
  // Also from here, so that kill(-pid) reaches the group even before the child ran.
  if (options.group == ChildGroup::kNewGroup) ::setpgid(pid, pid);
  return pid;
}

Status mark_close_on_exec(int fd, const std::string& what) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    return internal_error("cannot make " + what + " close-on-exec: " + std::strerror(errno));
  }
  return Status::ok();
}

int exit_code_of(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

Result<CapturedRun> run_captured(SpawnOptions options, const CaptureOptions& capture) {
  AnonymousFile in, out, err;
  if (capture.input) {
    TRAINER_RETURN_IF_ERROR(in.open());
    TRAINER_RETURN_IF_ERROR(in.write_all(*capture.input));
    options.stdin_stream = ChildStream::to(in.fd());
  }
  TRAINER_RETURN_IF_ERROR(out.open());
  options.stdout_stream = ChildStream::to(out.fd());
  if (capture.capture_stderr) {
    TRAINER_RETURN_IF_ERROR(err.open());
    options.stderr_stream = ChildStream::to(err.fd());
  }
  TRAINER_ASSIGN_OR_RETURN(const pid_t pid, spawn(options));

  const auto deadline = std::chrono::steady_clock::now() + capture.timeout;
  CapturedRun run;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      return internal_error("waiting for " + options.argv[0] + ": " + std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (options.group != ChildGroup::kInherit) ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      run.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(kWaitPollInterval);
  }
  run.exit_code = exit_code_of(status);
  run.out = out.read_all();
  if (capture.capture_stderr) run.err = err.read_all();
  return run;
}

Subprocess::~Subprocess() { kill(); }

Status Subprocess::start(const std::vector<std::string>& argv,
                         const std::vector<std::pair<std::string, std::string>>& env) {
  kill();
  if (argv.empty()) return Status(StatusCode::kInvalidArgument, "no program to start");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status(StatusCode::kUnavailable, "could not start " + argv[0] + ": socketpair: " + std::strerror(errno));
  }
  SpawnOptions options;
  options.argv = argv;
  options.search_path = true;
  options.env = env;
  options.stdin_stream = ChildStream::to(fds[1]);
  options.stdout_stream = ChildStream::to(fds[1]);
  options.group = ChildGroup::kNewGroup;  // kill() ends whatever it started too
  options.exec_failure_note = "subprocess: exec failed\n";
  Result<pid_t> pid = spawn(options);
  ::close(fds[1]);
  if (!pid.is_ok()) {
    ::close(fds[0]);
    return pid.status();
  }
  pid_ = *pid;
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

int Subprocess::wait_exit(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == pid_) {
    ::kill(-pid_, SIGKILL);  // whatever it started and left behind
    ::close(to_child_);
    pid_ = to_child_ = from_child_ = -1;
    buffered_.clear();
    return exit_code_of(status);
  }
  kill();
  return 128 + SIGKILL;
}

}  // namespace trainer
