#include <sqlite3.h>

#include "store/store.h"

namespace trainer::store {
namespace {

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override { sqlite3_close(db_); }
  int schema_version() const override { return 0; }

 private:
  sqlite3* db_;  // owned
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return unavailable("cannot open store " + path + ": " + msg);
  }
  return std::unique_ptr<Store>(new SqliteStore(db));
}

}  // namespace trainer::store
