// The SQLite Store's audit log (declared in store/sqlite_store.h).
#include <cstdio>

#include "store/sqlite_store.h"

namespace trainer::store::sqlite {
namespace {

// `v` as text that reads back as the same double (the store's arguments are texts).
std::string real_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

Status SqliteStore::append_audit(double at, const json& doc) {
  return write(
      "INSERT INTO audit_log(at, token_id, token_name, workload_id, doc) VALUES (CAST(?1 AS REAL), ?2, ?3, "
      "?4, ?5)",
      {real_text(at), doc.value("tokenId", std::string()), doc.value("tokenName", std::string()),
       doc.value("workload", std::string()), doc.dump(-1, ' ', false, json::error_handler_t::replace)});
}

Result<std::vector<json>> SqliteStore::list_audit(const AuditQuery& query) {
  return docs(
      "SELECT doc FROM audit_log WHERE at >= CAST(?1 AS REAL) AND (?2 = '' OR token_id = ?2 OR token_name = "
      "?2) "
      "AND (?3 = '' OR workload_id = ?3) ORDER BY seq DESC LIMIT CAST(?4 AS INTEGER)",
      {real_text(query.since), query.token, query.workload, std::to_string(query.limit)});
}

}  // namespace trainer::store::sqlite
