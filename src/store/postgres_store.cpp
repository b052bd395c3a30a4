// The PostgreSQL Store (declared in store/postgres_store.h): opening and migrating, transactions,
// and the service's core tables.
#include "store/postgres_store.h"

#include <utility>

#include "common/json_parse.h"
#include "store/postgres_jobs.h"
#include "store/postgres_tasks.h"

namespace trainer::store {
namespace postgres {
namespace {

// The advisory lock (bigint key space) that serialises migrations of one database: two trainerds
// opening it at once apply each migration once. The value is "trainmig" in ASCII.
constexpr int64_t kMigrationLock = 0x747261696e6d6967;
// The advisory lock key space (first int of the two-int form) of a run's event numbering.
constexpr int kRunEventsLockSpace = 1;

std::string text_of(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

Status PostgresStore::init() {
  const auto migrations = postgres::migrations();
  const int known = static_cast<int>(migrations.size());
  Status st = transaction([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows locked,
                             run("SELECT pg_advisory_xact_lock($1)", Params().integer(kMigrationLock),
                                 "waiting for the migration lock"));
    (void)locked;
    TRAINER_RETURN_IF_ERROR(
        db().exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    "creating schema_migrations"));
    TRAINER_ASSIGN_OR_RETURN(
        Rows v, run("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", {}, "reading schema version"));
    version_ = static_cast<int>(v.integer(0, 0));
    if (version_ > known) {
      return failed_precondition("store: schema version " + std::to_string(version_) +
                                 " is newer than this trainerd knows (" + std::to_string(known) +
                                 "); run a newer trainerd");
    }
    for (int next = version_ + 1; next <= known; ++next) {
      const std::string what = "migration " + std::to_string(next);
      TRAINER_RETURN_IF_ERROR(db().exec(migrations[next - 1], what));
      TRAINER_RETURN_IF_ERROR(write("INSERT INTO schema_migrations(version) VALUES ($1)",
                                    Params().integer(next), "recording " + what));
    }
    return Status::ok();
  });
  if (!st.is_ok()) return st;
  version_ = known;
  return Status::ok();
}

int PostgresStore::schema_version() const {
  return version_;
}

Result<uint64_t> PostgresStore::change_count() {
  return locked([&] { return postgres::change_count(db()); });
}

Status PostgresStore::transaction(const std::function<Status()>& body) {
  ConnectionPool::Lease lease(pool_);
  if (!lease.ok()) return lease.status();
  int& depth = lease.transaction_depth();
  if (depth > 0) return body();
  Connection& conn = lease.conn();
  TRAINER_RETURN_IF_ERROR(conn.reconnect_if_lost());
  TRAINER_RETURN_IF_ERROR(conn.exec("BEGIN", "BEGIN"));
  ++depth;
  Status st;
  try {
    st = body();
  } catch (const std::exception& e) {
    st = internal_error(std::string("store transaction: ") + e.what());
  }
  --depth;
  if (st.is_ok() && conn.transaction_failed()) {
    // A statement failed and the body went on as if it had not: PostgreSQL would turn the COMMIT
    // into a ROLLBACK without an error. Said instead of silently losing the writes.
    st = internal_error(
        "store: a statement of the transaction failed and the transaction was rolled back whole");
  }
  if (!st.is_ok()) {
    (void)conn.exec("ROLLBACK", "ROLLBACK");
    return st;
  }
  Status c = conn.exec("COMMIT", "COMMIT");
  if (!c.is_ok()) (void)conn.exec("ROLLBACK", "ROLLBACK");
  return c;
}

Status PostgresStore::write(const char* sql, const Params& params, const std::string& what) {
  auto r = run(sql, params, what);
  return r.is_ok() ? Status::ok() : r.status();
}

// ---- base models
Status PostgresStore::put_base_model(const json& doc) {
  const Params p{doc.at("name").get<std::string>(), text_of(doc)};
  return locked([&] {
    return write(
        "INSERT INTO base_models(name, doc) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc",
        p, "writing base model");
  });
}

Result<std::vector<json>> PostgresStore::list_base_models() {
  return docs("SELECT doc FROM base_models ORDER BY name", {}, "reading base models");
}

// ---- datasets
Result<bool> PostgresStore::insert_dataset(const json& doc) {
  const Params p{doc.at("hash").get<std::string>(), text_of(doc)};
  return locked([&]() -> Result<bool> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO datasets(hash, doc) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING", p,
                    "inserting dataset"));
    return r.changed() > 0;
  });
}

