// The PostgreSQL Store's distillations and their chunks (declared in store/postgres_store.h).
#include "store/postgres_store.h"

namespace trainer::store::postgres {

Status PostgresStore::put_distillation(const json& doc) {
  if (!doc.value("distillationId", json()).is_string() || !doc.value("phase", json()).is_string()) {
    return invalid_argument("a distillation needs string distillationId and phase");
  }
  return put_phased_doc("distillations", "distillationId", doc, "distillation");
}

Result<std::optional<json>> PostgresStore::get_distillation(const std::string& id) {
  return one("SELECT doc FROM distillations WHERE id = $1", {id}, "reading distillation");
}

Result<std::vector<json>> PostgresStore::list_distillations() {
  return docs("SELECT doc FROM distillations ORDER BY created_seq DESC", {}, "listing distillations");
}

Result<bool> PostgresStore::put_distillation_chunk(const std::string& distillation_id, const json& doc) {
  if (!doc.value("chunk", json()).is_number_integer()) {
    return invalid_argument("a distillation chunk needs an integer chunk");
  }
  const Params p{distillation_id, std::to_string(doc["chunk"].get<int64_t>()),
                 doc.dump(-1, ' ', false, json::error_handler_t::replace)};
  return locked([&]() -> Result<bool> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO distillation_chunks(distillation_id, chunk, doc) "
                    "VALUES ($1, $2::bigint, $3) ON CONFLICT (distillation_id, chunk) DO NOTHING",
                    p, "writing distillation chunk"));
    return r.changed() > 0;
  });
}

Result<std::vector<json>> PostgresStore::list_distillation_chunks(const std::string& distillation_id) {
  return docs("SELECT doc FROM distillation_chunks WHERE distillation_id = $1 ORDER BY chunk",
              Params{distillation_id}, "listing distillation chunks");
}

}  // namespace trainer::store::postgres
