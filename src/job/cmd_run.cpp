// trainer-job run: trains a resolved plan locally (the job protocol, docs/job-protocol.md).
//
// Events go to --events FILE (stdout when absent) as JSON lines, `hello` first; human progress
// to stderr. The SFT metrics are recorded through the telemetry SDK as well (job_telemetry.h).
// SIGTERM (or SIGINT) stops the engine at the next step boundary: {"type":"cancelled"}, exit
// 143; the metrics are pushed at once when the signal arrives, and again at exit.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "common/sha256.h"
#include "common/version.h"
#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"
#include "job/job_events.h"
#include "job/job_telemetry.h"
#include "job/snapshot_publisher.h"
#include "job/snapshot_restore.h"
#include "plan/plan.h"
#include "storage/storage.h"

namespace trainer::job {
namespace {

constexpr const char* kUsage =
    "usage: trainer-job run --plan FILE --output DIR [--events FILE]\n"
    "Trains the plan's LoRA adapter into DIR/adapter. In a local plan, baseModel is a model folder\n"
    "and config.dataset a JSONL file. Job-protocol events (JSON lines) go to --events or stdout;\n"
    "progress goes to stderr. SIGTERM stops at the next step boundary (exit 143).\n";

constexpr int kExitCancelled = 143;
// Sent by StopSignals to its own thread to end it.
constexpr int kQuitSignal = SIGUSR2;
// A pause with --checkpoint save (docs/job-protocol.md, "Signals").
constexpr int kPauseSignal = SIGUSR1;

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, kPauseSignal);
  sigaddset(&set, kQuitSignal);
  return set;
}

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it starts later
// (the exporter's, libtorch's): call it before starting any, so that only StopSignals takes them.
void block_stop_signals() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// SIGTERM and SIGINT, taken on a thread of their own (sigwait) rather than in a handler, so
// that their consequences may do more than set a flag (push the metrics). The signals must be
// blocked already (block_stop_signals).
class StopSignals {
 public:
  explicit StopSignals(std::function<void(int)> on_signal)
      : on_signal_(std::move(on_signal)), set_(stop_signal_set()) {
    thread_ = std::thread([this] {
      while (true) {
        int signal = 0;
        if (sigwait(&set_, &signal) != 0 || signal == kQuitSignal) return;
        on_signal_(signal);
      }
    });
  }
  ~StopSignals() {
    pthread_kill(thread_.native_handle(), kQuitSignal);
    thread_.join();
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  std::function<void(int)> on_signal_;
  sigset_t set_;
  std::thread thread_;
};

// The run's settings hash as the engine reports it in `resolved` (empty when the dataset
// cannot be read: the engine then fails and says why).
// The artifact kinds of a checkpoint the engine reported.
std::map<std::string, std::string> kinds_of(const std::string& adapter_dir, const std::optional<std::string>& state_dir) {
  std::map<std::string, std::string> kinds = {{protocol::kWeightsKind, adapter_dir}};
  if (state_dir) kinds[protocol::kTrainingStateKind] = *state_dir;
  return kinds;
}

std::string settings_sha_of(const plan::Plan& plan) {
  std::ifstream in(plan.config.dataset, std::ios::binary);
  if (!in) return "";
  Sha256 h;
  std::string buffer(1 << 16, '\0');
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    h.update(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
  }
  return plan::settings_sha(plan.config, h.hex_digest());
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"plan", "output", "events"}, {"help"});
  if (args.flags.count("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.error.empty() || !args.has("plan") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job run: %s\n%s", args.error.empty() ? "--plan and --output are required" : args.error.c_str(), kUsage);
    return 2;
  }
  block_stop_signals();
  EventWriter writer;
  if (Status st = writer.open(args.get("events")); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job run: %s\n", st.message().c_str());
    return 1;
  }
  auto identity = RunIdentity::from_environment(std::getenv);
  protocol::Hello hello{.job_version = std::string("trainer-job ") + version_string()};
  if (identity.is_ok() && identity->run_id != "local") {
    hello.run_id = identity->run_id;
    hello.attempt = identity->attempt;
  }
  writer.write(hello);
  auto fail = [&](const std::string& reason) {
    writer.write(protocol::Failed{reason});
    std::fprintf(stderr, "trainer-job run: failed: %s\n", reason.c_str());
    return 1;
  };
  if (!identity.is_ok()) return fail(identity.status().describe());
  const std::string plan_path = args.get("plan");
  std::ifstream in(plan_path);
  if (!in) return fail(plan_path + ": cannot read the plan file");
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::parse_plan(text.str(), plan_path);
  if (!plan.is_ok()) {
    const Status& st = plan.status();
    return fail(st.field().empty() ? st.message() : plan_path + ": " + st.describe());
  }

  std::atomic<bool> stop{false};
  std::atomic<bool> pause_requested{false};
  auto export_options = export_options_from_environment(std::getenv);
  if (!export_options.is_ok()) {
    std::fprintf(stderr, "trainer-job: telemetry export off: %s\n", export_options.status().describe().c_str());
  }
  JobTelemetry telemetry(*plan, *identity, settings_sha_of(*plan),
                         export_options.is_ok() ? *export_options : std::nullopt);
  StopSignals signals([&](int signal) {
    if (signal == kPauseSignal) {
      pause_requested.store(true);  // the engine saves at the next step boundary, then stops
    } else {
      stop.store(true);
    }
    telemetry.request_export();
  });

  engine::TrainRequest req;
  req.plan = std::move(plan).value();
  req.output_dir = args.get("output");
  req.stop = &stop;
  req.pause = &pause_requested;

  // Snapshots: published when the service names its catalog and artifact storage.
  std::unique_ptr<storage::Storage> artifacts;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<SnapshotPublisher> publisher;
  const char* catalog_url = std::getenv("TRAINER_CATALOG_URL");
  const char* artifact_root = std::getenv("TRAINER_ARTIFACT_ROOT");
  if (catalog_url != nullptr && *catalog_url != '\0' && artifact_root != nullptr && *artifact_root != '\0') {
    auto st = storage::make_folder_storage(artifact_root);
    if (!st.is_ok()) return fail("TRAINER_ARTIFACT_ROOT: " + st.status().message());
    artifacts = std::move(*st);
    catalog = make_http_catalog(catalog_url, identity->run_id);
    PublisherOptions po;
    po.staging_dir = (std::filesystem::path(req.output_dir) / "staging").string();
    po.run_id = identity->run_id;
    po.attempt = identity->attempt;
    po.base_model_sha = identity->base_model_sha;
    publisher = std::make_unique<SnapshotPublisher>(po, *artifacts, *catalog, telemetry.provider());
  }

  // A resumed attempt restores the snapshot its pause stopped against, validated before use.
  if (const char* resume = std::getenv("TRAINER_RESUME_SNAPSHOT"); resume != nullptr && *resume != '\0') {
    if (!publisher) return fail("TRAINER_RESUME_SNAPSHOT needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    auto restored = restore_snapshot(*catalog, *artifacts, resume, {protocol::kWeightsKind, protocol::kTrainingStateKind},
                                     (std::filesystem::path(req.output_dir) / "restore").string(),
                                     telemetry::CheckpointRestoreMode::kResume, telemetry.provider());
    if (!restored.is_ok()) return fail("restoring snapshot " + std::string(resume) + ": " + restored.status().message());
    if (restored->run_id != identity->run_id) {
      return fail("restoring snapshot " + std::string(resume) + ": it belongs to run " + restored->run_id);
    }
    req.resume_weights_dir = restored->dirs.at(protocol::kWeightsKind);
    req.resume_state_dir = restored->dirs.at(protocol::kTrainingStateKind);
    std::fprintf(stderr, "trainer-job run: resuming from snapshot %s (step %lld of attempt %lld)\n", resume,
                 static_cast<long long>(restored->step), static_cast<long long>(restored->attempt));
  }

  ProgressPrinter progress;
  int64_t epoch = 0;
  std::optional<Status> publication_failed;
  auto emit = [&](const protocol::Event& ev) {
    writer.write(ev);
    progress.on_event(ev);
    telemetry.on_event(ev);
  };
  auto report = [&](const protocol::Event& ev) {
    if (const auto* e = std::get_if<protocol::Step>(&ev)) epoch = e->epoch;
    if (publisher) {
      if (const auto* e = std::get_if<protocol::Checkpoint>(&ev)) {
        // Staged at once (the engine may prune its folder later); published in the background.
        auto staged = publisher->stage(e->step, epoch, kinds_of(e->adapter_dir, e->state_dir));
        if (!staged.is_ok()) {
          std::fprintf(stderr, "trainer-job run: staging the checkpoint of step %lld failed: %s\n",
                       static_cast<long long>(e->step), staged.status().message().c_str());
        }
      } else if (const auto* e = std::get_if<protocol::Completed>(&ev)) {
        // A completed run leaves a final snapshot: staged, then every publication awaited.
        auto staged = publisher->stage(e->steps, epoch, kinds_of(e->adapter_dir, e->state_dir));
        Status st = staged.is_ok() ? publisher->drain() : staged.status();
        if (!st.is_ok()) {
          publication_failed = st;
          return;  // not completed: the job fails below
        }
      }
    }
    emit(ev);
  };
  auto result = engine::run_training(req, report);
  if (!result.is_ok()) {
    telemetry.on_event(protocol::Failed{result.status().message()});
    return fail(result.status().message());
  }
  if (publication_failed) {
    telemetry.on_event(protocol::Failed{publication_failed->message()});
    return fail("the final snapshot was not published: " + publication_failed->message());
  }
  if (result->paused) {
    // The pause's checkpoint was staged when the engine reported it: await its commit.
    if (!publisher) return fail("asked to pause, but no snapshot catalog was given (TRAINER_CATALOG_URL)");
    Status st = publisher->drain();
    if (!st.is_ok()) return fail("the pause's snapshot was not published: " + st.message());
    for (const auto& r : publisher->results()) {
      if (r.step == result->steps && r.status.is_ok()) {
        report(protocol::Paused{.step = r.step, .snapshot_id = r.snapshot_id});
        std::fprintf(stderr, "trainer-job run: paused after step %lld (snapshot %s)\n",
                     static_cast<long long>(r.step), r.snapshot_id.c_str());
        return 0;
      }
    }
    return fail("the pause's checkpoint of step " + std::to_string(result->steps) + " was not staged");
  }
  if (result->cancelled) {
    report(protocol::Cancelled{.steps = result->steps});
    std::fprintf(stderr, "trainer-job run: cancelled after step %lld of %lld\n", static_cast<long long>(result->steps),
                 static_cast<long long>(result->total_steps));
    return kExitCancelled;
  }
  return 0;
}

}  // namespace trainer::job
