// trainer-job run: trains a resolved plan locally (the job protocol, docs/job-protocol.md).
// An SFT plan with execution.gpus N > 1 trains data-parallel: this process is rank 0 and starts
// ranks 1..N-1 as copies of itself (job/ranks.h, docs/data-parallel.md).
//
// Events go to --events FILE (stdout when absent) as JSON lines, `hello` first; human progress
// to stderr. The SFT metrics are recorded through the telemetry SDK as well (job_telemetry.h).
// SIGTERM (or SIGINT) stops the engine at the next step boundary: {"type":"cancelled"}, exit
// 143; the metrics are pushed at once when the signal arrives, and again at exit.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "common/files.h"
#include "common/sha256.h"
#include "common/version.h"
#include "engine/engine.h"
#include "job/args.h"
#include "job/heartbeat.h"
#include "job/commands.h"
#include "job/input_fetch.h"
#include "job/job_events.h"
#include "job/job_telemetry.h"
#include "job/job_tracing.h"
#include "job/learning_signal.h"
#include "job/run_ranks.h"
#include "job/snapshot_publisher.h"
#include "job/snapshot_restore.h"
#include "job/start_leave.h"
#include "job/stop_signals.h"
#include "job/trl_engine.h"
#include "job/verl_engine.h"
#include "job/tensorboard/run_board.h"
#include "plan/plan.h"
#include "plan/plan_warnings.h"
#include "protocol/job_request.h"
#include "storage/storage.h"

namespace trainer::job {
namespace {

// Test hook (docs/durability.md, "Test hooks"): with TRAINER_TEST_JOB_STARTS naming a file, every
// start of a run's job that trains (given leave to train: job/start_leave.h) appends "RUN ATTEMPT
// PID" to it, one write of one line (O_APPEND), so a
// test counts each attempt's starts from the job's side (the replicas' chaos test: 0 driven twice).
void record_start_for_tests(const RunIdentity& identity) {
  const char* path = std::getenv("TRAINER_TEST_JOB_STARTS");
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "trainer-job: TRAINER_TEST_JOB_STARTS %s: cannot open: %s\n", path, std::strerror(errno));
    return;
  }
  const std::string line =
      identity.run_id + " " + std::to_string(identity.attempt) + " " + std::to_string(::getpid()) + "\n";
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    std::fprintf(stderr, "trainer-job: TRAINER_TEST_JOB_STARTS %s: cannot write: %s\n", path, std::strerror(errno));
  }
  ::close(fd);
}

constexpr const char* kUsage =
    "usage: trainer-job run --plan FILE --output DIR [--events FILE]\n"
    "Trains the plan's LoRA adapter into DIR/adapter. In a local plan, baseModel is a model folder\n"
    "and config.dataset a JSONL file. Job-protocol events (JSON lines) go to --events or stdout;\n"
    "progress goes to stderr. SIGTERM stops at the next step boundary (exit 143).\n";

// The artifact kinds of a checkpoint the engine reported.
std::map<std::string, std::string> kinds_of(const std::string& adapter_dir, const std::optional<std::string>& state_dir) {
  std::map<std::string, std::string> kinds = {{protocol::kWeightsKind, adapter_dir}};
  if (state_dir) kinds[protocol::kTrainingStateKind] = *state_dir;
  return kinds;
}

// The run's settings hash as the engine reports it in `resolved` (empty when the dataset
// cannot be read: the engine then fails and says why).
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

// The job failed: the event, then the line on stderr; exit status 1.
int fail_job(EventWriter& writer, const std::string& reason) {
  writer.write(protocol::Failed{reason});
  std::fprintf(stderr, "trainer-job run: failed: %s\n", reason.c_str());
  return 1;
}

// Where a run's snapshots go: the service's artifact storage and catalog, and the publisher
// that uploads them in the background. Empty when the request names no catalog (a local run).
struct Publication {
  std::unique_ptr<storage::Storage> artifacts;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<SnapshotPublisher> publisher;
};

