// What comparisons.cpp (create, get, list) and comparison_steps.cpp (the kernel's "comparison"
// kind) share: a comparison's phases, its targets' statuses, and readers of stored documents.
// Internal to src/service.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace trainer::service::comparison {

// Phases of a comparison.
inline constexpr const char* kPreparing = "PREPARING";
inline constexpr const char* kRunning = "RUNNING";
inline constexpr const char* kCompleted = "COMPLETED";
inline constexpr const char* kPartial = "PARTIAL";
inline constexpr const char* kFailed = "FAILED";

// Statuses of a target: WAITING for its model's registration, EVALUATING, then COMPLETED,
// FAILED (its registration or evaluation failed) or REFUSED (at create: it has no model to score).
inline constexpr const char* kTargetWaiting = "WAITING";
inline constexpr const char* kTargetEvaluating = "EVALUATING";
inline constexpr const char* kTargetCompleted = "COMPLETED";
inline constexpr const char* kTargetFailed = "FAILED";
inline constexpr const char* kTargetRefused = "REFUSED";

// doc[key] when it is a string (stored documents may hold null where nothing was set), else `fallback`.
inline std::string text_of(const nlohmann::json& doc, const char* key, const std::string& fallback = "") {
  return doc.is_object() && doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : fallback;
}

// doc[key] when it is a number, else 0.
inline double number_of(const nlohmann::json& doc, const char* key) {
  return doc.is_object() && doc.contains(key) && doc[key].is_number() ? doc[key].get<double>() : 0.0;
}

}  // namespace trainer::service::comparison
