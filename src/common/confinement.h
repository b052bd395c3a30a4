// User code runs confined: a rule: or bundle: scoring function's worker and a tool command
// (docs/security.md, "User code"). The confinement is Debian's bubblewrap (bwrap), chosen over
// raw namespaces and seccomp because it is one small, audited setuid-free tool that sets up the
// mount, PID, IPC, UTS and network namespaces in one exec, and is packaged everywhere we run:
//
//   bwrap  (new PID/IPC/UTS/network namespaces; only /usr, the interpreter's install, the code's
//          own files, read-only; a scratch folder as /scratch; no environment but what is given)
//   prlimit (address space, CPU seconds, file size, processes, no core files)
//   setpriv (as root: the unprivileged user nobody, no supplementary groups, no new privileges)
//   ARGV
//
// Nothing of the host outside those mounts is visible: not the store, not the data folder, not
// /etc. Processes count against nobody's limit only when trainerd runs as root (which can switch
// users); run unprivileged, the code keeps its user and the process limit is left out (it would
// count the job's own threads).
//
// TRAINER_USER_CODE_CONFINEMENT picks the mode: "bubblewrap" (the default) or "none" (a
// development machine without bwrap; the operator's choice, never the plan's).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer {

enum class ConfinementMode { kBubblewrap, kNone };

// The mode of this process (TRAINER_USER_CODE_CONFINEMENT); kInvalidArgument naming the variable
// for a value other than "bubblewrap", "none" or unset.
Result<ConfinementMode> user_code_confinement();

struct ConfinementLimits {
  int64_t memory_bytes = int64_t{4} << 30;  // address space
  int64_t cpu_seconds = 3600;               // CPU time of one process (a worker past it is restarted)
  int64_t file_bytes = int64_t{64} << 20;   // the largest file it may write
  int processes = 64;                       // processes and threads (as root only, see above)
};

struct Confinement {
  std::vector<std::string> read_only;  // absolute paths (files or folders), visible read-only at their own paths
  std::string scratch;                 // a folder of ours, writable inside as /scratch (its HOME and TMPDIR); "" = none
  bool network = false;                // keep the host's network (else only a private loopback)
  ConfinementLimits limits;
  std::vector<std::pair<std::string, std::string>> env;  // its whole environment, besides PATH, HOME and TMPDIR
};

// An executable as the confinement needs it: the argv that starts it ({path}, or for a #! script
// {interpreter, [its argument,] script}, so the script needs only to be readable by nobody), and
// what must be mounted for it to run (its own file, a Python virtual environment's folder and its
// base install, a script's interpreter).
struct ConfinedExecutable {
  std::string path;               // the program's own path, as it is run
  std::vector<std::string> argv;  // what starts it; the caller appends its arguments
  std::vector<std::string> mounts;
};

// `program` (a path, or a name looked up on PATH) resolved for the confinement. kNotFound naming
// it when it is missing or not executable.
Result<ConfinedExecutable> confined_executable(const std::string& program);

// The argv that runs `argv` inside `c`: bwrap ... -- prlimit ... -- [setpriv ... --] argv.
// kFailedPrecondition naming the tool when bwrap, prlimit or setpriv is not installed.
Result<std::vector<std::string>> confined_argv(const Confinement& c, const std::vector<std::string>& argv);

// A new scratch folder under `parent` (mode 0700, owned by nobody when we are root): the one
// place confined code may write. Remove it with remove_scratch().
Result<std::string> make_scratch(const std::string& parent);
void remove_scratch(const std::string& folder);

}  // namespace trainer
