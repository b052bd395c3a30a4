#include "protocol/job_protocol.h"

#include <tuple>

#include "common/json_parse.h"
#include "protocol/fields.h"

namespace trainer::protocol {

// Each event's fields: its JSON name, its member, and whether it is required (fields.h).
// Memory parts are listed in the order the telemetry registry lists them.
#define TRAINER_DESCRIBE(Type, ...)                                  \
  template <>                                                        \
  struct fields::Description<Type> {                                 \
    static constexpr auto fields = std::make_tuple(__VA_ARGS__);     \
  };

using fields::defaulted;
using fields::if_object;
using fields::if_set;
using fields::optional;
using fields::required;

TRAINER_DESCRIBE(Hello, required("protocolVersion", &Hello::protocol_version),
                 defaulted("jobVersion", &Hello::job_version), if_set("runId", &Hello::run_id),
                 if_set("attempt", &Hello::attempt))
TRAINER_DESCRIBE(Phase, required("phase", &Phase::phase), optional("totalSteps", &Phase::total_steps),
                 optional("device", &Phase::device), optional("startupSeconds", &Phase::startup_seconds))
TRAINER_DESCRIBE(Preparing, required("rowsDone", &Preparing::rows_done), required("rowsTotal", &Preparing::rows_total))
TRAINER_DESCRIBE(DataFit, required("rows", &DataFit::rows), defaulted("truncated", &DataFit::truncated),
                 defaulted("exact", &DataFit::exact), defaulted("dropped", &DataFit::dropped))
TRAINER_DESCRIBE(DataSplit, required("trainRows", &DataSplit::train_rows),
                 required("validationRows", &DataSplit::validation_rows), defaulted("heldOut", &DataSplit::held_out))
TRAINER_DESCRIBE(Device, required("index", &Device::index), required("kind", &Device::kind),
                 if_set("name", &Device::name), if_set("uuid", &Device::uuid))
TRAINER_DESCRIBE(Devices, required("devices", &Devices::devices))
TRAINER_DESCRIBE(Resolved, required("config", &Resolved::config), required("settingsSha", &Resolved::settings_sha))
TRAINER_DESCRIBE(MemoryUsage, optional("weights", &MemoryUsage::weights), optional("adapter", &MemoryUsage::adapter),
                 optional("gradients", &MemoryUsage::gradients),
                 optional("optimizerState", &MemoryUsage::optimizer_state),
                 optional("activations", &MemoryUsage::activations),
                 optional("otherTensors", &MemoryUsage::other_tensors),
                 optional("allocatorCache", &MemoryUsage::allocator_cache),
                 optional("outsideAllocator", &MemoryUsage::outside_allocator), optional("free", &MemoryUsage::free))
TRAINER_DESCRIBE(StepMemory, optional("allocatedPeakBytes", &StepMemory::allocated_peak_bytes),
                 optional("reservedPeakBytes", &StepMemory::reserved_peak_bytes), if_set("usage", &StepMemory::usage))
TRAINER_DESCRIBE(Step, required("step", &Step::step), defaulted("totalSteps", &Step::total_steps),
                 defaulted("epoch", &Step::epoch), required("loss", &Step::loss),
                 defaulted("learningRate", &Step::learning_rate), defaulted("gradNorm", &Step::grad_norm),
                 defaulted("tokenAccuracy", &Step::token_accuracy),
                 defaulted("tokensPerSecond", &Step::tokens_per_second),
                 defaulted("batchTokens", &Step::batch_tokens), defaulted("trainedTokens", &Step::trained_tokens),
                 defaulted("stepSeconds", &Step::step_seconds), defaulted("inputSeconds", &Step::input_seconds),
                 defaulted("forwardBackwardSeconds", &Step::forward_backward_seconds),
                 defaulted("optimizerSeconds", &Step::optimizer_seconds),
                 optional("paddingShare", &Step::padding_share), optional("mfu", &Step::mfu),
                 optional("usefulFlops", &Step::useful_flops), optional("usefulMfu", &Step::useful_mfu),
                 optional("memory", &Step::memory), if_object("rl", &Step::rl))
TRAINER_DESCRIBE(Validation, required("step", &Validation::step),
                 required("validationLoss", &Validation::validation_loss), defaulted("tokens", &Validation::tokens),
                 defaulted("evaluationSeconds", &Validation::evaluation_seconds))
TRAINER_DESCRIBE(Checkpoint, required("step", &Checkpoint::step), required("adapterDir", &Checkpoint::adapter_dir),
                 defaulted("checkpointSeconds", &Checkpoint::checkpoint_seconds),
                 optional("stateDir", &Checkpoint::state_dir))
TRAINER_DESCRIBE(Completed, required("adapterDir", &Completed::adapter_dir),
                 defaulted("finalLoss", &Completed::final_loss), defaulted("steps", &Completed::steps),
                 optional("finalValidationLoss", &Completed::final_validation_loss),
                 defaulted("exportSeconds", &Completed::export_seconds), optional("stateDir", &Completed::state_dir))
TRAINER_DESCRIBE(Failed, defaulted("reason", &Failed::reason))
TRAINER_DESCRIBE(Cancelled, optional("steps", &Cancelled::steps))
TRAINER_DESCRIBE(Paused, required("step", &Paused::step), defaulted("snapshotId", &Paused::snapshot_id),
                 if_set("reason", &Paused::reason), if_set("planned", &Paused::planned))
TRAINER_DESCRIBE(Warning, if_set("field", &Warning::field), required("message", &Warning::message))
TRAINER_DESCRIBE(EvaluationProgress, required("done", &EvaluationProgress::done),
                 required("total", &EvaluationProgress::total))
TRAINER_DESCRIBE(EvaluationReport, required("report", &EvaluationReport::report))
TRAINER_DESCRIBE(Heartbeat, optional("step", &Heartbeat::step), required("uptimeSeconds", &Heartbeat::uptime_seconds))
TRAINER_DESCRIBE(Smoke, required("passed", &Smoke::passed), if_set("check", &Smoke::check),
                 if_set("reason", &Smoke::reason), defaulted("steps", &Smoke::steps), defaulted("rows", &Smoke::rows),
                 optional("loss", &Smoke::loss), optional("restoredLoss", &Smoke::restored_loss),
                 defaulted("seconds", &Smoke::seconds))
TRAINER_DESCRIBE(EngineConfig, required("engine", &EngineConfig::engine), required("config", &EngineConfig::config))
TRAINER_DESCRIBE(EngineRuntime, required("engine", &EngineRuntime::engine), required("report", &EngineRuntime::report))
#undef TRAINER_DESCRIBE

namespace {

using nlohmann::json;

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
  std::string_view operator()(const EvaluationProgress&) const { return "evaluation_progress"; }
  std::string_view operator()(const EvaluationReport&) const { return "evaluation_report"; }
  std::string_view operator()(const Heartbeat&) const { return "heartbeat"; }
  std::string_view operator()(const Smoke&) const { return "smoke"; }
  std::string_view operator()(const EngineConfig&) const { return "engine_config"; }
  std::string_view operator()(const EngineRuntime&) const { return "engine_runtime"; }
};

}  // namespace

