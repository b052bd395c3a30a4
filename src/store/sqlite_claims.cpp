// The SQLite Store's device claims and their holds (declared in store/sqlite_store.h): the claims
// of the GPU pools' devices, and the history of who held them (device-hours).
#include "store/sqlite_store.h"

#include <mutex>

namespace trainer::store::sqlite {

// ---- claims
Status SqliteStore::insert_claim(ClaimRow& c) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO claims(owner, kind, workload_id, pool, devices, state, since, device_ids) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, c.owner).bind(2, c.kind).bind(3, c.workload_id).bind(4, c.pool)
      .bind(5, static_cast<int64_t>(c.devices)).bind(6, c.state).bind(7, c.since).bind(8, ids_text(c.device_ids));
  int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("claim for " + c.owner + " exists");
  if (rc != SQLITE_DONE) return db_error(db_, "inserting claim");
  c.seq = sqlite3_last_insert_rowid(db_);
  return Status::ok();
}

Status SqliteStore::update_claim(const ClaimRow& c) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return write("UPDATE claims SET state = ?, since = ?, pool = ?, devices = ?, device_ids = ? WHERE owner = ?",
               {c.state, c.since, c.pool, std::to_string(c.devices), ids_text(c.device_ids), c.owner});
}

Status SqliteStore::delete_claim(const std::string& owner) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return write("DELETE FROM claims WHERE owner = ?", {owner});
}

namespace {

// A claim from the current row of a statement selecting a claim's columns in the claims table's
// order (owner, kind, workload_id, pool, devices, state, since, seq, device_ids).
ClaimRow claim_of(Stmt& s) {
  return ClaimRow{s.text(0), s.text(1),  s.text(2),   s.text(3), static_cast<int>(s.integer(4)),
                  s.text(5), s.text(6), s.integer(7), ids_of(s.text(8))};
}

// Every row of such a statement.
Result<std::vector<ClaimRow>> read_claims(sqlite3* db, Stmt& s) {
  std::vector<ClaimRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(claim_of(s));
  if (rc != SQLITE_DONE) return db_error(db, "listing claims");
  return out;
}

}  // namespace

Result<std::vector<ClaimRow>> SqliteStore::list_claims() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids FROM claims "
              "ORDER BY seq");
  return read_claims(db_, s);
}

Result<std::optional<ClaimRow>> SqliteStore::get_claim(const std::string& owner) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids FROM claims "
              "WHERE owner = ?");
  s.bind(1, owner);
  int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<ClaimRow>();
  if (rc != SQLITE_ROW) return db_error(db_, "reading a claim");
  return std::optional<ClaimRow>(claim_of(s));
}

Result<std::vector<ClaimRow>> SqliteStore::list_claims_in(const std::string& state,
                                                          const std::vector<std::string>& pools) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::string sql = "SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids FROM claims "
                    "WHERE state = ?";
  if (!pools.empty()) {
    sql += " AND pool IN (";
    for (size_t i = 0; i < pools.size(); ++i) sql += i ? ", ?" : "?";
    sql += ")";
  }
  sql += " ORDER BY seq";
  Stmt s(db_, sql.c_str());
  s.bind(1, state);
  for (size_t i = 0; i < pools.size(); ++i) s.bind(static_cast<int>(i) + 2, pools[i]);
  return read_claims(db_, s);
}

// ---- claim holds
Status SqliteStore::insert_claim_hold(ClaimHoldRow& h) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO claim_holds(owner, kind, workload_id, pool, devices, granted_at, released_at) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, h.owner).bind(2, h.kind).bind(3, h.workload_id).bind(4, h.pool)
      .bind(5, static_cast<int64_t>(h.devices)).bind_real(6, h.granted_at);
  if (h.released_at) s.bind_real(7, *h.released_at);
  else s.bind_null(7);
  if (s.step() != SQLITE_DONE) return db_error(db_, "inserting a claim hold");
  h.seq = sqlite3_last_insert_rowid(db_);
  return Status::ok();
}

Status SqliteStore::end_claim_holds(const std::string& owner, double released_at) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "UPDATE claim_holds SET released_at = ? WHERE owner = ? AND released_at IS NULL");
  s.bind_real(1, released_at).bind(2, owner);
  if (s.step() != SQLITE_DONE) return db_error(db_, "ending the claim holds of " + owner);
  return Status::ok();
}

Result<std::vector<ClaimHoldRow>> SqliteStore::list_claim_holds(double from, double to) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "SELECT seq, owner, kind, workload_id, pool, devices, granted_at, released_at FROM claim_holds "
              "WHERE granted_at < ? AND (released_at IS NULL OR released_at > ?) ORDER BY seq");
  s.bind_real(1, to).bind_real(2, from);
  std::vector<ClaimHoldRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) {
    ClaimHoldRow h{s.integer(0), s.text(1), s.text(2), s.text(3), s.text(4), static_cast<int>(s.integer(5)),
                   s.real(6), std::nullopt};
    if (!s.is_null(7)) h.released_at = s.real(7);
    out.push_back(std::move(h));
  }
  if (rc != SQLITE_DONE) return db_error(db_, "listing claim holds");
  return out;
}

Status SqliteStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);  // the same text as sqlite3_errmsg(), which db_error() reads with the code
    const std::string what(sql);
    return db_error(db_, what.size() > 40 ? what.substr(0, 40) + "..." : what);
  }
  return Status::ok();
}

Status SqliteStore::write(const char* sql, const std::vector<std::string>& args) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, sql);
  if (!s.ok()) return db_error(db_, "preparing statement");
  for (size_t i = 0; i < args.size(); ++i) s.bind(static_cast<int>(i + 1), args[i]);
  if (s.step() != SQLITE_DONE) return db_error(db_, "writing");
  return Status::ok();
}

}  // namespace trainer::store::sqlite
