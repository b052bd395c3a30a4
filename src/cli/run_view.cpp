#include "cli/run_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/format.h"
#include "cli/run_fields.h"

namespace trainer::cli {
namespace {

constexpr size_t kShortIdLength = 12;

using nlohmann::json;
using namespace run_fields;  // str, num, integer, field

const char* phase_colour(const std::string& phase) {
  if (phase == "COMPLETED") return "32";  // green
  if (phase == "FAILED") return "31";     // red
  if (phase == "CANCELLED") return "33";  // yellow
  if (phase == "TRAINING") return "36";   // cyan
  return "1";                             // bold
}

std::string paint(const std::string& text, const char* code, bool color) {
  if (!color) return text;
  return std::string("\033[") + code + "m" + text + "\033[0m";
}

std::string workload_name(const json& run) {
  const json& w = field(run, "workload");
  if (w.is_string()) return w.get<std::string>();
  std::string name = str(w, "name");
  return name.empty() ? str(w, "id") : name;
}

// "CPU" for a run that trains on the CPU (execution.gpus: 0), else "GPU".
std::string device_kind(const json& run) {
  auto gpus = num(field(field(run, "plan"), "execution"), "gpus");
  return gpus && *gpus == 0 ? "CPU" : "GPU";
}

std::string cost_text(const json& run) {
  const json& cost = field(run, "cost");
  auto gpu_seconds = num(cost, "gpuSeconds");
  if (!gpu_seconds) return "";
  std::string text = format_device_seconds(*gpu_seconds, device_kind(run));
  if (cost.is_object() && cost.value("estimated", false)) text += " (est.)";
  return text;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::optional<std::string> phase_entered_at(const json& run, const std::string& phase) {
  const json& history = field(run, "phaseHistory");
  if (!history.is_array()) return std::nullopt;
  std::optional<std::string> found;
  for (const auto& entry : history) {
    if (str(entry, "phase") == phase) found = str(entry, "enteredAt");  // the latest entry wins
  }
  return found;
}

}  // namespace

std::string short_id(const std::string& id) {
  return id.size() > kShortIdLength ? id.substr(0, kShortIdLength) : id;
}

bool is_terminal_phase(const std::string& phase) {
  return phase == "COMPLETED" || phase == "FAILED" || phase == "CANCELLED";
}

std::optional<double> training_elapsed_seconds(const json& run) {
  auto entered = phase_entered_at(run, "TRAINING");
  if (!entered) return std::nullopt;
  // Training ends when the next phase begins; until then, the last update is "now".
  std::string until = str(run, "updatedAt");
  const json& history = field(run, "phaseHistory");
  bool after = false;
  for (const auto& entry : history) {
    if (after) {
      until = str(entry, "enteredAt");
      break;
    }
    if (str(entry, "phase") == "TRAINING" && str(entry, "enteredAt") == *entered) after = true;
  }
  return seconds_between(*entered, until);
}

std::optional<double> run_eta_seconds(const json& run) {
  const json& progress = field(run, "progress");
  const int64_t step = integer(progress, "step");
  const int64_t total = integer(progress, "totalSteps");
  if (str(run, "phase") != "TRAINING") return std::nullopt;
  auto elapsed = training_elapsed_seconds(run);
  if (!elapsed) return std::nullopt;
  // The elapsed time is this attempt's: so are the steps it is divided by. An attempt that
  // resumed from a snapshot trained only the steps since the snapshot's.
  int64_t start = 0;
  if (const json& attempts = field(run, "attempts"); attempts.is_array()) {
    for (const json& a : attempts) {
      if (integer(a, "number") == integer(run, "attempt")) start = integer(a, "resumedFromStep");
    }
  }
  if (start < 0 || start > step) start = 0;
  return estimate_remaining(step - start, total - start, *elapsed);
}


namespace {

// A QUEUED claim's place in its pool's queue: "2nd in queue, behind 9a01c3d2e4f5 (SFT, 1 device)";
// "first in queue"; "" when the answer carries no place (an older trainerd).
std::string queue_text(const json& claim) {
  auto position = num(claim, "queuePosition");
  if (!position) return "";
  const int64_t n = static_cast<int64_t>(*position);
  if (n <= 1) return "first in queue";
  const int64_t last = n % 10, tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th" : last == 1 ? "st" : last == 2 ? "nd" : last == 3 ? "rd" : "th";
  std::string text = std::to_string(n) + suffix + " in queue, behind ";
  const json& ahead = field(claim, "ahead");
  std::string listed;
  int64_t shown = 0;
  if (ahead.is_array()) {
    for (const json& a : ahead) {
      const int64_t devices = integer(a, "devices");
      listed += (listed.empty() ? "" : ", ") + short_id(str(a, "owner")) + " (" + str(a, "kind") + ", " +
                std::to_string(devices) + (devices == 1 ? " device)" : " devices)");
      ++shown;
    }
  }
  if (n - 1 > shown) listed += (listed.empty() ? "" : " and ") + std::to_string(n - 1 - shown) + " more";
  return text + listed;
}

std::string progress_text(const json& run, const ViewStyle& style, bool with_phase) {
  const std::string phase = str(run, "phase");
  const json& progress = field(run, "progress");
  const json& latest = field(run, "latest");
  std::vector<std::string> parts;
  // Parts a narrow terminal drops first, in this order.
  std::vector<size_t> droppable_cost, droppable_rate, droppable_val;
  char buf[64];
  // Pad the phase so the bar does not jump when the phase changes.
  if (with_phase) {
    std::string phase_col = phase;
    if (phase_col.size() < 9) phase_col.append(9 - phase_col.size(), ' ');
    parts.push_back(paint(phase_col, phase_colour(phase), style.color));
  }

  const int64_t step = integer(progress, "step");
  const int64_t total = integer(progress, "totalSteps");
  if (phase == "PREPARING" && num(progress, "rowsTotal") && integer(progress, "rowsTotal") > 0) {
    const int64_t done = integer(progress, "rowsDone");
    const int64_t rows = integer(progress, "rowsTotal");
    parts.push_back(progress_bar(done, rows, style.bar_width, style.unicode));
    parts.push_back("rows " + format_thousands(done) + "/" + format_thousands(rows));
  } else if (total > 0) {
    parts.push_back(progress_bar(step, total, style.bar_width, style.unicode));
    std::snprintf(buf, sizeof buf, "step %lld/%lld", static_cast<long long>(step),
                  static_cast<long long>(total));
    parts.push_back(buf);
  }
  // Waiting for devices (its claim queued, or its job queued by the backend): where, and behind whom.
  if (phase == "QUEUED" || phase == "WAITING_FOR_DEVICES") {
    const json& claim = field(run, "claim");
    std::string pool = str(claim, "pool");
    parts.push_back(pool.empty() ? "waiting for devices" : "waiting for devices in pool " + pool);
    if (std::string place = queue_text(claim); !place.empty()) parts.push_back(place);
  }
  // A reinforcement run shows its mean reward instead of the policy loss.
  if (auto reward = num(latest, "reward")) parts.push_back("reward " + format_number(*reward));
  else if (auto loss = num(latest, "loss")) parts.push_back("loss " + format_number(*loss));
  if (auto vloss = num(latest, "validationLoss")) {
    droppable_val.push_back(parts.size());
    parts.push_back("val " + format_number(*vloss));
  }
  if (phase == "TRAINING") {
    if (auto tps = num(latest, "tokensPerSecond")) {
      droppable_rate.push_back(parts.size());
      parts.push_back(format_thousands(static_cast<int64_t>(*tps + 0.5)) + " tok/s");
    }
    if (auto eta = run_eta_seconds(run)) parts.push_back("ETA " + format_duration(*eta));
  } else if (is_terminal_phase(phase)) {
    if (auto elapsed = training_elapsed_seconds(run)) {
      parts.push_back("trained " + format_duration(*elapsed));
    }
  }
  if (std::string attempts = attempts_text(run, true); !attempts.empty()) parts.push_back(attempts);
  std::string cost = cost_text(run);
  if (!cost.empty()) {
    droppable_cost.push_back(parts.size());
    parts.push_back("cost " + cost);
  }
  if (style.max_width > 0) {
    auto width_of = [&] {
      size_t w = 0, shown = 0;
      for (const auto& p : parts) {
        if (p.empty()) continue;
        w += display_width(p);
        ++shown;
      }
      return shown ? w + 2 * (shown - 1) : 0;
    };
    for (const auto* group : {&droppable_cost, &droppable_rate, &droppable_val}) {
      for (size_t index : *group) {
        if (width_of() > style.max_width) parts[index].clear();
      }
    }
  }
  std::string line;
  for (const auto& part : parts) {
    if (part.empty()) continue;
    if (!line.empty()) line += "  ";
    line += part;
  }
  if (style.max_width > 0 && display_width(line) > style.max_width) {
    line = truncate_to_width(line, style.max_width);
  }
  return line;
}

// "512 B", "3.4 MiB", "1.25 GiB".
std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, kUnits[unit]);
  return buf;
}

// The run's latest memory figures (its job's step.memory): peaks, then what held the memory.
std::vector<std::pair<std::string, std::string>> memory_rows(const json& run) {
  std::vector<std::pair<std::string, std::string>> rows;
  const json& memory = field(run, "memory");
  if (!memory.is_object()) return rows;
  if (auto v = num(memory, "allocatedPeakBytes")) rows.push_back({"Allocated peak", format_bytes(*v)});
  if (auto v = num(memory, "reservedPeakBytes")) rows.push_back({"Reserved peak", format_bytes(*v)});
  static const std::pair<const char*, const char*> kParts[] = {
      {"weights", "Weights"},           {"adapter", "Adapter"},
      {"gradients", "Gradients"},       {"optimizerState", "Optimizer state"},
      {"activations", "Activations"},   {"otherTensors", "Other tensors"},
      {"allocatorCache", "Allocator cache"}, {"outsideAllocator", "Outside allocator"},
      {"free", "Free"}};
  const json& usage = field(memory, "usage");
  for (const auto& [key, label] : kParts) {
    if (auto v = num(usage, key)) rows.push_back({label, format_bytes(*v)});
  }
  if (!rows.empty()) {
    if (auto step = num(memory, "step")) rows.push_back({"At step", format_number(*step)});
  }
  return rows;
}

}  // namespace

