// The task table and the change counter of the PostgreSQL store (declared in
// store/postgres_tasks.h).
//
// Correct under several processes on one database by row locks, not serialisable transactions:
// - Every write is one conditional UPDATE (the condition, a lease that ran out, a fence or a
//   version, and the change are one statement). At READ COMMITTED, an UPDATE that finds its row
//   locked by another transaction waits for it, then evaluates its condition again on the row as
//   that transaction left it: of two replicas taking a lease at once, the second finds the first's
//   owner and fence and changes nothing.
// - check_task_lease() reads the row with SELECT ... FOR UPDATE: the row stays locked to the end
//   of the transaction it guards, so no other replica can take the lease over (its UPDATE waits)
//   between the check and the commit of the writes the check allowed.
// Serialisable transactions would give the same guarantees by aborting one of two conflicting
// transactions, which every caller would then have to retry; the locks make the second one wait
// instead, and keep every transaction's outcome what the caller saw.
#include "store/postgres_tasks.h"

namespace trainer::store::postgres {

namespace {

constexpr const char* kColumns = "kind, id, phase, terminal, due_at, owner, fence, lease_until, version";

TaskRow row_of(const Rows& r, int i) {
  TaskRow t;
  t.kind = r.text(i, 0);
  t.id = r.text(i, 1);
  t.phase = r.text(i, 2);
  t.terminal = r.boolean(i, 3);
  t.due_at = r.real(i, 4);
  t.owner = r.text(i, 5);
  t.fence = r.integer(i, 6);
  t.lease_until = r.real(i, 7);
  t.version = r.integer(i, 8);
  return t;
}

std::string task_name(const std::string& kind, const std::string& id) {
  return kind + " " + id;
}

// Why a conditional write to an existing task changed nothing, for a stale writer.
Status stale(Connection& db, const std::string& kind, const std::string& id, const std::string& what) {
  auto now = get_task(db, kind, id);
  if (!now.is_ok()) return now.status();
  if (!now->has_value()) return not_found("task " + task_name(kind, id));
  const TaskRow& r = **now;
  return failed_precondition("task " + task_name(kind, id) + ": " + what +
                             " is stale (the task is now under fence " + std::to_string(r.fence) +
                             (r.owner.empty() ? std::string(", unowned") : ", owner " + r.owner) +
                             ", version " + std::to_string(r.version) + "); the write was refused");
}

}  // namespace

Status insert_task(Connection& db, const TaskRow& row) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r,
      db.run("INSERT INTO tasks(kind, id, phase, terminal, due_at) VALUES ($1, $2, $3, $4, $5) "
             "ON CONFLICT (kind, id) DO NOTHING",
             Params().text(row.kind).text(row.id).text(row.phase).boolean(row.terminal).real(row.due_at),
             "inserting task"));
  if (r.changed() == 0) return already_exists("task " + task_name(row.kind, row.id) + " already exists");
  return Status::ok();
}

Result<std::optional<TaskRow>> get_task(Connection& db, const std::string& kind, const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r, db.run(std::string("SELECT ") + kColumns + " FROM tasks WHERE kind = $1 AND id = $2",
                     {kind, id}, "reading task"));
  if (r.empty()) return std::optional<TaskRow>();
  return std::optional<TaskRow>(row_of(r, 0));
}

Result<std::vector<TaskRow>> due_tasks(Connection& db, const std::string& kind, double now, int64_t limit) {
  TRAINER_ASSIGN_OR_RETURN(Rows r, db.run(std::string("SELECT ") + kColumns +
                                              " FROM tasks WHERE kind = $1 AND NOT terminal AND due_at <= $2 "
                                              "ORDER BY due_at, seq LIMIT $3",
                                          Params().text(kind).real(now).limit(limit), "listing due tasks"));
  std::vector<TaskRow> out;
  out.reserve(static_cast<size_t>(r.size()));
  for (int i = 0; i < r.size(); ++i) out.push_back(row_of(r, i));
  return out;
}

