// SQLite implementation of the Store: one connection, WAL, synchronous=FULL, a migrations table.
#include <sqlite3.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "common/json_parse.h"
#include "store/sqlite_support.h"
#include "store/sqlite_tasks.h"
#include "store/store.h"

namespace trainer::store {
namespace {

using sqlite::db_error;
using sqlite::ids_of;
using sqlite::ids_text;
using sqlite::Stmt;

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  Status init() {
    TRAINER_RETURN_IF_ERROR(exec("PRAGMA journal_mode=WAL"));
    TRAINER_RETURN_IF_ERROR(exec("PRAGMA synchronous=FULL"));
    TRAINER_RETURN_IF_ERROR(exec("PRAGMA foreign_keys=ON"));
    // Reads from a memory map and a 64 MiB page cache instead of a read() per page: a page of
    // runs deep in the list walks thousands of rows (profiled: most of a list's time was the
    // kernel copying pages).
    TRAINER_RETURN_IF_ERROR(exec("PRAGMA mmap_size=1073741824"));
    TRAINER_RETURN_IF_ERROR(exec("PRAGMA cache_size=-65536"));
    sqlite3_busy_timeout(db_, 5000);
    TRAINER_RETURN_IF_ERROR(exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
        "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')))"));
    Stmt q(db_, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    if (!q.ok() || q.step() != SQLITE_ROW) return db_error(db_, "reading schema version");
    version_ = static_cast<int>(q.integer(0));
    const auto migrations = sqlite::migrations();
    const int known = static_cast<int>(migrations.size());
    if (version_ > known) {
      return failed_precondition("store: schema version " + std::to_string(version_) +
                                 " is newer than this trainerd knows (" + std::to_string(known) +
                                 "); run a newer trainerd");
    }
    for (int v = version_ + 1; v <= known; ++v) {
      Status st = transaction([&]() -> Status {
        TRAINER_RETURN_IF_ERROR(exec(migrations[v - 1]));
        Stmt ins(db_, "INSERT INTO schema_migrations(version) VALUES (?)");
        ins.bind(1, static_cast<int64_t>(v));
        if (ins.step() != SQLITE_DONE) return db_error(db_, "recording migration");
        return Status::ok();
      });
      if (!st.is_ok()) return st.with_context("migration " + std::to_string(v));
      version_ = v;
    }
    return Status::ok();
  }

  int schema_version() const override { return version_; }
  Result<uint64_t> change_count() override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return sqlite::change_count(db_);
  }