Result<Publication> open_publication(const protocol::JobRequest& request, const RunIdentity& identity,
                                     const std::string& output_dir, JobTelemetry& telemetry, JobTracer* tracer) {
  Publication out;
  if (request.catalog_url.empty() || request.artifact_root.empty()) return out;
  // The catalog takes snapshots only from the run's current attempt, as it proves itself.
  if (request.job_id.empty() || request.job_token.empty()) {
    return invalid_argument("TRAINER_CATALOG_URL: publishing snapshots needs the attempt's TRAINER_JOB_ID and "
                            "TRAINER_JOB_TOKEN too (the catalog refuses a job that does not send them)");
  }
  PublisherOptions po;
  if (request.store.publish_deadline_seconds > 0) po.deadline = std::chrono::seconds(request.store.publish_deadline_seconds);
  // A folder, or s3://BUCKET[/PREFIX]: one store operation retries no longer than a publication may.
  auto st = storage::open_storage(request.artifact_root, std::chrono::duration<double>(po.deadline).count());
  if (!st.is_ok()) return Status(st.status().code(), "TRAINER_ARTIFACT_ROOT: " + st.status().message());
  out.artifacts = std::move(*st);
  // A restore's catalog reads ride out a trainerd restart within the same deadline as a publication.
  out.catalog = make_http_catalog({request.catalog_url, request.job_id, request.job_token, request.catalog_ca_file}, identity.run_id,
                                  std::chrono::seconds(30), po.deadline);
  po.staging_dir = (std::filesystem::path(output_dir) / "staging").string();
  po.run_id = identity.run_id;
  po.attempt = identity.attempt;
  po.base_model_sha = identity.base_model_sha;
  if (tracer != nullptr) po.observer = [tracer](const PublicationOperation& op) { tracer->on_publication(op); };
  out.publisher = std::make_unique<SnapshotPublisher>(po, *out.artifacts, *out.catalog, telemetry.provider());
  return out;
}

// A resumed attempt restores the snapshot its pause stopped against, validated before use; a
// child run (`runs branch`, `runs continue`) starts from its parent's snapshot: the weights alone
// (TRAINER_BRANCH_RESTORE=weights) or the whole training state (trainingState).
Status restore_start(const protocol::JobRequest& request, const RunIdentity& identity, Publication& pub,
                     JobTelemetry& telemetry, engine::TrainRequest& req) {
  const std::string restore_dir = (std::filesystem::path(req.output_dir) / "restore").string();
  if (const std::string& resume = request.resume_snapshot; !resume.empty()) {
    if (!pub.publisher) return invalid_argument("TRAINER_RESUME_SNAPSHOT needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    auto restored = restore_snapshot(*pub.catalog, *pub.artifacts, resume,
                                     {protocol::kWeightsKind, protocol::kTrainingStateKind}, restore_dir,
                                     telemetry::CheckpointRestoreMode::kResume, telemetry.provider());
    if (!restored.is_ok()) return restored.status().with_context("restoring snapshot " + resume);
    if (restored->run_id != identity.run_id) {
      return failed_precondition("restoring snapshot " + resume + ": it belongs to run " + restored->run_id);
    }
    req.resume_weights_dir = restored->dirs.at(protocol::kWeightsKind);
    req.resume_state_dir = restored->dirs.at(protocol::kTrainingStateKind);
    std::fprintf(stderr, "trainer-job run: resuming from snapshot %s (step %lld of attempt %lld)\n", resume.c_str(),
                 static_cast<long long>(restored->step), static_cast<long long>(restored->attempt));
  }
  if (const std::string& branch = request.branch_snapshot; !branch.empty()) {
    if (!pub.publisher) return invalid_argument("TRAINER_BRANCH_SNAPSHOT needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    const std::string& restore = request.branch_restore;  // weights or trainingState (the reader checked)
    std::vector<std::string> kinds = {protocol::kWeightsKind};
    if (restore == protocol::kTrainingStateKind) kinds.push_back(protocol::kTrainingStateKind);
    auto restored = restore_snapshot(*pub.catalog, *pub.artifacts, branch, kinds, restore_dir,
                                     telemetry::CheckpointRestoreMode::kBranch, telemetry.provider());
    if (!restored.is_ok()) return restored.status().with_context("restoring snapshot " + branch);
    req.branch = true;
    req.resume_weights_dir = restored->dirs.at(protocol::kWeightsKind);
    if (restore == protocol::kTrainingStateKind) req.resume_state_dir = restored->dirs.at(protocol::kTrainingStateKind);
    std::fprintf(stderr, "trainer-job run: starting from %s of snapshot %s (step %lld of run %s)\n", restore.c_str(),
                 branch.c_str(), static_cast<long long>(restored->step), restored->run_id.c_str());
  } else if (const std::string& key = request.warm_start_adapter; !key.empty() && request.resume_snapshot.empty()) {
    if (!pub.artifacts) return invalid_argument("TRAINER_WARM_START_ADAPTER needs TRAINER_CATALOG_URL and TRAINER_ARTIFACT_ROOT");
    const std::filesystem::path dir = std::filesystem::path(req.output_dir) / "warm-start" / "adapter";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return internal_error("creating " + dir.string() + ": " + ec.message());
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
      auto bytes = pub.artifacts->get(key + "/" + file);
      if (!bytes.is_ok()) return bytes.status().with_context("fetching the warm start's " + std::string(file));
      TRAINER_RETURN_IF_ERROR(write_file_atomic((dir / file).string(), *bytes));
    }
    req.branch = true;  // the weights alone; steps count from zero
    req.resume_weights_dir = dir.string();
    std::fprintf(stderr, "trainer-job run: starting from the registered adapter %s\n", key.c_str());
  }
  return Status::ok();
}

