// Small helpers every command file of the CLI uses: printing, path segments, the time, and a
// field of a JSON answer as text.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "cli/format.h"

namespace trainer::cli {

// Writes `text` to stdout as it is (no newline added).
inline void out(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// `s` escaped as one segment of a URL path.
inline std::string seg(const std::string& s) { return Client::escape(s); }

// Wall-clock seconds since the Unix epoch.
inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// `doc[key]` as display text: strings as they are, arrays joined by commas, numbers formatted,
// null or absent as "".
inline std::string str(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key)) return "";
  const nlohmann::json& v = doc[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  if (v.is_array()) {
    std::string joined;
    for (const auto& item : v) {
      if (!joined.empty()) joined += ",";
      joined += item.is_string() ? item.get<std::string>() : item.dump();
    }
    return joined;
  }
  if (v.is_number()) return format_number(v.get<double>());
  return v.dump();
}

// A score (0..1) in `doc[key]` as "0.9250"; "-" when absent or null (nothing was scored).
inline std::string score_text(const nlohmann::json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", doc[key].get<double>());
  return buf;
}

}  // namespace trainer::cli
