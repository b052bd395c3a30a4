// Jobs' posted reports in the PostgreSQL store (declared in store/postgres_jobs.h). A repeated post
// changes nothing: items are inserted by (job, seq) with ON CONFLICT DO NOTHING.
#include "store/postgres_jobs.h"

#include <algorithm>

namespace trainer::store::postgres {

Result<JobAttemptRow> register_job_attempt(Connection& db, const JobAttemptRow& row) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows ins, db.run("INSERT INTO job_attempts(job_id, owner_kind, owner_id, token) "
                       "VALUES ($1, $2, $3, $4) ON CONFLICT (job_id) DO NOTHING",
                       {row.job_id, row.owner_kind, row.owner_id, row.token}, "registering a job attempt"));
  (void)ins;
  auto stored = get_job_attempt(db, row.job_id);
  if (!stored.is_ok()) return stored.status();
  if (!stored->has_value()) return internal_error("store: job attempt " + row.job_id + " vanished");
  return **stored;
}

Result<std::optional<JobAttemptRow>> get_job_attempt(Connection& db, const std::string& job_id) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r, db.run("SELECT job_id, owner_kind, owner_id, token FROM job_attempts WHERE job_id = $1",
                     {job_id}, "reading a job attempt"));
  if (r.empty()) return std::optional<JobAttemptRow>();
  return std::optional<JobAttemptRow>(JobAttemptRow{r.text(0, 0), r.text(0, 1), r.text(0, 2), r.text(0, 3)});
}

Result<int64_t> put_job_items(Connection& db, const char* table, const std::string& job_id,
                              const std::vector<JobItem>& items) {
  const std::string sql = std::string("INSERT INTO ") + table +
                          "(job_id, seq, doc) VALUES ($1, $2, $3) ON CONFLICT (job_id, seq) DO NOTHING";
  int64_t added = 0;
  for (const JobItem& item : items) {
    TRAINER_ASSIGN_OR_RETURN(Rows r, db.run(sql, Params().text(job_id).integer(item.seq).text(item.text),
                                            std::string("storing a job's ") + table));
    added += r.changed();
  }
  return added;
}

namespace {

std::vector<JobItem> items_of(const Rows& r) {
  std::vector<JobItem> out;
  out.reserve(static_cast<size_t>(r.size()));
  for (int i = 0; i < r.size(); ++i) out.push_back(JobItem{r.integer(i, 0), r.text(i, 1)});
  return out;
}

}  // namespace

Result<std::vector<JobItem>> job_items_after(Connection& db, const char* table, const std::string& job_id,
                                             int64_t after, int64_t limit) {
  TRAINER_ASSIGN_OR_RETURN(Rows r, db.run(std::string("SELECT seq, doc FROM ") + table +
                                              " WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                                          Params().text(job_id).integer(after).limit(limit),
                                          std::string("reading a job's ") + table));
  return items_of(r);
}

Result<std::vector<JobItem>> job_items_tail(Connection& db, const char* table, const std::string& job_id,
                                            int64_t n) {
  TRAINER_ASSIGN_OR_RETURN(
      Rows r,
      db.run(std::string("SELECT seq, doc FROM ") + table + " WHERE job_id = $1 ORDER BY seq DESC LIMIT $2",
             Params().text(job_id).limit(n), std::string("reading a job's ") + table));
  std::vector<JobItem> items = items_of(r);
  std::reverse(items.begin(), items.end());
  return items;
}

}  // namespace trainer::store::postgres
