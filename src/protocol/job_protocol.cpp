#include "protocol/job_protocol.h"

#include <limits>
#include <type_traits>

#include "common/json_parse.h"

namespace trainer::protocol {
namespace {

using nlohmann::json;

// Reads the fields of one event object, remembering the first error (which names its field).
class Fields {
 public:
  explicit Fields(const json& in) : in_(in) {}

  template <class T>
  void req(const char* key, T* out) {
    if (!status_.is_ok()) return;
    auto it = in_.find(key);
    if (it == in_.end()) {
      status_ = invalid_field(key, "required");
      return;
    }
    read(key, *it, out);
  }

  // Absent and null leave `out` empty.
  template <class T>
  void opt(const char* key, std::optional<T>* out) {
    if (!status_.is_ok()) return;
    auto it = in_.find(key);
    if (it == in_.end() || it->is_null()) {
      out->reset();
      return;
    }
    T value{};
    read(key, *it, &value);
    if (status_.is_ok()) *out = std::move(value);
  }

  // Absent keeps `out` as it is (its default).
  template <class T>
  void def(const char* key, T* out) {
    if (!status_.is_ok()) return;
    auto it = in_.find(key);
    if (it != in_.end() && !it->is_null()) read(key, *it, out);
  }

  Status status() const { return status_; }

 private:
  void read(const char* key, const json& v, int64_t* out) {
    if (v.is_number_integer()) {
      *out = v.get<int64_t>();
    } else if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
      *out = static_cast<int64_t>(v.get<double>());
    } else {
      status_ = invalid_field(key, "must be an integer");
    }
  }
  void read(const char* key, const json& v, int* out) {
    int64_t wide = 0;
    read(key, v, &wide);
    if (status_.is_ok()) *out = static_cast<int>(wide);
  }
  // JSON has no NaN: a non-finite value is written as null and read back as NaN.
  void read(const char* key, const json& v, double* out) {
    if (v.is_number()) {
      *out = v.get<double>();
    } else if (v.is_null()) {
      *out = std::numeric_limits<double>::quiet_NaN();
    } else {
      status_ = invalid_field(key, "must be a number");
    }
  }
  void read(const char* key, const json& v, std::string* out) {
    if (v.is_string()) {
      *out = v.get<std::string>();
    } else {
      status_ = invalid_field(key, "must be a string");
    }
  }
  void read(const char* key, const json& v, bool* out) {
    if (v.is_boolean()) {
      *out = v.get<bool>();
    } else {
      status_ = invalid_field(key, "must be true or false");
    }
  }
  void read(const char* key, const json& v, json* out) {
    if (v.is_object()) {
      *out = v;
    } else {
      status_ = invalid_field(key, "must be an object");
    }
  }
  void read(const char* key, const json& v, StepMemory* out) {
    if (!v.is_object()) {
      status_ = invalid_field(key, "must be an object");
      return;
    }
    Status st = from_json(v, out);
    if (!st.is_ok()) status_ = st.with_field(key);
  }
  void read(const char* key, const json& v, std::vector<Device>* out) {
    if (!v.is_array()) {
      status_ = invalid_field(key, "must be an array");
      return;
    }
    out->clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
      if (!v[i].is_object()) {
        status_ = invalid_field(at, "must be an object");
        return;
      }
      Device d;
      Fields f(v[i]);
      f.req("index", &d.index);
      f.req("kind", &d.kind);
      f.def("name", &d.name);
      f.def("uuid", &d.uuid);
      if (!f.status().is_ok()) {
        status_ = f.status().with_field(at);
        return;
      }
      out->push_back(std::move(d));
    }
  }

  const json& in_;
  Status status_ = Status::ok();
};

template <class T>
void put(json& out, const char* key, const std::optional<T>& value) {
  if (value) out[key] = *value;
}

template <class T>
Result<std::optional<Event>> decode_as(const json& in) {
  T e;
  Status st = from_json(in, &e);
  if (!st.is_ok()) return st;
  return std::optional<Event>(Event(std::move(e)));
}

