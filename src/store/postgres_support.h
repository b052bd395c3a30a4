// PostgreSQL plumbing of the store (internal to src/store): the schema migrations, one libpq
// connection that runs parameterised statements and turns failures into a Status, and the
// parameters and rows of a statement.
//
// Values always travel as parameters (PQexecParams, text format); SQL text is built only from
// constant fragments and placeholders ($1, $2, ...).
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace trainer::store::postgres {

// Schema migrations, applied in order; index + 1 is the version recorded in schema_migrations.
// The same versions as SQLite's (store/sqlite_support.cpp), in PostgreSQL's types.
std::span<const char* const> migrations();

// The values of a statement's placeholders, in order ($1 first), in libpq's text format.
class Params {
 public:
  Params() = default;
  Params(std::initializer_list<std::string> texts);
  Params& text(std::string v);
  Params& integer(int64_t v);
  Params& real(double v);  // shortest text that reads back as the same double
  Params& boolean(bool v);
  Params& null();
  // A limit: NULL (LIMIT ALL) when negative, as the Store's contract says.
  Params& limit(int64_t v);
  // An offset: below 0 counts as 0.
  Params& offset(int64_t v);
  size_t size() const { return values_.size(); }
  // Adds `values` and returns " AND column IN ($N, ...)" numbering them after the ones already
  // here; "" when `values` is empty.
  std::string in_list(const char* column, const std::vector<std::string>& values);

 private:
  friend class Connection;
  std::vector<std::optional<std::string>> values_;
};

// The rows a statement returned (or the count it changed). Owns libpq's result.
class Rows {
 public:
  explicit Rows(PGresult* r) : r_(r, &PQclear) {}
  int size() const { return PQntuples(r_.get()); }
  bool empty() const { return size() == 0; }
  std::string text(int row, int col) const;
  int64_t integer(int row, int col) const;
  double real(int row, int col) const;
  bool boolean(int row, int col) const;
  bool is_null(int row, int col) const;
  // Rows an INSERT, UPDATE or DELETE changed.
  int64_t changed() const;

 private:
  friend class Connection;
  std::unique_ptr<PGresult, void (*)(PGresult*)> r_;
};

// One connection to the server. Not thread-safe: its owner serialises calls.
class Connection {
 public:
  // Connects to `url` (a libpq URI). invalid_argument when the URL does not parse (without
  // repeating it: it may hold a password), unavailable naming the server when it does not answer.
  // `limits` are set on the session (libpq's keepalive parameters and the server's `options`).
  static Result<std::unique_ptr<Connection>> open(const std::string& url, const PostgresSessionLimits& limits = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // "PostgreSQL at HOST:PORT/DATABASE" (never the password).
  const std::string& server() const { return server_; }

  // Runs one statement with `params`; its rows, or its failure as a Status ("store: WHAT: ...").
  Result<Rows> run(const char* sql, const Params& params, const std::string& what);
  Result<Rows> run(const std::string& sql, const Params& params, const std::string& what) {
    return run(sql.c_str(), params, what);
  }
  // Runs `sql` (one statement or several, no parameters) and checks it succeeded.
  Status exec(const char* sql, const std::string& what);

  // When the connection was lost, connects again (a transaction that was open is gone: call this
  // only between transactions). ok when the connection works.
  Status reconnect_if_lost();
  // Connects again, whatever the state (call it only between transactions).
  Status reconnect();
  // Whether a connection between transactions, that does not LISTEN, is lost: libpq knows it is,
  // or the server sent something unasked (the message it sends as it ends the session: a
  // pg_terminate_backend, a restart). Does not block.
  bool lost_while_idle() const;
  // Whether a transaction is open on the connection (failed or not).
  bool in_transaction() const;
  // The payloads of the notifications (LISTEN) that arrived within `timeout`; empty when none did.
  // Returns at the first that arrives. unavailable when the connection is lost.
  Result<std::vector<std::string>> wait_notifications(std::chrono::milliseconds timeout);
  // Whether the server has marked the open transaction failed (every later statement of it fails,
  // and COMMIT would roll it back).
  bool transaction_failed() const;

 private:
  Connection(PGconn* conn, std::string server) : conn_(conn), server_(std::move(server)) {}
  // The Status of a failed statement (`r` may be null when libpq could not send it).
  Status error(const PGresult* r, const std::string& what) const;

  PGconn* conn_;              // owned
  const std::string server_;  // server() text
};

}  // namespace trainer::store::postgres
