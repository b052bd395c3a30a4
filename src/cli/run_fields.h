// Typed reads of a run's JSON fields for the CLI's run views (run_view.cpp, run_attempts.cpp):
// absent or of another type reads as "", nullopt, 0 or null, so a view never throws on an older
// or partial document.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::cli::run_fields {

using json = nlohmann::json;

inline std::string str(const json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) return "";
  return doc[key].get<std::string>();
}

inline std::optional<double> num(const json& doc, const char* key) {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number()) return std::nullopt;
  return doc[key].get<double>();
}

inline int64_t integer(const json& doc, const char* key) {
  auto v = num(doc, key);
  return v ? static_cast<int64_t>(*v) : 0;
}

inline const json& field(const json& doc, const char* key) {
  static const json kNull;
  if (!doc.is_object() || !doc.contains(key)) return kNull;
  return doc[key];
}

}  // namespace trainer::cli::run_fields