// This attempt's TensorBoard event file (job/tensorboard/run_board.h) in OUTPUT/tensorboard,
// copied to the run's artifacts when the service named them. Null, after a warning, when the
// file cannot be created: training goes on without it.
std::unique_ptr<tensorboard::RunBoard> open_board(const std::string& output_dir, const RunIdentity& identity,
                                                  storage::Storage* artifacts) {
  tensorboard::RunBoardOptions o;
  o.local_dir = (std::filesystem::path(output_dir) / "tensorboard").string();
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "localhost");
  o.host = host;
  o.pid = ::getpid();
  o.run_id = identity.run_id;
  o.artifacts = artifacts;
  auto board = tensorboard::RunBoard::open(std::move(o));
  if (!board.is_ok()) {
    std::fprintf(stderr, "trainer-job run: warning: no TensorBoard events: %s\n", board.status().message().c_str());
    return nullptr;
  }
  return std::move(*board);
}

// Everything a run job holds from its start to its end: the events it writes, its telemetry,
// where its snapshots go.
class RunJob {
 public:
  RunJob(EventWriter& writer, JobTelemetry& telemetry) : writer_(writer), telemetry_(telemetry) {}

  int fail(const std::string& reason) {
    if (tracer_) tracer_->end_attempt("failed", reason);
    return fail_job(writer_, reason);
  }
  // A failure the telemetry counts as well (`measured` is the reason it records), pushed before
  // the event so trainerd has the series when it hears the attempt ended.
  int fail_measured(const std::string& measured, const std::string& reason) {
    telemetry_.on_event(protocol::Failed{measured});
    telemetry_.flush();
    return fail(reason);
  }
  // An event of the engine: staged checkpoints handed to the publisher, then written.
  void report(const protocol::Event& ev, bool pausing) {
    if (const auto* e = std::get_if<protocol::Step>(&ev)) {
      epoch_ = e->epoch;
      last_step_ = e->step;
    }
    if (SnapshotPublisher* publisher = pub_.publisher.get()) {
      // A save that met a full disk stops the run at the next step boundary: training on
      // without saves would only lose more work (the run pauses at its last committed snapshot).
      if (!disk_full_ && stop_ != nullptr) {
        if (auto full = publisher->disk_full()) {
          disk_full_ = *full;
          stop_->store(true);
          std::fprintf(stderr, "trainer-job run: %s; the run stops now and pauses at its newest committed snapshot\n",
                       full->message().c_str());
        }
      }
      if (const auto* e = std::get_if<protocol::Checkpoint>(&ev)) {
        // Staged at once (the engine may prune its folder later); published in the background.
        // A pause's save keeps its training state even when uploads lag: the run resumes from it.
        auto staged = publisher->stage(e->step, epoch_, kinds_of(e->adapter_dir, e->state_dir), pausing);
        if (!staged.is_ok()) {
          std::fprintf(stderr, "trainer-job run: staging the checkpoint of step %lld failed: %s\n",
                       static_cast<long long>(e->step), staged.status().message().c_str());
        }
      } else if (const auto* e = std::get_if<protocol::Completed>(&ev)) {
        // A completed run leaves a final snapshot: staged, then every publication awaited.
        auto staged = publisher->stage(e->steps, epoch_, kinds_of(e->adapter_dir, e->state_dir), /*every_kind=*/true);
        Status st = staged.is_ok() ? publisher->drain() : staged.status();
        if (!st.is_ok()) {
          // Not completed (finish() says how it ended), but the finished adapter is not thrown
          // away: it stays staged, and the reason says where.
          const std::string kept = staged.is_ok() ? publisher->staged_dir(*staged) : std::string();
          publication_failed_ = Status(st.code(), "the final snapshot of step " + std::to_string(e->steps) +
                                                      " was not published: " + st.message() +
                                                      (kept.empty() ? std::string()
                                                                    : "; its adapter is kept staged at " + kept + "/" +
                                                                          protocol::kWeightsKind));
          std::fprintf(stderr, "trainer-job run: %s\n", publication_failed_->message().c_str());
          return;
        }
      }
    }
    emit(ev);
  }
  void write(const protocol::Event& ev) { writer_.write(ev); }
  // How the attempt ended, once the engine returned: the exit status.
  int finish(const Result<engine::TrainResult>& result);

