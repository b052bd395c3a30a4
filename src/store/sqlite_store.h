// The SQLite Store's class (internal to src/store): one connection, WAL, synchronous=FULL, a
// migrations table. Its methods live in sqlite_store.cpp (opening, transactions, base models,
// datasets, workloads, runs and their events and metrics, claims), sqlite_catalog.cpp (snapshots,
// the model registry, evaluations, comparisons, bundles, lineage) sqlite_jobs.cpp (jobs' posted reports),
// sqlite_replicas.cpp (the replicas table; admission lock and change notices, which one process
// needs none of) and sqlite_tasks.cpp (the task table and the change counter, as free functions on
// the connection).
#pragma once

#include <sqlite3.h>

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/sqlite_support.h"
#include "store/store.h"

namespace trainer::store::sqlite {

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  Status init();

  int schema_version() const override;
  std::string description() const override { return "SQLite " + path_; }
  Result<uint64_t> change_count() override;

  Status transaction(const std::function<Status()>& body) override;

  // ---- base models
  Status put_base_model(const json& doc) override;
  Result<std::vector<json>> list_base_models() override;

  // ---- datasets
  Result<bool> insert_dataset(const json& doc) override;
  Result<std::optional<json>> get_dataset(const std::string& hash) override;
  Result<std::vector<json>> datasets_with_prefix(const std::string& prefix) override;
  Result<std::vector<json>> list_datasets() override;
  Status set_alias(const std::string& name, const std::string& hash) override;
  Result<std::optional<std::string>> get_alias(const std::string& name) override;
  Result<std::vector<std::string>> aliases_of(const std::string& hash) override;

  // ---- workloads
  Status insert_workload(const json& doc) override;
  Status update_workload(const json& doc) override;
  Result<std::optional<json>> get_workload(const std::string& id) override;
  Result<std::optional<json>> workload_by_name(const std::string& name) override;
  Result<std::vector<json>> list_workloads() override;

  // ---- runs
  Status insert_run(const json& doc) override;
  Status update_run(const json& doc) override;
  Result<std::optional<json>> get_run(const std::string& id) override;
  Result<std::optional<RunRow>> get_run_row(const std::string& id) override;
  Result<std::vector<std::string>> run_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::optional<json>> run_by_submission(const std::string& submission_id) override;
  Result<RunRowPage> list_run_rows(const RunFilter& f) override;

  // ---- run events
  Result<int64_t> append_run_event(const std::string& run_id, const json& event) override;
  Result<std::vector<json>> run_events(const std::string& run_id, int64_t after, int64_t limit) override;

  // ---- step metrics
  Status put_step_metrics(const std::string& run_id, int64_t step, const json& doc) override;
  Result<std::vector<json>> step_metrics(const std::string& run_id, int64_t limit) override;

  // ---- claims
  Status insert_claim(ClaimRow& c) override;
  Status update_claim(const ClaimRow& c) override;
  Status delete_claim(const std::string& owner) override;
  Result<std::vector<ClaimRow>> list_claims() override;
  Result<std::optional<ClaimRow>> get_claim(const std::string& owner) override;
  Result<std::vector<ClaimRow>> list_claims_in(const std::string& state,
                                               const std::vector<std::string>& pools) override;
  Status lock_admission() override;
  Status insert_claim_hold(ClaimHoldRow& hold) override;
  Status end_claim_holds(const std::string& owner, double released_at) override;
  Result<std::vector<ClaimHoldRow>> list_claim_holds(double from, double to) override;

  // ---- snapshots
  Status insert_snapshot(const json& doc) override;
  Status update_snapshot(const json& doc) override;
  Result<std::optional<json>> get_snapshot(const std::string& id) override;
  Result<std::vector<std::string>> snapshot_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::vector<json>> snapshots_with_reserved_kinds(int64_t limit) override;
  Result<SnapshotPage> list_snapshots(const std::string& run_id, const std::string& state, int64_t limit,
                                      int64_t offset) override;

  // ---- the model registry
  Status insert_trained_model(const json& doc) override;
  Status update_trained_model(const json& doc) override;
  Result<std::optional<json>> get_trained_model(const std::string& id) override;
  Result<std::vector<std::string>> trained_model_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::vector<json>> list_trained_models(const std::string& workload_id, const std::string& base_model,
                                                const std::vector<std::string>& statuses) override;

  // ---- dataset analyses
  Status put_dataset_analysis(const json& doc) override;
  Result<std::optional<json>> get_dataset_analysis(const std::string& id) override;
  Result<std::vector<json>> list_dataset_analyses(const std::string& dataset_hash) override;
  Result<bool> insert_session(const json& doc) override;
  Result<std::optional<json>> get_session(const std::string& hash) override;
  Status put_curation(const json& doc) override;
  Result<std::optional<json>> get_curation(const std::string& id) override;
  Result<std::vector<json>> list_curations() override;
  Result<bool> put_curation_score(const std::string& curation_id, const json& doc) override;
  Result<std::vector<json>> list_curation_scores(const std::string& curation_id) override;
  Status put_distillation(const json& doc) override;
  Result<std::optional<json>> get_distillation(const std::string& id) override;
  Result<std::vector<json>> list_distillations() override;
  Result<bool> put_distillation_chunk(const std::string& distillation_id, const json& doc) override;
  Result<std::vector<json>> list_distillation_chunks(const std::string& distillation_id) override;
  // ---- API tokens
  Status put_api_token(const json& doc) override;
  Result<std::optional<json>> find_api_token(const std::string& hash) override;
  Result<std::vector<json>> list_api_tokens() override;
  // ---- the audit log (sqlite_audit.cpp)
  Status append_audit(double at, const json& doc) override;
  Result<std::vector<json>> list_audit(const AuditQuery& query) override;
  // ---- evaluations
  Status put_evaluation(const json& doc) override;
  Result<std::optional<json>> get_evaluation(const std::string& id) override;
  Result<std::vector<std::string>> evaluation_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::vector<json>> list_evaluations(const std::vector<std::string>& phases) override;

