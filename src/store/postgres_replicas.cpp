// What replicas share on the PostgreSQL store (declared in store/postgres_store.h): the replicas
// table, where every trainerd on the database beats and `trainer info` finds the ones whose beat is
// recent; and the admission lock.
#include "store/postgres_store.h"

namespace trainer::store::postgres {
namespace {

// The advisory lock (bigint key space) that serialises admission across replicas: "trainadm".
constexpr int64_t kAdmissionLock = 0x747261696e61646d;
// The channel of change notices; a notice's payload is its origin's replica name.
constexpr const char* kChangesChannel = "trainer_changes";

// Opens a connection and listens on the changes channel.
Result<std::unique_ptr<Connection>> listening(const std::string& url, const PostgresSessionLimits& limits) {
  TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::open(url, limits));
  TRAINER_RETURN_IF_ERROR(conn->exec("LISTEN trainer_changes", "listening for changes"));
  return conn;
}

// A connection of its own that LISTENs; lost, it connects and listens again on the next wait(),
// which then answers true (a notice may have come while it was away).
class PostgresChangeListener final : public ChangeListener {
 public:
  PostgresChangeListener(std::string url, const PostgresSessionLimits& limits, std::string origin,
                         std::unique_ptr<Connection> conn)
      : url_(std::move(url)), limits_(limits), origin_(std::move(origin)), conn_(std::move(conn)) {}

  Result<bool> wait(std::chrono::milliseconds timeout) override {
    if (!conn_) {
      TRAINER_ASSIGN_OR_RETURN(conn_, listening(url_, limits_));
      return true;
    }
    auto payloads = conn_->wait_notifications(timeout);
    if (!payloads.is_ok()) {
      conn_.reset();
      return payloads.status();
    }
    for (const std::string& origin : *payloads) {
      if (origin != origin_) return true;
    }
    return false;
  }

 private:
  const std::string url_;
  const PostgresSessionLimits limits_;
  const std::string origin_;
  std::unique_ptr<Connection> conn_;  // null while lost
};

}  // namespace

Status PostgresStore::beat_replica(const ReplicaRow& row) {
  return locked([&] {
    return write(
        "INSERT INTO replicas(name, instance, url, started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (name) DO UPDATE SET instance = EXCLUDED.instance, url = EXCLUDED.url, "
        "heartbeat_at = EXCLUDED.heartbeat_at",
        Params().text(row.name).text(row.instance).text(row.url).real(row.started_at).real(row.heartbeat_at),
        "writing a replica's heartbeat");
  });
}

Result<std::vector<ReplicaRow>> PostgresStore::live_replicas(double since) {
  return locked([&]() -> Result<std::vector<ReplicaRow>> {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("SELECT name, instance, url, started_at, heartbeat_at FROM replicas "
                                         "WHERE heartbeat_at >= $1 ORDER BY name",
                                         Params().real(since), "reading replicas"));
    std::vector<ReplicaRow> out;
    for (int i = 0; i < r.size(); ++i) {
      out.push_back({r.text(i, 0), r.text(i, 1), r.text(i, 2), r.real(i, 3), r.real(i, 4)});
    }
    return out;
  });
}

Status PostgresStore::announce_change(const std::string& origin) {
  return locked([&] {
    return write("SELECT pg_notify($1, $2)", {kChangesChannel, origin}, "announcing a change");
  });
}

Result<std::unique_ptr<ChangeListener>> PostgresStore::listen_for_changes(const std::string& origin) {
  TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, listening(url_, limits_));
  return std::unique_ptr<ChangeListener>(
      std::make_unique<PostgresChangeListener>(url_, limits_, origin, std::move(conn)));
}

Status PostgresStore::lock_admission() {
  ConnectionPool::Lease lease(pool_);
  if (!lease.ok()) return lease.status();
  if (lease.transaction_depth() == 0) {
    return failed_precondition("store: the admission lock is taken inside a transaction");
  }
  return locked([&]() -> Status {
    // The change counter's row first: every writer of runs and claims locks it (its trigger), so an
    // admission that took the advisory lock first and then wrote a grant could meet, in a deadlock,
    // a step that wrote its run and then waits for admission (docs/durability.md, "Lock order").
    TRAINER_RETURN_IF_ERROR(write("SELECT value FROM counters WHERE name = 'changes' FOR UPDATE", {},
                                  "locking the change counter for admission"));
    return write("SELECT pg_advisory_xact_lock($1)", Params().integer(kAdmissionLock),
                 "waiting for the admission lock");
  });
}

Status PostgresStore::remove_replica(const std::string& name) {
  return locked([&] { return write("DELETE FROM replicas WHERE name = $1", {name}, "removing a replica"); });
}

}  // namespace trainer::store::postgres
