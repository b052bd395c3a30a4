// API tokens (docs/security.md): who may call trainerd. A token is a random secret shown once, at
// creation; the store keeps only its SHA-256. Each has one or more roles and the workloads it may
// touch (all, or a list of workload ids), and may expire or be revoked.
//
// Roles: `read` ⊂ `submit` ⊂ `admin` (each includes the ones before it); `control` (the operator's
// commands) includes `read` only. A token may carry `admin` and `control` together (the local
// token trainerd writes at first start does).
//
// Thread safety: every method may be called from any thread; writes take the core's mu.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "service/identity.h"
#include "service/service_core.h"
#include "service/workloads.h"

namespace trainer::service {

// The roles a token may carry, in order of inclusion for the first three.
inline const std::vector<std::string>& token_roles() {
  static const std::vector<std::string> roles = {"read", "submit", "admin", "control"};
  return roles;
}

class Tokens {
 public:
  Tokens(ServiceCore& core, Workloads& workloads);

  // Service::create_token: body {name, roles: [..] (or role), workloads?: [name or id, ...]
  // (absent or ["*"]: all), expiresAt?: RFC 3339}. The token's record with its secret under
  // "token": the only time the secret is shown.
  Result<json> create(const json& body);
  // Service::list_tokens: {tokens: [...]}, oldest first, without secrets or hashes.
  Result<json> list();
  // Service::revoke_token: by id or unique id prefix; the token's record. Revoking twice is no error.
  Result<json> revoke(const std::string& ref);
  // Service::authenticate_token: the identity of `secret`; Unauthenticated when it is empty,
  // unknown, revoked or expired (the message says which, never the secret).
  Result<Identity> authenticate(const std::string& secret);
  // Whether `secret` is a live token (known, not revoked, not expired).
  bool live(const std::string& secret);

 private:
  Result<json> find_by_ref(const std::string& ref);
  static json present(const json& doc);

  ServiceCore& core_;
  Workloads& workloads_;
};

// A new secret: "trn_" and 64 hex digits from the kernel's random source.
std::string new_token_secret();

}  // namespace trainer::service
