// A run's TensorBoard event files (`runs tensorboard`; docs/tensorboard.md): each attempt's job
// copies its file to the artifacts under protocol::tensorboard_key_prefix(run); trainerd lists
// and serves them as they are.
#include <string>

#include "protocol/snapshot.h"
#include "service/service_state.h"
#include "service/util.h"

namespace trainer::service {

Result<json> ServiceImpl::run_event_files(const std::string& ref) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  const std::string prefix = protocol::tensorboard_key_prefix(r->id);
  auto keys = artifacts().list(prefix);
  if (!keys.is_ok()) return keys.status().with_context("listing the event files of run " + r->id);
  json files = json::array();
  for (const auto& key : *keys) {
    const std::string name = key.substr(key.rfind('/') + 1);
    if (!protocol::is_event_file_name(name)) continue;  // a temporary of a copy in flight
    auto size = artifacts().size(key);
    if (!size.is_ok()) continue;  // replaced or removed since the listing
    files.push_back({{"name", name}, {"bytes", *size}});
  }
  return json{{"runId", r->id},
              {"phase", phase_name(r->phase)},
              {"ended", is_terminal(r->phase)},
              {"files", std::move(files)}};
}

Result<std::string> ServiceImpl::run_event_file(const std::string& ref, const std::string& name) {
  auto r = resolve_run(ref, "run");
  if (!r.is_ok()) return r.status();
  if (!protocol::is_event_file_name(name)) {
    return invalid_field("file", "\"" + name + "\" is not an event file's name (events.out.tfevents.*); list them with "
                                 "GET /v1/runs/" + r->id + "/tensorboard");
  }
  auto bytes = artifacts().get(protocol::tensorboard_key_prefix(r->id) + "/" + name);
  if (!bytes.is_ok() && bytes.status().code() == StatusCode::kNotFound) {
    return field_status(StatusCode::kNotFound, "file", "run " + r->id + " has no event file " + name);
  }
  return bytes;
}

}  // namespace trainer::service