Result<std::optional<json>> PostgresStore::get_dataset(const std::string& hash) {
  return one("SELECT doc FROM datasets WHERE hash = $1", {hash}, "reading dataset");
}

Result<std::vector<json>> PostgresStore::datasets_with_prefix(const std::string& prefix) {
  return docs("SELECT doc FROM datasets WHERE hash >= $1 AND hash < $2 ORDER BY hash LIMIT 10",
              {prefix, prefix + "\x7f"}, "reading datasets");
}

Result<std::vector<json>> PostgresStore::list_datasets() {
  return docs("SELECT doc FROM datasets ORDER BY created_seq DESC", {}, "reading datasets");
}

Status PostgresStore::set_alias(const std::string& name, const std::string& hash) {
  return locked([&] {
    return write(
        "INSERT INTO dataset_aliases(name, hash) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET hash = EXCLUDED.hash",
        {name, hash}, "writing alias");
  });
}

Result<std::optional<std::string>> PostgresStore::get_alias(const std::string& name) {
  return locked([&]() -> Result<std::optional<std::string>> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT hash FROM dataset_aliases WHERE name = $1", {name}, "reading alias"));
    if (r.empty()) return std::optional<std::string>();
    return std::optional<std::string>(r.text(0, 0));
  });
}

Result<std::vector<std::string>> PostgresStore::aliases_of(const std::string& hash) {
  return locked([&]() -> Result<std::vector<std::string>> {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("SELECT name FROM dataset_aliases WHERE hash = $1 ORDER BY name",
                                         {hash}, "reading aliases"));
    std::vector<std::string> out;
    for (int i = 0; i < r.size(); ++i) out.push_back(r.text(i, 0));
    return out;
  });
}

// ---- workloads
namespace {

Status workload_name_taken(const std::string& name) {
  return Status(StatusCode::kAlreadyExists, "name", "a workload named '" + name + "' already exists");
}

}  // namespace

Status PostgresStore::insert_workload(const json& doc) {
  const std::string name = doc.at("name").get<std::string>();
  const Params p{doc.at("id").get<std::string>(), name, text_of(doc)};
  return locked([&]() -> Status {
    // A taken id or name inserts nothing (no error that would fail an enclosing transaction).
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO workloads(id, name, doc) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", p,
                    "inserting workload"));
    if (r.changed() == 0) return workload_name_taken(name);
    return Status::ok();
  });
}

Status PostgresStore::update_workload(const json& doc) {
  const std::string id = doc.at("id").get<std::string>();
  const std::string name = doc.at("name").get<std::string>();
  const Params p{name, text_of(doc), id};
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows taken, run("SELECT 1 FROM workloads WHERE name = $1 AND id <> $2",
                                             {name, id}, "updating workload"));
    if (!taken.empty()) return workload_name_taken(name);
    auto r = run("UPDATE workloads SET name = $1, doc = $2 WHERE id = $3", p, "updating workload");
    // Another process took the name since the check above.
    if (!r.is_ok() && r.status().code() == StatusCode::kAlreadyExists) return workload_name_taken(name);
    if (!r.is_ok()) return r.status();
    if (r->changed() == 0) return not_found("workload " + id);
    return Status::ok();
  });
}

Result<std::optional<json>> PostgresStore::get_workload(const std::string& id) {
  return one("SELECT doc FROM workloads WHERE id = $1", {id}, "reading workload");
}

