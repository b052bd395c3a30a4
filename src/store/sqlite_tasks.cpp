// The task table and the change counter of the SQLite store (declared in store/sqlite_tasks.h).
// Every write here is one conditional UPDATE: the condition (a fence, a version, a lease that ran
// out) and the change are one statement, so no reader sees one without the other.
#include "store/sqlite_tasks.h"

#include "store/sqlite_support.h"

namespace trainer::store::sqlite {
namespace {

constexpr const char* kColumns = "kind, id, phase, terminal, due_at, owner, fence, lease_until, version";

TaskRow row_of(const Stmt& s) {
  TaskRow r;
  r.kind = s.text(0);
  r.id = s.text(1);
  r.phase = s.text(2);
  r.terminal = s.integer(3) != 0;
  r.due_at = s.real(4);
  r.owner = s.text(5);
  r.fence = s.integer(6);
  r.lease_until = s.real(7);
  r.version = s.integer(8);
  return r;
}

std::string task_name(const std::string& kind, const std::string& id) { return kind + " " + id; }

// Why a conditional write to an existing task changed nothing, for a stale writer.
Status stale(sqlite3* db, const std::string& kind, const std::string& id, const std::string& what) {
  auto now = get_task(db, kind, id);
  if (!now.is_ok()) return now.status();
  if (!now->has_value()) return not_found("task " + task_name(kind, id));
  const TaskRow& r = **now;
  return failed_precondition("task " + task_name(kind, id) + ": " + what + " is stale (the task is now under fence " +
                             std::to_string(r.fence) + (r.owner.empty() ? std::string(", unowned") : ", owner " + r.owner) +
                             ", version " + std::to_string(r.version) + "); the write was refused");
}

}  // namespace

Status insert_task(sqlite3* db, const TaskRow& row) {
  Stmt s(db, "INSERT INTO tasks(kind, id, phase, terminal, due_at, owner, fence, lease_until, version, seq) "
             "VALUES (?, ?, ?, ?, ?, '', 0, 0, 1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks))");
  s.bind(1, row.kind).bind(2, row.id).bind(3, row.phase).bind(4, static_cast<int64_t>(row.terminal));
  s.bind_real(5, row.due_at);
  const int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("task " + task_name(row.kind, row.id) + " already exists");
  if (rc != SQLITE_DONE) return db_error(db, "inserting task");
  return Status::ok();
}

Result<std::optional<TaskRow>> get_task(sqlite3* db, const std::string& kind, const std::string& id) {
  Stmt s(db, (std::string("SELECT ") + kColumns + " FROM tasks WHERE kind = ? AND id = ?").c_str());
  s.bind(1, kind).bind(2, id);
  const int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<TaskRow>();
  if (rc != SQLITE_ROW) return db_error(db, "reading task");
  return std::optional<TaskRow>(row_of(s));
}

Result<std::vector<TaskRow>> due_tasks(sqlite3* db, const std::string& kind, double now, int64_t limit) {
  Stmt s(db, (std::string("SELECT ") + kColumns +
              " FROM tasks WHERE kind = ? AND terminal = 0 AND due_at <= ? ORDER BY due_at, seq LIMIT ?")
                 .c_str());
  s.bind(1, kind).bind_real(2, now).bind(3, limit);
  std::vector<TaskRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(row_of(s));
  if (rc != SQLITE_DONE) return db_error(db, "listing due tasks");
  return out;
}

Result<std::optional<TaskLease>> acquire_task_lease(sqlite3* db, const std::string& kind, const std::string& id,
                                                    const std::string& owner, double now, double seconds) {
  Stmt s(db, "UPDATE tasks SET fence = CASE WHEN owner = ?3 THEN fence ELSE fence + 1 END, owner = ?3, "
             "lease_until = ?4 WHERE kind = ?1 AND id = ?2 AND (owner = '' OR owner = ?3 OR lease_until < ?5)");
  s.bind(1, kind).bind(2, id).bind(3, owner).bind_real(4, now + seconds).bind_real(5, now);
  if (s.step() != SQLITE_DONE) return db_error(db, "acquiring a task's lease");
  const bool granted = sqlite3_changes(db) > 0;
  auto row = get_task(db, kind, id);
  if (!row.is_ok()) return row.status();
  if (!row->has_value()) return not_found("task " + task_name(kind, id));
  if (!granted) return std::optional<TaskLease>();
  return std::optional<TaskLease>(TaskLease{owner, (*row)->fence, (*row)->lease_until});
}

Status check_task_lease(sqlite3* db, const std::string& kind, const std::string& id, const std::string& owner,
                        int64_t fence) {
  Stmt s(db, "SELECT 1 FROM tasks WHERE kind = ? AND id = ? AND owner = ? AND fence = ?");
  s.bind(1, kind).bind(2, id).bind(3, owner).bind(4, fence);
  const int rc = s.step();
  if (rc == SQLITE_ROW) return Status::ok();
  if (rc != SQLITE_DONE) return db_error(db, "checking a task's lease");
  return stale(db, kind, id, "the lease of " + owner + " under fence " + std::to_string(fence));
}

namespace {

// Writes the task's phase, terminal flag and due time when its `column` still holds `expected`.
Status update_task_where(sqlite3* db, const TaskRow& row, const char* column, int64_t expected,
                         const std::string& what) {
  Stmt s(db, (std::string("UPDATE tasks SET phase = ?, terminal = ?, due_at = ?, version = version + 1 "
                          "WHERE kind = ? AND id = ? AND ") + column + " = ?").c_str());
  s.bind(1, row.phase).bind(2, static_cast<int64_t>(row.terminal)).bind_real(3, row.due_at);
  s.bind(4, row.kind).bind(5, row.id).bind(6, expected);
  if (s.step() != SQLITE_DONE) return db_error(db, "updating task");
  if (sqlite3_changes(db) > 0) return Status::ok();
  return stale(db, row.kind, row.id, what);
}

}  // namespace

Status update_task(sqlite3* db, const TaskRow& row, int64_t fence) {
  return update_task_where(db, row, "fence", fence, "a write under fence " + std::to_string(fence));
}

Status update_task_if_version(sqlite3* db, const TaskRow& row, int64_t version) {
  return update_task_where(db, row, "version", version, "a write of version " + std::to_string(version));
}

Status release_task_lease(sqlite3* db, const std::string& kind, const std::string& id, const std::string& owner) {
  Stmt s(db, "UPDATE tasks SET owner = '', lease_until = 0 WHERE kind = ? AND id = ? AND owner = ?");
  s.bind(1, kind).bind(2, id).bind(3, owner);
  if (s.step() != SQLITE_DONE) return db_error(db, "releasing a task's lease");
  return Status::ok();
}

// One trainerd writes the store, under the service's mutex: no other transaction can hold the row.
Result<bool> wake_task(sqlite3* db, const std::string& kind, const std::string& id) {
  Stmt s(db, "UPDATE tasks SET due_at = 0 WHERE kind = ? AND id = ? AND NOT terminal AND due_at > 0");
  s.bind(1, kind).bind(2, id);
  if (s.step() != SQLITE_DONE) return db_error(db, "waking a task");
  return true;
}

Result<uint64_t> change_count(sqlite3* db) {
  Stmt s(db, "SELECT value FROM counters WHERE name = 'changes'");
  if (s.step() != SQLITE_ROW) return db_error(db, "reading the change counter");
  return static_cast<uint64_t>(s.integer(0));
}

}  // namespace trainer::store::sqlite
