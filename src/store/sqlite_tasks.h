// The task table and the change counter of the SQLite store (internal to src/store): free
// functions on the store's connection, called by SqliteStore with its mutex held.
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "store/store.h"

namespace trainer::store::sqlite {

Status insert_task(sqlite3* db, const TaskRow& row);
Result<std::optional<TaskRow>> get_task(sqlite3* db, const std::string& kind, const std::string& id);
Result<std::vector<TaskRow>> due_tasks(sqlite3* db, const std::string& kind, double now, int64_t limit);
Result<std::optional<TaskLease>> acquire_task_lease(sqlite3* db, const std::string& kind, const std::string& id,
                                                    const std::string& owner, double now, double seconds);
Status check_task_lease(sqlite3* db, const std::string& kind, const std::string& id, const std::string& owner,
                        int64_t fence);
Status update_task(sqlite3* db, const TaskRow& row, int64_t fence);
Status update_task_if_version(sqlite3* db, const TaskRow& row, int64_t version);
Status release_task_lease(sqlite3* db, const std::string& kind, const std::string& id, const std::string& owner);
Result<bool> wake_task(sqlite3* db, const std::string& kind, const std::string& id);
Result<uint64_t> change_count(sqlite3* db);

}  // namespace trainer::store::sqlite
