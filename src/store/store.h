// The Store: durable state of the service behind one interface, with two implementations:
// SQLite (a file in the data folder; the embedded default) and PostgreSQL (a server, chosen by
// trainerd's configuration `store: {kind: postgres, url: ...}`). Both pass the same unit suite
// (tests/unit/store/store_test.cpp); docs/architecture.md says how they differ inside.
//
// Entities are JSON documents (the shapes of docs/api.md) with the few columns the service
// queries by kept beside them. Every write is a committed transaction when it returns, and an
// acknowledged commit is durable as the database makes it: SQLite in WAL mode with
// synchronous=FULL survives power loss; PostgreSQL as its server's fsync and synchronous_commit
// settings say (on by default).
//
// Thread safety: every method may be called from any thread; the implementation serialises
// access. transaction() runs `body` atomically: its writes commit together or not at all,
// and other threads' calls wait until it ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::store {

using json = nlohmann::json;

// Filter of list_runs(). Empty fields do not filter.
struct RunFilter {
  std::vector<std::string> phases;  // any of these phases
  std::string workload_id;          // only this workload's runs
  int64_t limit = 50;               // page size; negative = every row
  int64_t offset = 0;               // rows skipped, newest first; below 0 counts as 0
};

// A run as stored, unparsed: for readers that can reuse what they made of the same text.
struct RunRow {
  std::string id;
  std::string workload_id;
  std::string phase;
  std::string doc;  // the JSON document
};

struct RunRowPage {
  std::vector<RunRow> rows;  // newest first
  int64_t total = 0;
};

struct RunPage {
  std::vector<json> runs;  // newest first
  int64_t total = 0;       // rows matching the filter, ignoring limit and offset
};

// A claim on a pool: owner is the run id (one claim per run).
struct ClaimRow {
  std::string owner;        // run id
  std::string kind;         // "SFT", "GRPO", "GSPO"
  std::string workload_id;  // workload the devices count against
  std::string pool;         // pool name
  int devices = 0;          // devices held or waited for
  std::string state;        // "GRANTED" | "QUEUED"
  std::string since;        // RFC 3339: when it entered its state
  int64_t seq = 0;          // admission order (assigned by the store on insert)
  std::vector<int> device_ids = {};  // GRANTED: the pool's device indices it holds (admission.h)
};

// One claim's hold of devices, from its grant to its release: the durable history that
// device-hours reads (a claim granted again after a release is a second hold).
struct ClaimHoldRow {
  int64_t seq = 0;                    // assigned by the store on insert
  std::string owner;                  // run, evaluation or endpoint id
  std::string kind;                   // the claim's kind: "SFT", "EVALUATION", "SERVING", ...
  std::string workload_id;            // workload the devices counted against
  std::string pool;                   // pool name
  int devices = 0;                    // devices held
  double granted_at = 0;              // seconds since the epoch
  std::optional<double> released_at;  // seconds since the epoch; nullopt while held
};

// A page of a run's snapshots.
struct SnapshotPage {
  std::vector<json> snapshots;  // newest saved step first
  int64_t total = 0;            // rows matching, ignoring limit and offset
};

// A page of comparisons (list_comparisons).
struct ComparisonPage {
  std::vector<json> comparisons;  // newest first
  int64_t total = 0;              // rows matching, ignoring limit and offset
};

// Which audit entries list_audit() answers (empty strings: any).
struct AuditQuery {
  double since = 0;      // seconds since the epoch: entries appended at this time or later
  std::string token;     // the token's id or name
  std::string workload;  // the workload id the request touched
  int64_t limit = 100;   // the newest this many
};

// A page of a parent run's direct children (run_lineage).
struct ChildPage {
  std::vector<std::string> run_ids;  // newest first
  int64_t total = 0;                 // children, ignoring limit and offset
};