std::string_view event_type(const Event& event) { return std::visit(TypeName{}, event); }

bool ends_attempt(const Event& event) {
  return std::holds_alternative<Completed>(event) || std::holds_alternative<Failed>(event) ||
         std::holds_alternative<Cancelled>(event) || std::holds_alternative<Paused>(event);
}

// The public to_json/from_json pair of each event, both from its description.
#define TRAINER_EVENT_JSON(Type)                                                  \
  void to_json(json& out, const Type& e) { fields::write(out, e); }               \
  Status from_json(const json& in, Type* e) { return fields::read(in, e); }

TRAINER_EVENT_JSON(Hello)
TRAINER_EVENT_JSON(Phase)
TRAINER_EVENT_JSON(Preparing)
TRAINER_EVENT_JSON(DataFit)
TRAINER_EVENT_JSON(DataSplit)
TRAINER_EVENT_JSON(Devices)
TRAINER_EVENT_JSON(Resolved)
TRAINER_EVENT_JSON(StepMemory)
TRAINER_EVENT_JSON(Step)
TRAINER_EVENT_JSON(Validation)
TRAINER_EVENT_JSON(Checkpoint)
TRAINER_EVENT_JSON(Completed)
TRAINER_EVENT_JSON(Cancelled)
TRAINER_EVENT_JSON(Paused)
TRAINER_EVENT_JSON(Warning)
TRAINER_EVENT_JSON(EvaluationProgress)
TRAINER_EVENT_JSON(EvaluationReport)
TRAINER_EVENT_JSON(Heartbeat)
TRAINER_EVENT_JSON(Smoke)
TRAINER_EVENT_JSON(EngineConfig)
TRAINER_EVENT_JSON(EngineRuntime)
#undef TRAINER_EVENT_JSON

void to_json(json& out, const Failed& e) { fields::write(out, e); }

Status from_json(const json& in, Failed* e) {
  Status st = fields::read(in, e);
  if (e->reason.empty()) e->reason = "the job reported a failure without a reason";
  return st;
}

json to_json(const Event& event) {
  json body;
  std::visit([&](const auto& e) { to_json(body, e); }, event);
  json out = {{"type", std::string(event_type(event))}};
  for (auto it = body.begin(); it != body.end(); ++it) out[it.key()] = std::move(it.value());
  return out;
}

std::string to_line(const Event& event) {
  return to_json(event).dump(-1, ' ', false, json::error_handler_t::replace);
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
  else if (type == "evaluation_progress") out = decode_as<EvaluationProgress>(in);
  else if (type == "evaluation_report") out = decode_as<EvaluationReport>(in);
  else if (type == "heartbeat") out = decode_as<Heartbeat>(in);
  else if (type == "smoke") out = decode_as<Smoke>(in);
  else if (type == "engine_config") out = decode_as<EngineConfig>(in);
  else if (type == "engine_runtime") out = decode_as<EngineRuntime>(in);
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
