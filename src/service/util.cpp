#include "service/util.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>

namespace trainer::service {

std::string rfc3339(double seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  int ms = static_cast<int>((seconds - static_cast<double>(t)) * 1000);
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string random_hex(int chars) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  std::string out;
  const char* digits = "0123456789abcdef";
  while (static_cast<int>(out.size()) < chars) out += digits[rng() & 15];
  return out;
}

bool is_hex(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status check_fields(const json& body, const std::set<std::string>& allowed) {
  if (!body.is_object()) return invalid_field("body", "must be a JSON object");
  for (const auto& [k, v] : body.items()) {
    if (!allowed.count(k)) return invalid_field(k, "unknown field");
  }
  return Status::ok();
}

Result<std::optional<std::string>> optional_string(const json& body, const std::string& key) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<std::string>();
  if (!body[key].is_string()) return invalid_field(key, "must be a string, got " + body[key].dump());
  return std::optional<std::string>(body[key].get<std::string>());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string last_lines(const std::string& path, int n) {
  std::string text = read_text(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return "(the log is empty)";  // e.g. a job killed before it wrote a line
  size_t pos = text.size();
  for (int i = 0; i < n && pos != std::string::npos && pos > 0; ++i) pos = text.rfind('\n', pos - 1);
  if (pos == std::string::npos) return text;
  return text.substr(pos + 1);
}

void flatten(const json& v, const std::string& prefix, json& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(x, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = v;
  }
}

std::string run_device_kind(const json& plan) {
  const json execution = plan.is_object() ? plan.value("execution", json::object()) : json::object();
  const json gpus = execution.is_object() ? execution.value("gpus", json(nullptr)) : json(nullptr);
  return gpus.is_number() && gpus.get<double>() == 0 ? "CPU" : "GPU";
}

json run_cost_json(const json& plan, double device_seconds, bool estimated) {
  return {{"deviceKind", run_device_kind(plan)},
          {"deviceSeconds", device_seconds},
          {"gpuSeconds", device_seconds},
          {"estimated", estimated}};
}

}  // namespace trainer::service