Result<std::optional<json>> PostgresStore::workload_by_name(const std::string& name) {
  return one("SELECT doc FROM workloads WHERE name = $1", {name}, "reading workload");
}

Result<std::vector<json>> PostgresStore::list_workloads() {
  return docs("SELECT doc FROM workloads ORDER BY name", {}, "reading workloads");
}

// ---- runs
Status PostgresStore::insert_run(const json& doc) {
  Params p{doc.at("runId").get<std::string>(), doc.at("workload").at("id").get<std::string>(),
           doc.at("phase").get<std::string>()};
  if (doc.contains("submissionId") && doc["submissionId"].is_string()) {
    p.text(doc["submissionId"].get<std::string>());
  } else {
    p.null();
  }
  p.text(text_of(doc));
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("INSERT INTO runs(id, workload_id, phase, submission_id, doc) "
                                         "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                                         p, "inserting run"));
    if (r.changed() == 0)
      return Status(StatusCode::kAlreadyExists, "submissionId", "already used by another run");
    return Status::ok();
  });
}

Status PostgresStore::update_run(const json& doc) {
  const std::string id = doc.at("runId").get<std::string>();
  const Params p{doc.at("phase").get<std::string>(), text_of(doc), id};
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows r,
                             run("UPDATE runs SET phase = $1, doc = $2 WHERE id = $3", p, "updating run"));
    if (r.changed() == 0) return not_found("run " + id);
    return Status::ok();
  });
}

Result<std::optional<json>> PostgresStore::get_run(const std::string& id) {
  return one("SELECT doc FROM runs WHERE id = $1", {id}, "reading run");
}

Result<std::optional<RunRow>> PostgresStore::get_run_row(const std::string& id) {
  return locked([&]() -> Result<std::optional<RunRow>> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT id, workload_id, phase, doc FROM runs WHERE id = $1", {id}, "reading run"));
    if (r.empty()) return std::optional<RunRow>();
    return std::optional<RunRow>(RunRow{r.text(0, 0), r.text(0, 1), r.text(0, 2), r.text(0, 3)});
  });
}

Result<std::vector<std::string>> PostgresStore::run_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("runs", prefix, limit, "run");
}

Result<std::optional<json>> PostgresStore::run_by_submission(const std::string& submission_id) {
  return one("SELECT doc FROM runs WHERE submission_id = $1", {submission_id}, "reading run");
}

Result<RunRowPage> PostgresStore::list_run_rows(const RunFilter& f) {
  Params p;
  std::string where = " WHERE true" + p.in_list("phase", f.phases);
  if (!f.workload_id.empty()) {
    p.text(f.workload_id);
    where += " AND workload_id = $" + std::to_string(p.size());
  }
  const std::string at_limit = "$" + std::to_string(p.size() + 1);
  const std::string at_offset = "$" + std::to_string(p.size() + 2);
  return locked([&]() -> Result<RunRowPage> {
    RunRowPage page;
    TRAINER_ASSIGN_OR_RETURN(page.total, count("SELECT COUNT(*) FROM runs" + where, p, "counting runs"));
    Params paged = p;
    paged.limit(f.limit).offset(f.offset);
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("SELECT id, workload_id, phase, doc FROM runs" + where +
                                             " ORDER BY seq DESC LIMIT " + at_limit + " OFFSET " + at_offset,
                                         paged, "listing runs"));
    page.rows.reserve(static_cast<size_t>(r.size()));
    for (int i = 0; i < r.size(); ++i)
      page.rows.push_back(RunRow{r.text(i, 0), r.text(i, 1), r.text(i, 2), r.text(i, 3)});
    return page;
  });
}

