// What replicas share on the SQLite store (declared in store/sqlite_store.h). One trainerd uses a
// SQLite store, so the replicas table holds one live row (kept so that both stores answer alike)
// and the admission lock has nothing to serialise.
#include "store/sqlite_store.h"
#include "store/sqlite_support.h"

namespace trainer::store::sqlite {

Status SqliteStore::beat_replica(const ReplicaRow& row) {
  return locked([&]() -> Status {
    Stmt s(db_,
           "INSERT INTO replicas(name, instance, url, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?) "
           "ON CONFLICT(name) DO UPDATE SET instance = excluded.instance, url = excluded.url, "
           "heartbeat_at = excluded.heartbeat_at");
    s.bind(1, row.name)
        .bind(2, row.instance)
        .bind(3, row.url)
        .bind_real(4, row.started_at)
        .bind_real(5, row.heartbeat_at);
    if (s.step() != SQLITE_DONE) return db_error(db_, "writing a replica's heartbeat");
    return Status::ok();
  });
}

Result<std::vector<ReplicaRow>> SqliteStore::live_replicas(double since) {
  return locked([&]() -> Result<std::vector<ReplicaRow>> {
    Stmt s(db_,
           "SELECT name, instance, url, started_at, heartbeat_at FROM replicas WHERE heartbeat_at >= ? ORDER "
           "BY name");
    s.bind_real(1, since);
    std::vector<ReplicaRow> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW)
      out.push_back({s.text(0), s.text(1), s.text(2), s.real(3), s.real(4)});
    if (rc != SQLITE_DONE) return db_error(db_, "reading replicas");
    return out;
  });
}

Status SqliteStore::announce_change(const std::string&) {
  return Status::ok();
}

Result<std::unique_ptr<ChangeListener>> SqliteStore::listen_for_changes(const std::string&) {
  return std::unique_ptr<ChangeListener>();
}

Status SqliteStore::lock_admission() {
  return Status::ok();
}

Status SqliteStore::remove_replica(const std::string& name) {
  return locked([&]() -> Status {
    Stmt s(db_, "DELETE FROM replicas WHERE name = ?");
    s.bind(1, name);
    if (s.step() != SQLITE_DONE) return db_error(db_, "removing a replica");
    return Status::ok();
  });
}

}  // namespace trainer::store::sqlite
