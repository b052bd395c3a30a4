#include "cli/context.h"

#include <cstdlib>
#include <unistd.h>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/spelling.h"

namespace trainer::cli {

Context::Context(Invocation& invocation)
    : inv(invocation),
      client(resolve_trainer_url(invocation.get_or("trainer-url", ""), invocation.has("trainer-url"))) {
  const std::string output = inv.get_or("output", "text");
  if (output == "text") format = OutputFormat::kText;
  else if (output == "json") format = OutputFormat::kJson;
  else if (output == "json-compact") format = OutputFormat::kJsonCompact;
  else format_error = "unknown output format \"" + output + "\" for -o; use text, json or json-compact";
  const char* no_color = std::getenv("NO_COLOR");
  const bool colours_off = inv.has("no-color") || (no_color && *no_color);
  const char* term = std::getenv("TERM");
  const bool dumb = term && std::string(term) == "dumb";
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  color = tty && !colours_off && !dumb;
  redraw = tty && !colours_off && !dumb;
  stdin_tty = ::isatty(STDIN_FILENO) == 1;
}

std::string describe_failure(const CallError& error) {
  const std::string& message = error.status.message();
  if (error.field.empty() || message.rfind(error.field, 0) == 0) return message;
  return error.field + ": " + message;
}

int Context::fail(const std::string& message, int exit_code) {
  std::fflush(stdout);
  std::fprintf(stderr, "trainer: %s\n", message.c_str());
  return exit_code;
}

std::optional<nlohmann::json> Context::finish(bool ok, Response& response, CallError& error, const std::string& path,
                                              const nlohmann::json* body) {
  if (ok) return std::move(response.body);
  last_failure_code_ = error.transport ? kExitUnreachable : kExitError;
  std::string where;
  if (locate_field && !error.field.empty()) where = locate_field(error.field);
  const std::string line = describe_failure(error) + (error.transport ? "" : next_step(*this, error, path, body));
  fail(where.empty() ? line : where + ": " + line, last_failure_code_);
  return std::nullopt;
}

std::optional<nlohmann::json> Context::get(const std::string& path, int read_timeout_seconds) {
  Response r;
  CallError e;
  bool ok = client.get(path, &r, &e, read_timeout_seconds);
  return finish(ok, r, e, path, nullptr);
}

std::optional<nlohmann::json> Context::post(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.post(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

std::optional<nlohmann::json> Context::put(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.put(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

std::optional<nlohmann::json> Context::patch(const std::string& path, const nlohmann::json& body) {
  Response r;
  CallError e;
  bool ok = client.patch(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

namespace {

enum class Noun { kNone, kWorkload, kRun, kDataset, kBaseModel };

// The noun a blamed field names.
Noun noun_of_field(const std::string& field) {
  if (field == "workload") return Noun::kWorkload;
  if (field == "run") return Noun::kRun;
  if (field == "baseModel") return Noun::kBaseModel;
  if (field == "dataset" || field == "config.dataset" || field == "config.validationDataset" ||
      field == "evaluationDataset") {
    return Noun::kDataset;
  }
  return Noun::kNone;
}

// "/v1/workloads/abc/refs/base" -> {"workloads", "abc"}.
std::pair<std::string, std::string> collection_and_ref(const std::string& path) {
  std::string p = path.substr(0, path.find('?'));
  const std::string prefix = "/v1/";
  if (p.rfind(prefix, 0) != 0) return {};
  p = p.substr(prefix.size());
  const size_t slash = p.find('/');
  if (slash == std::string::npos) return {p, ""};
  std::string ref = p.substr(slash + 1);
  ref = ref.substr(0, ref.find('/'));
  std::string decoded;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size()) {
      decoded += static_cast<char>(std::strtol(ref.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      decoded += ref[i];
    }
  }
  return {p.substr(0, slash), decoded};
}

// The value of the dotted `field` in a request body ("config.dataset"), or "".
std::string body_value(const nlohmann::json* body, const std::string& field) {
  if (!body) return "";
  const nlohmann::json* node = body;
  size_t start = 0;
  while (start <= field.size()) {
    const size_t dot = field.find('.', start);
    const std::string key = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(key)) return "";
    node = &(*node)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node->is_string() ? node->get<std::string>() : "";
}

// Names listed at `path` under `key` (each item's "name"), quietly empty on any failure.
std::vector<std::string> known_names(Context& ctx, const std::string& path, const char* key) {
  Response r;
  CallError e;
  std::vector<std::string> names;
  if (!ctx.client.get(path, &r, &e) || !r.body.is_object()) return names;
  for (const auto& item : r.body.value(key, nlohmann::json::array())) {
    if (item.is_object() && item.contains("name") && item["name"].is_string()) {
      names.push_back(item["name"].get<std::string>());
    }
  }
  return names;
}

std::string did_you_mean(Context& ctx, const std::string& ref, const std::string& path, const char* key) {
  if (ref.empty()) return "";
  auto near = nearest_name(ref, known_names(ctx, path, key));
  return near ? "did you mean " + *near + "? " : "";
}

bool mentions(const std::string& message, const std::string& text) { return message.find(text) != std::string::npos; }

}  // namespace

std::string next_step(Context& ctx, const CallError& error, const std::string& path, const nlohmann::json* body) {
  if (error.status.code() != StatusCode::kNotFound) return "";
  const std::string& message = error.status.message();
  auto [collection, path_ref] = collection_and_ref(path);
  Noun noun = noun_of_field(error.field);
  std::string ref = body_value(body, error.field);
  if (noun == Noun::kNone || ref.empty()) {
    // A lookup by path: GET /v1/workloads/NAME, POST /v1/base-models/select {name}, ...
    if (collection == "workloads") noun = Noun::kWorkload;
    else if (collection == "runs") noun = Noun::kRun;
    else if (collection == "datasets") noun = Noun::kDataset;
    else if (collection == "base-models") noun = Noun::kBaseModel;
    ref = path_ref == "select" ? body_value(body, "name") : path_ref;
    if (noun == Noun::kBaseModel && error.field == "baseModel") ref = body_value(body, "baseModel");
  }
  switch (noun) {
    case Noun::kWorkload:
      if (mentions(message, "trainer workloads create")) return "";
      return "; " + did_you_mean(ctx, ref, "/v1/workloads", "workloads") + "Create it with `trainer workloads create " +
             (ref.empty() ? "NAME" : ref) + "`, or see `trainer workloads list`";
    case Noun::kRun:
      if (mentions(message, "trainer runs list")) return "";
      return "; see `trainer runs list` for the runs there are";
    case Noun::kDataset:
      if (mentions(message, "trainer datasets list")) return "";
      return "; " + did_you_mean(ctx, ref, "/v1/datasets", "datasets") + "See `trainer datasets list`";
    case Noun::kBaseModel:
      if (mentions(message, "baseModels")) return "";
      return "; " + did_you_mean(ctx, ref, "/v1/base-models?all=true", "baseModels") +
             "An operator adds a model to the deployment under `baseModels` in `trainerd --config`";
    case Noun::kNone:
      break;
  }
  return "";
}

void Context::print_json(const nlohmann::json& doc) {
  const std::string text = format == OutputFormat::kJsonCompact ? doc.dump() : doc.dump(2);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

void Context::print_document(const nlohmann::json& doc) {
  if (!text()) {
    print_json(doc);
    return;
  }
  const std::string yaml = to_yaml_text(doc);
  std::fwrite(yaml.data(), 1, yaml.size(), stdout);
}

std::string Context::paint(const std::string& text, const char* code) const {
  if (!color) return text;
  return std::string("\033[") + code + "m" + text + "\033[0m";
}

}  // namespace trainer::cli