Result<std::optional<TaskLease>> acquire_task_lease(Connection& db, const std::string& kind,
                                                    const std::string& id, const std::string& owner,
                                                    double now, double seconds) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r,
      db.run(
          "UPDATE tasks SET fence = CASE WHEN owner = $3 THEN fence ELSE fence + 1 END, owner = $3, "
          "lease_until = $4 WHERE kind = $1 AND id = $2 AND (owner = '' OR owner = $3 OR lease_until < $5) "
          "RETURNING fence, lease_until",
          Params().text(kind).text(id).text(owner).real(now + seconds).real(now),
          "acquiring a task's lease"));
  if (!r.empty()) return std::optional<TaskLease>(TaskLease{owner, r.integer(0, 0), r.real(0, 1)});
  auto row = get_task(db, kind, id);
  if (!row.is_ok()) return row.status();
  if (!row->has_value()) return not_found("task " + task_name(kind, id));
  return std::optional<TaskLease>();
}

Status check_task_lease(Connection& db, const std::string& kind, const std::string& id,
                        const std::string& owner, int64_t fence) {
  // FOR UPDATE: the row stays locked until the enclosing transaction ends (see the top).
  TRAINER_ASSIGN_OR_RETURN(
      Rows r, db.run("SELECT 1 FROM tasks WHERE kind = $1 AND id = $2 AND owner = $3 AND fence = $4 "
                     "FOR UPDATE",
                     Params().text(kind).text(id).text(owner).integer(fence), "checking a task's lease"));
  if (!r.empty()) return Status::ok();
  return stale(db, kind, id, "the lease of " + owner + " under fence " + std::to_string(fence));
}

Status lock_task(Connection& db, const std::string& kind, const std::string& id) {
  // FOR UPDATE: the row stays locked until the enclosing transaction ends, as check_task_lease's.
  return db.run("SELECT 1 FROM tasks WHERE kind = $1 AND id = $2 FOR UPDATE", Params().text(kind).text(id),
                "locking a task").status();
}

namespace {

// Writes the task's phase, terminal flag and due time when its `column` still holds `expected`.
Status update_task_where(Connection& db, const TaskRow& row, const char* column, int64_t expected,
                         const std::string& what) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r,
      db.run(std::string("UPDATE tasks SET phase = $1, terminal = $2, due_at = $3, version = version + 1 "
                         "WHERE kind = $4 AND id = $5 AND ") +
                 column + " = $6",
             Params()
                 .text(row.phase)
                 .boolean(row.terminal)
                 .real(row.due_at)
                 .text(row.kind)
                 .text(row.id)
                 .integer(expected),
             "updating task"));
  if (r.changed() > 0) return Status::ok();
  return stale(db, row.kind, row.id, what);
}

}  // namespace

Status update_task(Connection& db, const TaskRow& row, int64_t fence) {
  return update_task_where(db, row, "fence", fence, "a write under fence " + std::to_string(fence));
}

Status update_task_if_version(Connection& db, const TaskRow& row, int64_t version) {
  return update_task_where(db, row, "version", version, "a write of version " + std::to_string(version));
}

Status release_task_lease(Connection& db, const std::string& kind, const std::string& id,
                          const std::string& owner) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r,
      db.run("UPDATE tasks SET owner = '', lease_until = 0 WHERE kind = $1 AND id = $2 AND owner = $3",
             {kind, id, owner}, "releasing a task's lease"));
  (void)r;
  return Status::ok();
}

// SKIP LOCKED: admission wakes the tasks whose claims it grants while it holds the admission lock,
// and a step holds its task's row while it may wait for that lock; waiting here for the row could
// deadlock the two. A row skipped is reported (false) and woken again after the caller's commit.
Result<bool> wake_task(Connection& db, const std::string& kind, const std::string& id) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r, db.run("UPDATE tasks SET due_at = 0 WHERE (kind, id) IN (SELECT kind, id FROM tasks WHERE kind = $1 "
                     "AND id = $2 AND NOT terminal AND due_at > 0 FOR UPDATE SKIP LOCKED)",
                     {kind, id}, "waking a task"));
  if (r.changed() > 0) return true;
  // Nothing woken: nothing to wake (absent, terminal, due already), or its row was locked.
  TRAINER_ASSIGN_OR_RETURN(
      Rows left, db.run("SELECT 1 FROM tasks WHERE kind = $1 AND id = $2 AND NOT terminal AND due_at > 0",
                        {kind, id}, "waking a task"));
  return left.empty();
}

Result<uint64_t> change_count(Connection& db) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r, db.run("SELECT value FROM counters WHERE name = 'changes'", {}, "reading the change counter"));
  if (r.empty()) return internal_error("store: reading the change counter: the counter's row is missing");
  return static_cast<uint64_t>(r.integer(0, 0));
}

}  // namespace trainer::store::postgres
