#include "common/confinement.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace trainer {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;  // Debian's nobody and nogroup

// Folders every confinement mounts whole (read-only): what lies under them needs no mount of its own.
bool is_system_path(const fs::path& p) {
  for (const char* root : {"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/"}) {
    if (p.string().rfind(root, 0) == 0) return true;
  }
  return false;
}

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// `name` on PATH, or "" when no entry of it holds an executable of that name.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t pos = 0; pos <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', pos), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(pos, end - pos).empty() ? "." : dirs.substr(pos, end - pos)) / name;
    if (executable(candidate)) return fs::absolute(candidate).lexically_normal().string();
    pos = end + 1;
  }
  return "";
}

// A tool of the confinement itself: on PATH, or in /usr/bin.
Result<std::string> confinement_tool(const std::string& name, const std::string& package) {
  std::string found = on_path(name);
  if (found.empty() && executable("/usr/bin/" + name)) found = "/usr/bin/" + name;
  if (found.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "user code runs confined by bubblewrap, and " + name + " is not installed on this node (Debian: " +
                      package + "); install it, or set TRAINER_USER_CODE_CONFINEMENT=none where unconfined user code "
                      "is acceptable");
  }
  return found;
}

// A #! script's interpreter and its one optional argument; empty when it is not a script.
std::vector<std::string> interpreter_of(const fs::path& script) {
  std::ifstream in(script, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return {};
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  const size_t start = line.find_first_not_of(" \t", 2);
  if (start == std::string::npos) return {};
  const size_t end = line.find_first_of(" \t", start);
  std::vector<std::string> out = {line.substr(start, end - start)};
  if (end != std::string::npos) {
    const size_t arg = line.find_first_not_of(" \t", end);
    if (arg != std::string::npos) out.push_back(line.substr(arg));
  }
  return out;
}

}  // namespace

Result<ConfinementMode> user_code_confinement() {
  const char* v = std::getenv("TRAINER_USER_CODE_CONFINEMENT");
  const std::string mode = v != nullptr ? v : "";
  if (mode.empty() || mode == "bubblewrap") return ConfinementMode::kBubblewrap;
  if (mode == "none") return ConfinementMode::kNone;
  return Status(StatusCode::kInvalidArgument,
                "TRAINER_USER_CODE_CONFINEMENT: '" + mode + "' is not a confinement; use bubblewrap (the default) or none");
}

Result<ConfinedExecutable> confined_executable(const std::string& program) {
  const std::string found = program.find('/') == std::string::npos ? on_path(program) : program;
  if (found.empty() || !executable(found)) {
    return Status(StatusCode::kNotFound, program + ": cannot be run (missing or not executable)");
  }
  std::error_code ec;
  const fs::path given = fs::absolute(found, ec).lexically_normal();
  // Run it by its folder's real path and its own name: a Python virtual environment's interpreter
  // is a link, and Python finds the environment (pyvenv.cfg) beside the path it was started by.
  const fs::path folder = fs::canonical(given.parent_path(), ec);
  const fs::path real = fs::canonical(given, ec);
  if (ec) return Status(StatusCode::kNotFound, program + ": cannot be run (" + ec.message() + ")");
  ConfinedExecutable out;
  out.path = (folder / given.filename()).string();
  out.argv = {out.path};
  if (fs::exists(folder.parent_path() / "pyvenv.cfg")) {
    out.mounts.push_back(folder.parent_path().string());  // the environment's packages
  } else if (!is_system_path(out.path)) {
    out.mounts.push_back(out.path);
  }
  // A Python interpreter's install (bin/pythonX.Y beside lib/pythonX.Y).
  if (real.filename().string().rfind("python", 0) == 0 && real.parent_path().filename() == "bin" &&
      !is_system_path(real)) {
    out.mounts.push_back(real.parent_path().parent_path().string());
  }
  // A script runs through its interpreter, mounted too (one through /usr/bin/env finds a system one).
  if (const std::vector<std::string> interpreter = interpreter_of(real); !interpreter.empty()) {
    if (interpreter[0] == program || interpreter[0] == found) {
      return Status(StatusCode::kNotFound, program + ": cannot be run (its #! line names itself)");
    }
    TRAINER_ASSIGN_OR_RETURN(ConfinedExecutable inner, confined_executable(interpreter[0]));
    out.mounts.insert(out.mounts.end(), inner.mounts.begin(), inner.mounts.end());
    out.argv = inner.argv;
    out.argv.insert(out.argv.end(), interpreter.begin() + 1, interpreter.end());
    out.argv.push_back(out.path);
  }
  return out;
}

