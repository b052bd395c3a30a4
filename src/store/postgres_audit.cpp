// The PostgreSQL Store's audit log (declared in store/postgres_store.h).
#include "store/postgres_store.h"

namespace trainer::store::postgres {

Status PostgresStore::append_audit(double at, const json& doc) {
  Params p;
  p.real(at)
      .text(doc.value("tokenId", std::string()))
      .text(doc.value("tokenName", std::string()))
      .text(doc.value("workload", std::string()))
      .text(doc.dump(-1, ' ', false, json::error_handler_t::replace));
  return locked([&] {
    return write(
        "INSERT INTO audit_log(at, token_id, token_name, workload_id, doc) VALUES ($1, $2, $3, $4, $5)", p,
        "writing audit entry");
  });
}

Result<std::vector<json>> PostgresStore::list_audit(const AuditQuery& query) {
  Params p;
  p.real(query.since).text(query.token).text(query.workload).limit(query.limit);
  return docs(
      "SELECT doc FROM audit_log WHERE at >= $1 AND ($2 = '' OR token_id = $2 OR token_name = $2) "
      "AND ($3 = '' OR workload_id = $3) ORDER BY seq DESC LIMIT $4",
      p, "listing the audit log");
}

}  // namespace trainer::store::postgres
