#include "cli/context.h"

#include <cstdlib>
#include <unistd.h>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/json_fields.h"
#include "common/spelling.h"

namespace trainer::cli {

Context::Context(Invocation& invocation)
    : inv(invocation),
      address(resolve_trainer_address(invocation.get_or("trainer-url", ""), invocation.has("trainer-url"))),
      client(address.url) {
  client.set_token(resolve_token(address.url));
  const auto [ca_file, ca_source] = resolve_ca_file(invocation.get_or("ca-file", ""), invocation.has("ca-file"), address.url);
  client.set_ca_file(ca_file, ca_source);
  const std::string output = inv.get_or("output", "text");
  if (output == "text") format = OutputFormat::kText;
  else if (output == "json") format = OutputFormat::kJson;
  else if (output == "json-compact") format = OutputFormat::kJsonCompact;
  else usage_error = "unknown output format \"" + output + "\" for -o; use text, json or json-compact";
  quiet = inv.has("quiet");
  if (usage_error.empty()) read_output_flags();
  const char* no_color = std::getenv("NO_COLOR");
  const bool colours_off = inv.has("no-color") || (no_color && *no_color);
  const char* term = std::getenv("TERM");
  const bool dumb = term && std::string(term) == "dumb";
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  color = tty && !colours_off && !dumb;
  redraw = tty && !colours_off && !dumb;
  stdin_tty = ::isatty(STDIN_FILENO) == 1;
}

namespace {

bool declares_flag(const Command* command, const std::string& name) {
  if (!command) return false;
  for (const auto& f : command->flags) {
    if (f.name == name) return true;
  }
  return false;
}

}  // namespace

void Context::read_output_flags() {
  const bool filtered = inv.has("jq") || inv.has("json");
  if (filtered && text()) {
    if (inv.has("output")) {
      usage_error = std::string(inv.has("jq") ? "--jq" : "--json") + " prints JSON; drop -o text";
      return;
    }
    format = OutputFormat::kJson;
  }
  // A wait declares its own --timeout, which bounds the watching; the global one bounds each call.
  if (auto t = inv.get("timeout"); t && !declares_flag(inv.command, "timeout")) {
    auto seconds = parse_duration(*t);
    if (!seconds || *seconds <= 0) {
      usage_error = "--timeout \"" + *t + "\" is not a duration above zero; write it like 500ms, 30s or 2m";
      return;
    }
    client.set_call_timeout(*seconds);
  }
  if (auto fields = inv.get("json")) {
    std::string error;
    json_fields_ = parse_field_list(*fields, &error);
    if (!json_fields_) {
      usage_error = error;
      return;
    }
    if (json_fields_->empty()) {
      client.refuse_changes("--json= lists the fields of an answer, and `" + inv.command_line() +
                            "` would change something, which was not sent. Name the fields (--json runId,phase) "
                            "or use -o json");
    }
  }
  if (auto expr = inv.get("jq")) {
    std::string error;
    jq_ = JqFilter::compile(*expr, &error);
    if (!jq_) usage_error = "--jq \"" + *expr + "\" does not compile: " + error;
  }
}

bool Context::refuse_change(const std::string& method, const std::string& path) {
  if (!json_fields_ || !json_fields_->empty()) return false;
  last_failure_code_ = kExitUsage;
  fail("--json= lists the fields of an answer, and `" + inv.command_line() + "` would change something (" + method +
           " " + path + "), which was not sent. Name the fields (--json runId,phase) or use -o json",
       kExitUsage);
  return true;
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
  const std::string line =
      describe_failure(error) + (error.transport ? retry_hint : next_step(*this, error, path, body));
  fail(where.empty() ? line : where + ": " + line, last_failure_code_);
  return std::nullopt;
}

std::optional<nlohmann::json> Context::get(const std::string& path, int read_timeout_seconds) {
  Response r;
  CallError e;
  bool ok = client.get(path, &r, &e, read_timeout_seconds);
  return finish(ok, r, e, path, nullptr);
}

std::optional<std::string> Context::get_bytes(const std::string& path) {
  std::string bytes;
  Response r;
  CallError e;
  const bool ok = client.get_bytes(path, &bytes, &e);
  if (!finish(ok, r, e, path, nullptr)) return std::nullopt;
  return bytes;
}

std::optional<nlohmann::json> Context::post(const std::string& path, const nlohmann::json& body) {
  if (refuse_change("POST", path)) return std::nullopt;
  Response r;
  CallError e;
  bool ok = client.post(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

std::optional<nlohmann::json> Context::put(const std::string& path, const nlohmann::json& body) {
  if (refuse_change("PUT", path)) return std::nullopt;
  Response r;
  CallError e;
  bool ok = client.put(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

std::optional<nlohmann::json> Context::del(const std::string& path) {
  if (refuse_change("DELETE", path)) return std::nullopt;
  Response r;
  CallError e;
  bool ok = client.del(path, &r, &e);
  return finish(ok, r, e, path, nullptr);
}

std::optional<nlohmann::json> Context::patch(const std::string& path, const nlohmann::json& body) {
  if (refuse_change("PATCH", path)) return std::nullopt;
  Response r;
  CallError e;
  bool ok = client.patch(path, body, &r, &e);
  return finish(ok, r, e, path, &body);
}

namespace {

enum class Noun { kNone, kWorkload, kRun, kDataset, kBaseModel, kEvaluatedModel };

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
  // `evaluations start --model M`: M is a registered model, a completed run or a base model.
  if (collection == "evaluations" && path_ref.empty() && error.field == "model") {
    noun = Noun::kEvaluatedModel;
    ref = body_value(body, "model");
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
    case Noun::kEvaluatedModel:
      if (mentions(message, "trainer trained-models list")) return "";
      return "; " + did_you_mean(ctx, ref, "/v1/base-models", "baseModels") +
             "What can be evaluated: `trainer trained-models list`, `trainer runs list --phase COMPLETED`, "
             "`trainer base-models list`";
    case Noun::kNone:
      break;
  }
  return "";
}

void Context::print_json(const nlohmann::json& doc) {
  const bool compact = format == OutputFormat::kJsonCompact;
  const nlohmann::json* shown = &doc;
  nlohmann::json selected;
  if (json_fields_) {
    std::string error;
    if (json_fields_->empty()) {  // --json= : the fields this answer offers, one a line
      const auto names = offered_fields(doc, list_keys_for(inv.path));
      if (names.empty()) {
        output_failure_ = fail("--json=: this answer has no fields to list (an empty list?)", kExitError);
      }
      for (const auto& name : names) std::printf("%s\n", name.c_str());
      return;
    }
    auto picked = select_fields(doc, *json_fields_, list_keys_for(inv.path), &error);
    if (!picked) {
      output_failure_ = fail(error, kExitUsage);
      return;
    }
    selected = std::move(*picked);
    shown = &selected;
  }
  std::string text;
  if (jq_) {
    std::string error;
    auto filtered = jq_->run(*shown, compact, &error);
    if (!filtered) {
      output_failure_ = fail("--jq \"" + jq_->expression() + "\": " + error, kExitError);
      return;
    }
    text = std::move(*filtered);
  } else {
    text = (compact ? shown->dump() : shown->dump(2)) + "\n";
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
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
