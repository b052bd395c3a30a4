// Jobs' posted reports in the SQLite store (declared in store/sqlite_jobs.h). A repeated post
// changes nothing: items are inserted by (job, seq) with INSERT OR IGNORE.
#include "store/sqlite_jobs.h"

#include <algorithm>

#include "store/sqlite_support.h"

namespace trainer::store::sqlite {

Result<JobAttemptRow> register_job_attempt(sqlite3* db, const JobAttemptRow& row) {
  Stmt s(db, "INSERT OR IGNORE INTO job_attempts(job_id, owner_kind, owner_id, token) VALUES (?, ?, ?, ?)");
  s.bind(1, row.job_id).bind(2, row.owner_kind).bind(3, row.owner_id).bind(4, row.token);
  if (s.step() != SQLITE_DONE) return db_error(db, "registering a job attempt");
  auto stored = get_job_attempt(db, row.job_id);
  if (!stored.is_ok()) return stored.status();
  if (!stored->has_value()) return internal_error("store: job attempt " + row.job_id + " vanished");
  return **stored;
}

Result<std::optional<JobAttemptRow>> get_job_attempt(sqlite3* db, const std::string& job_id) {
  Stmt s(db, "SELECT job_id, owner_kind, owner_id, token FROM job_attempts WHERE job_id = ?");
  s.bind(1, job_id);
  const int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<JobAttemptRow>();
  if (rc != SQLITE_ROW) return db_error(db, "reading a job attempt");
  return std::optional<JobAttemptRow>(JobAttemptRow{s.text(0), s.text(1), s.text(2), s.text(3)});
}

Result<int64_t> put_job_items(sqlite3* db, const char* table, const std::string& job_id,
                              const std::vector<JobItem>& items) {
  const std::string sql = std::string("INSERT OR IGNORE INTO ") + table + "(job_id, seq, doc) VALUES (?, ?, ?)";
  int64_t added = 0;
  for (const JobItem& item : items) {
    Stmt s(db, sql.c_str());
    s.bind(1, job_id).bind(2, item.seq).bind(3, item.text);
    if (s.step() != SQLITE_DONE) return db_error(db, std::string("storing a job's ") + table);
    added += sqlite3_changes(db);
  }
  return added;
}

namespace {

Result<std::vector<JobItem>> items_of(sqlite3* db, Stmt& s, const char* table) {
  std::vector<JobItem> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(JobItem{s.integer(0), s.text(1)});
  if (rc != SQLITE_DONE) return db_error(db, std::string("reading a job's ") + table);
  return out;
}

}  // namespace

Result<std::vector<JobItem>> job_items_after(sqlite3* db, const char* table, const std::string& job_id, int64_t after,
                                             int64_t limit) {
  Stmt s(db, (std::string("SELECT seq, doc FROM ") + table + " WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?").c_str());
  s.bind(1, job_id).bind(2, after).bind(3, limit);
  return items_of(db, s, table);
}

Result<std::vector<JobItem>> job_items_tail(sqlite3* db, const char* table, const std::string& job_id, int64_t n) {
  Stmt s(db, (std::string("SELECT seq, doc FROM ") + table + " WHERE job_id = ? ORDER BY seq DESC LIMIT ?").c_str());
  s.bind(1, job_id).bind(2, n);
  auto items = items_of(db, s, table);
  if (items.is_ok()) std::reverse(items->begin(), items->end());
  return items;
}

}  // namespace trainer::store::sqlite
