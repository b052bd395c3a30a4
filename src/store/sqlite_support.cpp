// SQLite plumbing of the store (declared in store/sqlite_support.h).
#include "store/sqlite_support.h"

#include <filesystem>

#include "common/files.h"

namespace trainer::store::sqlite {
namespace {

// Applied in order; index + 1 is the schema version. Never edit an applied entry: append a new one.
const char* const kMigrations[] = {
    // 1: the round-1 nouns.
    R"sql(
CREATE TABLE base_models (name TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE datasets (hash TEXT PRIMARY KEY, created_seq INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE TABLE dataset_aliases (name TEXT PRIMARY KEY, hash TEXT NOT NULL REFERENCES datasets(hash));
CREATE TABLE workloads (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, doc TEXT NOT NULL);
CREATE TABLE runs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  workload_id TEXT NOT NULL,
  phase TEXT NOT NULL,
  submission_id TEXT UNIQUE,
  doc TEXT NOT NULL);
CREATE INDEX runs_by_phase ON runs(phase, seq);
CREATE INDEX runs_by_workload ON runs(workload_id, seq);
CREATE TABLE run_events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (run_id, seq));
CREATE TABLE run_metrics (run_id TEXT NOT NULL, step INTEGER NOT NULL, doc TEXT NOT NULL,
  PRIMARY KEY (run_id, step));
CREATE TABLE claims (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  owner TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  workload_id TEXT NOT NULL,
  pool TEXT NOT NULL,
  devices INTEGER NOT NULL,
  state TEXT NOT NULL,
  since TEXT NOT NULL);
)sql",
    // 2: a granted claim holds specific device indices of its pool ("0,1"; "" while queued).
    R"sql(
ALTER TABLE claims ADD COLUMN device_ids TEXT NOT NULL DEFAULT '';
)sql",
    // 3: the snapshot catalog.
    R"sql(
CREATE TABLE snapshots (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  step INTEGER NOT NULL,
  state TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE INDEX snapshots_by_run ON snapshots(run_id, step);
)sql",
    // 4: evaluations (docs/evaluations.md), newest first by created_seq.
    R"sql(
CREATE TABLE evaluations (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
)sql",
    // 5: the model registry (registrations in progress are rows whose status is not final).
    R"sql(
CREATE TABLE trained_models (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  workload_id TEXT NOT NULL,
  base_model TEXT NOT NULL,
  status TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE INDEX trained_models_by_status ON trained_models(status, seq);
)sql",
    // 6: lineage: each child run (runs branch, runs continue) and its parent.
    R"sql(
CREATE TABLE run_lineage (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL UNIQUE,
  parent_id TEXT NOT NULL);
CREATE INDEX run_lineage_by_parent ON run_lineage(parent_id, seq);
)sql",
    // 7: comparisons (docs/comparisons.md), newest first by seq.
    R"sql(
CREATE TABLE comparisons (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  source_snapshot TEXT NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE INDEX comparisons_by_source ON comparisons(source_snapshot, seq);
CREATE INDEX comparisons_by_phase ON comparisons(phase, seq);
)sql",
    // 8: scoring bundles (docs/graders.md, "Registered bundles"): versions per name, by content hash.
    R"sql(
CREATE TABLE bundle_versions (
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  sha TEXT NOT NULL,
  doc TEXT NOT NULL,
  PRIMARY KEY (name, version));
CREATE INDEX bundle_versions_by_sha ON bundle_versions(sha);
)sql",
    // 9: the task kernel (src/service/tasks/): one row per long-lived thing with its phase, when it
    // is due, and its lease (owner, fence); and the change counter readers of runs, workloads and
    // claims key their caches on, kept by triggers in the same transaction as each write.
    R"sql(
CREATE TABLE tasks (
  kind TEXT NOT NULL,
  id TEXT NOT NULL,
  phase TEXT NOT NULL,
  terminal INTEGER NOT NULL DEFAULT 0,
  due_at REAL NOT NULL DEFAULT 0,
  owner TEXT NOT NULL DEFAULT '',
  fence INTEGER NOT NULL DEFAULT 0,
  lease_until REAL NOT NULL DEFAULT 0,
  version INTEGER NOT NULL DEFAULT 1,
  seq INTEGER NOT NULL,
  PRIMARY KEY (kind, id));
CREATE INDEX tasks_due ON tasks(kind, terminal, due_at, seq);
CREATE INDEX tasks_by_seq ON tasks(seq);
INSERT INTO tasks(kind, id, phase, terminal, seq)
  SELECT 'run', id, phase, phase IN ('COMPLETED', 'FAILED', 'CANCELLED'), seq FROM runs;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters(name, value) VALUES ('changes', 0);
CREATE TRIGGER runs_inserted AFTER INSERT ON runs BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER runs_updated AFTER UPDATE ON runs BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER runs_deleted AFTER DELETE ON runs BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER workloads_inserted AFTER INSERT ON workloads BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER workloads_updated AFTER UPDATE ON workloads BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER workloads_deleted AFTER DELETE ON workloads BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER claims_inserted AFTER INSERT ON claims BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER claims_updated AFTER UPDATE ON claims BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
CREATE TRIGGER claims_deleted AFTER DELETE ON claims BEGIN UPDATE counters SET value = value + 1 WHERE name = 'changes'; END;
)sql",
    // 10: jobs report over the API (src/api/routes_jobs.cpp): each attempt's identity and token,
    // and the events and log lines it posted, keyed by the job's own sequence numbers.
    R"sql(
