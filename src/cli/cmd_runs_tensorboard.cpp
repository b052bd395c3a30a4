// `trainer runs tensorboard RUN [--dir D] [--port 6006] [--sync-only]`: mirrors the run's
// TensorBoard event files (GET /v1/runs/{id}/tensorboard, one file per attempt) into D/RUN,
// re-fetching them every few seconds while the run trains, and starts `tensorboard --logdir D`
// from PATH (docs/tensorboard.md).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/run_view.h"
#include "common/subprocess.h"

namespace trainer::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kSyncEverySeconds = 3;  // between two looks at the run's files while it trains
constexpr long long kDefaultPort = 6006;

// What one sync did.
struct Synced {
  bool ended = false;  // the run is in a terminal phase: its files are final
  int changed = 0;     // files that grew (or appeared)
  int files = 0;
};

// The local copy of `name` made equal to the run's: the bytes past what the copy holds are
// appended, so a TensorBoard reading the copy sees it grow as the job's file grew. A copy longer
// than the run's file (not ours) is written anew.
Status mirror_file(Context& ctx, const std::string& run_id, const std::string& name, int64_t bytes,
                   const fs::path& dir, bool* changed) {
  const fs::path local = dir / name;
  std::error_code ec;
  const auto have = fs::exists(local, ec) ? static_cast<int64_t>(fs::file_size(local, ec)) : int64_t{-1};
  *changed = false;
  if (have == bytes) return Status::ok();
  auto got = ctx.get_bytes("/v1/runs/" + seg(run_id) + "/tensorboard/" + seg(name));
  if (!got) return unavailable("");  // printed
  const int64_t from = have >= 0 && have <= static_cast<int64_t>(got->size()) ? have : 0;
  std::ofstream out(local, from > 0 ? std::ios::binary | std::ios::app : std::ios::binary | std::ios::trunc);
  out.write(got->data() + from, static_cast<std::streamsize>(got->size() - static_cast<size_t>(from)));
  out.close();
  if (!out) return internal_error(local.string() + ": cannot write the event file's copy");
  *changed = true;
  return Status::ok();
}

// One look at the run's files; nullopt after printing why it failed.
std::optional<Synced> sync_once(Context& ctx, const std::string& ref, const fs::path& dir) {
  auto doc = ctx.get("/v1/runs/" + seg(ref) + "/tensorboard");
  if (!doc) return std::nullopt;
  Synced s;
  s.ended = doc->value("ended", false);
  const std::string run_id = doc->value("runId", ref);
  for (const auto& f : doc->value("files", json::array())) {
    bool changed = false;
    Status st = mirror_file(ctx, run_id, f.value("name", std::string()), f.value("bytes", int64_t{0}), dir, &changed);
    if (!st.is_ok()) {
      if (!st.message().empty()) ctx.fail(st.message(), kExitError);
      return std::nullopt;
    }
    s.changed += changed ? 1 : 0;
    ++s.files;
  }
  return s;
}

// `program` found on PATH, or "" when it is not there.
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(end > start ? dirs.substr(start, end - start) : ".") / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate.string();
    start = end + 1;
  }
  return "";
}

// Waits for SIGINT or SIGTERM (blocked by the caller) up to `seconds`; the signal, or 0.
int wait_for_stop(const sigset_t& stop_signals, int seconds) {
  timespec wait{seconds, 0};
  const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
  return sig > 0 ? sig : 0;
}

