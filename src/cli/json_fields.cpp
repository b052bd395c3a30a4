#include "cli/json_fields.h"

#include <algorithm>
#include <cctype>

#include "common/spelling.h"

namespace trainer::cli {
namespace {

using nlohmann::json;

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const size_t last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// The items of a list document, or null when the document is one record.
const json* list_items(const json& doc, const std::vector<std::string>& list_keys) {
  if (doc.is_array()) return &doc;
  if (!doc.is_object()) return nullptr;
  for (const auto& key : list_keys) {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_array()) return &*it;
  }
  return nullptr;
}

void add_keys(const json& object, std::vector<std::string>* names) {
  if (!object.is_object()) return;
  for (const auto& [key, value] : object.items()) {
    if (std::find(names->begin(), names->end(), key) == names->end()) names->push_back(key);
  }
}

json select_from(const json& object, const std::vector<std::string>& fields) {
  json out = json::object();
  for (const auto& f : fields) out[f] = object.is_object() && object.contains(f) ? object[f] : json(nullptr);
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::optional<std::vector<std::string>> parse_field_list(const std::string& text, std::string* error) {
  std::vector<std::string> fields;
  if (trim(text).empty()) return fields;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string name = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (name.empty()) {
      *error = "--json \"" + text + "\" has an empty field name; write the fields like runId,phase";
      return std::nullopt;
    }
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) fields.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

std::vector<std::string> list_keys_for(const std::vector<std::string>& path) {
  std::vector<std::string> keys;
  for (auto word = path.rbegin(); word != path.rend(); ++word) {
    std::string key;
    bool upper = false;
    for (char c : *word) {
      if (c == '-') {
        upper = true;
        continue;
      }
      key += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
    keys.push_back(key);
  }
  return keys;
}

std::vector<std::string> offered_fields(const json& doc, const std::vector<std::string>& list_keys) {
  std::vector<std::string> names;
  if (const json* items = list_items(doc, list_keys)) {
    for (const auto& item : *items) add_keys(item, &names);
  } else {
    add_keys(doc, &names);
  }
  return names;
}

std::optional<json> select_fields(const json& doc, const std::vector<std::string>& fields,
                                  const std::vector<std::string>& list_keys, std::string* error) {
  const json* items = list_items(doc, list_keys);
  if (!items && !doc.is_object()) {
    *error = "--json selects fields of objects, and this answer is not one (use --jq)";
    return std::nullopt;
  }
  const std::vector<std::string> offered = offered_fields(doc, list_keys);
  // An empty list offers no names to check against: nothing is refused and nothing comes out.
  if (!items || !items->empty()) {
    for (const auto& f : fields) {
      if (std::find(offered.begin(), offered.end(), f) != offered.end()) continue;
      auto near = nearest_name(f, offered);
      *error = "--json: no field \"" + f + "\" in this answer" + (near ? " (did you mean " + *near + "?)" : "") +
               "; fields: " + join(offered);
      return std::nullopt;
    }
  }
  if (!items) return select_from(doc, fields);
  json out = json::array();
  for (const auto& item : *items) out.push_back(select_from(item, fields));
  return out;
}

}  // namespace trainer::cli
