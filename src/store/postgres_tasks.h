// The task table and the change counter of the PostgreSQL store (internal to src/store): free
// functions on the store's connection, called by PostgresStore with its mutex held.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/postgres_support.h"
#include "store/store.h"

namespace trainer::store::postgres {

Status insert_task(Connection& db, const TaskRow& row);
Result<std::optional<TaskRow>> get_task(Connection& db, const std::string& kind, const std::string& id);
Result<std::vector<TaskRow>> due_tasks(Connection& db, const std::string& kind, double now, int64_t limit);
Result<std::optional<TaskLease>> acquire_task_lease(Connection& db, const std::string& kind,
                                                    const std::string& id, const std::string& owner,
                                                    double now, double seconds);
Status check_task_lease(Connection& db, const std::string& kind, const std::string& id,
                        const std::string& owner, int64_t fence);
Status lock_task(Connection& db, const std::string& kind, const std::string& id);
Status update_task(Connection& db, const TaskRow& row, int64_t fence);
Status update_task_if_version(Connection& db, const TaskRow& row, int64_t version);
Status release_task_lease(Connection& db, const std::string& kind, const std::string& id,
                          const std::string& owner);
Result<bool> wake_task(Connection& db, const std::string& kind, const std::string& id);
Result<uint64_t> change_count(Connection& db);

}  // namespace trainer::store::postgres
