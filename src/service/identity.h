// Who a request comes from: what its API token grants (docs/security.md; tokens.h makes and
// checks tokens). Plain data, shared by the service and the API's authorization.
#pragma once

#include <string>
#include <vector>

namespace trainer::service {

// What a request's token grants, once authenticated.
struct Identity {
  std::string token_id;                // the token's public id ("" for none)
  std::string name;                    // the token's name, as its creator gave it
  std::vector<std::string> roles;      // read, submit, admin, control
  bool all_workloads = false;          // true: every workload, present and future
  std::vector<std::string> workloads;  // the workload ids it may touch, when not all
  // Whether the roles cover `role` (the order read ⊂ submit ⊂ admin; control ⊇ read).
  bool has(const std::string& role) const;
  // Whether the token may touch the workload with id `workload_id`.
  bool may_touch(const std::string& workload_id) const;
};

}  // namespace trainer::service
