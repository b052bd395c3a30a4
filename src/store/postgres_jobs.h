// Jobs' posted reports in the PostgreSQL store (internal to src/store): the attempts' identities
// and the events and log lines they posted. Free functions on the store's connection, called by
// PostgresStore with its mutex held.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/postgres_support.h"
#include "store/store.h"

namespace trainer::store::postgres {

Result<JobAttemptRow> register_job_attempt(Connection& db, const JobAttemptRow& row);
Result<std::optional<JobAttemptRow>> get_job_attempt(Connection& db, const std::string& job_id);
// `table` is "job_events" or "job_logs": the items whose seq is new are inserted; returns how many.
Result<int64_t> put_job_items(Connection& db, const char* table, const std::string& job_id,
                              const std::vector<JobItem>& items);
Result<std::vector<JobItem>> job_items_after(Connection& db, const char* table, const std::string& job_id,
                                             int64_t after, int64_t limit);
Result<std::vector<JobItem>> job_items_tail(Connection& db, const char* table, const std::string& job_id,
                                            int64_t n);

}  // namespace trainer::store::postgres
