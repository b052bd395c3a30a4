// The OTLP/HTTP JSON encoding of attribute values, shared by the metrics (otlp.cpp) and the
// traces (tracing.cpp) exporters: protobuf's JSON mapping, 64-bit integers as decimal strings,
// non-finite doubles as strings. Private to src/telemetry.
#pragma once

#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/telemetry.h"

namespace trainer::telemetry::otlp_encoding {

// A double as protobuf's JSON mapping writes it (a NaN loss is worth sending).
inline nlohmann::json number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

// An AnyValue.
inline nlohmann::json any_value(const AttributeValue& value) {
  struct Visitor {
    nlohmann::json operator()(const std::string& s) const { return {{"stringValue", s}}; }
    nlohmann::json operator()(bool b) const { return {{"boolValue", b}}; }
    nlohmann::json operator()(int64_t i) const { return {{"intValue", std::to_string(i)}}; }
    nlohmann::json operator()(double d) const { return {{"doubleValue", number(d)}}; }
  };
  return std::visit(Visitor{}, value);
}

// A KeyValue list.
inline nlohmann::json key_values(const std::vector<Attribute>& attributes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : attributes) out.push_back({{"key", a.key}, {"value", any_value(a.value)}});
  return out;
}

}  // namespace trainer::telemetry::otlp_encoding