struct TypeName {
  std::string_view operator()(const Hello&) const { return "hello"; }
  std::string_view operator()(const Phase&) const { return "phase"; }
  std::string_view operator()(const Preparing&) const { return "preparing"; }
  std::string_view operator()(const DataFit&) const { return "data_fit"; }
  std::string_view operator()(const DataSplit&) const { return "data_split"; }
  std::string_view operator()(const Devices&) const { return "devices"; }
  std::string_view operator()(const Resolved&) const { return "resolved"; }
  std::string_view operator()(const Step&) const { return "step"; }
  std::string_view operator()(const Validation&) const { return "validation"; }
  std::string_view operator()(const Checkpoint&) const { return "checkpoint"; }
  std::string_view operator()(const Completed&) const { return "completed"; }
  std::string_view operator()(const Failed&) const { return "failed"; }
  std::string_view operator()(const Cancelled&) const { return "cancelled"; }
  std::string_view operator()(const Paused&) const { return "paused"; }
  std::string_view operator()(const Warning&) const { return "warning"; }
};

// The memory parts in JSON, in the order the telemetry registry lists them.
struct MemoryPart {
  const char* key;
  std::optional<int64_t> MemoryUsage::*field;
};
constexpr MemoryPart kMemoryParts[] = {
    {"weights", &MemoryUsage::weights},
    {"adapter", &MemoryUsage::adapter},
    {"gradients", &MemoryUsage::gradients},
    {"optimizerState", &MemoryUsage::optimizer_state},
    {"activations", &MemoryUsage::activations},
    {"otherTensors", &MemoryUsage::other_tensors},
    {"allocatorCache", &MemoryUsage::allocator_cache},
    {"outsideAllocator", &MemoryUsage::outside_allocator},
    {"free", &MemoryUsage::free},
};

}  // namespace

std::string_view event_type(const Event& event) { return std::visit(TypeName{}, event); }

// ---- encoding ------------------------------------------------------------------------------

void to_json(json& out, const Hello& e) {
  out = {{"protocolVersion", e.protocol_version}, {"jobVersion", e.job_version}};
  if (!e.run_id.empty()) out["runId"] = e.run_id;
  if (e.attempt > 0) out["attempt"] = e.attempt;
}

void to_json(json& out, const Phase& e) {
  out = {{"phase", e.phase}};
  put(out, "totalSteps", e.total_steps);
  put(out, "device", e.device);
  put(out, "startupSeconds", e.startup_seconds);
}

void to_json(json& out, const Preparing& e) { out = {{"rowsDone", e.rows_done}, {"rowsTotal", e.rows_total}}; }

void to_json(json& out, const DataFit& e) {
  out = {{"rows", e.rows}, {"truncated", e.truncated}, {"exact", e.exact}, {"dropped", e.dropped}};
}

void to_json(json& out, const DataSplit& e) {
  out = {{"trainRows", e.train_rows}, {"validationRows", e.validation_rows}, {"heldOut", e.held_out}};
}

void to_json(json& out, const Devices& e) {
  json list = json::array();
  for (const auto& d : e.devices) {
    json one = {{"index", d.index}, {"kind", d.kind}};
    if (!d.name.empty()) one["name"] = d.name;
    if (!d.uuid.empty()) one["uuid"] = d.uuid;
    list.push_back(std::move(one));
  }
  out = {{"devices", std::move(list)}};
}

void to_json(json& out, const Resolved& e) { out = {{"config", e.config}, {"settingsSha", e.settings_sha}}; }

void to_json(json& out, const StepMemory& e) {
  out = json::object();
  put(out, "allocatedPeakBytes", e.allocated_peak_bytes);
  put(out, "reservedPeakBytes", e.reserved_peak_bytes);
  json usage = json::object();
  for (const auto& part : kMemoryParts) put(usage, part.key, e.usage.*part.field);
  if (!usage.empty()) out["usage"] = std::move(usage);
}

void to_json(json& out, const Step& e) {
  out = {{"step", e.step},
         {"totalSteps", e.total_steps},
         {"epoch", e.epoch},
         {"loss", e.loss},
         {"learningRate", e.learning_rate},
         {"gradNorm", e.grad_norm},
         {"tokenAccuracy", e.token_accuracy},
         {"tokensPerSecond", e.tokens_per_second},
         {"batchTokens", e.batch_tokens},
         {"trainedTokens", e.trained_tokens},
         {"stepSeconds", e.step_seconds},
         {"inputSeconds", e.input_seconds},
         {"forwardBackwardSeconds", e.forward_backward_seconds},
         {"optimizerSeconds", e.optimizer_seconds}};
  put(out, "paddingShare", e.padding_share);
  put(out, "mfu", e.mfu);
  put(out, "memory", e.memory);
  if (e.rl.is_object()) out["rl"] = e.rl;
}