  // ---- pipelines
  Status put_pipeline(const json& doc) override;
  Result<std::optional<json>> get_pipeline(const std::string& id) override;
  Result<std::vector<std::string>> pipeline_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::vector<json>> list_pipelines(const std::vector<std::string>& phases) override;
  // ---- endpoints
  Status put_endpoint(const json& doc) override;
  Result<std::optional<json>> get_endpoint(const std::string& id) override;
  Result<std::vector<std::string>> endpoint_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<std::vector<json>> list_endpoints(const std::vector<std::string>& phases) override;

  // ---- scoring bundles
  Status insert_bundle_version(const json& doc) override;
  Result<std::vector<json>> list_bundle_versions() override;

  // ---- comparisons
  Status insert_comparison(const json& doc) override;
  Status update_comparison(const json& doc) override;
  Result<std::optional<json>> get_comparison(const std::string& id) override;
  Result<std::vector<std::string>> comparison_ids_with_prefix(const std::string& prefix, int limit) override;
  Result<ComparisonPage> list_comparisons(const std::string& source_snapshot, const std::vector<std::string>& phases,
                                          int64_t limit, int64_t offset) override;

  // ---- lineage
  Status insert_child(const std::string& run_id, const std::string& parent_id) override;
  Result<ChildPage> run_children(const std::string& parent_id, int64_t limit, int64_t offset) override;

  // ---- jobs' reports (sqlite_jobs.cpp)
  Result<JobAttemptRow> register_job_attempt(const JobAttemptRow& row) override;
  Result<std::optional<JobAttemptRow>> get_job_attempt(const std::string& job_id) override;
  Result<int64_t> put_job_events(const std::string& job_id, const std::vector<JobItem>& items) override;
  Result<std::vector<JobItem>> job_events(const std::string& job_id, int64_t after, int64_t limit) override;
  Result<int64_t> put_job_log_lines(const std::string& job_id, const std::vector<JobItem>& lines) override;
  Result<std::vector<JobItem>> job_log_tail(const std::string& job_id, int64_t n) override;

  // ---- change notices
  Status announce_change(const std::string& origin) override;
  Result<std::unique_ptr<ChangeListener>> listen_for_changes(const std::string& origin) override;

  // ---- replicas
  Status beat_replica(const ReplicaRow& row) override;
  Result<std::vector<ReplicaRow>> live_replicas(double since) override;
  Status remove_replica(const std::string& name) override;

  // ---- tasks (sqlite_tasks.cpp)
  Status insert_task(const TaskRow& row) override;
  Result<std::optional<TaskRow>> get_task(const std::string& kind, const std::string& id) override;
  Result<std::vector<TaskRow>> due_tasks(const std::string& kind, double now, int64_t limit) override;
  Result<std::optional<TaskLease>> acquire_task_lease(const std::string& kind, const std::string& id,
                                                     const std::string& owner, double now, double seconds) override;
  Status check_task_lease(const std::string& kind, const std::string& id, const std::string& owner,
                          int64_t fence) override;
  Status lock_task(const std::string& kind, const std::string& id) override;
  Status update_task(const TaskRow& row, int64_t fence) override;
  Status update_task_if_version(const TaskRow& row, int64_t version) override;
  Status release_task_lease(const std::string& kind, const std::string& id, const std::string& owner) override;
  Result<bool> wake_task(const std::string& kind, const std::string& id) override;

 private:
  Status exec(const char* sql);
  Status write(const char* sql, const std::vector<std::string>& args);
  // `f()` with mu_ held.
  template <typename F>
  auto locked(F&& f) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return f();
  }
  // The indexed columns of a registry or comparison document, then the document's text.
  static std::vector<std::string> trained_model_columns(const json& doc);
  static std::vector<std::string> comparison_columns(const json& doc);

  // The ids of `table` that start with `prefix`, in order, at most `limit` (`what` names them in
  // an error). A range on the key, so the primary key's index serves it.
  Result<std::vector<std::string>> ids_with_prefix(const char* table, const std::string& prefix, int limit,
                                                   const char* what);
  // Writes `doc`, keyed by doc[id_key], into `table` (id, created_seq, phase, doc): a new id is
  // numbered after the newest, a known one keeps its place (`what` names it in an error).
  Status put_phased_doc(const char* table, const char* id_key, const json& doc, const char* what);

  // " AND column IN (?N, ...)" for `values`, numbered after the arguments already in `args`, to
  // which they are added; "" when there are none.
  static std::string in_list(const char* column, const std::vector<std::string>& values, std::vector<std::string>* args);

  Result<std::vector<json>> docs(const char* sql, const std::vector<std::string>& args);
  Result<std::optional<json>> one(const char* sql, const std::vector<std::string>& args);

  sqlite3* db_;  // owned; guarded by mu_
  const std::string path_;  // the database file
  std::recursive_mutex mu_;
  int depth_ = 0;    // transaction nesting; guarded by mu_
  int version_ = 0;  // constant after init()
};

}  // namespace trainer::store::sqlite