std::string run_progress_line(const json& run, const ViewStyle& style) {
  return progress_text(run, style, true);
}

namespace {

// The Pause section of `runs get`: the latest pause while the run is PAUSING or PAUSED (and when
// a resumed run resumed), with what to run next. Empty when the run was never paused.
std::vector<std::pair<std::string, std::string>> pause_rows(const json& run) {
  std::vector<std::pair<std::string, std::string>> rows;
  const json& pause = field(run, "pause");
  if (!pause.is_object()) return rows;
  const std::string phase = str(run, "phase");
  const std::string id = short_id(str(run, "runId"));
  const std::string policy = str(pause, "policy");
  rows.push_back({"Checkpoint", policy == "save" ? "save (a save at the next optimizer step, then stop)"
                                                 : policy + " (stop against the newest committed snapshot)"});
  if (!str(pause, "requestedAt").empty()) {
    const std::string by = str(pause, "requestedBy");
    rows.push_back({"Requested", str(pause, "requestedAt") +
                                     (by == "plan" ? " (by the plan's pauseAtStep)" : by == "job" ? " (by the job)" : "")});
  }
  const std::string snapshot = str(pause, "snapshotId");
  if (!snapshot.empty()) {
    rows.push_back({"Snapshot", short_id(snapshot) + " (step " + format_number(integer(pause, "savedStep")) + ")"});
  } else if (phase == "PAUSING" && policy == "save") {
    rows.push_back({"Snapshot", "saving at the next optimizer step"});
  }
  if (!str(pause, "failureReason").empty()) rows.push_back({"Save failed", str(pause, "failureReason")});
  if (pause.value("resourcesReleased", false)) {
    rows.push_back({"Devices", "released" + (str(pause, "releasedAt").empty() ? "" : " at " + str(pause, "releasedAt"))});
  } else if (phase == "PAUSING") {
    rows.push_back({"Devices", "held until the job stops"});
  }
  if (!str(pause, "resumedAt").empty() && phase != "PAUSED") rows.push_back({"Resumed", str(pause, "resumedAt")});
  if (phase == "PAUSED") {
    rows.push_back({"Next", "`trainer runs resume " + id + "` continues it" +
                                (snapshot.empty() ? "" : " from step " + format_number(integer(pause, "savedStep"))) +
                                " as a new attempt; `trainer runs cancel " + id + "` ends it"});
  } else if (phase == "PAUSING") {
    rows.push_back({"Next", "`trainer runs get " + id + "` shows PAUSED once its devices are released; then "
                            "`trainer runs resume " + id + "` continues it"});
  } else if (str(pause, "resumedAt").empty()) {
    rows.clear();  // a pause that ended otherwise (the run was cancelled or failed): its phase says it
  }
  return rows;
}

// The plan's smoke check: pending, passed, or failed naming the check and why.
std::string smoke_text(const json& smoke) {
  const std::string verdict = str(smoke, "verdict");
  const std::string scope = format_number(integer(smoke, "steps")) + " steps on " +
                            (verdict == "pending" ? "the first " : "") + format_number(integer(smoke, "rows")) + " rows";
  if (verdict == "pending") return "pending (" + scope + ", before training)";
  std::string text = verdict + " (" + scope;
  if (auto seconds = num(smoke, "seconds")) text += ", " + format_duration(*seconds);
  text += ")";
  if (verdict == "failed") text += ": " + str(smoke, "check") + ": " + first_line(str(smoke, "reason"));
  return text;
}

}  // namespace

