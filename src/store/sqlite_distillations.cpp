// The SQLite Store's distillations and their chunks (declared in store/sqlite_store.h).
#include "store/sqlite_store.h"

namespace trainer::store::sqlite {

Status SqliteStore::put_distillation(const json& doc) {
  if (!doc.value("distillationId", json()).is_string() || !doc.value("phase", json()).is_string()) {
    return invalid_argument("a distillation needs string distillationId and phase");
  }
  return put_phased_doc("distillations", "distillationId", doc, "distillation");
}

Result<std::optional<json>> SqliteStore::get_distillation(const std::string& id) {
  return one("SELECT doc FROM distillations WHERE id = ?", {id});
}

Result<std::vector<json>> SqliteStore::list_distillations() {
  return docs("SELECT doc FROM distillations ORDER BY created_seq DESC", {});
}

Result<bool> SqliteStore::put_distillation_chunk(const std::string& distillation_id, const json& doc) {
  if (!doc.value("chunk", json()).is_number_integer()) {
    return invalid_argument("a distillation chunk needs an integer chunk");
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_,
         "INSERT INTO distillation_chunks(distillation_id, chunk, doc) VALUES (?, ?, ?) "
         "ON CONFLICT(distillation_id, chunk) DO NOTHING");
  s.bind(1, distillation_id)
      .bind(2, doc["chunk"].get<int64_t>())
      .bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "writing distillation chunk");
  return sqlite3_changes(db_) > 0;
}

Result<std::vector<json>> SqliteStore::list_distillation_chunks(const std::string& distillation_id) {
  return docs("SELECT doc FROM distillation_chunks WHERE distillation_id = ? ORDER BY chunk",
              {distillation_id});
}

}  // namespace trainer::store::sqlite
