// Tool calls of reinforcement runs (declared in rl/tools.h).
#include "engine/rl/tools.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/confinement.h"
#include "common/subprocess.h"

namespace trainer::engine::rl {
namespace {

using nlohmann::json;

// Most bytes of a tool's answer read (the rest is dropped and the call fails).
constexpr size_t kMaxAnswerBytes = size_t{1} << 20;

std::string trimmed(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

}  // namespace

std::optional<ParsedToolCall> find_tool_call(std::string_view text) {
  const std::string t = trimmed(text);
  if (t.size() < kToolCallClose.size() || t.compare(t.size() - kToolCallClose.size(), kToolCallClose.size(), kToolCallClose) != 0) {
    return std::nullopt;
  }
  ParsedToolCall out;
  const size_t open = t.rfind(kToolCallOpen);
  if (open == std::string::npos) {
    out.error = "the tool call has no opening " + std::string(kToolCallOpen);
    return out;
  }
  const size_t body_at = open + kToolCallOpen.size();
  const std::string body = trimmed(std::string_view(t).substr(body_at, t.size() - kToolCallClose.size() - body_at));
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    out.error = "the tool call is not a JSON object: " + body.substr(0, 200);
    return out;
  }
  if (!doc.contains("name") || !doc["name"].is_string() || doc["name"].get<std::string>().empty()) {
    out.error = "the tool call names no tool (a string \"name\")";
    return out;
  }
  ToolCall call;
  call.name = doc["name"].get<std::string>();
  if (doc.contains("arguments")) call.arguments = doc["arguments"];
  out.call = std::move(call);
  return out;
}

std::vector<std::string> declared_tool_names(const json& tools) {
  std::vector<std::string> names;
  if (!tools.is_array()) return names;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const json& f = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (f.contains("name") && f["name"].is_string()) names.push_back(f["name"].get<std::string>());
  }
  return names;
}

ToolAnswer failed_call(const std::string& why) {
  return {.content = json{{"error", why}}.dump(), .failed = true, .error = why};
}

// The argv that runs `command` as the job's confinement says (common/confinement.h: the tool sees
// its own file and interpreter, read-only, and `scratch`; no environment of the job's; the host's
// network only when the plan declared it, `network`, else none).
Result<std::vector<std::string>> tool_argv(const std::string& command, const std::string& scratch, bool network) {
  TRAINER_ASSIGN_OR_RETURN(ConfinementMode mode, user_code_confinement());
  if (mode == ConfinementMode::kNone) return std::vector<std::string>{command};
  TRAINER_ASSIGN_OR_RETURN(ConfinedExecutable exe, confined_executable(command));
  Confinement c;
  c.read_only = exe.mounts;
  c.scratch = scratch;
  c.network = network;
  return confined_argv(c, exe.argv);
}

ToolAnswer run_tool(const std::string& command, const ToolCall& call, double timeout_seconds, bool network) {
  auto scratch = make_scratch(std::filesystem::temp_directory_path().string());
  if (!scratch.is_ok()) return failed_call(scratch.status().message());
  struct Cleanup {
    std::string folder;
    ~Cleanup() { remove_scratch(folder); }
  } cleanup{*scratch};
  auto argv = tool_argv(command, *scratch, network);
  if (!argv.is_ok()) return failed_call(argv.status().message());
  SpawnOptions options;
  options.argv = std::move(*argv);
  options.stderr_stream = ChildStream::null();
  options.group = ChildGroup::kNewGroup;  // a timeout ends the tool and whatever it started
  options.unblock_signals = true;
  CaptureOptions capture;
  capture.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_seconds));
  capture.input = json{{"name", call.name}, {"arguments", call.arguments}}.dump() + "\n";
  capture.capture_stderr = false;
  Result<CapturedRun> run = run_captured(options, capture);
  if (!run.is_ok()) return failed_call(run.status().message());  // "could not start TOOL: fork: ..."
  if (run->timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", timeout_seconds);
    return failed_call("the tool ran past its " + std::string(buf) + " s timeout and was stopped");
  }
  std::string answer = std::move(run->out);
  const int code = run->exit_code;
  if (code == 127 && answer.empty()) return failed_call(command + ": cannot be run (missing or not executable)");
  if (code != 0) return failed_call("the tool exited with code " + std::to_string(code));
  if (answer.size() > kMaxAnswerBytes) return failed_call("the tool's answer is over 1 MiB");
  json doc = json::parse(answer, nullptr, false);
  if (doc.is_discarded()) return failed_call("the tool's answer is not JSON: " + trimmed(answer).substr(0, 200));
  return {.content = doc.is_string() ? doc.get<std::string>() : doc.dump(), .failed = false, .error = ""};
}

}  // namespace trainer::engine::rl
