#include "service/config_fields.h"

#include "common/spelling.h"

namespace trainer::service::config_fields {

using json = nlohmann::json;

Status check_keys(const json& obj, const std::string& where, const std::set<std::string>& allowed) {
  for (const auto& [k, v] : obj.items()) {
    if (!allowed.count(k)) {
      const auto near = nearest_name(k, std::vector<std::string>(allowed.begin(), allowed.end()));
      std::string known;
      for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + a;
      return invalid_argument(where + k + ": unknown field; " +
                              (near ? "did you mean " + *near + "?" : "the fields here are " + known));
    }
  }
  return Status::ok();
}

Result<int64_t> non_negative_int(const json& obj, const std::string& key, const std::string& where, int64_t fallback,
                                 int64_t max) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) {
    return invalid_argument(where + key + ": must be an integer between 0 and " + std::to_string(max) + ", got " +
                            v.dump());
  }
  return v.get<int64_t>();
}

Result<std::string> string_field(const json& obj, const std::string& key, const std::string& where, bool required) {
  if (!obj.contains(key)) {
    if (required) return invalid_argument(where + key + ": required");
    return std::string();
  }
  if (!obj[key].is_string() || obj[key].get<std::string>().empty()) {
    return invalid_argument(where + key + ": must be a non-empty string, got " + obj[key].dump());
  }
  return obj[key].get<std::string>();
}

Status not_an_object(const std::string& where) {
  return invalid_argument(where.substr(0, where.size() - 1) + ": must be an object");
}

bool is_http_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

}  // namespace trainer::service::config_fields
