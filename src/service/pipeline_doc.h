// What both halves of the pipelines share (pipelines.cpp: the requests; pipeline_steps.cpp: the
// step that starts and follows the stages): the phase and stage-state names and the helpers that
// read a stored pipeline document. Internal to src/service.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::service::pipeline_doc {

using json = nlohmann::json;

inline constexpr const char* kKind = "pipeline";
// Pipeline phases.
inline constexpr const char* kRunning = "RUNNING";
inline constexpr const char* kInterrupted = "INTERRUPTED";
inline constexpr const char* kCompleted = "COMPLETED";
inline constexpr const char* kFailed = "FAILED";
inline constexpr const char* kCancelled = "CANCELLED";
// Stage states.
inline constexpr const char* kStagePending = "PENDING";
inline constexpr const char* kStageRunning = "RUNNING";
inline constexpr const char* kStageCompleted = "COMPLETED";
inline constexpr const char* kStageFailed = "FAILED";
inline constexpr const char* kStageCancelled = "CANCELLED";
inline constexpr const char* kStageSkipped = "SKIPPED";  // never started: an earlier stage stopped the pipeline

// The id fields a stage records, one per kind of thing a stage starts.
inline constexpr const char* kStageIds[] = {"runId", "evaluationId", "curationId", "distillationId"};

// `j[key]` when it is a string, else "".
inline std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

inline std::string stage_label(const json& stage) { return "stage '" + text(stage, "name") + "'"; }

// A run plan's fields as a train stage holds them: the stage's body with kind "run".
inline json run_plan_of(const json& body) {
  json plan = body;
  plan["kind"] = "run";
  return plan;
}

// Whether the stage has started `key`'s kind of thing (documents from before a kind existed lack it).
inline bool has_id(const json& stage, const char* key) { return stage.value(key, json(nullptr)).is_string(); }

}  // namespace trainer::service::pipeline_doc
