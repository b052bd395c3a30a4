// The PostgreSQL store's pool of connections (declared in store/postgres_pool.h).
#include "store/postgres_pool.h"

#include <algorithm>

namespace trainer::store::postgres {
namespace {

// The holds of the calling thread, one per pool it holds a connection of (a thread rarely holds
// more than one: two stores in one process, as the tests open).
thread_local std::vector<ConnectionPool::Lease*> t_outermost;

}  // namespace

ConnectionPool::ConnectionPool(std::unique_ptr<Connection> first, std::string url,
                               const PostgresSessionLimits& limits, int size)
    : url_(std::move(url)), limits_(limits), size_(std::max(1, size)), server_(first->server()) {
  idle_.push_back(std::move(first));
  open_ = 1;
}

Connection* ConnectionPool::held_by_this_thread() const {
  for (Lease* l : t_outermost) {
    if (l->own_.pool == this) return l->own_.conn.get();
  }
  return nullptr;
}

Result<std::unique_ptr<Connection>> ConnectionPool::take() {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, limits_.statement_timeout_ms));
  std::unique_lock<std::mutex> lock(mu_);
  while (idle_.empty() && open_ >= size_) {
    if (freed_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() && open_ >= size_) {
      return unavailable("store: all " + std::to_string(size_) + " connections to " + server_ + " (store.poolSize) " +
                         "stayed in use for " + std::to_string(limits_.statement_timeout_ms) + " ms; try again");
    }
  }
  if (!idle_.empty()) {
    std::unique_ptr<Connection> conn = std::move(idle_.back());
    idle_.pop_back();
    return conn;
  }
  ++open_;  // counted before connecting, so that no more than size_ are ever made
  lock.unlock();
  auto conn = Connection::open(url_, limits_);
  if (!conn.is_ok()) {
    lock.lock();
    --open_;
    lock.unlock();
    freed_.notify_one();
    return conn.status().with_context("store: opening a connection of the pool");
  }
  return std::move(*conn);
}

void ConnectionPool::give_back(std::unique_ptr<Connection> conn) {
  // A transaction is always ended by the store before its connection goes back; one that is not
  // (an exception between BEGIN and the end) is rolled back, never handed on half-done.
  if (conn->in_transaction()) (void)conn->exec("ROLLBACK", "ROLLBACK");
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(conn));
  }
  freed_.notify_one();
}

ConnectionPool::Lease::Lease(ConnectionPool& pool) : pool_(pool) {
  for (Lease* l : t_outermost) {
    if (l->own_.pool == &pool) {
      held_ = &l->own_;
      return;
    }
  }
  auto conn = pool.take();
  if (!conn.is_ok()) {
    status_ = conn.status();
    return;
  }
  // Leased only between transactions, so connecting again loses nothing.
  if ((*conn)->lost_while_idle()) {
    Status st = (*conn)->reconnect();
    if (!st.is_ok()) {
      pool.give_back(std::move(*conn));  // tried again by a later lease
      status_ = st;
      return;
    }
  }
  own_.pool = &pool;
  own_.conn = std::move(*conn);
  held_ = &own_;
  outermost_ = true;
  t_outermost.push_back(this);
}

ConnectionPool::Lease::~Lease() {
  if (!outermost_) return;
  t_outermost.erase(std::find(t_outermost.begin(), t_outermost.end(), this));
  pool_.give_back(std::move(own_.conn));
}

}  // namespace trainer::store::postgres
