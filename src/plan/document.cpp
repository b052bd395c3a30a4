// JSON and YAML documents users write (plans, override files, grids, model descriptors): read
// into JSON, and a field found back in the text (declared in plan/document.h and plan/plan.h).
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/json_parse.h"
#include "plan/document.h"
#include "plan/plan.h"

namespace trainer::plan {
namespace {

using json = nlohmann::json;

// ---- YAML to JSON -------------------------------------------------------------------------

// Plain YAML scalars are typed the way YAML 1.2's core schema types them; quoted ones stay strings.
json yaml_scalar(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted
  if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(s.c_str(), &end, 10);
  if (end && *end == '\0' && errno == 0) return i;
  errno = 0;
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == '\0' && errno == 0 && s.find_first_of("0123456789") != std::string::npos) return d;
  return s;
}

json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar(node);
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
  }
  return nullptr;
}

}  // namespace

Result<json> parse_document(std::string_view text, std::string_view source) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    return invalid_argument(std::string(source) + ": the document is empty");
  }
  if (text[first] == '{') return parse_json(text, source);
  try {
    return yaml_to_json(YAML::Load(std::string(text)));
  } catch (const YAML::Exception& e) {
    return invalid_argument(std::string(source) + ":" + std::to_string(e.mark.line + 1) + ":" +
                            std::to_string(e.mark.column + 1) + ": not valid YAML: " + e.msg);
  }
}

std::optional<TextPosition> locate_field(std::string_view text, std::string_view field) {
  // "a.b[2].c" -> {"a", "b", "[2]", "c"}
  std::vector<std::string> parts;
  std::string cur;
  for (char c : field) {
    if (c == '.' || c == '[') {
      if (!cur.empty()) parts.push_back(cur);
      cur = c == '[' ? "[" : "";
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  try {
    YAML::Node node = YAML::Load(std::string(text));
    std::optional<YAML::Mark> found;
    for (const auto& part : parts) {
      if (part.front() == '[') {
        const size_t index = std::strtoul(part.c_str() + 1, nullptr, 10);
        if (!node.IsSequence() || index >= node.size()) break;
        const YAML::Node& seq = node;
        node.reset(seq[index]);  // reset() rebinds; operator= would write into the document
        found = node.Mark();
        continue;
      }
      if (!node.IsMap()) break;
      bool matched = false;
      for (const auto& kv : node) {
        if (kv.first.IsScalar() && kv.first.Scalar() == part) {
          found = kv.first.Mark();
          node.reset(kv.second);
          matched = true;
          break;
        }
      }
      if (!matched) break;
    }
    if (!found || found->is_null()) return std::nullopt;
    return TextPosition{found->line + 1, found->column + 1};
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

}  // namespace trainer::plan
