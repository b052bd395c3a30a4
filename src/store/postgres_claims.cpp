// The PostgreSQL Store's device claims and their holds (declared in store/postgres_store.h): the
// claims of the GPU pools' devices, and the history of who held them (device-hours).
#include "store/postgres_store.h"

#include "store/device_ids.h"

namespace trainer::store::postgres {

// ---- claims
Status PostgresStore::insert_claim(ClaimRow& c) {
  const Params p = Params()
                       .text(c.owner)
                       .text(c.kind)
                       .text(c.workload_id)
                       .text(c.pool)
                       .integer(c.devices)
                       .text(c.state)
                       .text(c.since)
                       .text(ids_text(c.device_ids));
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO claims(owner, kind, workload_id, pool, devices, state, since, device_ids) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (owner) DO NOTHING RETURNING seq",
                    p, "inserting claim"));
    if (r.empty()) return already_exists("claim for " + c.owner + " exists");
    c.seq = r.integer(0, 0);
    return Status::ok();
  });
}

Status PostgresStore::update_claim(const ClaimRow& c) {
  const Params p = Params()
                       .text(c.state)
                       .text(c.since)
                       .text(c.pool)
                       .integer(c.devices)
                       .text(ids_text(c.device_ids))
                       .text(c.owner);
  return locked([&] {
    return write(
        "UPDATE claims SET state = $1, since = $2, pool = $3, devices = $4, device_ids = $5 WHERE owner = $6",
        p, "updating claim");
  });
}

Status PostgresStore::delete_claim(const std::string& owner) {
  return locked([&] { return write("DELETE FROM claims WHERE owner = $1", {owner}, "deleting claim"); });
}

Result<std::vector<ClaimRow>> PostgresStore::list_claims() {
  return locked([&]() -> Result<std::vector<ClaimRow>> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids "
                    "FROM claims ORDER BY seq",
                    {}, "listing claims"));
    std::vector<ClaimRow> out;
    for (int i = 0; i < r.size(); ++i) {
      out.push_back(ClaimRow{r.text(i, 0), r.text(i, 1), r.text(i, 2), r.text(i, 3),
                             static_cast<int>(r.integer(i, 4)), r.text(i, 5), r.text(i, 6), r.integer(i, 7),
                             ids_of(r.text(i, 8))});
    }
    return out;
  });
}

Result<std::optional<ClaimRow>> PostgresStore::get_claim(const std::string& owner) {
  return locked([&]() -> Result<std::optional<ClaimRow>> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids "
                    "FROM claims WHERE owner = $1",
                    {owner}, "reading a claim"));
    if (r.empty()) return std::optional<ClaimRow>();
    return std::optional<ClaimRow>(ClaimRow{r.text(0, 0), r.text(0, 1), r.text(0, 2), r.text(0, 3),
                                            static_cast<int>(r.integer(0, 4)), r.text(0, 5), r.text(0, 6),
                                            r.integer(0, 7), ids_of(r.text(0, 8))});
  });
}

Result<std::vector<ClaimRow>> PostgresStore::list_claims_in(const std::string& state,
                                                            const std::vector<std::string>& pools) {
  return locked([&]() -> Result<std::vector<ClaimRow>> {
    Params p;
    p.text(state);
    const std::string in_pools = p.in_list("pool", pools);
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT owner, kind, workload_id, pool, devices, state, since, seq, device_ids "
                    "FROM claims WHERE state = $1" + in_pools + " ORDER BY seq",
                    p, "listing claims"));
    std::vector<ClaimRow> out;
    out.reserve(static_cast<size_t>(r.size()));
    for (int i = 0; i < r.size(); ++i) {
      out.push_back(ClaimRow{r.text(i, 0), r.text(i, 1), r.text(i, 2), r.text(i, 3),
                             static_cast<int>(r.integer(i, 4)), r.text(i, 5), r.text(i, 6), r.integer(i, 7),
                             ids_of(r.text(i, 8))});
    }
    return out;
  });
}

// ---- claim holds
Status PostgresStore::insert_claim_hold(ClaimHoldRow& h) {
  Params p = Params().text(h.owner).text(h.kind).text(h.workload_id).text(h.pool).integer(h.devices).real(h.granted_at);
  if (h.released_at) p.real(*h.released_at);
  else p.null();
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO claim_holds(owner, kind, workload_id, pool, devices, granted_at, released_at) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
                    p, "inserting a claim hold"));
    h.seq = r.integer(0, 0);
    return Status::ok();
  });
}

Status PostgresStore::end_claim_holds(const std::string& owner, double released_at) {
  const Params p = Params().real(released_at).text(owner);
  return locked([&] {
    return write("UPDATE claim_holds SET released_at = $1 WHERE owner = $2 AND released_at IS NULL", p,
                 "ending the claim holds of " + owner);
  });
}

Result<std::vector<ClaimHoldRow>> PostgresStore::list_claim_holds(double from, double to) {
  const Params p = Params().real(to).real(from);
  return locked([&]() -> Result<std::vector<ClaimHoldRow>> {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("SELECT seq, owner, kind, workload_id, pool, devices, granted_at, released_at FROM claim_holds "
                    "WHERE granted_at < $1 AND (released_at IS NULL OR released_at > $2) ORDER BY seq",
                    p, "listing claim holds"));
    std::vector<ClaimHoldRow> out;
    for (int i = 0; i < r.size(); ++i) {
      ClaimHoldRow h{r.integer(i, 0), r.text(i, 1), r.text(i, 2), r.text(i, 3), r.text(i, 4),
                     static_cast<int>(r.integer(i, 5)), r.real(i, 6), std::nullopt};
      if (!r.is_null(i, 7)) h.released_at = r.real(i, 7);
      out.push_back(std::move(h));
    }
    return out;
  });
}

}  // namespace trainer::store::postgres