void to_json(json& out, const Validation& e) {
  out = {{"step", e.step},
         {"validationLoss", e.validation_loss},
         {"tokens", e.tokens},
         {"evaluationSeconds", e.evaluation_seconds}};
}

void to_json(json& out, const Checkpoint& e) {
  out = {{"step", e.step}, {"adapterDir", e.adapter_dir}, {"checkpointSeconds", e.checkpoint_seconds}};
  put(out, "stateDir", e.state_dir);
}

void to_json(json& out, const Completed& e) {
  out = {{"adapterDir", e.adapter_dir}, {"finalLoss", e.final_loss}, {"steps", e.steps},
         {"exportSeconds", e.export_seconds}};
  put(out, "finalValidationLoss", e.final_validation_loss);
  put(out, "stateDir", e.state_dir);
}

void to_json(json& out, const Failed& e) { out = {{"reason", e.reason}}; }

void to_json(json& out, const Cancelled& e) {
  out = json::object();
  put(out, "steps", e.steps);
}

void to_json(json& out, const Paused& e) { out = {{"step", e.step}, {"snapshotId", e.snapshot_id}}; }

void to_json(json& out, const Warning& e) {
  out = json::object();
  if (!e.field.empty()) out["field"] = e.field;
  out["message"] = e.message;
}

json to_json(const Event& event) {
  json body;
  std::visit([&](const auto& e) { to_json(body, e); }, event);
  // "type" first, for people reading the file.
  json out = {{"type", std::string(event_type(event))}};
  for (auto it = body.begin(); it != body.end(); ++it) out[it.key()] = std::move(it.value());
  return out;
}

