// The process seam: every child process of the project starts here (spawn), and one waited for
// to its end with its output captured (run_captured), or spoken to one line at a time
// (Subprocess).
//
// spawn() is the one fork() of the project. Everything the child needs (argv, environment, the
// descriptors it gets) is built before the fork; after it the child calls only
// async-signal-safe functions, then exec. A child that cannot exec exits with status 127.
//
// A child inherits no descriptor of ours but its three standard streams: spawn() closes every
// other one in the child before exec, whether or not it was opened close-on-exec (a listening
// socket a job inherited would keep trainerd's port bound after trainerd died). Descriptors are
// opened close-on-exec all the same (mark_close_on_exec for those a library opens), so that a
// process some library starts behind our back inherits none either.
//
// Thread safety: spawn() and run_captured() may be called from any thread; a Subprocess has one
// owner that drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer {

// Where a child's standard stream (stdin, stdout or stderr) goes.
struct ChildStream {
  enum class Kind {
    kInherit,  // this process's own
    kNull,     // /dev/null
    kFd,       // `fd`, a descriptor of this process (a file, a pipe, a socket); the caller closes it
  };
  Kind kind = Kind::kInherit;
  int fd = -1;  // kFd only; a descriptor above 2

  static ChildStream inherit() { return {}; }
  static ChildStream null() { return {Kind::kNull, -1}; }
  static ChildStream to(int fd) { return {Kind::kFd, fd}; }
};

// The process group a child runs in.
enum class ChildGroup {
  kInherit,     // this process's: a signal to our group reaches it
  kNewGroup,    // a group of its own (setpgid), so kill(-pid) ends it and all it started
  kNewSession,  // a session of its own (setsid): a group of its own, and no controlling terminal
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name when search_path
  bool search_path = false;       // look argv[0] up on PATH when it holds no '/'
  // Added to this process's environment; an added name replaces the inherited variable.
  std::vector<std::pair<std::string, std::string>> env;
  bool clear_env = false;         // true: the child's environment is `env` alone
  std::string working_dir;        // "" = this process's
  ChildStream stdin_stream, stdout_stream, stderr_stream;
  ChildGroup group = ChildGroup::kInherit;
  bool unblock_signals = false;   // clear the signal mask (a blocked mask survives exec)
  bool restore_sigpipe = false;   // SIGPIPE back to its default action (an ignored one survives exec)
  // SIGKILL the child when the thread that spawned it ends (PR_SET_PDEATHSIG); a child whose
  // parent is already gone when it starts exits at once with status 1.
  bool die_with_parent = false;
  // Written to the child's stderr when exec fails ("" = nothing), before it exits with 127.
  std::string exec_failure_note;
};

// Starts a child as `options` say; its pid. The caller reaps it (waitpid). Errors: kInvalidArgument
// for an empty argv, kUnavailable when fork fails (naming the program), kInternal when /dev/null
// cannot be opened.
[[nodiscard]] Result<pid_t> spawn(const SpawnOptions& options);

// Sets FD_CLOEXEC on `fd`, a descriptor some library opened without it (an asio socket).
// kInternal naming `what` when fcntl fails.
[[nodiscard]] Status mark_close_on_exec(int fd, const std::string& what);

// How a child's wait status reads as one number: its exit code, or 128 + the signal that ended it.
int exit_code_of(int wait_status);

struct CaptureOptions {
  std::chrono::milliseconds timeout{0};  // the child's whole run; past it the child is SIGKILLed
  std::optional<std::string> input;      // the child's stdin when given (else SpawnOptions' stdin_stream)
  bool capture_stderr = true;            // false: stderr goes where SpawnOptions' stderr_stream says
};

struct CapturedRun {
  bool timed_out = false;  // it ran past the timeout and was killed (its group too, when it has one)
  int exit_code = 0;       // exit_code_of() its wait status
  std::string out;         // what it wrote to stdout
  std::string err;         // what it wrote to stderr (empty unless captured)
};

// Runs a child to its end (or the timeout), its stdout and stderr captured in temporary files, so
// a child that writes much never blocks on a full pipe. Errors as spawn's, and kInternal when a
// temporary file cannot be made. A timeout is not an error: CapturedRun.timed_out.
[[nodiscard]] Result<CapturedRun> run_captured(SpawnOptions options, const CaptureOptions& capture);

// A child spoken to over a socket, one line at a time.
//
// A Subprocess starts `argv` with its stdin and stdout connected to this process (its stderr is
// inherited: a child's complaints land in our log). Lines are written whole; a read waits for
// one line until a deadline, so a child that hangs costs at most the caller's timeout. Ending
// it is SIGKILL to the child's own process group (the child and anything it started), then a
// wait, so no zombie is left.
class Subprocess {
 public:
  // What a line read came to.
  enum class ReadResult {
    kLine,      // a whole line (without its newline) is in *line
    kTimeout,   // the deadline passed first
    kClosed,    // the child closed its stdout (it exited or crashed)
  };

  Subprocess() = default;
  ~Subprocess();  // kills the child if it still runs
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Starts `argv` (argv[0] looked up on PATH) with `env` added to this process's environment.
  // Errors (kUnavailable) name the program.
  [[nodiscard]] Status start(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& env = {});

  // Writes `line` and a newline to the child's stdin. kUnavailable when the child is gone.
  [[nodiscard]] Status write_line(const std::string& line);

  // Reads the next line of the child's stdout, waiting until `deadline` at most.
  ReadResult read_line(std::chrono::steady_clock::time_point deadline, std::string* line);

  // SIGKILLs the child's process group and reaps the child. A no-op when none runs.
  void kill();

  // Waits up to `grace` for the child to exit by itself (it closed its stdout), then ends its
  // group as kill() does; the child's exit_code_of() status (128 + 9 when it had to be killed).
  // -1 when none runs.
  int wait_exit(std::chrono::milliseconds grace);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;     // the child, -1 when none
  int to_child_ = -1;  // write end of the child's stdin
  int from_child_ = -1;  // read end of the child's stdout
  std::string buffered_;  // bytes read past the last line returned
};

}  // namespace trainer