std::string run_detail(const json& run, const ViewStyle& style) {
  std::vector<std::pair<std::string, std::string>> state;
  const std::string phase = str(run, "phase");
  state.push_back({"Run", str(run, "runId")});
  state.push_back({"Workload", workload_name(run)});
  state.push_back({"Base model", str(run, "baseModel")});
  std::string phase_text = paint(phase, phase_colour(phase), style.color);
  if (auto attempt = num(run, "attempt"); attempt && *attempt > 1) {
    phase_text += " (attempt " + format_number(*attempt) + ")";
  }
  if (!str(run, "outcome").empty() && str(run, "outcome") != phase) {
    phase_text += " — " + str(run, "outcome");
  }
  state.push_back({"Phase", phase_text});
  if (std::string attempts = attempts_text(run, false); !attempts.empty()) state.push_back({"Attempts", attempts});
  if (!is_terminal_phase(phase) || integer(field(run, "progress"), "totalSteps") > 0) {
    state.push_back({"Progress", progress_text(run, style, false)});
  }
  if (!str(run, "failureReason").empty()) {
    state.push_back({"Failure", first_line(str(run, "failureReason"))});
  }
  // What the job reported it does otherwise than the plan asked (a `warning` job event).
  if (const json& warnings = field(run, "warnings"); warnings.is_array()) {
    for (const json& w : warnings) {
      if (!w.is_object()) continue;
      const std::string f = str(w, "field"), message = str(w, "message");
      state.push_back({"Warning", f.empty() || message.rfind(f, 0) == 0 ? message : f + ": " + message});
    }
  }
  const json& plan = field(run, "plan");
  const json& config = field(plan, "config");
  if (config.is_object()) {
    std::string method = str(config, "method");
    const json& hp = field(config, "hyperparams");
    std::string desc = method.empty() ? "" : method;
    if (auto rank = num(field(hp, "lora"), "rank")) desc += ", LoRA rank " + format_number(*rank);
    if (auto lr = num(field(hp, "optimizer"), "learningRate")) desc += ", lr " + format_number(*lr);
    if (auto seq = num(config, "maxSeqLength")) desc += ", maxSeqLength " + format_number(*seq);
    std::string precision = str(field(config, "model"), "precision");
    if (!precision.empty()) desc += ", " + precision;
    state.push_back({"Config", desc});
    const json& dataset = field(run, "dataset");
    std::string ref = str(dataset, "ref");
    std::string hash = str(dataset, "hash");
    if (hash.empty()) hash = str(config, "dataset");
    state.push_back({"Dataset", ref.empty() || ref == hash ? hash : ref + " (" + short_id(hash) + ")"});
  }
  // A child run: where it came from, with both methods (they differ after a method change).
  if (!str(run, "parentRunId").empty()) {
    std::string parent = "run " + short_id(str(run, "parentRunId"));
    if (!str(run, "parentMethod").empty()) parent += " (" + str(run, "parentMethod") + ")";
    parent += ", " + (str(run, "childKind").empty() ? std::string("child") : str(run, "childKind")) +
              " from snapshot " + short_id(str(run, "sourceSnapshotId"));
    if (auto step = num(run, "sourceStep")) parent += " (step " + format_number(*step) + ")";
    if (!str(run, "restore").empty()) parent += ", restoring " + str(run, "restore");
    state.push_back({"Parent", parent});
    if (const json& change = field(run, "methodChange"); change.is_object()) {
      state.push_back({"Method change", str(change, "from") + " -> " + str(change, "to") + "; " + str(change, "message")});
    }
  }
  // A warm start: the registered adapter it started from (and the run that trained it).
  if (const json& warm = field(run, "warmStart"); warm.is_object()) {
    std::string from = "model " + short_id(str(warm, "modelId"));
    if (!str(warm, "sourceRunId").empty()) from += " (trained by run " + short_id(str(warm, "sourceRunId")) + ")";
    state.push_back({"Warm start", from + ", its weights"});
  }
  if (const json& smoke = field(run, "smoke"); smoke.is_object()) state.push_back({"Smoke check", smoke_text(smoke)});
  if (!str(run, "configName").empty()) state.push_back({"Config name", str(run, "configName")});
  if (!str(run, "description").empty()) state.push_back({"Description", str(run, "description")});
  if (const json& judges = field(run, "judgeInstructions"); judges.is_array()) {
    for (const auto& j : judges) {
      state.push_back({"Judge instructions", str(j, "grader") + " (" + str(j, "at") + "): " + str(j, "graderInstructionsSource")});
    }
  }

  std::vector<std::pair<std::string, std::string>> results;
  const json& latest = field(run, "latest");
  if (auto reward = num(latest, "reward")) results.push_back({"Reward", format_number(*reward)});
  if (auto loss = num(latest, "loss")) results.push_back({"Loss", format_number(*loss)});
  if (auto v = num(latest, "validationLoss")) results.push_back({"Validation loss", format_number(*v)});
  if (auto t = num(latest, "tokensPerSecond")) {
    results.push_back({"Tokens/s", format_thousands(static_cast<int64_t>(*t + 0.5))});
  }
  if (!str(run, "adapterPath").empty()) results.push_back({"Adapter", str(run, "adapterPath")});
  if (!str(run, "modelId").empty()) results.push_back({"Model", str(run, "modelId") + " (trainer trained-models get)"});
  const json& split = field(run, "dataSplit");
  if (auto trained = num(split, "trainRows")) {
    std::string rows = format_thousands(static_cast<int64_t>(*trained)) + " trained";
    if (auto held = num(split, "validationRows"); held && *held > 0) {
      rows += ", " + format_thousands(static_cast<int64_t>(*held)) +
              (split.value("heldOut", false) ? " held out for validation" : " validated");
    }
    results.push_back({"Rows", rows});
  }
  const auto memory = memory_rows(run);

  std::vector<std::pair<std::string, std::string>> cost;
  if (!cost_text(run).empty()) cost.push_back({device_kind(run) + " time", cost_text(run)});
  const json& claim = field(run, "claim");
  if (claim.is_object()) {
    std::string devices = claim.contains("devices") ? claim["devices"].dump() : "";
    cost.push_back({"Claim", str(claim, "state") + " " + devices + " in pool " + str(claim, "pool")});
    if (std::string place = queue_text(claim); !place.empty()) cost.push_back({"Queue", place});
  }
  // The device indices the current attempt was granted, kept after its claim is released.
  const json& placement = field(run, "placement");
  if (placement.is_object()) {
    std::string ids;
    if (placement.contains("deviceIds") && placement["deviceIds"].is_array()) {
      for (const auto& id : placement["deviceIds"]) ids += (ids.empty() ? "" : ",") + id.dump();
    }
    cost.push_back({"Placement", str(placement, "backend") + " " + str(placement, "job") + ", pool " +
                                     str(placement, "pool") + (ids.empty() ? "" : ", devices " + ids)});
  }

  const auto pause = pause_rows(run);

  // What identifies the record, apart from what it costs.
  std::vector<std::pair<std::string, std::string>> record;
  record.push_back({"Created", str(run, "createdAt")});
  record.push_back({"Updated", str(run, "updatedAt")});
  if (!str(run, "submissionId").empty()) record.push_back({"Submission", str(run, "submissionId")});
  if (!str(run, "settingsSha").empty()) record.push_back({"Settings sha", str(run, "settingsSha")});

  // One alignment across all sections, so the values line up.
  std::string out;
  auto section = [&](const char* title, const std::vector<std::pair<std::string, std::string>>& rows) {
    if (rows.empty()) return;
    size_t width = 0;
    for (const auto& s : {state, pause, results, memory, cost, record}) {
      for (const auto& [k, v] : s) width = std::max(width, k.size());
    }
    out += paint(title, "1", style.color) + "\n";
    for (const auto& [k, v] : rows) {
      out += "  " + k + ":" + std::string(width - k.size() + 2, ' ') + v + "\n";
    }
  };
  section("State", state);
  section("Pause", pause);
  section("Results", results);
  section("Memory", memory);
  section("Cost", cost);
  section("Record", record);
  return out;
}

