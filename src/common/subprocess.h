// The process seam: a child process spoken to over pipes, one line at a time.
//
// A Subprocess starts `argv` with its stdin and stdout connected to this process (its stderr is
// inherited: a child's complaints land in our log). Lines are written whole; a read waits for
// one line until a deadline, so a child that hangs costs at most the caller's timeout. Ending
// it is SIGKILL to the child's own process group (the child and anything it started), then a
// wait, so no zombie is left.
//
// Thread safety: none; one owner drives one Subprocess.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer {

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

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;     // the child, -1 when none
  int to_child_ = -1;  // write end of the child's stdin
  int from_child_ = -1;  // read end of the child's stdout
  std::string buffered_;  // bytes read past the last line returned
};

}  // namespace trainer