// A task: the kernel's record of one long-lived thing (a run, an evaluation, ...), keyed by
// (kind, id); src/service/tasks/ says what its fields mean to the kernel.
struct TaskRow {
  std::string kind;         // the task kind's name: "run", "evaluation", "registration", ...
  std::string id;           // the thing's own id (a run id, ...)
  std::string phase;        // a phase of the kind's phase table
  bool terminal = false;    // the phase ends the task: it is never due again
  double due_at = 0;        // wall seconds when the task next wants a step; kNeverDue = only when woken
  std::string owner;        // the replica holding its lease; "" = none
  int64_t fence = 0;        // grows by one each time the lease is granted anew (not on renewal)
  double lease_until = 0;   // wall seconds: the owner's lease lasts until then
  int64_t version = 0;      // grows by one on every write of the row
};

// A job attempt as the API knows it (src/api/routes_jobs.cpp): the thing it works for and the
// token its posts must carry. Keyed by job_id.
struct JobAttemptRow {
  std::string job_id;      // the attempt's id, e.g. "RUN-2" (TRAINER_JOB_ID)
  std::string owner_kind;  // what it works for: "run", "evaluation", ...
  std::string owner_id;    // that thing's id
  std::string token;       // the secret the job's posts carry (TRAINER_JOB_TOKEN)
};

// One item a job posted: an event (its JSON text) or a log line, numbered by the job from 1.
struct JobItem {
  int64_t seq = 0;
  std::string text;
};

// A live trainerd on the store (the replicas table): written by its own heartbeat.
struct ReplicaRow {
  std::string name;       // unique per process start: the owner its task leases carry
  std::string instance;   // its --instance (the `instance` attribute of its metrics)
  std::string url;        // its API base URL ("http://127.0.0.1:9001")
  double started_at = 0;  // wall seconds when it started
  double heartbeat_at = 0;  // wall seconds of its last heartbeat
};

// A due time that never comes: the task waits for a change (a request, another task) to wake it.
inline constexpr double kNeverDue = 1e300;

// A lease granted by acquire_task_lease(): writes under it name the fence.
struct TaskLease {
  std::string owner;
  int64_t fence = 0;
  double until = 0;  // wall seconds
};

// Change notices from the other processes on one store: how a replica learns that another one
// changed something its long polls and event streams wait on. Not thread-safe: one thread waits.
class ChangeListener {
 public:
  virtual ~ChangeListener() = default;
  // Waits up to `timeout` for a change announced by another process (announce_change() with
  // another origin). true when one came, or when one may have been missed (the listener lost its
  // connection and listens again): the caller looks again either way. unavailable while the
  // store cannot be reached (the caller waits and calls again).
  virtual Result<bool> wait(std::chrono::milliseconds timeout) = 0;
};

// Pages and counts: a method's `limit` is a number of rows, negative meaning every row; an
// `offset` below 0 counts as 0. Text compares byte by byte (ids, names, prefixes, orderings).
class Store {
 public:
  virtual ~Store() = default;

  // Schema version after migrations.
  virtual int schema_version() const = 0;

  // What the store is and where, for people (info's startup steps, errors): "SQLite PATH" or
  // "PostgreSQL at HOST:PORT/DATABASE". Never a password.
  virtual std::string description() const = 0;

  // Runs `body` in one transaction; commits when it returns ok, rolls back otherwise.
  // Nested calls join the outer transaction.
  virtual Status transaction(const std::function<Status()>& body) = 0;

  // ---- base models: keyed by doc["name"]
  virtual Status put_base_model(const json& doc) = 0;
  virtual Result<std::vector<json>> list_base_models() = 0;

