// The Store: durable state of the service behind one interface (SQLite now, PostgreSQL later).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace trainer::store {

class Store {
 public:
  virtual ~Store() = default;
  // Schema version after migrations.
  virtual int schema_version() const = 0;
};

// Opens (creating and migrating as needed) the SQLite store at `path`.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

}  // namespace trainer::store
