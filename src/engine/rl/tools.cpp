// Tool calls of reinforcement runs (declared in rl/tools.h).
#include "engine/rl/tools.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

namespace trainer::engine::rl {
namespace {

using nlohmann::json;

// Most bytes of a tool's answer read (the rest is dropped and the call fails).
constexpr size_t kMaxAnswerBytes = size_t{1} << 20;
constexpr auto kPollInterval = std::chrono::milliseconds(5);

std::string slurp_and_remove(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  return s;
}

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

ToolAnswer run_tool(const std::string& command, const ToolCall& call, double timeout_seconds) {
  char in_tpl[] = "/tmp/trainer-tool-in-XXXXXX";
  char out_tpl[] = "/tmp/trainer-tool-out-XXXXXX";
  const int in_fd = ::mkstemp(in_tpl);
  const int out_fd = ::mkstemp(out_tpl);
  if (in_fd < 0 || out_fd < 0) {
    const std::string why = std::string("cannot create a temporary file: ") + std::strerror(errno);
    if (in_fd >= 0) ::close(in_fd), ::unlink(in_tpl);
    if (out_fd >= 0) ::close(out_fd), ::unlink(out_tpl);
    return failed_call(why);
  }
  const std::string request = json{{"name", call.name}, {"arguments", call.arguments}}.dump() + "\n";
  if (::write(in_fd, request.data(), request.size()) != static_cast<ssize_t>(request.size()) ||
      ::lseek(in_fd, 0, SEEK_SET) != 0) {
    ::close(in_fd), ::unlink(in_tpl);
    ::close(out_fd), ::unlink(out_tpl);
    return failed_call("cannot write the tool's request");
  }
  // Everything the child needs is built before fork: it calls only async-signal-safe functions.
  std::string path = command;
  char* argv[] = {path.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, 2);
    ::close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv);
    _exit(127);
  }
  ::close(in_fd);
  ::unlink(in_tpl);
  ::close(out_fd);
  if (pid < 0) {
    slurp_and_remove(out_tpl);
    return failed_call(command + ": cannot start: " + std::strerror(errno));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int status = 0;
  bool exited = false;
  while (!exited) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) {
      exited = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  if (!exited) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    slurp_and_remove(out_tpl);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", timeout_seconds);
    return failed_call("the tool ran past its " + std::string(buf) + " s timeout and was stopped");
  }
  std::string answer = slurp_and_remove(out_tpl);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 127 && answer.empty()) return failed_call(command + ": cannot be run (missing or not executable)");
  if (code != 0) return failed_call("the tool exited with code " + std::to_string(code));
  if (answer.size() > kMaxAnswerBytes) return failed_call("the tool's answer is over 1 MiB");
  json doc = json::parse(answer, nullptr, false);
  if (doc.is_discarded()) return failed_call("the tool's answer is not JSON: " + trimmed(answer).substr(0, 200));
  return {.content = doc.is_string() ? doc.get<std::string>() : doc.dump(), .failed = false, .error = ""};
}

}  // namespace trainer::engine::rl
