// The SQLite Store's sessions and curations (declared in store/sqlite_store.h).
#include "store/sqlite_store.h"

namespace trainer::store::sqlite {

Result<bool> SqliteStore::insert_session(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO sessions(hash, created_seq, doc) VALUES (?, "
              "(SELECT COALESCE(MAX(created_seq), 0) + 1 FROM sessions), ?) ON CONFLICT(hash) DO NOTHING");
  s.bind(1, doc.at("hash").get<std::string>()).bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "inserting session");
  return sqlite3_changes(db_) > 0;
}

Result<std::optional<json>> SqliteStore::get_session(const std::string& hash) {
  return one("SELECT doc FROM sessions WHERE hash = ?", {hash});
}

Status SqliteStore::put_curation(const json& doc) {
  if (!doc.value("curationId", json()).is_string() || !doc.value("phase", json()).is_string()) {
    return invalid_argument("a curation needs string curationId and phase");
  }
  return put_phased_doc("curations", "curationId", doc, "curation");
}

Result<std::optional<json>> SqliteStore::get_curation(const std::string& id) {
  return one("SELECT doc FROM curations WHERE id = ?", {id});
}

Result<std::vector<json>> SqliteStore::list_curations() {
  return docs("SELECT doc FROM curations ORDER BY created_seq DESC", {});
}

Result<bool> SqliteStore::put_curation_score(const std::string& curation_id, const json& doc) {
  if (!doc.value("candidate", json()).is_number_integer()) {
    return invalid_argument("a curation score needs an integer candidate");
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO curation_scores(curation_id, candidate, doc) VALUES (?, ?, ?) "
              "ON CONFLICT(curation_id, candidate) DO NOTHING");
  s.bind(1, curation_id)
      .bind(2, doc["candidate"].get<int64_t>())
      .bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "writing curation score");
  return sqlite3_changes(db_) > 0;
}

Result<std::vector<json>> SqliteStore::list_curation_scores(const std::string& curation_id) {
  return docs("SELECT doc FROM curation_scores WHERE curation_id = ? ORDER BY candidate", {curation_id});
}

}  // namespace trainer::store::sqlite
