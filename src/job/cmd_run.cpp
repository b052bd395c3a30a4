// trainer-job run: trains a resolved plan locally (the job protocol, docs/job-protocol.md).
// An SFT plan with execution.gpus N > 1 trains data-parallel: this process is rank 0 and starts
// ranks 1..N-1 as copies of itself (job/ranks.h, docs/data-parallel.md).
//
// Events go to --events FILE (stdout when absent) as JSON lines, `hello` first; human progress
// to stderr. The SFT metrics are recorded through the telemetry SDK as well (job_telemetry.h).
// SIGTERM (or SIGINT) stops the engine at the next step boundary: {"type":"cancelled"}, exit
// 143; the metrics are pushed at once when the signal arrives, and again at exit.
#include <unistd.h>

#include <atomic>
#include <chrono>
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
#include "job/input_fetch.h"
#include "job/job_events.h"
#include "job/job_telemetry.h"
#include "job/rank_worker.h"
#include "job/ranks.h"
#include "job/snapshot_publisher.h"
#include "job/snapshot_restore.h"
#include "job/stop_signals.h"
#include "plan/plan.h"
#include "plan/plan_warnings.h"
#include "protocol/job_request.h"
#include "storage/storage.h"

namespace trainer::job {
namespace {

// How long rank 0, failed, waits to learn whether another rank's failure caused its own.
constexpr std::chrono::seconds kOtherRankGrace{5};

constexpr const char* kUsage =
    "usage: trainer-job run --plan FILE --output DIR [--events FILE]\n"
    "Trains the plan's LoRA adapter into DIR/adapter. In a local plan, baseModel is a model folder\n"
    "and config.dataset a JSONL file. Job-protocol events (JSON lines) go to --events or stdout;\n"
    "progress goes to stderr. SIGTERM stops at the next step boundary (exit 143).\n";

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

// The ranks a plan trains on: execution.gpus for SFT; GRPO/GSPO train on one device (the job
// says so with a `warning` event, plan::single_device_warning).
int data_parallel_ranks(const plan::Plan& plan) {
  if (plan.execution.gpus <= 1 || plan.config.method != plan::Method::kSft) return 1;
  return plan.execution.gpus;
}

// A rank other than 0, started by rank 0 with the same arguments.
int run_other_rank(const Args& args, const engine::dist::World& world) {
  const std::string plan_path = args.get("plan");
  std::ifstream in(plan_path);
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::parse_plan(text.str(), plan_path);
  if (!in || !plan.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s: cannot read the plan\n", world.rank, plan_path.c_str());
    return 1;
  }
  // Rank 0 fetched the plan's store inputs into this node's cache before it started this rank.
  auto request = protocol::job_request_from_environment(std::getenv);
  if (!request.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s\n", world.rank, request.status().describe().c_str());
    return 1;
  }
  if (Status st = fetch_plan_inputs(*plan, input_fetch_options(*request)); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job rank %d: %s\n", world.rank, st.describe().c_str());
    return 1;
  }
  return run_rank(std::move(plan).value(), args.get("output"), world);
}

// This executable, for the other ranks.
std::string self_executable() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  path.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return path;
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
  auto world = engine::dist::world_from_environment(std::getenv);
  if (world.is_ok() && world->rank > 0) return run_other_rank(args, *world);
  EventWriter writer;
  if (Status st = writer.open(args.get("events")); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job run: %s\n", st.message().c_str());
    return 1;
  }
  // What trainerd asks of this job (protocol/job_request.h); a local run sets none of it.
  auto request = protocol::job_request_from_environment(std::getenv);
  const RunIdentity identity = request.is_ok() ? RunIdentity::of(*request) : RunIdentity{};
  protocol::Hello hello{.job_version = std::string("trainer-job ") + version_string()};
  if (request.is_ok() && identity.run_id != "local") {
    hello.run_id = identity.run_id;
    hello.attempt = identity.attempt;
  }
  writer.write(hello);
  // The attempt reports to trainerd over its API (docs/job-protocol.md, "Reporting to trainerd"):
  // its events (those written so far first) and its log. The files stay the fallback.
  std::unique_ptr<PostedLog> posted_log = request.is_ok() ? report_to_trainerd(writer, *request) : nullptr;
  auto fail = [&](const std::string& reason) {
    writer.write(protocol::Failed{reason});
    std::fprintf(stderr, "trainer-job run: failed: %s\n", reason.c_str());
    return 1;
  };
  if (!request.is_ok()) return fail(request.status().describe());
  if (!world.is_ok()) return fail(world.status().describe());
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
  // Inputs named by s3:// URIs (a cluster job with an S3 store): verified copies on this node.
  if (Status st = fetch_plan_inputs(*plan, input_fetch_options(*request)); !st.is_ok()) {
    return fail(st.describe());
  }