  Status transaction(const std::function<Status()>& body) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (depth_ > 0) return body();
    TRAINER_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    ++depth_;
    Status st;
    try {
      st = body();
    } catch (const std::exception& e) {
      st = internal_error(std::string("store transaction: ") + e.what());
    }
    --depth_;
    if (!st.is_ok()) {
      (void)exec("ROLLBACK");
      return st;
    }
    Status c = exec("COMMIT");
    if (!c.is_ok()) (void)exec("ROLLBACK");
    return c;
  }

  // ---- base models
  Status put_base_model(const json& doc) override {
    return write("INSERT INTO base_models(name, doc) VALUES (?, ?) "
                 "ON CONFLICT(name) DO UPDATE SET doc = excluded.doc",
                 {doc.at("name").get<std::string>(), doc.dump(-1, ' ', false, json::error_handler_t::replace)});
  }
  Result<std::vector<json>> list_base_models() override {
    return docs("SELECT doc FROM base_models ORDER BY name", {});
  }

  // ---- datasets
  Result<bool> insert_dataset(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO datasets(hash, created_seq, doc) VALUES (?, "
                "(SELECT COALESCE(MAX(created_seq), 0) + 1 FROM datasets), ?) "
                "ON CONFLICT(hash) DO NOTHING");
    s.bind(1, doc.at("hash").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    if (s.step() != SQLITE_DONE) return db_error(db_, "inserting dataset");
    return sqlite3_changes(db_) > 0;
  }
  Result<std::optional<json>> get_dataset(const std::string& hash) override {
    return one("SELECT doc FROM datasets WHERE hash = ?", {hash});
  }
  Result<std::vector<json>> datasets_with_prefix(const std::string& prefix) override {
    return docs("SELECT doc FROM datasets WHERE hash >= ? AND hash < ? ORDER BY hash LIMIT 10",
                {prefix, prefix + "\x7f"});
  }
  Result<std::vector<json>> list_datasets() override {
    return docs("SELECT doc FROM datasets ORDER BY created_seq DESC", {});
  }
  Status set_alias(const std::string& name, const std::string& hash) override {
    return write("INSERT INTO dataset_aliases(name, hash) VALUES (?, ?) "
                 "ON CONFLICT(name) DO UPDATE SET hash = excluded.hash",
                 {name, hash});
  }
  Result<std::optional<std::string>> get_alias(const std::string& name) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "SELECT hash FROM dataset_aliases WHERE name = ?");
    s.bind(1, name);
    int rc = s.step();
    if (rc == SQLITE_DONE) return std::optional<std::string>();
    if (rc != SQLITE_ROW) return db_error(db_, "reading alias");
    return std::optional<std::string>(s.text(0));
  }
  Result<std::vector<std::string>> aliases_of(const std::string& hash) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "SELECT name FROM dataset_aliases WHERE hash = ? ORDER BY name");
    s.bind(1, hash);
    std::vector<std::string> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(s.text(0));
    if (rc != SQLITE_DONE) return db_error(db_, "reading aliases");
    return out;
  }

  // ---- workloads
  Status insert_workload(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO workloads(id, name, doc) VALUES (?, ?, ?)");
    s.bind(1, doc.at("id").get<std::string>()).bind(2, doc.at("name").get<std::string>()).bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) {
      return Status(StatusCode::kAlreadyExists, "name",
                    "a workload named '" + doc.at("name").get<std::string>() + "' already exists");
    }
    if (rc != SQLITE_DONE) return db_error(db_, "inserting workload");
    return Status::ok();
  }
  Status update_workload(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "UPDATE workloads SET name = ?, doc = ? WHERE id = ?");
    s.bind(1, doc.at("name").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace)).bind(3, doc.at("id").get<std::string>());
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) {
      return Status(StatusCode::kAlreadyExists, "name",
                    "a workload named '" + doc.at("name").get<std::string>() + "' already exists");
    }
    if (rc != SQLITE_DONE) return db_error(db_, "updating workload");
    if (sqlite3_changes(db_) == 0) return not_found("workload " + doc.at("id").get<std::string>());
    return Status::ok();
  }
  Result<std::optional<json>> get_workload(const std::string& id) override {
    return one("SELECT doc FROM workloads WHERE id = ?", {id});
  }
  Result<std::optional<json>> workload_by_name(const std::string& name) override {
    return one("SELECT doc FROM workloads WHERE name = ?", {name});
  }
  Result<std::vector<json>> list_workloads() override {
    return docs("SELECT doc FROM workloads ORDER BY name", {});
  }

  // ---- runs
  Status insert_run(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO runs(id, workload_id, phase, submission_id, doc) VALUES (?, ?, ?, ?, ?)");
    s.bind(1, doc.at("runId").get<std::string>())
        .bind(2, doc.at("workload").at("id").get<std::string>())
        .bind(3, doc.at("phase").get<std::string>());
    if (doc.contains("submissionId") && doc["submissionId"].is_string()) {
      s.bind(4, doc["submissionId"].get<std::string>());
    } else {
      s.bind_null(4);
    }
    s.bind(5, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return Status(StatusCode::kAlreadyExists, "submissionId", "already used by another run");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting run");
    return Status::ok();
  }
  Status update_run(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "UPDATE runs SET phase = ?, doc = ? WHERE id = ?");
    s.bind(1, doc.at("phase").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace)).bind(3, doc.at("runId").get<std::string>());
    if (s.step() != SQLITE_DONE) return db_error(db_, "updating run");
    if (sqlite3_changes(db_) == 0) return not_found("run " + doc.at("runId").get<std::string>());
    return Status::ok();
  }
  Result<std::optional<json>> get_run(const std::string& id) override {
    return one("SELECT doc FROM runs WHERE id = ?", {id});
  }
  Result<std::optional<RunRow>> get_run_row(const std::string& id) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "SELECT id, workload_id, phase, doc FROM runs WHERE id = ?");
    s.bind(1, id);
    int rc = s.step();
    if (rc == SQLITE_ROW) return std::optional<RunRow>(RunRow{s.text(0), s.text(1), s.text(2), s.text(3)});
    if (rc != SQLITE_DONE) return db_error(db_, "reading run");
    return std::optional<RunRow>();
  }
  Result<std::vector<std::string>> run_ids_with_prefix(const std::string& prefix, int limit) override {
    return ids_with_prefix("runs", prefix, limit, "run");
  }
  Result<std::optional<json>> run_by_submission(const std::string& submission_id) override {
    return one("SELECT doc FROM runs WHERE submission_id = ?", {submission_id});
  }
  Result<RunPage> list_runs(const RunFilter& f) override {
    auto rows = list_run_rows(f);
    if (!rows.is_ok()) return rows.status();
    RunPage page;
    page.total = rows->total;
    page.runs.reserve(rows->rows.size());
    // Parsing outside the lock lets concurrent readers use every core.
    for (const auto& r : rows->rows) {
      auto doc = parse_json(r.doc, "stored run " + r.id);
      if (!doc.is_ok()) return internal_error(doc.status().message());
      page.runs.push_back(std::move(*doc));
    }
    return page;
  }
  Result<RunRowPage> list_run_rows(const RunFilter& f) override {
    std::string where = " WHERE 1=1";
    std::vector<std::string> args;
    where += in_list("phase", f.phases, &args);
    if (!f.workload_id.empty()) {
      where += " AND workload_id = ?";
      args.push_back(f.workload_id);
    }
    RunRowPage page;
    std::lock_guard<std::recursive_mutex> lock(mu_);
    {
      Stmt c(db_, ("SELECT COUNT(*) FROM runs" + where).c_str());
      for (size_t i = 0; i < args.size(); ++i) c.bind(static_cast<int>(i + 1), args[i]);
      if (c.step() != SQLITE_ROW) return db_error(db_, "counting runs");
      page.total = c.integer(0);
    }
    Stmt s(db_, ("SELECT id, workload_id, phase, doc FROM runs" + where + " ORDER BY seq DESC LIMIT ? OFFSET ?").c_str());
    int i = 1;
    for (const auto& a : args) s.bind(i++, a);
    s.bind(i, f.limit);
    s.bind(i + 1, f.offset);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) page.rows.push_back(RunRow{s.text(0), s.text(1), s.text(2), s.text(3)});
    if (rc != SQLITE_DONE) return db_error(db_, "listing runs");
    return page;
  }

  // ---- run events
  Result<int64_t> append_run_event(const std::string& run_id, const json& event) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    int64_t seq = 0;
    {
      Stmt q(db_, "SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = ?");
      q.bind(1, run_id);
      if (q.step() != SQLITE_ROW) return db_error(db_, "reading event seq");
      seq = q.integer(0);
    }
    json doc = event;
    doc["seq"] = seq;
    Stmt s(db_, "INSERT INTO run_events(run_id, seq, doc) VALUES (?, ?, ?)");
    s.bind(1, run_id).bind(2, seq).bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    if (s.step() != SQLITE_DONE) return db_error(db_, "appending run event");
    return seq;
  }
  Result<std::vector<json>> run_events(const std::string& run_id, int64_t after, int64_t limit) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "SELECT doc FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?");
    s.bind(1, run_id).bind(2, after).bind(3, limit);
    std::vector<json> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      auto doc = parse_json(s.text(0), "a stored event of run " + run_id);
      if (!doc.is_ok()) return internal_error(doc.status().message());
      out.push_back(std::move(*doc));
    }
    if (rc != SQLITE_DONE) return db_error(db_, "reading run events");
    return out;
  }

  // ---- step metrics
  Status put_step_metrics(const std::string& run_id, int64_t step, const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO run_metrics(run_id, step, doc) VALUES (?, ?, ?) "
                "ON CONFLICT(run_id, step) DO UPDATE SET doc = excluded.doc");
    s.bind(1, run_id).bind(2, step).bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    if (s.step() != SQLITE_DONE) return db_error(db_, "writing step metrics");
    return Status::ok();
  }
  Result<std::vector<json>> step_metrics(const std::string& run_id, int64_t limit) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    // The last `limit` steps, ascending.
    Stmt s(db_, "SELECT doc FROM (SELECT step, doc FROM run_metrics WHERE run_id = ? "
                "ORDER BY step DESC LIMIT ?) ORDER BY step ASC");
    s.bind(1, run_id).bind(2, limit);
    std::vector<json> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      auto doc = parse_json(s.text(0), "stored step metrics of run " + run_id);
      if (!doc.is_ok()) return internal_error(doc.status().message());
      out.push_back(std::move(*doc));
    }
    if (rc != SQLITE_DONE) return db_error(db_, "reading step metrics");
    return out;
  }

  // ---- claims
  Status insert_claim(ClaimRow& c) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO claims(owner, kind, workload_id, pool, devices, state, since, device_ids) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    s.bind(1, c.owner).bind(2, c.kind).bind(3, c.workload_id).bind(4, c.pool)
        .bind(5, static_cast<int64_t>(c.devices)).bind(6, c.state).bind(7, c.since).bind(8, ids_text(c.device_ids));
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return already_exists("claim for " + c.owner + " exists");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting claim");
    c.seq = sqlite3_last_insert_rowid(db_);
    return Status::ok();
  }
  Status update_claim(const ClaimRow& c) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return write("UPDATE claims SET state = ?, since = ?, pool = ?, devices = ?, device_ids = ? WHERE owner = ?",
                 {c.state, c.since, c.pool, std::to_string(c.devices), ids_text(c.device_ids), c.owner});
  }
  Status delete_claim(const std::string& owner) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return write("DELETE FROM claims WHERE owner = ?", {owner});
  }
  Result<std::vector<ClaimRow>> list_claims() override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids FROM claims "
                "ORDER BY seq");
    std::vector<ClaimRow> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      out.push_back(ClaimRow{s.text(0), s.text(1), s.text(2), s.text(3), static_cast<int>(s.integer(4)),
                             s.text(5), s.text(6), s.integer(7), ids_of(s.text(8))});
    }
    if (rc != SQLITE_DONE) return db_error(db_, "listing claims");
    return out;
  }

 private:
  Status exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return internal_error(std::string("store: ") + msg);
    }
    return Status::ok();
  }
  Status write(const char* sql, const std::vector<std::string>& args) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, sql);
    if (!s.ok()) return db_error(db_, "preparing statement");
    for (size_t i = 0; i < args.size(); ++i) s.bind(static_cast<int>(i + 1), args[i]);
    if (s.step() != SQLITE_DONE) return db_error(db_, "writing");
    return Status::ok();
  }
  // ---- snapshots
  Status insert_snapshot(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO snapshots(id, run_id, step, state, doc) VALUES (?, ?, ?, ?, ?)");
    s.bind(1, doc.at("snapshotId").get<std::string>())
        .bind(2, doc.at("runId").get<std::string>())
        .bind(3, doc.at("savedStep").get<int64_t>())
        .bind(4, doc.at("state").get<std::string>())
        .bind(5, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) {
      return already_exists("snapshot " + doc.at("snapshotId").get<std::string>() + " is already in the catalog");
    }
    if (rc != SQLITE_DONE) return db_error(db_, "inserting snapshot");
    return Status::ok();
  }
  Status update_snapshot(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "UPDATE snapshots SET state = ?, doc = ? WHERE id = ?");
    s.bind(1, doc.at("state").get<std::string>())
        .bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace))
        .bind(3, doc.at("snapshotId").get<std::string>());
    if (s.step() != SQLITE_DONE) return db_error(db_, "updating snapshot");
    if (sqlite3_changes(db_) == 0) return not_found("snapshot " + doc.at("snapshotId").get<std::string>());
    return Status::ok();
  }
  Result<std::optional<json>> get_snapshot(const std::string& id) override {
    return one("SELECT doc FROM snapshots WHERE id = ?", {id});
  }
  Result<std::vector<std::string>> snapshot_ids_with_prefix(const std::string& prefix, int limit) override {
    return ids_with_prefix("snapshots", prefix, limit, "snapshot");
  }
  Result<SnapshotPage> list_snapshots(const std::string& run_id, const std::string& state, int64_t limit,
                                      int64_t offset) override {
    SnapshotPage page;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      Stmt c(db_, "SELECT COUNT(*) FROM snapshots WHERE run_id = ?1 AND (?2 = '' OR state = ?2)");
      c.bind(1, run_id).bind(2, state);
      if (c.step() != SQLITE_ROW) return db_error(db_, "counting snapshots");
      page.total = c.integer(0);
    }
    std::vector<std::string> args = {run_id, state, std::to_string(limit), std::to_string(offset)};
    auto rows = docs(
        "SELECT doc FROM snapshots WHERE run_id = ?1 AND (?2 = '' OR state = ?2) ORDER BY step DESC, id "
        "LIMIT CAST(?3 AS INTEGER) OFFSET CAST(?4 AS INTEGER)",
        args);
    if (!rows.is_ok()) return rows.status();
    page.snapshots = std::move(*rows);
    return page;
  }

  // ---- the model registry
  static std::vector<std::string> trained_model_columns(const json& doc) {
    const json& w = doc.at("workload");
    return {doc.at("modelId").get<std::string>(), w.is_object() ? w.at("id").get<std::string>() : std::string(),
            doc.at("baseModel").at("name").get<std::string>(), doc.at("status").get<std::string>(),
            doc.dump(-1, ' ', false, json::error_handler_t::replace)};
  }
  Status insert_trained_model(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const auto c = trained_model_columns(doc);
    Stmt s(db_, "INSERT INTO trained_models(id, workload_id, base_model, status, doc) VALUES (?, ?, ?, ?, ?)");
    for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
    int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return already_exists("model " + c[0] + " is already registered");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting model");
    return Status::ok();
  }
  Status update_trained_model(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const auto c = trained_model_columns(doc);
    Stmt s(db_, "UPDATE trained_models SET workload_id = ?2, base_model = ?3, status = ?4, doc = ?5 WHERE id = ?1");
    for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
    if (s.step() != SQLITE_DONE) return db_error(db_, "updating model");
    if (sqlite3_changes(db_) == 0) return not_found("model " + c[0]);
    return Status::ok();
  }
  Result<std::optional<json>> get_trained_model(const std::string& id) override {
    return one("SELECT doc FROM trained_models WHERE id = ?", {id});
  }
  Result<std::vector<std::string>> trained_model_ids_with_prefix(const std::string& prefix, int limit) override {
    return ids_with_prefix("trained_models", prefix, limit, "model");
  }
  Result<std::vector<json>> list_trained_models(const std::string& workload_id, const std::string& base_model,
                                                const std::vector<std::string>& statuses) override {
    std::string sql = "SELECT doc FROM trained_models WHERE (?1 = '' OR workload_id = ?1) AND (?2 = '' OR base_model = ?2)";
    std::vector<std::string> args = {workload_id, base_model};
    sql += in_list("status", statuses, &args);
    sql += " ORDER BY seq DESC";
    return docs(sql.c_str(), args);
  }

  // ---- evaluations
  Status put_evaluation(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_,
           "INSERT INTO evaluations(id, created_seq, phase, doc) "
           "VALUES (?1, (SELECT COALESCE(MAX(created_seq), 0) + 1 FROM evaluations), ?2, ?3) "
           "ON CONFLICT(id) DO UPDATE SET phase = excluded.phase, doc = excluded.doc");
    s.bind(1, doc.at("evaluationId").get<std::string>())
        .bind(2, doc.at("phase").get<std::string>())
        .bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    if (s.step() != SQLITE_DONE) return db_error(db_, "writing evaluation");
    return Status::ok();
  }
  Result<std::optional<json>> get_evaluation(const std::string& id) override {
    return one("SELECT doc FROM evaluations WHERE id = ?", {id});
  }
  Result<std::vector<std::string>> evaluation_ids_with_prefix(const std::string& prefix, int limit) override {
    return ids_with_prefix("evaluations", prefix, limit, "evaluation");
  }
  Result<std::vector<json>> list_evaluations(const std::vector<std::string>& phases) override {
    auto all = docs("SELECT doc FROM evaluations ORDER BY created_seq DESC", {});
    if (!all.is_ok() || phases.empty()) return all;
    std::vector<json> out;
    for (auto& d : *all) {
      if (std::find(phases.begin(), phases.end(), d.value("phase", std::string())) != phases.end()) out.push_back(std::move(d));
    }
    return out;
  }

  // ---- comparisons
  static std::vector<std::string> comparison_columns(const json& doc) {
    return {doc.at("comparisonId").get<std::string>(), doc.at("source").at("snapshotId").get<std::string>(),
            doc.at("phase").get<std::string>(), doc.dump(-1, ' ', false, json::error_handler_t::replace)};
  }
  // ---- scoring bundles
  Status insert_bundle_version(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const std::string name = doc.at("name").get<std::string>();
    const int64_t version = doc.at("version").get<int64_t>();
    Stmt s(db_, "INSERT INTO bundle_versions(name, version, sha, doc) VALUES (?, ?, ?, ?)");
    s.bind(1, name).bind(2, version).bind(3, doc.at("sha").get<std::string>());
    s.bind(4, doc.dump(-1, ' ', false, json::error_handler_t::replace));
    const int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return already_exists("bundle " + name + " version " + std::to_string(version) + " already exists");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting bundle version");
    return Status::ok();
  }
  Result<std::vector<json>> list_bundle_versions() override {
    return docs("SELECT doc FROM bundle_versions ORDER BY name, version", {});
  }

  Status insert_comparison(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const auto c = comparison_columns(doc);
    Stmt s(db_, "INSERT INTO comparisons(id, source_snapshot, phase, doc) VALUES (?, ?, ?, ?)");
    for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
    const int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return already_exists("comparison " + c[0] + " already exists");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting comparison");
    return Status::ok();
  }
  Status update_comparison(const json& doc) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const auto c = comparison_columns(doc);
    Stmt s(db_, "UPDATE comparisons SET source_snapshot = ?2, phase = ?3, doc = ?4 WHERE id = ?1");
    for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
    if (s.step() != SQLITE_DONE) return db_error(db_, "updating comparison");
    if (sqlite3_changes(db_) == 0) return not_found("comparison " + c[0]);
    return Status::ok();
  }
  Result<std::optional<json>> get_comparison(const std::string& id) override {
    return one("SELECT doc FROM comparisons WHERE id = ?", {id});
  }
  Result<std::vector<std::string>> comparison_ids_with_prefix(const std::string& prefix, int limit) override {
    return ids_with_prefix("comparisons", prefix, limit, "comparison");
  }
  Result<ComparisonPage> list_comparisons(const std::string& source_snapshot, const std::vector<std::string>& phases,
                                          int64_t limit, int64_t offset) override {
    std::string where = " WHERE (?1 = '' OR source_snapshot = ?1)";
    std::vector<std::string> args = {source_snapshot};
    where += in_list("phase", phases, &args);
    ComparisonPage page;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      Stmt c(db_, ("SELECT COUNT(*) FROM comparisons" + where).c_str());
      for (size_t i = 0; i < args.size(); ++i) c.bind(static_cast<int>(i + 1), args[i]);
      if (c.step() != SQLITE_ROW) return db_error(db_, "counting comparisons");
      page.total = c.integer(0);
    }
    const std::string sql = "SELECT doc FROM comparisons" + where + " ORDER BY seq DESC LIMIT " + std::to_string(limit) +
                            " OFFSET " + std::to_string(offset);
    auto rows = docs(sql.c_str(), args);
    if (!rows.is_ok()) return rows.status();
    page.comparisons = std::move(*rows);
    return page;
  }

  // ---- lineage
  Status insert_child(const std::string& run_id, const std::string& parent_id) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, "INSERT INTO run_lineage(run_id, parent_id) VALUES (?, ?)");
    s.bind(1, run_id).bind(2, parent_id);
    const int rc = s.step();
    if (rc == SQLITE_CONSTRAINT) return already_exists("run " + run_id + " already has a parent");
    if (rc != SQLITE_DONE) return db_error(db_, "inserting lineage");
    return Status::ok();
  }
  Result<ChildPage> run_children(const std::string& parent_id, int64_t limit, int64_t offset) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    ChildPage page;
    Stmt c(db_, "SELECT COUNT(*) FROM run_lineage WHERE parent_id = ?");
    c.bind(1, parent_id);
    if (c.step() != SQLITE_ROW) return db_error(db_, "counting children");
    page.total = c.integer(0);
    Stmt s(db_, "SELECT run_id FROM run_lineage WHERE parent_id = ?1 ORDER BY seq DESC LIMIT ?2 OFFSET ?3");
    s.bind(1, parent_id).bind(2, limit).bind(3, offset);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) page.run_ids.push_back(s.text(0));
    if (rc != SQLITE_DONE) return db_error(db_, "reading children");
    return page;
  }

  // `f()` with mu_ held.
  template <typename F>
  auto locked(F&& f) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return f();
  }

  // ---- tasks (sqlite_tasks.cpp)
  Status insert_task(const TaskRow& row) override { return locked([&] { return sqlite::insert_task(db_, row); }); }
  Result<std::optional<TaskRow>> get_task(const std::string& kind, const std::string& id) override {
    return locked([&] { return sqlite::get_task(db_, kind, id); });
  }
  Result<std::vector<TaskRow>> due_tasks(const std::string& kind, double now, int64_t limit) override {
    return locked([&] { return sqlite::due_tasks(db_, kind, now, limit); });
  }
  Result<double> next_due() override { return locked([&] { return sqlite::next_due(db_); }); }
  Result<std::optional<TaskLease>> acquire_task_lease(const std::string& kind, const std::string& id,
                                                     const std::string& owner, double now, double seconds) override {
    return locked([&] { return sqlite::acquire_task_lease(db_, kind, id, owner, now, seconds); });
  }
  Status check_task_lease(const std::string& kind, const std::string& id, const std::string& owner,
                          int64_t fence) override {
    return locked([&] { return sqlite::check_task_lease(db_, kind, id, owner, fence); });
  }
  Status update_task(const TaskRow& row, int64_t fence) override {
    return locked([&] { return sqlite::update_task(db_, row, fence); });
  }
  Status update_task_if_version(const TaskRow& row, int64_t version) override {
    return locked([&] { return sqlite::update_task_if_version(db_, row, version); });
  }
  Status release_task_lease(const std::string& kind, const std::string& id, const std::string& owner) override {
    return locked([&] { return sqlite::release_task_lease(db_, kind, id, owner); });
  }

  // The ids of `table` that start with `prefix`, in order, at most `limit` (`what` names them in
  // an error). A range on the key, so the primary key's index serves it.
  Result<std::vector<std::string>> ids_with_prefix(const char* table, const std::string& prefix, int limit,
                                                   const char* what) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt s(db_, (std::string("SELECT id FROM ") + table + " WHERE id >= ? AND id < ? ORDER BY id LIMIT ?").c_str());
    s.bind(1, prefix).bind(2, prefix + "\x7f").bind(3, static_cast<int64_t>(limit));
    std::vector<std::string> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(s.text(0));
    if (rc != SQLITE_DONE) return db_error(db_, std::string("reading ") + what + " ids");
    return out;
  }
  // " AND column IN (?N, ...)" for `values`, numbered after the arguments already in `args`, to
  // which they are added; "" when there are none.
  static std::string in_list(const char* column, const std::vector<std::string>& values, std::vector<std::string>* args) {
    if (values.empty()) return "";
    std::string sql = std::string(" AND ") + column + " IN (";
    for (size_t i = 0; i < values.size(); ++i) {
      args->push_back(values[i]);
      sql += (i ? ", ?" : "?") + std::to_string(args->size());
    }
    return sql + ")";
  }

  Result<std::vector<json>> docs(const char* sql, const std::vector<std::string>& args) {
    std::vector<std::string> texts;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      Stmt s(db_, sql);
      for (size_t i = 0; i < args.size(); ++i) s.bind(static_cast<int>(i + 1), args[i]);
      int rc;
      while ((rc = s.step()) == SQLITE_ROW) texts.push_back(s.text(0));
      if (rc != SQLITE_DONE) return db_error(db_, "reading");
    }
    std::vector<json> out;
    out.reserve(texts.size());
    for (const auto& t : texts) {
      // A damaged document is an error of the store, never an exception.
      auto doc = parse_json(t, "a stored document");
      if (!doc.is_ok()) return internal_error(doc.status().message());
      out.push_back(std::move(*doc));
    }
    return out;
  }
  Result<std::optional<json>> one(const char* sql, const std::vector<std::string>& args) {
    auto r = docs(sql, args);
    if (!r.is_ok()) return r.status();
    if (r->empty()) return std::optional<json>();
    return std::optional<json>(std::move(r->front()));
  }

  sqlite3* db_;  // owned; guarded by mu_
  std::recursive_mutex mu_;
  int depth_ = 0;    // transaction nesting; guarded by mu_
  int version_ = 0;  // constant after init()
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return unavailable("cannot open store " + path + ": " + msg);
  }
  auto store = std::make_unique<SqliteStore>(db);
  Status st = store->init();
  if (!st.is_ok()) return st.with_context("opening store " + path);
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace trainer::store