  Publication& publication() { return pub_; }
  // The flag that stops the engine at its next step boundary (a save met a full disk).
  void set_stop(std::atomic<bool>* stop) { stop_ = stop; }
  void set_board(std::unique_ptr<tensorboard::RunBoard> board) { board_ = std::move(board); }
  // The attempt's spans (null: untraced); it outlives the job.
  void set_tracer(JobTracer* tracer) { tracer_ = tracer; }

 private:
  void emit(const protocol::Event& ev) {
    // The event file is copied before the attempt's last event tells trainerd it ended.
    if (board_) board_->on_event(ev);
    telemetry_.on_event(ev);
    if (tracer_) tracer_->on_event(ev);
    // The series are at trainerd before it hears the attempt ended (and shows the run so).
    if (protocol::ends_attempt(ev)) telemetry_.flush();
    writer_.write(ev);
    progress_.on_event(ev);
    if (const auto* step = std::get_if<protocol::Step>(&ev)) {
      if (auto warning = learning_signal_.observe(*step)) {
        std::fprintf(stderr, "trainer-job run: warning: %s\n", warning->message.c_str());
        writer_.write(*warning);
      }
    }
  }

  EventWriter& writer_;
  JobTelemetry& telemetry_;
  LearningSignalWatch learning_signal_;  // an RL run whose groups never differ says so once
  Publication pub_;
  ProgressPrinter progress_;
  int64_t epoch_ = 0;
  int64_t last_step_ = 0;  // the last step the engine reported
  std::optional<Status> publication_failed_;
  std::optional<Status> disk_full_;  // a save met a full disk: the run stopped, and pauses
  std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<tensorboard::RunBoard> board_;  // null: no event file
  JobTracer* tracer_ = nullptr;                   // null: no spans
};