std::string judge_instructions_text(const json& judges) {
  std::string out;
  if (!judges.is_array()) return out;
  for (const auto& j : judges) {
    out += "Judge instructions of " + str(j, "grader") + " (" + str(j, "at") + "): " + str(j, "graderInstructionsSource") + "\n";
  }
  return out;
}

std::string run_summary(const json& run) {
  const std::string phase = str(run, "phase");
  std::string out = "Run " + str(run, "runId") + " " + phase;
  const json& progress = field(run, "progress");
  if (integer(progress, "totalSteps") > 0) {
    out += " after " + std::to_string(integer(progress, "step")) + "/" +
           std::to_string(integer(progress, "totalSteps")) + " steps";
  }
  if (auto elapsed = training_elapsed_seconds(run)) out += " in " + format_duration(*elapsed);
  out += "\n";
  std::vector<std::pair<std::string, std::string>> rows;
  const json& latest = field(run, "latest");
  if (auto reward = num(latest, "reward")) rows.push_back({"final reward", format_number(*reward)});
  else if (auto loss = num(latest, "loss")) rows.push_back({"final loss", format_number(*loss)});
  if (auto v = num(latest, "validationLoss")) rows.push_back({"validation loss", format_number(*v)});
  if (auto t = num(latest, "tokensPerSecond")) {
    rows.push_back({"tokens/s", format_thousands(static_cast<int64_t>(*t + 0.5))});
  }
  if (!cost_text(run).empty()) rows.push_back({"cost", cost_text(run)});
  if (!str(run, "adapterPath").empty()) rows.push_back({"adapter", str(run, "adapterPath")});
  if (!str(run, "modelId").empty()) rows.push_back({"model", str(run, "modelId")});
  if (!str(run, "failureReason").empty()) rows.push_back({"failure", first_line(str(run, "failureReason"))});
  std::string fields = render_fields(rows);
  // Indent the fields under the headline.
  size_t start = 0;
  while (start < fields.size()) {
    size_t end = fields.find('\n', start);
    out += "  " + fields.substr(start, end - start + 1);
    start = end + 1;
  }
  return out;
}

