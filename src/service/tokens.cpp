// API tokens: creation (the secret shown once, its SHA-256 stored), listing, revocation and the
// authentication of a request's secret (tokens.h).
#include "service/tokens.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "common/sha256.h"
#include "common/utc_time.h"
#include "service/util.h"

namespace trainer::service {
namespace {

constexpr size_t kMaxNameBytes = 200;
constexpr size_t kMaxWorkloads = 1000;
constexpr int kTokenIdChars = 12;

int rank(const std::string& role) {
  if (role == "read") return 1;
  if (role == "submit") return 2;
  if (role == "admin") return 3;
  return 0;
}

}  // namespace

bool Identity::has(const std::string& role) const {
  for (const std::string& mine : roles) {
    if (mine == role) return true;
    if (role == "read" && mine == "control") return true;  // control includes read
    if (rank(role) > 0 && rank(mine) >= rank(role)) return true;
  }
  return false;
}

bool Identity::may_touch(const std::string& workload_id) const {
  return all_workloads || std::find(workloads.begin(), workloads.end(), workload_id) != workloads.end();
}

namespace {

// a == b, in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string new_token_secret() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "trn_";
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Tokens::Tokens(ServiceCore& core, Workloads& workloads) : core_(core), workloads_(workloads) {}

json Tokens::present(const json& doc) {
  json out = doc;
  out.erase("hash");
  return out;
}

Result<json> Tokens::create(const json& body) {
  const json name = body.value("name", json());
  if (!name.is_string() || name.get<std::string>().empty() || name.get<std::string>().size() > kMaxNameBytes) {
    return invalid_field("name", "a token needs a name (1 to 200 bytes) that says whose it is");
  }
  std::vector<std::string> roles;
  json given = body.contains("roles") ? body["roles"] : body.value("role", json());
  if (given.is_string()) given = json::array({given});
  if (!given.is_array() || given.empty()) {
    return invalid_field("roles", "name one or more of read, submit, admin, control");
  }
  for (const json& r : given) {
    const auto& all = token_roles();
    if (!r.is_string() || std::find(all.begin(), all.end(), r.get<std::string>()) == all.end()) {
      return invalid_field("roles", "unknown role " + r.dump() + "; one of read, submit, admin, control");
    }
    if (std::find(roles.begin(), roles.end(), r.get<std::string>()) == roles.end()) roles.push_back(r.get<std::string>());
  }
  json scope = body.value("workloads", json::array({"*"}));
  if (!scope.is_array() || scope.empty() || scope.size() > kMaxWorkloads) {
    return invalid_field("workloads", "a list of workload names or ids, or [\"*\"] for all");
  }
  json workloads = json::array();
  bool all = false;
  for (size_t i = 0; i < scope.size(); ++i) {
    const std::string field = "workloads[" + std::to_string(i) + "]";
    if (!scope[i].is_string()) return invalid_field(field, "must be a workload name or id");
    if (scope[i] == "*") {
      all = true;
      continue;
    }
    auto w = workloads_.get(scope[i].get<std::string>());
    if (!w.is_ok()) return w.status().with_field(field);
    workloads.push_back({{"id", (*w)["id"]}, {"name", (*w)["name"]}});
  }
  if (all && !workloads.empty()) return invalid_field("workloads", "\"*\" (all) cannot be mixed with named workloads");
  json doc = {{"tokenId", random_hex(kTokenIdChars)}, {"name", name}, {"roles", roles},
              {"allWorkloads", all}, {"workloads", workloads}, {"createdAt", core_.now_rfc3339()}};
  if (body.contains("expiresAt")) {
    const json& at = body["expiresAt"];
    auto when = at.is_string() ? parse_utc_time(at.get<std::string>()) : std::nullopt;
    if (!when) return invalid_field("expiresAt", "must be an RFC 3339 time such as 2027-01-31T00:00:00Z");
    if (*when <= core_.now()) return invalid_field("expiresAt", "is in the past; a token must expire later");
    doc["expiresAt"] = rfc3339(*when);
  }
  const std::string secret = new_token_secret();
  doc["hash"] = sha256_hex(secret);
  {
    std::lock_guard<std::mutex> lock(core_.mu);
    TRAINER_RETURN_IF_ERROR(core_.store->put_api_token(doc));
  }
  json out = present(doc);
  out["token"] = secret;
  return out;
}

Result<json> Tokens::list() {
  TRAINER_ASSIGN_OR_RETURN(auto all, core_.store->list_api_tokens());
  json out = json::array();
  for (const json& doc : all) out.push_back(present(doc));
  return json{{"tokens", out}};
}

Result<json> Tokens::find_by_ref(const std::string& ref) {
  if (ref.empty()) return invalid_field("token", "name a token by its id");
  TRAINER_ASSIGN_OR_RETURN(auto all, core_.store->list_api_tokens());
  std::optional<json> found;
  for (json& doc : all) {
    const std::string id = doc.value("tokenId", std::string());
    if (id.rfind(ref, 0) != 0) continue;
    if (found) return invalid_field("token", "'" + ref + "' names more than one token; give more of its id");
    found = std::move(doc);
  }
  if (!found) return not_found("token '" + ref + "' not found; `trainer tokens list` shows them");
  return std::move(*found);
}

Result<json> Tokens::revoke(const std::string& ref) {
  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(json doc, find_by_ref(ref));
  if (!doc.contains("revokedAt")) {
    doc["revokedAt"] = core_.now_rfc3339();
    TRAINER_RETURN_IF_ERROR(core_.store->put_api_token(doc));
  }
  return present(doc);
}

Result<Identity> Tokens::authenticate(const std::string& secret) {
  if (secret.empty()) {
    return unauthenticated("this request needs an API token: send Authorization: Bearer TOKEN (`trainer login`, "
                           "TRAINER_TOKEN, or the token file trainerd writes; docs/security.md)");
  }
  if (same_secret(secret, core_.own_token)) {
    Identity self;  // trainerd calling its own API (ServiceCore::own_token)
    self.token_id = "trainerd";
    self.name = "trainerd";
    self.roles = {"submit"};
    self.all_workloads = true;
    return self;
  }
  TRAINER_ASSIGN_OR_RETURN(auto doc, core_.store->find_api_token(sha256_hex(secret)));
  if (!doc) return unauthenticated("the API token is not known to this service");
  const std::string id = doc->value("tokenId", std::string());
  if (doc->contains("revokedAt")) return unauthenticated("the API token " + id + " was revoked");
  if (doc->contains("expiresAt")) {
    auto until = parse_utc_time(doc->value("expiresAt", std::string()));
    if (!until || *until <= core_.now()) {
      return unauthenticated("the API token " + id + " expired at " + doc->value("expiresAt", std::string()));
    }
  }
  Identity who;
  who.token_id = id;
  who.name = doc->value("name", std::string());
  who.roles = doc->value("roles", std::vector<std::string>{});
  who.all_workloads = doc->value("allWorkloads", false);
  for (const json& w : doc->value("workloads", json::array())) who.workloads.push_back(w.value("id", std::string()));
  return who;
}

bool Tokens::live(const std::string& secret) { return authenticate(secret).is_ok(); }

}  // namespace trainer::service
