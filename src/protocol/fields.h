// One description per protocol struct drives both directions of its JSON: for each field its
// JSON name, its member and whether it is required, so writing and reading cannot drift apart
// and every reader gives the same errors ("step.step: must be an integer").
//
// A struct is described by specialising Description:
//
//   template <> struct fields::Description<Paused> {
//     static constexpr auto fields = std::make_tuple(fields::required("step", &Paused::step),
//                                                    fields::required("snapshotId", &Paused::snapshot_id));
//   };
//
// then `fields::write(out, e)` and `fields::read(in, &e)` encode and decode it. Member types:
// int64_t, int, double, bool, std::string, nlohmann::json (an object), another described struct,
// a std::vector of described structs, a std::map from names to described structs (a JSON object),
// and std::optional of any of these (with `optional`). `.checked(fn)` adds a check of the value.
// Integers accept an integral float (2.0); a double reads null as NaN (JSON has no NaN: a
// non-finite value is written as null). Unknown keys are ignored. Header-only, torch-free.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::protocol::fields {

enum class Presence {
  kRequired,  // always written; reading fails without it ("required")
  kDefault,   // always written; absent or null keeps the member's default
  kIfSet,     // written when set (a non-empty string, a positive number, true, a non-empty object);
              // absent or null keeps the default
  kOptional,  // a std::optional member: written when it holds a value; absent or null: empty
  kIfObject,  // a JSON member: written and read only when it is an object (anything else is ignored)
};

template <class S, class T>
struct Field {
  const char* key;
  T S::*member;
  Presence presence;
  // What a value read must also be (a bound, a format): invalid_field(key, why) when it is not.
  // Not applied to kOptional members.
  Status (*check)(const std::string& key, const T& value) = nullptr;
  constexpr Field checked(Status (*fn)(const std::string& key, const T& value)) const {
    Field f = *this;
    f.check = fn;
    return f;
  }
};

template <class S, class T>
constexpr Field<S, T> required(const char* key, T S::*member) { return {key, member, Presence::kRequired}; }
template <class S, class T>
constexpr Field<S, T> defaulted(const char* key, T S::*member) { return {key, member, Presence::kDefault}; }
template <class S, class T>
constexpr Field<S, T> if_set(const char* key, T S::*member) { return {key, member, Presence::kIfSet}; }
template <class S, class T>
constexpr Field<S, std::optional<T>> optional(const char* key, std::optional<T> S::*member) {
  return {key, member, Presence::kOptional};
}
template <class S>
constexpr Field<S, nlohmann::json> if_object(const char* key, nlohmann::json S::*member) {
  return {key, member, Presence::kIfObject};
}

// Specialise with `static constexpr auto fields = std::make_tuple(...)` (see above).
template <class S>
struct Description;

template <class T>
concept Described = requires { Description<T>::fields; };

template <Described S>
void write(nlohmann::json& out, const S& value);
template <Described S>
Status read(const nlohmann::json& in, S* value);

namespace detail {

using nlohmann::json;

inline Status read_value(const std::string& key, const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    *out = static_cast<int64_t>(v.get<double>());
  } else {
    return invalid_field(key, "must be an integer");
  }
  return Status::ok();
}

inline Status read_value(const std::string& key, const json& v, int* out) {
  int64_t wide = 0;
  TRAINER_RETURN_IF_ERROR(read_value(key, v, &wide));
  *out = static_cast<int>(wide);
  return Status::ok();
}

inline Status read_value(const std::string& key, const json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
  } else if (v.is_null()) {
    *out = std::numeric_limits<double>::quiet_NaN();
  } else {
    return invalid_field(key, "must be a number");
  }
  return Status::ok();
}

inline Status read_value(const std::string& key, const json& v, std::string* out) {
  if (!v.is_string()) return invalid_field(key, "must be a string");
  *out = v.get<std::string>();
  return Status::ok();
}

inline Status read_value(const std::string& key, const json& v, bool* out) {
  if (!v.is_boolean()) return invalid_field(key, "must be true or false");
  *out = v.get<bool>();
  return Status::ok();
}

inline Status read_value(const std::string& key, const json& v, json* out) {
  if (!v.is_object()) return invalid_field(key, "must be an object");
  *out = v;
  return Status::ok();
}

template <Described S>
Status read_value(const std::string& key, const json& v, S* out) {
  if (!v.is_object()) return invalid_field(key, "must be an object");
  return read(v, out).with_field(key);
}