CREATE TABLE job_attempts (
  job_id TEXT PRIMARY KEY,
  owner_kind TEXT NOT NULL,
  owner_id TEXT NOT NULL,
  token TEXT NOT NULL);
CREATE TABLE job_events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (job_id, seq));
CREATE TABLE job_logs (job_id TEXT NOT NULL, seq INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (job_id, seq));
)sql",
    // 11: endpoints (docs/serving.md, "Endpoints"), newest first by created_seq.
    R"sql(
CREATE TABLE endpoints (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
)sql",
    // 12: dataset analyses (datasets analyze), a dataset's newest first by created_seq.
    R"sql(
CREATE TABLE dataset_analyses (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  dataset_hash TEXT NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE INDEX dataset_analyses_by_dataset ON dataset_analyses(dataset_hash, created_seq);
)sql",
    // 13: claim holds, each claim's grant and release (seconds since the epoch; released_at NULL
    // while held), for device-hours. Claims granted before it hold from their `since`.
    R"sql(
CREATE TABLE claim_holds (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  owner TEXT NOT NULL,
  kind TEXT NOT NULL,
  workload_id TEXT NOT NULL,
  pool TEXT NOT NULL,
  devices INTEGER NOT NULL,
  granted_at REAL NOT NULL,
  released_at REAL);
CREATE INDEX claim_holds_by_owner ON claim_holds(owner, released_at);
CREATE INDEX claim_holds_by_grant ON claim_holds(granted_at);
INSERT INTO claim_holds(owner, kind, workload_id, pool, devices, granted_at)
  SELECT owner, kind, workload_id, pool, devices, round((julianday(since) - 2440587.5) * 86400.0, 3)
  FROM claims WHERE state = 'GRANTED' ORDER BY seq;
)sql",
    // 14: replicas: each trainerd on the store, by its unique name, with its heartbeat.
    R"sql(
CREATE TABLE replicas (
  name TEXT PRIMARY KEY,
  instance TEXT NOT NULL,
  url TEXT NOT NULL,
  started_at REAL NOT NULL,
  heartbeat_at REAL NOT NULL);
)sql",
    // 15: sessions (raw conversation corpora by content hash) and curations (a judge's pass over
    // them), each judged candidate's score kept as it arrives (docs/curations.md).
    R"sql(
CREATE TABLE sessions (hash TEXT PRIMARY KEY, created_seq INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE TABLE curations (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE TABLE curation_scores (
  curation_id TEXT NOT NULL,
  candidate INTEGER NOT NULL,
  doc TEXT NOT NULL,
  PRIMARY KEY (curation_id, candidate));
)sql",
    // 16: pipelines (docs/pipelines.md), newest first by created_seq.
    R"sql(
CREATE TABLE pipelines (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
)sql",
    // 17: distillations (a teacher answers every assistant turn of a dataset's rows), the
    // answers stored a chunk at a time (docs/distillations.md).
    R"sql(
CREATE TABLE distillations (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE TABLE distillation_chunks (
  distillation_id TEXT NOT NULL,
  chunk INTEGER NOT NULL,
  doc TEXT NOT NULL,
  PRIMARY KEY (distillation_id, chunk));
)sql",
    // 18: API tokens (docs/security.md): the secret's SHA-256 only, never the secret.
    R"sql(
CREATE TABLE api_tokens (
  id TEXT PRIMARY KEY,
  created_seq INTEGER NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  doc TEXT NOT NULL);
)sql",
    // 19: the audit log (docs/security.md, "Audit log"): one row per write request, appended only.
    R"sql(
CREATE TABLE audit_log (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at REAL NOT NULL,
  token_id TEXT NOT NULL,
  token_name TEXT NOT NULL,
  workload_id TEXT NOT NULL,
  doc TEXT NOT NULL);
CREATE INDEX audit_log_at ON audit_log(at);
)sql",
};

}  // namespace

std::span<const char* const> migrations() { return kMigrations; }

Status db_error(sqlite3* db, const std::string& what) {
  // A full disk is named, with the database's file: nothing was written (SQLite rolls back), and
  // the write succeeds again once space is freed.
  const int code = sqlite3_errcode(db);
  if (code == SQLITE_FULL || (code == SQLITE_IOERR && is_disk_full(sqlite3_system_errno(db)))) {
    const char* file = sqlite3_db_filename(db, "main");
    const std::string path = file != nullptr && *file != '\0' ? std::filesystem::path(file).parent_path().string()
                                                                : std::string("(in memory)");
    return resource_exhausted("store: " + what + ": no space left on the disk of the data folder " + path + " (" +
                              sqlite3_errmsg(db) + ")");
  }
  return internal_error("store: " + what + ": " + sqlite3_errmsg(db));
}

}  // namespace trainer::store::sqlite