int RunJob::finish(const Result<engine::TrainResult>& result) {
  if (!result.is_ok() && result.status().code() == StatusCode::kResourceExhausted && pub_.publisher) {
    // The engine's own checkpoint write met a full disk: the run pauses at its newest committed
    // snapshot (the saves before this one published first), as a full staging or store does.
    const Status drained = pub_.publisher->drain();
    if (!drained.is_ok() && drained.code() != StatusCode::kResourceExhausted) {
      return fail_measured(drained.message(), result.status().message() + "; and " + drained.message());
    }
    report(protocol::Paused{.step = last_step_, .snapshot_id = "", .reason = result.status().message()}, true);
    std::fprintf(stderr, "trainer-job run: paused after step %lld: %s\n", static_cast<long long>(last_step_),
                 result.status().message().c_str());
    return 0;
  }
  if (!result.is_ok()) return fail_measured(result.status().message(), result.status().message());
  if (publication_failed_ && publication_failed_->code() != StatusCode::kResourceExhausted) {
    return fail_measured(publication_failed_->message(), publication_failed_->message());
  }
  if (publication_failed_ || (disk_full_ && result->cancelled)) {
    // A full disk: the run pauses (trainerd pauses it against its newest committed snapshot, or
    // fails it when there is none) and resumes once space is freed.
    const Status& why = publication_failed_ ? *publication_failed_ : *disk_full_;
    report(protocol::Paused{.step = result->steps, .snapshot_id = "", .reason = why.message()}, true);
    std::fprintf(stderr, "trainer-job run: paused after step %lld: %s\n", static_cast<long long>(result->steps),
                 why.message().c_str());
    return 0;
  }
  if (result->paused) {
    // The pause's checkpoint was staged when the engine reported it: await its commit.
    SnapshotPublisher* publisher = pub_.publisher.get();
    if (!publisher) return fail("asked to pause, but no snapshot catalog was given (TRAINER_CATALOG_URL)");
    Status st = publisher->drain();
    if (!st.is_ok()) return fail("the pause's snapshot was not published: " + st.message());
    for (const auto& r : publisher->results()) {
      if (r.step == result->steps && r.status.is_ok()) {
        report(protocol::Paused{.step = r.step, .snapshot_id = r.snapshot_id, .planned = result->paused_by_plan}, true);
        std::fprintf(stderr, "trainer-job run: paused after step %lld (snapshot %s)\n",
                     static_cast<long long>(r.step), r.snapshot_id.c_str());
        return 0;
      }
    }
    return fail("the pause's checkpoint of step " + std::to_string(result->steps) + " was not staged");
  }
  if (result->cancelled) {
    report(protocol::Cancelled{.steps = result->steps}, false);
    std::fprintf(stderr, "trainer-job run: cancelled after step %lld of %lld\n", static_cast<long long>(result->steps),
                 static_cast<long long>(result->total_steps));
    return kExitCancelled;
  }
  return 0;
}