  std::atomic<bool> stop{false};
  std::atomic<bool> pause_requested{false};
  auto export_options = export_options_for(*request, std::getenv);
  if (!export_options.is_ok()) {
    std::fprintf(stderr, "trainer-job: telemetry export off: %s\n", export_options.status().describe().c_str());
  }
  JobTelemetry telemetry(*plan, identity, settings_sha_of(*plan),
                         export_options.is_ok() ? *export_options : std::nullopt);
  std::unique_ptr<Ranks> other_ranks;  // destroyed after `signals`, which forwards to them
  std::atomic<Ranks*> forward_to{nullptr};
  StopSignals signals([&](int signal) {
    if (signal == kPauseSignal) {
      pause_requested.store(true);  // the engine saves at the next step boundary, then stops
    } else {
      stop.store(true);
    }
    if (Ranks* r = forward_to.load()) r->signal(signal);
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
  if (!request->catalog_url.empty() && !request->artifact_root.empty()) {
    auto st = storage::open_storage(request->artifact_root);  // a folder, or s3://BUCKET[/PREFIX]
    if (!st.is_ok()) return fail("TRAINER_ARTIFACT_ROOT: " + st.status().message());
    artifacts = std::move(*st);
    catalog = make_http_catalog(request->catalog_url, identity.run_id);
    PublisherOptions po;
    po.staging_dir = (std::filesystem::path(req.output_dir) / "staging").string();
    po.run_id = identity.run_id;
    po.attempt = identity.attempt;
    po.base_model_sha = identity.base_model_sha;
    if (request->store.publish_deadline_seconds > 0) po.deadline = std::chrono::seconds(request->store.publish_deadline_seconds);
    publisher = std::make_unique<SnapshotPublisher>(po, *artifacts, *catalog, telemetry.provider());
  }

  // A resumed attempt restores the snapshot its pause stopped against, validated before use.
  if (const std::string& resume = request->resume_snapshot; !resume.empty()) {
    if (!publisher) return fail("TRAINER_RESUME_SNAPSHOT needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    auto restored = restore_snapshot(*catalog, *artifacts, resume, {protocol::kWeightsKind, protocol::kTrainingStateKind},
                                     (std::filesystem::path(req.output_dir) / "restore").string(),
                                     telemetry::CheckpointRestoreMode::kResume, telemetry.provider());
    if (!restored.is_ok()) return fail("restoring snapshot " + resume + ": " + restored.status().message());
    if (restored->run_id != identity.run_id) {
      return fail("restoring snapshot " + resume + ": it belongs to run " + restored->run_id);
    }
    req.resume_weights_dir = restored->dirs.at(protocol::kWeightsKind);
    req.resume_state_dir = restored->dirs.at(protocol::kTrainingStateKind);
    std::fprintf(stderr, "trainer-job run: resuming from snapshot %s (step %lld of attempt %lld)\n", resume.c_str(),
                 static_cast<long long>(restored->step), static_cast<long long>(restored->attempt));
  }

  // A child run (`runs branch`, `runs continue`) starts from its parent's snapshot: the weights
  // alone (TRAINER_BRANCH_RESTORE=weights) or the whole training state (trainingState).
  if (const std::string& branch = request->branch_snapshot; !branch.empty()) {
    if (!publisher) return fail("TRAINER_BRANCH_SNAPSHOT needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    const std::string& restore = request->branch_restore;  // weights or trainingState (the reader checked)
    std::vector<std::string> kinds = {protocol::kWeightsKind};
    if (restore == protocol::kTrainingStateKind) kinds.push_back(protocol::kTrainingStateKind);
    auto restored = restore_snapshot(*catalog, *artifacts, branch, kinds,
                                     (std::filesystem::path(req.output_dir) / "restore").string(),
                                     telemetry::CheckpointRestoreMode::kBranch, telemetry.provider());
    if (!restored.is_ok()) return fail("restoring snapshot " + branch + ": " + restored.status().message());
    req.branch = true;
    req.resume_weights_dir = restored->dirs.at(protocol::kWeightsKind);
    if (restore == protocol::kTrainingStateKind) req.resume_state_dir = restored->dirs.at(protocol::kTrainingStateKind);
    std::fprintf(stderr, "trainer-job run: starting from %s of snapshot %s (step %lld of run %s)\n", restore.c_str(),
                 branch.c_str(), static_cast<long long>(restored->step), restored->run_id.c_str());
  }

  ProgressPrinter progress;
  int64_t epoch = 0;
  std::optional<Status> publication_failed;
  auto emit = [&](const protocol::Event& ev) {
    telemetry.on_event(ev);
    // The series are at trainerd before it hears the attempt ended (and shows the run so).
    if (protocol::ends_attempt(ev)) telemetry.flush();
    writer.write(ev);
    progress.on_event(ev);
  };
  auto fail_measured = [&](const std::string& measured, const std::string& reason) {
    telemetry.on_event(protocol::Failed{measured});
    telemetry.flush();
    return fail(reason);
  };
  auto report = [&](const protocol::Event& ev) {
    if (const auto* e = std::get_if<protocol::Step>(&ev)) epoch = e->epoch;
    if (publisher) {
      if (const auto* e = std::get_if<protocol::Checkpoint>(&ev)) {
        // Staged at once (the engine may prune its folder later); published in the background.
        // A pause's save keeps its training state even when uploads lag: the run resumes from it.
        auto staged = publisher->stage(e->step, epoch, kinds_of(e->adapter_dir, e->state_dir), pause_requested.load());
        if (!staged.is_ok()) {
          std::fprintf(stderr, "trainer-job run: staging the checkpoint of step %lld failed: %s\n",
                       static_cast<long long>(e->step), staged.status().message().c_str());
        }
      } else if (const auto* e = std::get_if<protocol::Completed>(&ev)) {
        // A completed run leaves a final snapshot: staged, then every publication awaited.
        auto staged = publisher->stage(e->steps, epoch, kinds_of(e->adapter_dir, e->state_dir), /*every_kind=*/true);
        Status st = staged.is_ok() ? publisher->drain() : staged.status();
        if (!st.is_ok()) {
          publication_failed = st;
          return;  // not completed: the job fails below
        }
      }
    }
    emit(ev);
  };
  if (auto w = plan::single_device_warning(req.plan)) {
    writer.write(protocol::Warning{.field = w->field, .message = w->message});
    std::fprintf(stderr, "trainer-job run: warning: %s\n", w->message.c_str());
  }
  // Data parallelism: the rendezvous hosted here, then the other ranks started.
  if (const int ranks = data_parallel_ranks(req.plan); ranks > 1) {
    auto rendezvous = engine::dist::host_rendezvous(ranks);
    if (!rendezvous.is_ok()) return fail(rendezvous.status().message());
    req.rendezvous = *rendezvous;
    req.world = engine::dist::World{.rank = 0,
                                    .size = ranks,
                                    .master_addr = engine::dist::kLoopback,
                                    .master_port = engine::dist::rendezvous_port(**rendezvous)};
    RanksOptions ro;
    ro.executable = self_executable();
    ro.args = {"run", "--plan", plan_path, "--output", req.output_dir};
    ro.world_size = ranks;
    ro.master_addr = req.world.master_addr;
    ro.master_port = req.world.master_port;
    if (!req.resume_weights_dir.empty()) {
      ro.env[kRankResumeWeightsVar] = req.resume_weights_dir;
      ro.env[kRankResumeStateVar] = req.resume_state_dir;
      if (req.branch) ro.env[kRankBranchVar] = "1";
    }
    // Rank 0 stuck where no collective notices the failed rank: report it and exit.
    ro.on_abandon = [&writer](const std::string& failure) {
      writer.write(protocol::Failed{failure});
      std::fprintf(stderr, "trainer-job run: failed: %s\n", failure.c_str());
      writer.flush(std::chrono::seconds(5));  // the failure reaches trainerd before the exit
      std::_Exit(1);
    };
    auto started = Ranks::start(std::move(ro));
    if (!started.is_ok()) return fail(started.status().message());
    other_ranks = std::move(*started);
    forward_to.store(other_ranks.get());
    std::fprintf(stderr, "trainer-job run: data parallel over %d ranks (rendezvous %s:%d)\n", ranks,
                 req.world.master_addr.c_str(), req.world.master_port);
  }
  auto result = engine::run_training(req, report);
  if (other_ranks) {
    // Rank 0's collectives broke (Unavailable): the rank that failed is the cause, named first.
    // Rank 0's own error (bad data, memory) is the job's, whatever it then did to the others.
    std::optional<std::string> failed;
    if (result.is_ok()) {
      failed = other_ranks->wait();
    } else if (result.status().code() == StatusCode::kUnavailable) {
      failed = other_ranks->failure(kOtherRankGrace);
    }
    if (failed) {
      const std::string reason = result.is_ok() ? *failed : *failed + "; rank 0: " + result.status().message();
      return fail_measured(reason, reason);
    }
  }
  if (!result.is_ok()) {
    return fail_measured(result.status().message(), result.status().message());
  }
  if (publication_failed) {
    return fail_measured(publication_failed->message(),
                         "the final snapshot was not published: " + publication_failed->message());
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