int runs_tensorboard(Context& ctx) {
  const std::string ref = ctx.inv.positionals[0];
  int code = kExitOk;
  const auto port = int_flag(ctx, "port", &code);
  if (code != kExitOk) return code;
  if (port && (*port < 1 || *port > 65535)) {
    return ctx.fail("--port must be between 1 and 65535, got " + std::to_string(*port), kExitUsage);
  }
  const bool sync_only = ctx.inv.has("sync-only");
  std::string tensorboard;
  if (!sync_only) {
    tensorboard = find_on_path("tensorboard");
    if (tensorboard.empty()) {
      return ctx.fail("tensorboard is not on PATH: install it (`pip install tensorboard`), or mirror the files with "
                      "--sync-only --dir D and point your own TensorBoard at D",
                      kExitError);
    }
  }
  // The run first: a wrong reference fails before anything is made.
  auto run = ctx.get("/v1/runs/" + seg(ref));
  if (!run) return ctx.last_failure_code();
  const std::string run_id = run->value("runId", ref);
  fs::path root;
  std::error_code ec;
  if (auto d = ctx.inv.get("dir"); d && !d->empty()) {
    root = *d;
  } else {
    std::string tmpl = (fs::temp_directory_path(ec) / "trainer-tensorboard-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return ctx.fail("cannot make a temporary folder for the event files: " + std::string(std::strerror(errno)) +
                          "; name one with --dir",
                      kExitError);
    }
    root = tmpl;
  }
  const fs::path dir = root / short_id(run_id);  // TensorBoard names the run by its folder
  fs::create_directories(dir, ec);
  if (ec) return ctx.fail("--dir " + root.string() + ": cannot create " + dir.string() + ": " + ec.message(), kExitUsage);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto synced = sync_once(ctx, run_id, dir);
  if (!synced) return ctx.last_failure_code();
  if (ctx.text()) {
    out("Run " + short_id(run_id) + ": " + std::to_string(synced->files) + " event file(s) in " + dir.string() +
        (synced->ended ? " (the run has ended)" : "; re-fetching every " + std::to_string(kSyncEverySeconds) +
                                                     " s while it trains") +
        "\n");
  }
  pid_t child = -1;
  if (!sync_only) {
    SpawnOptions so;
    so.argv = {tensorboard, "--logdir", root.string(), "--port", std::to_string(port.value_or(kDefaultPort))};
    so.group = ChildGroup::kNewGroup;
    so.unblock_signals = true;
    so.die_with_parent = true;
    auto started = spawn(so);
    if (!started.is_ok()) return ctx.fail(started.status().message(), kExitError);
    child = *started;
    if (ctx.text()) {
      out("TensorBoard: http://localhost:" + std::to_string(port.value_or(kDefaultPort)) + "/ (Ctrl-C to stop)\n");
    } else {
      ctx.print_json({{"runId", run_id}, {"dir", root.string()}, {"port", port.value_or(kDefaultPort)}});
    }
  }
  std::fflush(stdout);
  bool ended = synced->ended;
  while (true) {
    if (sync_only && ended) break;
    if (wait_for_stop(stop_signals, kSyncEverySeconds) != 0) break;
    if (child > 0) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        return ctx.fail("tensorboard exited (" + std::to_string(exit_code_of(status)) + ") before it was stopped; "
                        "its own message is above",
                        kExitError);
      }
    }
    if (ended) continue;  // the files are final: TensorBoard keeps serving them
    auto s = sync_once(ctx, run_id, dir);
    if (!s) {
      if (child < 0) return ctx.last_failure_code();
      continue;  // TensorBoard keeps what it has; the next look may work
    }
    ended = s->ended;
    if (ctx.text() && sync_only && (s->changed > 0 || ended)) {
      // The end is said even when the last look found nothing new (everything was synced before).
      out(s->changed > 0 ? "synced " + std::to_string(s->changed) + " file(s)" + (ended ? "; the run has ended" : "") + "\n"
                         : std::string("the run has ended; every file is synced\n"));
      std::fflush(stdout);
    }
  }
  if (child > 0) {
    ::kill(-child, SIGTERM);
    int status = 0;
    ::waitpid(child, &status, 0);
  }
  if (sync_only && !ctx.text()) ctx.print_json({{"runId", run_id}, {"dir", dir.string()}});
  return kExitOk;
}

}  // namespace

Command runs_tensorboard_command() {
  Command c{"tensorboard", {}, "Mirror a run's TensorBoard event files locally and launch TensorBoard", "RUN",
            "Copies the run's event files (one per attempt: every step's loss, learning rate, gradient\n"
            "norm and throughput, validation loss, the RL figures and a few rollouts, the resolved plan\n"
            "as hyperparameters) into DIR/RUN, re-fetching them every 3 s while the run trains, and\n"
            "starts `tensorboard --logdir DIR --port PORT` from PATH (the `tensorboard` Python package).\n"
            "--sync-only copies without TensorBoard until the run ends, then exits. Without it, runs\n"
            "until Ctrl-C or SIGTERM, which stop TensorBoard too.",
            {{"dir", 0, "DIR", "where the files go (default: a new temporary folder)", ""},
             {"port", 0, "N", "TensorBoard's port (default 6006)", ""},
             {"sync-only", 0, "", "only mirror the files, until the run ends; start no TensorBoard", ""}},
            {}, runs_tensorboard, 1, 1, {}};
  c.examples = {{"watch a run's curves at http://localhost:6006/", "trainer runs tensorboard 7d496e82"},
                {"mirror the files into ./tb until the run ends", "trainer runs tensorboard 7d496e82 --dir tb --sync-only"},
                {"TensorBoard on another port", "trainer runs tensorboard 7d496e82 --port 6007"}};
  return c;
}

}  // namespace trainer::cli