std::string to_line(const Event& event) {
  return to_json(event).dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- decoding ------------------------------------------------------------------------------

Status from_json(const json& in, Hello* e) {
  Fields f(in);
  f.req("protocolVersion", &e->protocol_version);
  f.def("jobVersion", &e->job_version);
  f.def("runId", &e->run_id);
  f.def("attempt", &e->attempt);
  return f.status();
}

Status from_json(const json& in, Phase* e) {
  Fields f(in);
  f.req("phase", &e->phase);
  f.opt("totalSteps", &e->total_steps);
  f.opt("device", &e->device);
  f.opt("startupSeconds", &e->startup_seconds);
  return f.status();
}

Status from_json(const json& in, Preparing* e) {
  Fields f(in);
  f.req("rowsDone", &e->rows_done);
  f.req("rowsTotal", &e->rows_total);
  return f.status();
}

Status from_json(const json& in, DataFit* e) {
  Fields f(in);
  f.req("rows", &e->rows);
  f.def("truncated", &e->truncated);
  f.def("exact", &e->exact);
  f.def("dropped", &e->dropped);
  return f.status();
}

Status from_json(const json& in, DataSplit* e) {
  Fields f(in);
  f.req("trainRows", &e->train_rows);
  f.req("validationRows", &e->validation_rows);
  f.def("heldOut", &e->held_out);
  return f.status();
}

Status from_json(const json& in, Devices* e) {
  Fields f(in);
  f.req("devices", &e->devices);
  return f.status();
}

Status from_json(const json& in, Resolved* e) {
  Fields f(in);
  f.req("config", &e->config);
  f.req("settingsSha", &e->settings_sha);
  return f.status();
}

Status from_json(const json& in, StepMemory* e) {
  Fields f(in);
  f.opt("allocatedPeakBytes", &e->allocated_peak_bytes);
  f.opt("reservedPeakBytes", &e->reserved_peak_bytes);
  if (!f.status().is_ok()) return f.status();
  auto usage = in.find("usage");
  if (usage == in.end() || usage->is_null()) return Status::ok();
  if (!usage->is_object()) return invalid_field("usage", "must be an object");
  Fields u(*usage);
  for (const auto& part : kMemoryParts) u.opt(part.key, &(e->usage.*part.field));
  Status st = u.status();
  return st.is_ok() ? st : st.with_field("usage");
}

Status from_json(const json& in, Step* e) {
  Fields f(in);
  f.req("step", &e->step);
  f.def("totalSteps", &e->total_steps);
  f.def("epoch", &e->epoch);
  f.req("loss", &e->loss);
  f.def("learningRate", &e->learning_rate);
  f.def("gradNorm", &e->grad_norm);
  f.def("tokenAccuracy", &e->token_accuracy);
  f.def("tokensPerSecond", &e->tokens_per_second);
  f.def("batchTokens", &e->batch_tokens);
  f.def("trainedTokens", &e->trained_tokens);
  f.def("stepSeconds", &e->step_seconds);
  f.def("inputSeconds", &e->input_seconds);
  f.def("forwardBackwardSeconds", &e->forward_backward_seconds);
  f.def("optimizerSeconds", &e->optimizer_seconds);
  f.opt("paddingShare", &e->padding_share);
  f.opt("mfu", &e->mfu);
  f.opt("memory", &e->memory);
  if (auto rl = in.find("rl"); rl != in.end() && rl->is_object()) e->rl = *rl;
  return f.status();
}

Status from_json(const json& in, Validation* e) {
  Fields f(in);
  f.req("step", &e->step);
  f.req("validationLoss", &e->validation_loss);
  f.def("tokens", &e->tokens);
  f.def("evaluationSeconds", &e->evaluation_seconds);
  return f.status();
}

Status from_json(const json& in, Checkpoint* e) {
  Fields f(in);
  f.req("step", &e->step);
  f.req("adapterDir", &e->adapter_dir);
  f.def("checkpointSeconds", &e->checkpoint_seconds);
  f.opt("stateDir", &e->state_dir);
  return f.status();
}

Status from_json(const json& in, Completed* e) {
  Fields f(in);
  f.req("adapterDir", &e->adapter_dir);
  f.def("finalLoss", &e->final_loss);
  f.def("steps", &e->steps);
  f.opt("finalValidationLoss", &e->final_validation_loss);
  f.def("exportSeconds", &e->export_seconds);
  f.opt("stateDir", &e->state_dir);
  return f.status();
}

Status from_json(const json& in, Failed* e) {
  Fields f(in);
  f.def("reason", &e->reason);
  if (e->reason.empty()) e->reason = "the job reported a failure without a reason";
  return f.status();
}

Status from_json(const json& in, Cancelled* e) {
  Fields f(in);
  f.opt("steps", &e->steps);
  return f.status();
}

Status from_json(const json& in, Paused* e) {
  Fields f(in);
  f.req("step", &e->step);
  f.req("snapshotId", &e->snapshot_id);
  return f.status();
}

Status from_json(const json& in, Warning* e) {
  Fields f(in);
  f.def("field", &e->field);
  f.req("message", &e->message);
  return f.status();
}

Result<std::optional<Event>> event_from_json(const json& in) {
  if (!in.is_object()) return invalid_argument("event: must be a JSON object");
  auto type_it = in.find("type");
  if (type_it == in.end() || !type_it->is_string()) return invalid_field("type", "required: the event's type, a string");
  const std::string& type = type_it->get_ref<const std::string&>();
  Result<std::optional<Event>> out = std::optional<Event>();
  if (type == "hello") out = decode_as<Hello>(in);
  else if (type == "phase") out = decode_as<Phase>(in);
  else if (type == "preparing") out = decode_as<Preparing>(in);
  else if (type == "data_fit") out = decode_as<DataFit>(in);
  else if (type == "data_split") out = decode_as<DataSplit>(in);
  else if (type == "devices") out = decode_as<Devices>(in);
  else if (type == "resolved") out = decode_as<Resolved>(in);
  else if (type == "step") out = decode_as<Step>(in);
  else if (type == "validation") out = decode_as<Validation>(in);
  else if (type == "checkpoint") out = decode_as<Checkpoint>(in);
  else if (type == "completed") out = decode_as<Completed>(in);
  else if (type == "failed") out = decode_as<Failed>(in);
  else if (type == "cancelled") out = decode_as<Cancelled>(in);
  else if (type == "paused") out = decode_as<Paused>(in);
  else if (type == "warning") out = decode_as<Warning>(in);
  if (!out.is_ok()) return out.status().with_field(type);
  return out;
}

Result<std::optional<Event>> decode_event(std::string_view line) {
  if (line.size() > kMaxEventLineBytes) {
    return invalid_argument("event line of " + std::to_string(line.size()) + " bytes: longer than " +
                            std::to_string(kMaxEventLineBytes));
  }
  auto parsed = parse_json(line, "event", kMaxEventDepth);
  if (!parsed.is_ok()) return parsed.status();
  return event_from_json(*parsed);
}

std::optional<Event> parse_event(std::string_view line) {
  auto decoded = decode_event(line);
  if (!decoded.is_ok()) return std::nullopt;
  return std::move(decoded).value();
}

}  // namespace trainer::protocol