template <Described S>
Status read_value(const std::string& key, const json& v, std::vector<S>* out) {
  if (!v.is_array()) return invalid_field(key, "must be an array");
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    S item{};
    TRAINER_RETURN_IF_ERROR(read_value(key + "[" + std::to_string(i) + "]", v[i], &item));
    out->push_back(std::move(item));
  }
  return Status::ok();
}

template <Described S>
Status read_value(const std::string& key, const json& v, std::map<std::string, S>* out) {
  if (!v.is_object()) return invalid_field(key, "must be an object");
  out->clear();
  for (const auto& [name, item] : v.items()) {
    S value{};
    TRAINER_RETURN_IF_ERROR(read_value(key + "." + name, item, &value));
    (*out)[name] = std::move(value);
  }
  return Status::ok();
}

template <class T>
inline constexpr bool kIsOptional = false;
template <class T>
inline constexpr bool kIsOptional<std::optional<T>> = true;

template <class T>
inline constexpr bool kIsMap = false;
template <class V>
inline constexpr bool kIsMap<std::map<std::string, V>> = true;

template <class T>
json write_value(const T& value) {
  if constexpr (Described<T>) {
    json out;
    write(out, value);
    return out;
  } else if constexpr (kIsMap<T>) {
    json out = json::object();
    for (const auto& [name, item] : value) out[name] = write_value(item);
    return out;
  } else if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string> &&
                       !std::is_same_v<T, json>) {
    json list = json::array();
    for (const auto& item : value) list.push_back(write_value(item));
    return list;
  } else {
    return json(value);
  }
}

// Whether a kIfSet value is written.
inline bool is_set(const json& written) {
  if (written.is_boolean()) return written.get<bool>();
  if (written.is_string()) return !written.get_ref<const std::string&>().empty();
  if (written.is_number()) return written.get<double>() > 0;
  if (written.is_object() || written.is_array()) return !written.empty();
  return !written.is_null();
}

template <class S, class T>
void write_field(json& out, const S& s, const Field<S, T>& f) {
  const T& value = s.*f.member;
  if constexpr (kIsOptional<T>) {
    if (value) out[f.key] = write_value(*value);
  } else {
    if constexpr (std::is_same_v<T, json>) {
      if (f.presence == Presence::kIfObject) {
        if (value.is_object()) out[f.key] = value;
        return;
      }
    }
    json written = write_value(value);
    if (f.presence != Presence::kIfSet || is_set(written)) out[f.key] = std::move(written);
  }
}

template <class S, class T>
Status read_field(const json& in, S* s, const Field<S, T>& f) {
  T& value = s->*f.member;
  auto it = in.find(f.key);
  const bool absent = it == in.end();
  if constexpr (kIsOptional<T>) {
    value.reset();
    if (absent || it->is_null()) return Status::ok();
    typename T::value_type read_into{};
    TRAINER_RETURN_IF_ERROR(read_value(f.key, *it, &read_into));
    value = std::move(read_into);
    return Status::ok();
  } else {
    auto read_checked = [&]() -> Status {
      TRAINER_RETURN_IF_ERROR(read_value(f.key, *it, &value));
      return f.check != nullptr ? f.check(f.key, value) : Status::ok();
    };
    if (f.presence == Presence::kRequired) {
      if (absent) return invalid_field(f.key, "required");
      return read_checked();
    }
    if constexpr (std::is_same_v<T, json>) {
      if (f.presence == Presence::kIfObject) {
        if (!absent && it->is_object()) value = *it;
        return Status::ok();
      }
    }
    if (absent || it->is_null()) return Status::ok();
    return read_checked();
  }
}

}  // namespace detail

template <Described S>
void write(nlohmann::json& out, const S& value) {
  out = nlohmann::json::object();
  std::apply([&](const auto&... f) { (detail::write_field(out, value, f), ...); }, Description<S>::fields);
}

// The first error, naming its field; the fields before it are read.
template <Described S>
Status read(const nlohmann::json& in, S* value) {
  Status st = Status::ok();
  auto one = [&](const auto& f) {
    if (st.is_ok()) st = detail::read_field(in, value, f);
  };
  std::apply([&](const auto&... f) { (one(f), ...); }, Description<S>::fields);
  return st;
}

}  // namespace trainer::protocol::fields
