// What both halves of the distillations share (distillations.cpp: the requests; distillation_work.cpp:
// the work): the phase names, and how a source's rows split into decisions and chunks. Internal to
// src/service.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "service/service_core.h"

namespace trainer::service::distillation {

using json = nlohmann::json;

inline constexpr const char* kKind = "distillation";
inline constexpr const char* kPending = "PENDING";
inline constexpr const char* kSmoke = "SMOKE_TEST";
inline constexpr const char* kDistilling = "DISTILLING";
inline constexpr const char* kPaused = "PAUSED";
inline constexpr const char* kAssembling = "ASSEMBLING";
inline constexpr const char* kCompleted = "COMPLETED";
inline constexpr const char* kFailed = "FAILED";
inline constexpr const char* kCancelled = "CANCELLED";

// Whether `phase` is an end (COMPLETED, FAILED, CANCELLED).
bool ended(const std::string& phase);
// A decision {row, message} as "ROW:MSG".
std::string at_of(const json& d);
// Every decision of `rows`, in order: {row, message} of each assistant message.
std::vector<json> decisions_of(const std::vector<json>& rows);
// The smoke decisions: the request's list, or the first kSmokeDecisions.
std::vector<json> smoke_of(const json& doc, const std::vector<json>& decisions);
// The decisions of chunk `k`: 0 is the smoke pass; 1.. the others in order, kChunkDecisions each.
std::vector<json> chunk_of(const json& doc, const std::vector<json>& decisions, int64_t k);
// The chunks after the smoke pass.
int64_t rest_chunks(int64_t decisions, int64_t smoke);
// The source dataset's rows (doc.source.hash), as chat rows.
Result<std::vector<json>> load_rows(ServiceCore& core, const json& doc);

}  // namespace trainer::service::distillation
