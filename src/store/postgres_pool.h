// The PostgreSQL store's connections (internal to src/store): a pool of at most `size` libpq
// connections to one database, shared by the store's threads. A thread holds at most one
// connection of a pool at a time, through a Lease; a Lease made while the thread already holds one
// (a store method called inside a transaction's body) is that same connection, so a transaction's
// statements all run on the connection that began it.
//
// Connections are opened on demand (the first is the one the store was opened with) and kept. One
// found lost when leased is connected again (PQreset); one that cannot be is handed back as it is
// and the lease fails with unavailable, so the next lease tries again: a lost connection is never
// fatal to the pool. A thread that finds every connection in use waits for one, at most the
// session's statement_timeout, then fails with unavailable naming the pool.
//
// Thread safety: every member is safe to call from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/postgres_support.h"

namespace trainer::store::postgres {

class ConnectionPool {
 public:
  ConnectionPool(std::unique_ptr<Connection> first, std::string url, const PostgresSessionLimits& limits,
                 int size);
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  int size() const { return size_; }
  // "PostgreSQL at HOST:PORT/DATABASE" (never the password).
  const std::string& server() const { return server_; }

  // The calling thread's connection of `pool` for the Lease's lifetime: the one it already holds,
  // else a free one (waiting for one while all are in use). Check ok() before conn().
  class Lease {
   public:
    explicit Lease(ConnectionPool& pool);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    bool ok() const { return status_.is_ok(); }
    const Status& status() const { return status_; }
    Connection& conn() { return *held_->conn; }
    // How deep the thread is in transactions on this connection (0: none open); the store's
    // transaction() counts its nesting here.
    int& transaction_depth() { return held_->depth; }

   private:
    friend class ConnectionPool;
    struct Held {
      const ConnectionPool* pool = nullptr;
      std::unique_ptr<Connection> conn;
      int depth = 0;
    };
    ConnectionPool& pool_;
    Held own_;               // the hold, when this Lease is the thread's outermost on the pool
    Held* held_ = nullptr;   // the thread's hold (&own_ when outermost)
    bool outermost_ = false;
    Status status_;
  };

  // The connection the calling thread holds of this pool (inside a Lease), else null.
  Connection* held_by_this_thread() const;


 private:
  // A connection for an outermost Lease: a free one, a new one while fewer than size_ are open,
  // else the first one handed back within the wait.
  Result<std::unique_ptr<Connection>> take();
  void give_back(std::unique_ptr<Connection> conn);

  const std::string url_;
  const PostgresSessionLimits limits_;
  const int size_;
  const std::string server_;

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
  int open_ = 0;                                   // connections made, idle or leased; guarded by mu_
};

}  // namespace trainer::store::postgres