// A pipeline stage's run: "PIPELINE/STAGE" (the pipeline's short id); "-" for any other run.
std::string pipeline_text(const json& run) {
  const json& p = field(run, "pipeline");
  if (!p.is_object()) return "-";
  return short_id(str(p, "pipelineId")) + "/" + str(p, "stage");
}

std::vector<std::string> run_list_header() {
  return {"RUN", "WORKLOAD", "BASE MODEL", "PHASE", "STEP", "LOSS", "CONFIG", "PIPELINE", "CREATED"};
}

std::vector<std::string> run_list_row(const json& run, double now_epoch_seconds) {
  const json& progress = field(run, "progress");
  std::string step;
  if (integer(progress, "totalSteps") > 0) {
    step = std::to_string(integer(progress, "step")) + "/" + std::to_string(integer(progress, "totalSteps"));
  }
  // A reinforcement run's policy loss says little (often 0): its mean reward, labelled, instead.
  const json& latest = field(run, "latest");
  std::string result;
  if (auto reward = num(latest, "reward")) result = "reward " + format_number(*reward);
  else if (auto loss = num(latest, "loss")) result = format_number(*loss);
  return {short_id(str(run, "runId")),
          workload_name(run),
          str(run, "baseModel"),
          str(run, "phase"),
          step,
          result,
          str(run, "configName"),
          pipeline_text(run),
          age_text(str(run, "createdAt"), now_epoch_seconds)};
}

std::string erase_drawn_line(size_t drawn_width, size_t columns) {
  std::string out = "\r\033[K";
  if (columns == 0 || drawn_width <= columns) return out;
  const size_t rows = (drawn_width + columns - 1) / columns;
  for (size_t i = 1; i < rows; ++i) out += "\033[A\033[K";
  return out;
}

std::string age_text(const std::string& time, double now_epoch_seconds) {
  auto t = parse_rfc3339(time);
  if (!t) return "";
  double age = now_epoch_seconds - *t;
  if (age < 0) age = 0;
  char buf[32];
  if (age < 60) std::snprintf(buf, sizeof buf, "%.0fs ago", age);
  else if (age < 3600) std::snprintf(buf, sizeof buf, "%.0fm ago", std::floor(age / 60));
  else if (age < 86400) std::snprintf(buf, sizeof buf, "%.0fh ago", std::floor(age / 3600));
  else std::snprintf(buf, sizeof buf, "%.0fd ago", std::floor(age / 86400));
  return buf;
}

}  // namespace trainer::cli
