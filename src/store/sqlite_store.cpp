// The SQLite Store (declared in store/sqlite_store.h): opening and migrating, transactions, and
// the service's core tables.
#include "store/sqlite_store.h"

#include <algorithm>
#include <utility>

#include "common/json_parse.h"
#include "store/sqlite_jobs.h"
#include "store/sqlite_tasks.h"

namespace trainer::store {
namespace sqlite {

Status SqliteStore::init() {
  // First: another process may hold the file's lock while it opens it too.
  sqlite3_busy_timeout(db_, 5000);
  TRAINER_RETURN_IF_ERROR(exec("PRAGMA journal_mode=WAL"));
  TRAINER_RETURN_IF_ERROR(exec("PRAGMA synchronous=FULL"));
  TRAINER_RETURN_IF_ERROR(exec("PRAGMA foreign_keys=ON"));
  // Reads from a memory map and a 64 MiB page cache instead of a read() per page: a page of
  // runs deep in the list walks thousands of rows (profiled: most of a list's time was the
  // kernel copying pages).
  TRAINER_RETURN_IF_ERROR(exec("PRAGMA mmap_size=1073741824"));
  TRAINER_RETURN_IF_ERROR(exec("PRAGMA cache_size=-65536"));
  TRAINER_RETURN_IF_ERROR(exec(
      "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
      "applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')))"));
  {
    // Finalized before the migrations: a statement left open would hold a read snapshot that a
    // migration's write lock could not be taken from once another process has written.
    Stmt q(db_, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
    if (!q.ok() || q.step() != SQLITE_ROW) return db_error(db_, "reading schema version");
    version_ = static_cast<int>(q.integer(0));
  }
  const auto migrations = sqlite::migrations();
  const int known = static_cast<int>(migrations.size());
  if (version_ > known) {
    return failed_precondition("store: schema version " + std::to_string(version_) +
                               " is newer than this trainerd knows (" + std::to_string(known) +
                               "); run a newer trainerd");
  }
  for (int v = version_ + 1; v <= known; ++v) {
    Status st = transaction([&]() -> Status {
      // Another process opening the same file at once may have applied it since the read above:
      // BEGIN IMMEDIATE holds the write lock, so this second read is the truth.
      int64_t applied = 0;
      {
        Stmt again(db_, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
        if (!again.ok() || again.step() != SQLITE_ROW) return db_error(db_, "reading schema version");
        applied = again.integer(0);
      }
      if (applied >= v) return Status::ok();
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

int SqliteStore::schema_version() const { return version_; }

Result<uint64_t> SqliteStore::change_count() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return sqlite::change_count(db_);
}

Status SqliteStore::transaction(const std::function<Status()>& body) {
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
Status SqliteStore::put_base_model(const json& doc) {
  return write("INSERT INTO base_models(name, doc) VALUES (?, ?) "
               "ON CONFLICT(name) DO UPDATE SET doc = excluded.doc",
               {doc.at("name").get<std::string>(), doc.dump(-1, ' ', false, json::error_handler_t::replace)});
}

Result<std::vector<json>> SqliteStore::list_base_models() {
  return docs("SELECT doc FROM base_models ORDER BY name", {});
}

// ---- datasets
Result<bool> SqliteStore::insert_dataset(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO datasets(hash, created_seq, doc) VALUES (?, "
              "(SELECT COALESCE(MAX(created_seq), 0) + 1 FROM datasets), ?) "
              "ON CONFLICT(hash) DO NOTHING");
  s.bind(1, doc.at("hash").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "inserting dataset");
  return sqlite3_changes(db_) > 0;
}

Result<std::optional<json>> SqliteStore::get_dataset(const std::string& hash) {
  return one("SELECT doc FROM datasets WHERE hash = ?", {hash});
}

Result<std::vector<json>> SqliteStore::datasets_with_prefix(const std::string& prefix) {
  return docs("SELECT doc FROM datasets WHERE hash >= ? AND hash < ? ORDER BY hash LIMIT 10",
              {prefix, prefix + "\x7f"});
}

Result<std::vector<json>> SqliteStore::list_datasets() {
  return docs("SELECT doc FROM datasets ORDER BY created_seq DESC", {});
}

Status SqliteStore::set_alias(const std::string& name, const std::string& hash) {
  return write("INSERT INTO dataset_aliases(name, hash) VALUES (?, ?) "
               "ON CONFLICT(name) DO UPDATE SET hash = excluded.hash",
               {name, hash});
}

Result<std::optional<std::string>> SqliteStore::get_alias(const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "SELECT hash FROM dataset_aliases WHERE name = ?");
  s.bind(1, name);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return db_error(db_, "reading alias");
  return std::optional<std::string>(s.text(0));
}

Result<std::vector<std::string>> SqliteStore::aliases_of(const std::string& hash) {
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
Status SqliteStore::insert_workload(const json& doc) {
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

Status SqliteStore::update_workload(const json& doc) {
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

Result<std::optional<json>> SqliteStore::get_workload(const std::string& id) {
  return one("SELECT doc FROM workloads WHERE id = ?", {id});
}

Result<std::optional<json>> SqliteStore::workload_by_name(const std::string& name) {
  return one("SELECT doc FROM workloads WHERE name = ?", {name});
}

Result<std::vector<json>> SqliteStore::list_workloads() {
  return docs("SELECT doc FROM workloads ORDER BY name", {});
}

// ---- runs
Status SqliteStore::insert_run(const json& doc) {
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

Status SqliteStore::update_run(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "UPDATE runs SET phase = ?, doc = ? WHERE id = ?");
  s.bind(1, doc.at("phase").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace)).bind(3, doc.at("runId").get<std::string>());
  if (s.step() != SQLITE_DONE) return db_error(db_, "updating run");
  if (sqlite3_changes(db_) == 0) return not_found("run " + doc.at("runId").get<std::string>());
  return Status::ok();
}

Result<std::optional<json>> SqliteStore::get_run(const std::string& id) {
  return one("SELECT doc FROM runs WHERE id = ?", {id});
}

Result<std::optional<RunRow>> SqliteStore::get_run_row(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "SELECT id, workload_id, phase, doc FROM runs WHERE id = ?");
  s.bind(1, id);
  int rc = s.step();
  if (rc == SQLITE_ROW) return std::optional<RunRow>(RunRow{s.text(0), s.text(1), s.text(2), s.text(3)});
  if (rc != SQLITE_DONE) return db_error(db_, "reading run");
  return std::optional<RunRow>();
}

Result<std::vector<std::string>> SqliteStore::run_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("runs", prefix, limit, "run");
}

Result<std::optional<json>> SqliteStore::run_by_submission(const std::string& submission_id) {
  return one("SELECT doc FROM runs WHERE submission_id = ?", {submission_id});
}

Result<RunRowPage> SqliteStore::list_run_rows(const RunFilter& f) {
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
Result<int64_t> SqliteStore::append_run_event(const std::string& run_id, const json& event) {
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

Result<std::vector<json>> SqliteStore::run_events(const std::string& run_id, int64_t after, int64_t limit) {
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
Status SqliteStore::put_step_metrics(const std::string& run_id, int64_t step, const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO run_metrics(run_id, step, doc) VALUES (?, ?, ?) "
              "ON CONFLICT(run_id, step) DO UPDATE SET doc = excluded.doc");
  s.bind(1, run_id).bind(2, step).bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "writing step metrics");
  return Status::ok();
}

Result<std::vector<json>> SqliteStore::step_metrics(const std::string& run_id, int64_t limit) {
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

// ---- jobs' reports (sqlite_jobs.cpp)
Result<JobAttemptRow> SqliteStore::register_job_attempt(const JobAttemptRow& row) {
  return locked([&] { return sqlite::register_job_attempt(db_, row); });
}

Result<std::optional<JobAttemptRow>> SqliteStore::get_job_attempt(const std::string& job_id) {
  return locked([&] { return sqlite::get_job_attempt(db_, job_id); });
}

Result<int64_t> SqliteStore::put_job_events(const std::string& job_id, const std::vector<JobItem>& items) {
  int64_t added = 0;
  TRAINER_RETURN_IF_ERROR(transaction([&]() -> Status {
    auto n = sqlite::put_job_items(db_, "job_events", job_id, items);
    if (!n.is_ok()) return n.status();
    added = *n;
    return Status::ok();
  }));
  return added;
}

Result<std::vector<JobItem>> SqliteStore::job_events(const std::string& job_id, int64_t after, int64_t limit) {
  return locked([&] { return sqlite::job_items_after(db_, "job_events", job_id, after, limit); });
}

Result<int64_t> SqliteStore::put_job_log_lines(const std::string& job_id, const std::vector<JobItem>& lines) {
  int64_t added = 0;
  TRAINER_RETURN_IF_ERROR(transaction([&]() -> Status {
    auto n = sqlite::put_job_items(db_, "job_logs", job_id, lines);
    if (!n.is_ok()) return n.status();
    added = *n;
    return Status::ok();
  }));
  return added;
}

Result<std::vector<JobItem>> SqliteStore::job_log_tail(const std::string& job_id, int64_t n) {
  return locked([&] { return sqlite::job_items_tail(db_, "job_logs", job_id, n); });
}

// ---- tasks (sqlite_tasks.cpp)
Status SqliteStore::insert_task(const TaskRow& row) { return locked([&] { return sqlite::insert_task(db_, row); }); }

Result<std::optional<TaskRow>> SqliteStore::get_task(const std::string& kind, const std::string& id) {
  return locked([&] { return sqlite::get_task(db_, kind, id); });
}

Result<std::vector<TaskRow>> SqliteStore::due_tasks(const std::string& kind, double now, int64_t limit) {
  return locked([&] { return sqlite::due_tasks(db_, kind, now, limit); });
}


Result<std::optional<TaskLease>> SqliteStore::acquire_task_lease(const std::string& kind, const std::string& id,
                                                   const std::string& owner, double now, double seconds) {
  return locked([&] { return sqlite::acquire_task_lease(db_, kind, id, owner, now, seconds); });
}

Status SqliteStore::check_task_lease(const std::string& kind, const std::string& id, const std::string& owner,
                        int64_t fence) {
  return locked([&] { return sqlite::check_task_lease(db_, kind, id, owner, fence); });
}

Status SqliteStore::lock_task(const std::string&, const std::string&) { return Status::ok(); }

Status SqliteStore::update_task(const TaskRow& row, int64_t fence) {
  return locked([&] { return sqlite::update_task(db_, row, fence); });
}

Status SqliteStore::update_task_if_version(const TaskRow& row, int64_t version) {
  return locked([&] { return sqlite::update_task_if_version(db_, row, version); });
}

Status SqliteStore::release_task_lease(const std::string& kind, const std::string& id, const std::string& owner) {
  return locked([&] { return sqlite::release_task_lease(db_, kind, id, owner); });
}

Result<bool> SqliteStore::wake_task(const std::string& kind, const std::string& id) {
  return locked([&] { return sqlite::wake_task(db_, kind, id); });
}

// The ids of `table` that start with `prefix`, in order, at most `limit` (`what` names them in
// an error). A range on the key, so the primary key's index serves it.
Result<std::vector<std::string>> SqliteStore::ids_with_prefix(const char* table, const std::string& prefix, int limit,
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
std::string SqliteStore::in_list(const char* column, const std::vector<std::string>& values, std::vector<std::string>* args) {
  if (values.empty()) return "";
  std::string sql = std::string(" AND ") + column + " IN (";
  for (size_t i = 0; i < values.size(); ++i) {
    args->push_back(values[i]);
    sql += (i ? ", ?" : "?") + std::to_string(args->size());
  }
  return sql + ")";
}

Result<std::vector<json>> SqliteStore::docs(const char* sql, const std::vector<std::string>& args) {
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

Result<std::optional<json>> SqliteStore::one(const char* sql, const std::vector<std::string>& args) {
  auto r = docs(sql, args);
  if (!r.is_ok()) return r.status();
  if (r->empty()) return std::optional<json>();
  return std::optional<json>(std::move(r->front()));
}

}  // namespace sqlite

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return unavailable("cannot open store " + path + ": " + msg);
  }
  auto store = std::make_unique<sqlite::SqliteStore>(db, path);
  Status st = store->init();
  if (!st.is_ok()) return st.with_context("opening store " + path);
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace trainer::store
