// The plan's strict reader (internal to src/plan/): one JSON object's fields read by name and type,
// ranges from the field table (bounds.h), every error kept with the field's dotted path so that
// one answer names every mistake, fields no read asked for refused with a "did you mean".
// plan.cpp reads the plan's objects with it.
#pragma once

#include <algorithm>
#include <cassert>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/spelling.h"
#include "common/status.h"
#include "plan/bounds.h"

namespace trainer::plan {

using json = nlohmann::json;

// ---- every error of a plan, not only the first ----------------------------------------------

// The errors a plan's reading found, in reading order. A reader keeps an error and reads on, so
// that one answer names every mistake; an error that leaves the rest of its object unreadable
// (a term of no known kind) ends that object's reading, and its caller keeps it.
class Problems {
 public:
  void keep(Status st) {
    if (!st.is_ok()) list_.push_back(std::move(st));
  }
  bool empty() const { return list_.empty(); }
  std::vector<Status>& list() { return list_; }

 private:
  std::vector<Status> list_;
};

// ---- a strict reader over one JSON object ---------------------------------------------------

// Reads the fields of one object of the plan; every field read is remembered so that the
// remaining ones can be refused by name. Ranges come from the field table; errors blame the
// dotted path of the field.
class ObjectReader {
 public:
  // `spec_path` is the path the field table knows the object by when it differs from the one
  // messages blame ("config.reward.terms[]" for "config.reward.terms[2]").
  ObjectReader(Problems& problems, const json& obj, std::string path, std::string spec_path = {})
      : problems_(problems), obj_(obj), path_(std::move(path)), spec_path_(std::move(spec_path)) {}

  std::string field_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  const json* find(const std::string& key) {
    seen_.push_back(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status fail(const std::string& key, std::string message) const {
    return invalid_field(field_path(key), std::move(message));
  }

  Status read_string(const std::string& key, std::string* out, bool required) {
    const json* v = find(key);
    if (!v) return required ? fail(key, "required field is missing") : Status::ok();
    if (!v->is_string()) return fail(key, "must be a string, got " + v->dump());
    *out = v->get<std::string>();
    if (required && out->empty()) return fail(key, "must not be empty");
    return Status::ok();
  }

  Status read_optional_string(const std::string& key, std::optional<std::string>* out) {
    const json* v = find(key);
    if (!v) return Status::ok();
    if (!v->is_string()) return fail(key, "must be a string, got " + v->dump());
    *out = v->get<std::string>();
    return Status::ok();
  }

  Status read_int(const std::string& key, int64_t* out, bool* present = nullptr) {
    const FieldSpec& spec = spec_of(key);
    const json* v = find(key);
    if (present) *present = v != nullptr;
    if (!v) return Status::ok();
    if (!v->is_number_integer()) return fail(key, "must be an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    const bool below = static_cast<double>(x) < spec.lo;
    const bool above = std::isfinite(spec.hi) && static_cast<double>(x) > spec.hi;
    if (below || above) {
      return fail(key, (std::isfinite(spec.hi) ? "must be between " + field_bound_text(spec.lo) + " and " + field_bound_text(spec.hi)
                                               : "must be at least " + field_bound_text(spec.lo)) +
                           ", got " + std::to_string(x));
    }
    *out = x;
    return Status::ok();
  }

  template <typename Int>
  Status read_int_as(const std::string& key, Int* out) {
    int64_t x = static_cast<int64_t>(*out);
    TRAINER_RETURN_IF_ERROR(read_int(key, &x));
    *out = static_cast<Int>(x);
    return Status::ok();
  }

  Status read_optional_int(const std::string& key, std::optional<int>* out) {
    int64_t x = 0;
    bool present = false;
    TRAINER_RETURN_IF_ERROR(read_int(key, &x, &present));
    if (present) *out = static_cast<int>(x);
    return Status::ok();
  }

  Status read_double(const std::string& key, double* out) {
    const FieldSpec& spec = spec_of(key);
    const json* v = find(key);
    if (!v) return Status::ok();
    if (!v->is_number()) return fail(key, "must be a number, got " + v->dump());
    const double x = v->get<double>();
    const bool ok = std::isfinite(x) && (spec.lo_open ? x > spec.lo : x >= spec.lo) &&
                    (spec.hi_open ? x < spec.hi : x <= spec.hi);
    if (!ok) return fail(key, "must be in " + field_range_text(spec) + ", got " + v->dump());
    *out = x;
    return Status::ok();
  }

  Status read_bool(const std::string& key, bool* out) {
    const json* v = find(key);
    if (!v) return Status::ok();
    if (!v->is_boolean()) return fail(key, "must be true or false, got " + v->dump());
    *out = v->get<bool>();
    return Status::ok();
  }

  // Returns the nested object at `key` (an empty one when absent, or when it is not an object).
  Status read_object(const std::string& key, const json** out) {
    static const json kEmpty = json::object();
    const json* v = find(key);
    if (!v) {
      *out = &kEmpty;
      return Status::ok();
    }
    if (!v->is_object()) {
      *out = &kEmpty;  // read on as if absent: the error is kept, and the rest of the plan read
      return fail(key, "must be an object, got " + v->dump());
    }
    *out = v;
    return Status::ok();
  }

  // Keeps an error for every field that no read asked for, suggesting the nearest one that is.
  void refuse_unknown() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (std::find(seen_.begin(), seen_.end(), it.key()) != seen_.end()) continue;
      if (auto near = nearest_name(it.key(), seen_)) {
        problems_.keep(fail(it.key(), "unknown field; did you mean " + *near + "?"));
        continue;
      }
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      problems_.keep(fail(it.key(), "unknown field; " + (path_.empty() ? std::string("a plan") : path_) + " takes " + known));
    }
  }

 private:
  const FieldSpec& spec_of(const std::string& key) const {
    const FieldSpec* spec = find_field(spec_path_.empty() ? field_path(key) : spec_path_ + "." + key);
    assert(spec && "every field the parser reads is in kFields");
    return *spec;
  }

  Problems& problems_;
  const json& obj_;
  std::string path_;
  std::string spec_path_;
  std::vector<std::string> seen_;  // in reading order, which is the documented order
};

template <typename Enum, size_t N>
Status read_enum(ObjectReader& r, const std::string& key, const std::pair<const char*, Enum> (&names)[N],
                 bool case_insensitive, Enum* out) {
  std::optional<std::string> text;
  TRAINER_RETURN_IF_ERROR(r.read_optional_string(key, &text));
  if (!text) return Status::ok();
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::string allowed;
  std::vector<std::string> candidates;
  for (const auto& [name, value] : names) {
    if (*text == name || (case_insensitive && lower(*text) == lower(name))) {
      *out = value;
      return Status::ok();
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string("\"") + name + "\"";
    candidates.push_back(name);
  }
  // Only a near miss is suggested ("cosin", "grop"): "fp16" is a choice, not a typo of FP32.
  auto near = nearest_name(*text, candidates);
  if (near && edit_distance(*text, *near) > std::max<size_t>(1, text->size() / 4)) near.reset();
  return r.fail(key, "must be one of " + allowed + ", got \"" + *text + "\"" +
                         (near ? "; did you mean " + *near + "?" : ""));
}

}  // namespace trainer::plan