  // ---- datasets: keyed by doc["hash"]; aliases name -> hash
  // Inserts when the hash is new; returns true when inserted, false when it existed.
  virtual Result<bool> insert_dataset(const json& doc) = 0;
  virtual Result<std::optional<json>> get_dataset(const std::string& hash) = 0;
  virtual Result<std::vector<json>> datasets_with_prefix(const std::string& prefix) = 0;
  virtual Result<std::vector<json>> list_datasets() = 0;  // newest first
  virtual Status set_alias(const std::string& name, const std::string& hash) = 0;
  virtual Result<std::optional<std::string>> get_alias(const std::string& name) = 0;
  // Names currently pointing at `hash`.
  virtual Result<std::vector<std::string>> aliases_of(const std::string& hash) = 0;

  // ---- workloads: keyed by doc["id"], unique doc["name"]
  virtual Status insert_workload(const json& doc) = 0;  // already_exists on a taken name or id
  virtual Status update_workload(const json& doc) = 0;  // already_exists on a taken name
  virtual Result<std::optional<json>> get_workload(const std::string& id) = 0;
  virtual Result<std::optional<json>> workload_by_name(const std::string& name) = 0;
  virtual Result<std::vector<json>> list_workloads() = 0;

  // A number that grows whenever a run, a workload or a claim is written (not run events nor
  // step metrics): what a reader derived from those tables stays true while it is unchanged.
  // Kept in the database and grown in the same transaction as the write, so it is shared by every
  // process on the store and never goes back (not even across a restart); a reader that reads it,
  // then the tables, never files old data under the new number.
  virtual Result<uint64_t> change_count() = 0;

  // ---- runs: keyed by doc["runId"]; unique doc["submissionId"] when present
  virtual Status insert_run(const json& doc) = 0;
  virtual Status update_run(const json& doc) = 0;
  virtual Result<std::optional<json>> get_run(const std::string& id) = 0;
  // The stored run, unparsed, with its columns (readers that validate the document themselves).
  virtual Result<std::optional<RunRow>> get_run_row(const std::string& id) = 0;
  virtual Result<std::vector<std::string>> run_ids_with_prefix(const std::string& prefix, int limit) = 0;
  virtual Result<std::optional<json>> run_by_submission(const std::string& submission_id) = 0;
  virtual Result<RunRowPage> list_run_rows(const RunFilter& filter) = 0;
  // list_run_rows() with each document parsed (store.cpp: the same for every implementation).
  Result<RunPage> list_runs(const RunFilter& filter);

  // ---- run events: append-only, seq from 1 per run
  virtual Result<int64_t> append_run_event(const std::string& run_id, const json& event) = 0;
  virtual Result<std::vector<json>> run_events(const std::string& run_id, int64_t after, int64_t limit) = 0;

  // ---- per-step metrics of a run (one row per step; a repeated step replaces it)
  virtual Status put_step_metrics(const std::string& run_id, int64_t step, const json& doc) = 0;
  virtual Result<std::vector<json>> step_metrics(const std::string& run_id, int64_t limit) = 0;

  // ---- claims: one per owner
  virtual Status insert_claim(ClaimRow& claim) = 0;  // assigns claim.seq
  virtual Status update_claim(const ClaimRow& claim) = 0;
  virtual Status delete_claim(const std::string& owner) = 0;  // ok when absent
  virtual Result<std::vector<ClaimRow>> list_claims() = 0;    // by seq ascending
  virtual Result<std::optional<ClaimRow>> get_claim(const std::string& owner) = 0;  // nullopt when absent
  // The claims in `state` ("GRANTED" | "QUEUED") on one of `pools`, by seq ascending; `pools`
  // empty: on any pool. What admission reads (every granted claim, then the queued ones of the
  // pools with a free device) instead of every claim.
  virtual Result<std::vector<ClaimRow>> list_claims_in(const std::string& state,
                                                       const std::vector<std::string>& pools) = 0;
  // ---- claim holds: the history of grants and releases, written in the transaction that
  // grants or releases the claim
  virtual Status insert_claim_hold(ClaimHoldRow& hold) = 0;  // assigns hold.seq
  // Sets released_at on every hold of `owner` still open; ok when none is.
  virtual Status end_claim_holds(const std::string& owner, double released_at) = 0;
  // The holds overlapping [from, to): granted before `to`, and not released by `from` (still
  // held, or released after it); by seq ascending.
  virtual Result<std::vector<ClaimHoldRow>> list_claim_holds(double from, double to) = 0;
  // Serialises admission across every process on the store: holds the store's admission lock until
  // the enclosing transaction ends (call it inside transaction(), before reading the claims that
  // admission rewrites). PostgreSQL: a transaction-scoped advisory lock, so a second replica's
  // admission waits and then reads the first one's committed grants. SQLite: nothing to take (one
  // trainerd, whose writes the service's mutex already serialises).
  virtual Status lock_admission() = 0;

