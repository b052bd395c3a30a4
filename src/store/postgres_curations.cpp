// The PostgreSQL Store's sessions and curations (declared in store/postgres_store.h).
#include "store/postgres_store.h"

namespace trainer::store::postgres {
namespace {

std::string text_of(const json& doc) { return doc.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

Result<bool> PostgresStore::insert_session(const json& doc) {
  const Params p{doc.at("hash").get<std::string>(), text_of(doc)};
  return locked([&]() -> Result<bool> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO sessions(hash, doc) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING", p,
                    "inserting session"));
    return r.changed() > 0;
  });
}

Result<std::optional<json>> PostgresStore::get_session(const std::string& hash) {
  return one("SELECT doc FROM sessions WHERE hash = $1", {hash}, "reading session");
}

Status PostgresStore::put_curation(const json& doc) {
  if (!doc.value("curationId", json()).is_string() || !doc.value("phase", json()).is_string()) {
    return invalid_argument("a curation needs string curationId and phase");
  }
  return put_phased_doc("curations", "curationId", doc, "curation");
}

Result<std::optional<json>> PostgresStore::get_curation(const std::string& id) {
  return one("SELECT doc FROM curations WHERE id = $1", {id}, "reading curation");
}

Result<std::vector<json>> PostgresStore::list_curations() {
  return docs("SELECT doc FROM curations ORDER BY created_seq DESC", {}, "listing curations");
}

Result<bool> PostgresStore::put_curation_score(const std::string& curation_id, const json& doc) {
  if (!doc.value("candidate", json()).is_number_integer()) {
    return invalid_argument("a curation score needs an integer candidate");
  }
  const Params p{curation_id, std::to_string(doc["candidate"].get<int64_t>()), text_of(doc)};
  return locked([&]() -> Result<bool> {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("INSERT INTO curation_scores(curation_id, candidate, doc) "
                                         "VALUES ($1, $2::bigint, $3) ON CONFLICT (curation_id, candidate) DO NOTHING",
                                         p, "writing curation score"));
    return r.changed() > 0;
  });
}

Result<std::vector<json>> PostgresStore::list_curation_scores(const std::string& curation_id) {
  return docs("SELECT doc FROM curation_scores WHERE curation_id = $1 ORDER BY candidate", Params{curation_id},
              "listing curation scores");
}

}  // namespace trainer::store::postgres