// The plan file, parsed, with its store inputs fetched onto this node.
Result<plan::Plan> read_plan(const std::string& plan_path, const protocol::JobRequest& request) {
  std::ifstream in(plan_path);
  if (!in) return invalid_argument(plan_path + ": cannot read the plan file");
  std::stringstream text;
  text << in.rdbuf();
  auto plan = plan::parse_plan(text.str(), plan_path);
  if (!plan.is_ok()) {
    const Status& st = plan.status();
    return invalid_argument(st.field().empty() ? st.message() : plan_path + ": " + st.describe());
  }
  // Inputs named by s3:// URIs (a cluster job with an S3 store): verified copies on this node.
  if (Status st = fetch_plan_inputs(*plan, input_fetch_options(request)); !st.is_ok()) {
    return invalid_argument(st.describe());
  }
  return plan;
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
  // What trainerd asks of this job (protocol/job_request.h); a local run sets none of it.
  auto request = protocol::job_request_from_environment(std::getenv);
  // A job started by a replica that had lost the run's lease is refused here, before it touches
  // the attempt's events file, which the attempt's one job writes (job/start_leave.h).
  if (request.is_ok()) {
    if (Status leave = ask_leave_to_train(*request); !leave.is_ok()) {
      std::fprintf(stderr, "trainer-job run: not training: %s\n", leave.message().c_str());
      return kExitNotTraining;
    }
  }
  EventWriter writer;
  if (Status st = writer.open(args.get("events")); !st.is_ok()) {
    std::fprintf(stderr, "trainer-job run: %s\n", st.message().c_str());
    return 1;
  }
  const RunIdentity identity = request.is_ok() ? RunIdentity::of(*request) : RunIdentity{};
  protocol::Hello hello{.job_version = std::string("trainer-job ") + version_string()};
  if (request.is_ok() && identity.run_id != "local") {
    hello.run_id = identity.run_id;
    hello.attempt = identity.attempt;
  }
  writer.write(hello);
  if (request.is_ok()) record_start_for_tests(identity);
  // The attempt reports to trainerd over its API (docs/job-protocol.md, "Reporting to trainerd"):
  // its events (those written so far first) and its log. The files stay the fallback.
  std::unique_ptr<PostedLog> posted_log = request.is_ok() ? report_to_trainerd(writer, *request) : nullptr;
  // Alive between events too: trainerd stops a job silent past limits.jobSilenceSeconds as hung.
  Heartbeat heartbeat(writer, std::chrono::seconds(request.is_ok() ? request->heartbeat_seconds : 0));
  auto fail = [&](const std::string& reason) { return fail_job(writer, reason); };
  if (!request.is_ok()) return fail(request.status().describe());
  if (!world.is_ok()) return fail(world.status().describe());
  const std::string plan_path = args.get("plan");
  auto plan = read_plan(plan_path, *request);
  if (!plan.is_ok()) return fail(plan.status().message());

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

  // The run's trace, when trainerd names a collector (docs/traces.md); outlives the job's publisher.
  std::unique_ptr<JobTracer> tracer = JobTracer::open(*request, telemetry.provider().resource());
  RunJob job(writer, telemetry);
  job.set_tracer(tracer.get());
  // Snapshots: published when the service names its catalog and artifact storage.
  auto publication = open_publication(*request, identity, req.output_dir, telemetry, tracer.get());
  if (!publication.is_ok()) return job.fail(publication.status().message());
  job.publication() = std::move(*publication);
  job.set_stop(&stop);
  if (Status st = restore_start(*request, identity, job.publication(), telemetry, req); !st.is_ok()) {
    return job.fail(st.message());
  }
  job.set_board(open_board(req.output_dir, identity, job.publication().artifacts.get()));
  if (auto w = plan::single_device_warning(req.plan)) {
    job.write(protocol::Warning{.field = w->field, .message = w->message});
    std::fprintf(stderr, "trainer-job run: warning: %s\n", w->message.c_str());
  }
  // The plan's smoke check, before the training and on one device; a resumed attempt's run passed
  // it already (its first attempt trained past it).
  if (req.plan.smoke && request->resume_snapshot.empty()) {
    std::fprintf(stderr, "trainer-job run: smoke check: %d steps on the first %d rows\n", req.plan.smoke->steps,
                 req.plan.smoke->rows);
    job.write(protocol::Phase{.phase = "PREPARING"});
    auto smoke = engine::smoke_check(req, *req.plan.smoke);
    if (!smoke.is_ok()) return job.fail(smoke.status().with_context("smoke check").message());
    if (smoke->cancelled) {
      job.report(protocol::Cancelled{.steps = 0}, false);
      return kExitCancelled;
    }
    const protocol::Smoke& verdict = smoke->verdict;
    job.report(verdict, false);
    if (!verdict.passed) {
      return job.fail_measured("smoke check failed",
                               "smoke check failed (" + verdict.check + "): " + verdict.reason);
    }
    std::fprintf(stderr, "trainer-job run: smoke check passed in %.1fs\n", verdict.seconds);
  }
  auto started = start_other_ranks(req, plan_path, writer);
  if (!started.is_ok()) return job.fail(started.status().message());
  other_ranks = std::move(*started);
  forward_to.store(other_ranks.get());
  const int64_t pause_at = req.plan.pauseAtStep.value_or(0);
  const engine::EventSink sink = [&](const protocol::Event& ev) {
    // The plan's pauseAtStep save is a pause's save: its training state is kept whatever the uploads.
    const auto* checkpoint = std::get_if<protocol::Checkpoint>(&ev);
    job.report(ev, pause_requested.load() || (checkpoint && pause_at > 0 && checkpoint->step == pause_at));
  };
  // A peer engine (config.engine) trains in a worker of its own (peer_worker.h).
  auto result = req.plan.config.engine == plan::Engine::kTrl    ? run_trl_training(req, settings_sha_of(req.plan), sink)
                : req.plan.config.engine == plan::Engine::kVerl ? run_verl_training(req, settings_sha_of(req.plan), sink)
                                                                : engine::run_training(req, sink);
  if (other_ranks) {
    if (auto failed = other_rank_failure(*other_ranks, result)) return job.fail_measured(*failed, *failed);
  }
  return job.finish(result);
}

}  // namespace trainer::job