Result<std::vector<std::string>> confined_argv(const Confinement& c, const std::vector<std::string>& argv) {
  TRAINER_ASSIGN_OR_RETURN(std::string bwrap, confinement_tool("bwrap", "bubblewrap"));
  TRAINER_ASSIGN_OR_RETURN(std::string prlimit, confinement_tool("prlimit", "util-linux"));
  TRAINER_ASSIGN_OR_RETURN(std::string setpriv, confinement_tool("setpriv", "util-linux"));
  const bool root = ::geteuid() == 0;
  std::vector<std::string> a = {bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
                                "--unshare-uts", "--unshare-cgroup-try"};
  if (!root) a.insert(a.end(), {"--unshare-user", "--disable-userns"});
  if (!c.network) a.push_back("--unshare-net");
  a.insert(a.end(), {"--ro-bind", "/usr", "/usr"});
  std::error_code ec;
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib64", "/lib32"}) {
    if (fs::is_symlink(top, ec)) {
      a.insert(a.end(), {"--symlink", fs::read_symlink(top, ec).string(), top});
    } else if (fs::is_directory(top, ec)) {
      a.insert(a.end(), {"--ro-bind", top, top});
    }
  }
  // Of /etc, what the dynamic loader and (with the network) name lookups and TLS read.
  a.insert(a.end(), {"--perms", "0755", "--dir", "/etc"});
  std::vector<std::string> etc = {"/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"};
  if (c.network) etc.insert(etc.end(), {"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl"});
  for (const auto& e : etc) a.insert(a.end(), {"--ro-bind-try", e, e});
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  if (!c.scratch.empty()) {
    a.insert(a.end(), {"--bind", c.scratch, "/scratch", "--chdir", "/scratch"});
  } else {
    a.insert(a.end(), {"--chdir", "/"});
  }
  // The code's own files, each at its own path. Their parent folders are made readable (a folder
  // bwrap makes on its own is 0700, which nobody cannot enter); a path under one already mounted
  // needs nothing.
  std::vector<std::string> mounts;
  for (const auto& m : c.read_only) mounts.push_back(fs::path(m).lexically_normal().string());
  std::sort(mounts.begin(), mounts.end());
  mounts.erase(std::unique(mounts.begin(), mounts.end()), mounts.end());
  std::vector<std::string> mounted;
  std::set<std::string> made = {"/", "/etc", "/proc", "/dev", "/scratch"};
  for (const auto& m : mounts) {
    const bool covered = is_system_path(m) || std::any_of(mounted.begin(), mounted.end(), [&](const std::string& p) {
                           return m == p || m.rfind(p + "/", 0) == 0;
                         });
    if (covered) continue;
    std::vector<std::string> parents;
    for (fs::path p = fs::path(m).parent_path(); p != p.root_path() && !p.empty(); p = p.parent_path()) {
      parents.push_back(p.string());
    }
    for (auto it = parents.rbegin(); it != parents.rend(); ++it) {
      if (made.insert(*it).second) a.insert(a.end(), {"--perms", "0755", "--dir", *it});
    }
    a.insert(a.end(), {"--ro-bind", m, m});
    mounted.push_back(m);
  }
  a.insert(a.end(), {"--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME",
                     c.scratch.empty() ? "/" : "/scratch", "--setenv", "TMPDIR", c.scratch.empty() ? "/" : "/scratch"});
  for (const auto& [k, v] : c.env) a.insert(a.end(), {"--setenv", k, v});
  a.insert(a.end(), {"--", prlimit, "--as=" + std::to_string(c.limits.memory_bytes),
                     "--cpu=" + std::to_string(c.limits.cpu_seconds), "--fsize=" + std::to_string(c.limits.file_bytes),
                     "--core=0"});
  if (root) {
    a.push_back("--nproc=" + std::to_string(c.limits.processes));
    a.insert(a.end(), {"--", setpriv, "--reuid=" + std::to_string(kNobody), "--regid=" + std::to_string(kNobody),
                       "--clear-groups", "--no-new-privs"});
  }
  a.push_back("--");
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

Result<std::string> make_scratch(const std::string& parent) {
  std::string tmpl = (fs::path(parent) / "user-code-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status(StatusCode::kInternal, "could not make a scratch folder under " + parent + ": " + std::strerror(errno));
  }
  if (::geteuid() == 0 && ::chown(tmpl.c_str(), kNobody, kNobody) != 0) {
    remove_scratch(tmpl);
    return Status(StatusCode::kInternal, "could not give the scratch folder " + tmpl + " to nobody: " + std::strerror(errno));
  }
  return tmpl;
}

void remove_scratch(const std::string& folder) {
  std::error_code ec;
  fs::remove_all(folder, ec);
}

}  // namespace trainer