  // ---- the snapshot catalog: keyed by doc["snapshotId"]; doc["runId"], doc["savedStep"] and
  // doc["state"] ("reserved" | "committed") are kept as columns
  virtual Status insert_snapshot(const json& doc) = 0;  // already_exists when the id exists
  virtual Status update_snapshot(const json& doc) = 0;  // not_found when the id is absent
  virtual Result<std::optional<json>> get_snapshot(const std::string& id) = 0;
  // Ids starting with `prefix`, at most `limit`, sorted.
  virtual Result<std::vector<std::string>> snapshot_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // A run's snapshots in `state` ("" = any), newest saved step first.
  virtual Result<SnapshotPage> list_snapshots(const std::string& run_id, const std::string& state, int64_t limit,
                                              int64_t offset) = 0;
  // Snapshots of any run with a kind still reserved (doc["kinds"][K]["state"] == "reserved"),
  // oldest first, at most `limit`.
  virtual Result<std::vector<json>> snapshots_with_reserved_kinds(int64_t limit) = 0;

  // ---- evaluations: keyed by doc["evaluationId"]; doc["phase"] kept as a column
  virtual Status put_evaluation(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_evaluation(const std::string& id) = 0;
  virtual Result<std::vector<std::string>> evaluation_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Newest first; `phases` empty = any.
  virtual Result<std::vector<json>> list_evaluations(const std::vector<std::string>& phases) = 0;
  // ---- endpoints: keyed by doc["endpointId"]; doc["phase"] kept as a column
  virtual Status put_endpoint(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_endpoint(const std::string& id) = 0;
  virtual Result<std::vector<std::string>> endpoint_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Newest first; `phases` empty = any.
  virtual Result<std::vector<json>> list_endpoints(const std::vector<std::string>& phases) = 0;
  // ---- pipelines (docs/pipelines.md): keyed by doc["pipelineId"]; doc["phase"] kept as a column
  virtual Status put_pipeline(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_pipeline(const std::string& id) = 0;
  virtual Result<std::vector<std::string>> pipeline_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Newest first; `phases` empty = any.
  virtual Result<std::vector<json>> list_pipelines(const std::vector<std::string>& phases) = 0;
  // ---- the model registry: keyed by doc["modelId"]; doc["workload"]["id"] ("" for none),
  // doc["baseModel"]["name"] and doc["status"] are kept as columns
  virtual Status insert_trained_model(const json& doc) = 0;  // already_exists when the id exists
  virtual Status update_trained_model(const json& doc) = 0;  // not_found when the id is absent
  virtual Result<std::optional<json>> get_trained_model(const std::string& id) = 0;
  // Ids starting with `prefix`, at most `limit`, sorted.
  virtual Result<std::vector<std::string>> trained_model_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Models matching every non-empty filter, newest first; `statuses` empty = any status.
  virtual Result<std::vector<json>> list_trained_models(const std::string& workload_id, const std::string& base_model,
                                                        const std::vector<std::string>& statuses) = 0;
  // ---- comparisons: keyed by doc["comparisonId"]; doc["source"]["snapshotId"] and doc["phase"]
  // are kept as columns
  virtual Status insert_comparison(const json& doc) = 0;  // already_exists when the id exists
  virtual Status update_comparison(const json& doc) = 0;  // not_found when the id is absent
  virtual Result<std::optional<json>> get_comparison(const std::string& id) = 0;
  // Ids starting with `prefix`, at most `limit`, sorted.
  virtual Result<std::vector<std::string>> comparison_ids_with_prefix(const std::string& prefix, int limit) = 0;
  // Comparisons of `source_snapshot` ("" = any) in any of `phases` (empty = any), newest first.
  virtual Result<ComparisonPage> list_comparisons(const std::string& source_snapshot,
                                                  const std::vector<std::string>& phases, int64_t limit,
                                                  int64_t offset) = 0;
  // ---- dataset analyses (docs/api.md, "Dataset analyses"): keyed by doc["analysisId"];
  // doc["dataset"]["hash"] and doc["phase"] are kept as columns
  virtual Status put_dataset_analysis(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_dataset_analysis(const std::string& id) = 0;
  // The analyses of the dataset with content hash `dataset_hash`, newest first.
  virtual Result<std::vector<json>> list_dataset_analyses(const std::string& dataset_hash) = 0;
  // ---- sessions (docs/curations.md): raw conversation corpora keyed by doc["hash"]
  virtual Result<bool> insert_session(const json& doc) = 0;  // false when the hash exists (nothing written)
  virtual Result<std::optional<json>> get_session(const std::string& hash) = 0;
  // ---- curations: keyed by doc["curationId"]; doc["phase"] is kept as a column. Each judged
  // candidate's score is a row of its own, keyed by (curation, candidate index).
  virtual Status put_curation(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_curation(const std::string& id) = 0;
  virtual Result<std::vector<json>> list_curations() = 0;  // newest first
  // Stores doc (doc["candidate"], an integer) unless that candidate has a score already; false then.
  virtual Result<bool> put_curation_score(const std::string& curation_id, const json& doc) = 0;
  // The curation's scores, by candidate index.
  virtual Result<std::vector<json>> list_curation_scores(const std::string& curation_id) = 0;
  // ---- distillations (docs/distillations.md): keyed by doc["distillationId"]; doc["phase"] is kept
  // as a column. The teacher's answers are stored in chunks, each a row of its own keyed by
  // (distillation, chunk index), written once when the chunk is complete.
  virtual Status put_distillation(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> get_distillation(const std::string& id) = 0;
  virtual Result<std::vector<json>> list_distillations() = 0;  // newest first
  // Stores doc (doc["chunk"], an integer) unless that chunk is stored already; false then.
  virtual Result<bool> put_distillation_chunk(const std::string& distillation_id, const json& doc) = 0;
  // The distillation's stored chunks, by chunk index.
  virtual Result<std::vector<json>> list_distillation_chunks(const std::string& distillation_id) = 0;
  // ---- API tokens (docs/security.md): keyed by doc["tokenId"]; doc["hash"] (the SHA-256 of the
  // secret, hex; the secret itself is never stored) is kept as a unique column
  virtual Status put_api_token(const json& doc) = 0;  // inserts, or replaces the stored document
  virtual Result<std::optional<json>> find_api_token(const std::string& hash) = 0;  // by the secret's hash
  virtual Result<std::vector<json>> list_api_tokens() = 0;  // oldest first
  // ---- the audit log (docs/security.md, "Audit log"): one row per write request, in the order
  // appended; `at` (seconds since the epoch), doc["tokenId"], doc["tokenName"] and doc["workload"]
  // are kept as columns. Rows are only ever appended.
  virtual Status append_audit(double at, const json& doc) = 0;
  // The entries appended at `query.since` or later that match its filters, the newest
  // `query.limit`, newest first.
  virtual Result<std::vector<json>> list_audit(const AuditQuery& query) = 0;
  // ---- scoring bundles: versions keyed by (doc["name"], doc["version"]), doc["sha"] the hash of
  // their files
  virtual Status insert_bundle_version(const json& doc) = 0;  // already_exists when (name, version) exists
  virtual Result<std::vector<json>> list_bundle_versions() = 0;  // by name, then version
  // ---- tasks (the kernel, src/service/tasks/): keyed by (kind, id)
  virtual Status insert_task(const TaskRow& row) = 0;  // already_exists when (kind, id) exists
  virtual Result<std::optional<TaskRow>> get_task(const std::string& kind, const std::string& id) = 0;
  // Open tasks of `kind` (not terminal) due at `now` or before, earliest due first (then in the
  // order they were created), at most `limit`.
  virtual Result<std::vector<TaskRow>> due_tasks(const std::string& kind, double now, int64_t limit) = 0;
  // Grants `owner` the lease of a task until now + seconds when nobody holds it, its lease ran out,
  // or `owner` holds it already (a renewal keeps the fence; a new grant grows it). nullopt while
  // another owner's lease runs; not_found when the task does not exist.
  virtual Result<std::optional<TaskLease>> acquire_task_lease(const std::string& kind, const std::string& id,
                                                             const std::string& owner, double now,
                                                             double seconds) = 0;
  // ok when `owner` still holds the task's lease under `fence`; else failed_precondition naming the
  // task and the fence that replaced it (a stale writer). Called inside the transaction of the
  // writes it guards, so they commit only while the lease holds.
  virtual Status check_task_lease(const std::string& kind, const std::string& id, const std::string& owner,
                                  int64_t fence) = 0;
  // Locks the task's row until the enclosing transaction ends, as a step's check_task_lease()
  // does: a request that changes a task's thing (cancels a run, pauses it) calls it first in its
  // transaction, so it takes its locks in the order every step takes them (docs/durability.md,
  // "Lock order") and waits for a step of that task in flight to end instead of meeting it in a
  // deadlock. ok when the task does not exist. PostgreSQL: SELECT ... FOR UPDATE; SQLite: nothing
  // (one writer at a time).
  virtual Status lock_task(const std::string& kind, const std::string& id) = 0;
  // Writes the task's phase, terminal flag and due time when `fence` is still its fence (a
  // stale fence is refused as by check_task_lease()); grows its version.
  virtual Status update_task(const TaskRow& row, int64_t fence) = 0;
  // Writes the task's phase, terminal flag and due time when its version is still `version`
  // (failed_precondition otherwise): a change made outside the lease's holder (a request).
  virtual Status update_task_if_version(const TaskRow& row, int64_t version) = 0;
  // Gives the lease back (the task may be taken by any replica at once); ok when not held.
  virtual Status release_task_lease(const std::string& kind, const std::string& id, const std::string& owner) = 0;
  // Makes the task due at once (due_at 0, nothing else changed) unless it is terminal, absent or
  // due already: a change another transaction made (admission granting its claim) wakes it. Never
  // waits for the row: true when done (or nothing to do), false while another transaction holds
  // the row locked (PostgreSQL; a step of that task): the caller wakes it again once that one ended.
  virtual Result<bool> wake_task(const std::string& kind, const std::string& id) = 0;

  // ---- jobs' reports over the API: their attempts, and the events and log lines they posted
  // Records the attempt when its id is new; returns the stored row (an attempt registered before
  // keeps its token).
  virtual Result<JobAttemptRow> register_job_attempt(const JobAttemptRow& row) = 0;
  virtual Result<std::optional<JobAttemptRow>> get_job_attempt(const std::string& job_id) = 0;
  // Stores the items whose seq the job has not posted before, all or none; returns how many were
  // new (a repeated seq changes nothing, whatever its text).
  virtual Result<int64_t> put_job_events(const std::string& job_id, const std::vector<JobItem>& items) = 0;
  // The job's events with seq > `after`, in seq order, at most `limit`.
  virtual Result<std::vector<JobItem>> job_events(const std::string& job_id, int64_t after, int64_t limit) = 0;
  // put_job_events() for the job's log lines.
  virtual Result<int64_t> put_job_log_lines(const std::string& job_id, const std::vector<JobItem>& lines) = 0;
  // The job's last `n` log lines, in seq order.
  virtual Result<std::vector<JobItem>> job_log_tail(const std::string& job_id, int64_t n) = 0;

  // ---- replicas: every trainerd on the store announces itself and beats
  // Inserts the replica, or rewrites its instance, url and heartbeat (started_at is kept from the
  // first beat).
  virtual Status beat_replica(const ReplicaRow& row) = 0;
  // Replicas whose last heartbeat is at `since` or later, by name.
  virtual Result<std::vector<ReplicaRow>> live_replicas(double since) = 0;
  // Removes the replica's row (a clean stop); ok when absent.
  virtual Status remove_replica(const std::string& name) = 0;

  // ---- change notices between processes (ChangeListener)
  // Tells the other processes listening on the store that something changed. `origin` names this
  // process (its replica name): its own listener ignores the notice. PostgreSQL: NOTIFY, delivered
  // when the enclosing transaction commits (never when it rolls back), or at once outside one.
  // SQLite: nothing to tell (one trainerd).
  virtual Status announce_change(const std::string& origin) = 0;
  // A listener of the notices whose origin is not `origin`, on a connection of its own; null when
  // no other process can share the store (SQLite).
  virtual Result<std::unique_ptr<ChangeListener>> listen_for_changes(const std::string& origin) = 0;

  // ---- lineage: which run a child run (runs branch, runs continue) was started from
  virtual Status insert_child(const std::string& run_id, const std::string& parent_id) = 0;  // already_exists twice
  // The direct children of `parent_id`, newest first.
  virtual Result<ChildPage> run_children(const std::string& parent_id, int64_t limit, int64_t offset) = 0;
};

// Opens (creating and migrating as needed) the SQLite store at `path`.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

// How long a PostgreSQL session may hold or wait for what other replicas need, so that a replica
// that stopped (SIGSTOP, a partition, a dead host) cannot block the others for longer than these.
// Set on every connection of the store; the URL's own `options` parameter, when it has one,
// replaces the server-side ones.
struct PostgresSessionLimits {
  // The server ends a session that sat this long inside a transaction (a stopped replica),
  // rolling it back and freeing its row locks. Milliseconds.
  int64_t idle_in_transaction_ms = 10000;
  // A statement waits at most this long for a lock, then fails with unavailable (try again).
  int64_t lock_timeout_ms = 5000;
  // A statement runs at most this long, then fails with unavailable.
  int64_t statement_timeout_ms = 60000;
  // TCP keepalives, on both ends: the first probe after this many idle seconds, then one every
  // keepalive_interval_s; the connection is dead after keepalive_count unanswered probes.
  int keepalive_idle_s = 10;
  int keepalive_interval_s = 5;
  int keepalive_count = 3;
};

// How many connections a PostgreSQL store keeps at most (store.poolSize): by default, and the most
// it may be set to.
inline constexpr int kDefaultPostgresPoolSize = 8;
inline constexpr int kMaxPostgresPoolSize = 64;

// Opens (migrating as needed) the PostgreSQL store in the database that `url` names: a libpq
// connection URI, postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?PARAM=VALUE...]. The
// database must exist; its tables are created by the migrations. It reads and writes through a
// pool of at most `pool_size` connections, opened as needed (a change listener has its own).
// unavailable when the server does not answer (naming it), failed_precondition when its schema is
// newer than this build knows, invalid_argument naming store.poolSize when `pool_size` is not
// between 1 and kMaxPostgresPoolSize.
Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url, const PostgresSessionLimits& limits = {},
                                                   int pool_size = kDefaultPostgresPoolSize);

}  // namespace trainer::store