// ---- run events
Result<int64_t> PostgresStore::append_run_event(const std::string& run_id, const json& event) {
  int64_t seq = 0;
  // The next number and the insert under the run's advisory lock, held to the commit: two
  // processes appending to one run number their events one after the other.
  TRAINER_RETURN_IF_ERROR(transaction([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows locked, run("SELECT pg_advisory_xact_lock($1, hashtext($2))",
                         Params().integer(kRunEventsLockSpace).text(run_id), "locking the run's events"));
    (void)locked;
    TRAINER_ASSIGN_OR_RETURN(Rows q, run("SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = $1",
                                         {run_id}, "reading event seq"));
    seq = q.integer(0, 0);
    json doc = event;
    doc["seq"] = seq;
    return write("INSERT INTO run_events(run_id, seq, doc) VALUES ($1, $2, $3)",
                 Params().text(run_id).integer(seq).text(text_of(doc)), "appending run event");
  }));
  return seq;
}

Result<std::vector<json>> PostgresStore::run_events(const std::string& run_id, int64_t after, int64_t limit) {
  return docs("SELECT doc FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
              Params().text(run_id).integer(after).limit(limit), "reading run events of " + run_id);
}

// ---- step metrics
Status PostgresStore::put_step_metrics(const std::string& run_id, int64_t step, const json& doc) {
  const Params p = Params().text(run_id).integer(step).text(text_of(doc));
  return locked([&] {
    return write(
        "INSERT INTO run_metrics(run_id, step, doc) VALUES ($1, $2, $3) "
        "ON CONFLICT (run_id, step) DO UPDATE SET doc = EXCLUDED.doc",
        p, "writing step metrics");
  });
}

Result<std::vector<json>> PostgresStore::step_metrics(const std::string& run_id, int64_t limit) {
  // The last `limit` steps, ascending.
  return docs(
      "SELECT doc FROM (SELECT step, doc FROM run_metrics WHERE run_id = $1 "
      "ORDER BY step DESC LIMIT $2) AS last ORDER BY step ASC",
      Params().text(run_id).limit(limit), "reading step metrics of run " + run_id);
}

// ---- jobs' reports (postgres_jobs.cpp)
Result<JobAttemptRow> PostgresStore::register_job_attempt(const JobAttemptRow& row) {
  return locked([&] { return postgres::register_job_attempt(db(), row); });
}

Result<std::optional<JobAttemptRow>> PostgresStore::get_job_attempt(const std::string& job_id) {
  return locked([&] { return postgres::get_job_attempt(db(), job_id); });
}

Result<int64_t> PostgresStore::put_job_events(const std::string& job_id, const std::vector<JobItem>& items) {
  int64_t added = 0;
  TRAINER_RETURN_IF_ERROR(transaction([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(added, postgres::put_job_items(db(), "job_events", job_id, items));
    return Status::ok();
  }));
  return added;
}

Result<std::vector<JobItem>> PostgresStore::job_events(const std::string& job_id, int64_t after,
                                                       int64_t limit) {
  return locked([&] { return postgres::job_items_after(db(), "job_events", job_id, after, limit); });
}

Result<int64_t> PostgresStore::put_job_log_lines(const std::string& job_id,
                                                 const std::vector<JobItem>& lines) {
  int64_t added = 0;
  TRAINER_RETURN_IF_ERROR(transaction([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(added, postgres::put_job_items(db(), "job_logs", job_id, lines));
    return Status::ok();
  }));
  return added;
}

Result<std::vector<JobItem>> PostgresStore::job_log_tail(const std::string& job_id, int64_t n) {
  return locked([&] { return postgres::job_items_tail(db(), "job_logs", job_id, n); });
}

// ---- tasks (postgres_tasks.cpp)
Status PostgresStore::insert_task(const TaskRow& row) {
  return locked([&] { return postgres::insert_task(db(), row); });
}

Result<std::optional<TaskRow>> PostgresStore::get_task(const std::string& kind, const std::string& id) {
  return locked([&] { return postgres::get_task(db(), kind, id); });
}

Result<std::vector<TaskRow>> PostgresStore::due_tasks(const std::string& kind, double now, int64_t limit) {
  return locked([&] { return postgres::due_tasks(db(), kind, now, limit); });
}

