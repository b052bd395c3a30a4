// Jobs' posted reports in the SQLite store (internal to src/store): the attempts' identities and
// the events and log lines they posted. Free functions on the store's connection, called by
// SqliteStore with its mutex held.
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "store/store.h"

namespace trainer::store::sqlite {

Result<JobAttemptRow> register_job_attempt(sqlite3* db, const JobAttemptRow& row);
Result<std::optional<JobAttemptRow>> get_job_attempt(sqlite3* db, const std::string& job_id);
// `table` is "job_events" or "job_logs": the items whose seq is new are inserted; returns how many.
Result<int64_t> put_job_items(sqlite3* db, const char* table, const std::string& job_id,
                              const std::vector<JobItem>& items);
Result<std::vector<JobItem>> job_items_after(sqlite3* db, const char* table, const std::string& job_id, int64_t after,
                                             int64_t limit);
Result<std::vector<JobItem>> job_items_tail(sqlite3* db, const char* table, const std::string& job_id, int64_t n);

}  // namespace trainer::store::sqlite