Result<std::optional<TaskLease>> PostgresStore::acquire_task_lease(const std::string& kind,
                                                                   const std::string& id,
                                                                   const std::string& owner, double now,
                                                                   double seconds) {
  return locked([&] { return postgres::acquire_task_lease(db(), kind, id, owner, now, seconds); });
}

Status PostgresStore::check_task_lease(const std::string& kind, const std::string& id,
                                       const std::string& owner, int64_t fence) {
  return locked([&] { return postgres::check_task_lease(db(), kind, id, owner, fence); });
}

Status PostgresStore::lock_task(const std::string& kind, const std::string& id) {
  ConnectionPool::Lease lease(pool_);
  if (!lease.ok()) return lease.status();
  if (lease.transaction_depth() == 0) return failed_precondition("store: a task's row is locked inside a transaction");
  return locked([&] { return postgres::lock_task(db(), kind, id); });
}

Status PostgresStore::update_task(const TaskRow& row, int64_t fence) {
  return locked([&] { return postgres::update_task(db(), row, fence); });
}

Status PostgresStore::update_task_if_version(const TaskRow& row, int64_t version) {
  return locked([&] { return postgres::update_task_if_version(db(), row, version); });
}

Status PostgresStore::release_task_lease(const std::string& kind, const std::string& id,
                                         const std::string& owner) {
  return locked([&] { return postgres::release_task_lease(db(), kind, id, owner); });
}

Result<bool> PostgresStore::wake_task(const std::string& kind, const std::string& id) {
  return locked([&] { return postgres::wake_task(db(), kind, id); });
}

// ---- shared readers
Result<std::vector<std::string>> PostgresStore::ids_with_prefix(const char* table, const std::string& prefix,
                                                                int limit, const char* what) {
  const std::string sql =
      std::string("SELECT id FROM ") + table + " WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3";
  return locked([&]() -> Result<std::vector<std::string>> {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run(sql, Params().text(prefix).text(prefix + "\x7f").limit(limit),
                                         std::string("reading ") + what + " ids"));
    std::vector<std::string> out;
    for (int i = 0; i < r.size(); ++i) out.push_back(r.text(i, 0));
    return out;
  });
}

Result<std::vector<json>> PostgresStore::docs(const char* sql, const Params& params,
                                              const std::string& what) {
  std::vector<std::string> texts;
  {
    auto rows = locked([&]() -> Result<Rows> { return run(sql, params, what); });
    if (!rows.is_ok()) return rows.status();
    texts.reserve(static_cast<size_t>(rows->size()));
    for (int i = 0; i < rows->size(); ++i) texts.push_back(rows->text(i, 0));
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

Result<std::optional<json>> PostgresStore::one(const char* sql, const Params& params,
                                               const std::string& what) {
  auto r = docs(sql, params, what);
  if (!r.is_ok()) return r.status();
  if (r->empty()) return std::optional<json>();
  return std::optional<json>(std::move(r->front()));
}

Result<int64_t> PostgresStore::count(const std::string& sql, const Params& params, const std::string& what) {
  TRAINER_ASSIGN_OR_RETURN(Rows r, run(sql, params, what));
  return r.integer(0, 0);
}

}  // namespace postgres

Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url, const PostgresSessionLimits& limits,
                                                   int pool_size) {
  if (pool_size < 1 || pool_size > kMaxPostgresPoolSize) {
    return invalid_argument("store.poolSize: " + std::to_string(pool_size) + " connections; must be between 1 and " +
                            std::to_string(kMaxPostgresPoolSize));
  }
  auto conn = postgres::Connection::open(url, limits);
  if (!conn.is_ok()) return conn.status();
  const std::string server = (*conn)->server();
  auto store = std::make_unique<postgres::PostgresStore>(std::move(*conn), url, limits, pool_size);
  Status st = store->init();
  if (!st.is_ok()) return st.with_context("opening store " + server);
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace trainer::store
