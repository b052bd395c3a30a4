#include "service/service.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/sha256.h"
#include "common/version.h"
#include "plan/plan.h"
#include "service/metrics.h"
#include "service/phases.h"
#include "storage/storage.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;
using store::ClaimRow;

const char* const kDefaultGrader = "json-label-match";
const std::regex kWorkloadName("^[a-z0-9][a-z0-9-]{0,63}$");
const std::regex kDatasetName("^[a-z0-9][a-z0-9._-]{0,127}$");
const std::regex kLooksLikeId("^[0-9a-f]{8,}$");

// ---- small helpers ------------------------------------------------------------------------

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string rfc3339(double seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  int ms = static_cast<int>((seconds - static_cast<double>(t)) * 1000);
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string now_rfc3339() { return rfc3339(now_seconds()); }

std::string random_hex(int chars) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  std::string out;
  const char* digits = "0123456789abcdef";
  while (static_cast<int>(out.size()) < chars) out += digits[rng() & 15];
  return out;
}

bool is_hex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); });
}

// Strips internal fields (keys starting with '_') from a stored document.
json public_view(const json& doc) {
  json out = json::object();
  for (const auto& [k, v] : doc.items()) {
    if (!k.empty() && k[0] == '_') continue;
    out[k] = v;
  }
  return out;
}

Status check_fields(const json& body, const std::set<std::string>& allowed) {
  if (!body.is_object()) return invalid_argument("body: must be a JSON object");
  for (const auto& [k, v] : body.items()) {
    if (!allowed.count(k)) return invalid_argument(k + ": unknown field");
  }
  return Status::ok();
}

Result<std::optional<std::string>> optional_string(const json& body, const std::string& key) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<std::string>();
  if (!body[key].is_string()) return invalid_argument(key + ": must be a string, got " + body[key].dump());
  return std::optional<std::string>(body[key].get<std::string>());
}

Status check_workload_name(const std::string& field, const std::string& name) {
  if (!std::regex_match(name, kWorkloadName)) {
    return invalid_argument(field + ": '" + name +
                            "' is not a valid workload name: use 1-64 of a-z, 0-9 and '-', starting with a "
                            "letter or digit");
  }
  if (std::regex_match(name, kLooksLikeId)) {
    return invalid_argument(field + ": '" + name + "' looks like an id; choose a name with a letter beyond a-f or a '-'");
  }
  return Status::ok();
}

Status check_dataset_name(const std::string& name) {
  if (!std::regex_match(name, kDatasetName) || name.find("..") != std::string::npos) {
    return invalid_argument("name: '" + name +
                            "' is not a valid dataset name: use 1-128 of a-z, 0-9, '.', '_' and '-', starting "
                            "with a letter or digit, without '..'");
  }
  if (std::regex_match(name, kLooksLikeId)) {
    return invalid_argument("name: '" + name + "' looks like a content hash; choose a name that does not");
  }
  return Status::ok();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string last_lines(const std::string& path, int n) {
  std::string text = read_text(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  size_t pos = text.size();
  for (int i = 0; i < n && pos != std::string::npos && pos > 0; ++i) pos = text.rfind('\n', pos - 1);
  if (pos == std::string::npos) return text;
  return text.substr(pos + 1);
}

// Flattens {"a":{"b":1}} into {"a.b":1} under `prefix`.
void flatten(const json& v, const std::string& prefix, json& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(x, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = v;
  }
}

// Validates chat JSONL and returns its canonical rows (one compact JSON object per line).
Result<std::vector<std::string>> canonical_rows(const std::string& rows) {
  std::vector<std::string> out;
  std::istringstream in(rows);
  std::string line;
  int lineno = 0;
  static const std::set<std::string> kRoles = {"system", "user", "assistant", "tool"};
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string where = "rows: line " + std::to_string(lineno) + ": ";
    json row = json::parse(line, nullptr, false);
    if (row.is_discarded()) return invalid_argument(where + "not valid JSON");
    if (!row.is_object()) return invalid_argument(where + "must be a JSON object with \"messages\"");
    if (!row.contains("messages") || !row["messages"].is_array() || row["messages"].empty()) {
      return invalid_argument(where + "\"messages\" must be a non-empty list");
    }
    const json& msgs = row["messages"];
    for (size_t i = 0; i < msgs.size(); ++i) {
      const json& m = msgs[i];
      std::string mw = where + "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return invalid_argument(mw + ": must be an object");
      if (!m.contains("role") || !m["role"].is_string() || !kRoles.count(m["role"].get<std::string>())) {
        return invalid_argument(mw + ".role: must be one of system, user, assistant, tool");
      }
      if (m.contains("content") && !(m["content"].is_string() || m["content"].is_array() || m["content"].is_null())) {
        return invalid_argument(mw + ".content: must be a string or a list of parts");
      }
    }
    if (msgs.back().value("role", "") != "assistant") {
      return invalid_argument(where + "the last message must be the assistant's");
    }
    out.push_back(row.dump());
  }
  if (out.empty()) return invalid_argument("rows: no rows; send chat JSONL, one {\"messages\": [...]} per line");
  return out;
}

// Hash of a base model folder's files: relative path, size and bytes of each, in path order.
Result<std::pair<std::string, int64_t>> hash_folder(const fs::path& root) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path());
  }
  if (ec) return failed_precondition("cannot read " + root.string() + ": " + ec.message());
  std::sort(files.begin(), files.end());
  Sha256 h;
  int64_t total = 0;
  std::vector<char> buf(1 << 20);
  for (const auto& f : files) {
    std::string rel = fs::relative(f, root).string();
    h.update(rel);
    h.update(std::string_view("\0", 1));
    std::ifstream in(f, std::ios::binary);
    if (!in) return failed_precondition("cannot read " + f.string());
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      std::streamsize n = in.gcount();
      if (n > 0) {
        h.update(std::string_view(buf.data(), static_cast<size_t>(n)));
        total += n;
      }
    }
    h.update(std::string_view("\0", 1));
  }
  return std::make_pair(h.hex_digest(), total);
}

// ---- the service --------------------------------------------------------------------------

class ServiceImpl final : public Service {
 public:
  ServiceImpl(ServiceOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<backend::Backend> backend)
      : opt_(std::move(options)),
        store_(std::move(store)),
        backend_(std::move(backend)),
        metrics_(opt_.instance) {}

  ~ServiceImpl() override { stop(); }

  // ---- startup ----------------------------------------------------------------------------

  Status start() override {
    add_step("open store", true, "SQLite schema version " + std::to_string(store_->schema_version()));
    add_step("load configuration", true,
             opt_.config.source + ": " + std::to_string(opt_.config.base_models.size()) + " base models, " +
                 std::to_string(opt_.config.pools.size()) + " pools");
    Status st = resume_base_models();
    add_step("resume base model preparation", st.is_ok(), st.is_ok() ? "ok" : st.message());
    if (!st.is_ok()) return st;
    std::string summary;
    st = recover_runs(&summary);
    add_step("recover runs", st.is_ok(), st.is_ok() ? summary : st.message());
    if (!st.is_ok()) return st;
    read_capacity();
    add_step("read capacity", true, backend_->observed_source());
    driver_ = std::thread([this] { drive(); });
    add_step("start run driver", true, "every " + std::to_string(opt_.tick.count()) + " ms");
    ready_ = true;
    return Status::ok();
  }

  void stop() override {
    stopping_ = true;
    if (driver_.joinable()) driver_.join();
    std::vector<std::thread> preparers;
    {
      std::lock_guard<std::mutex> lock(prep_mu_);
      preparers.swap(preparers_);
    }
    for (auto& t : preparers) t.join();
  }

  bool ready() const override { return ready_; }

  std::vector<StartupStep> startup_steps() const override {
    std::lock_guard<std::mutex> lock(steps_mu_);
    return steps_;
  }

  json info() const override {
    json steps = json::array();
    for (const auto& s : startup_steps()) steps.push_back({{"name", s.name}, {"ok", s.ok}, {"message", s.message}});
    return {{"backend", backend_->name()},
            {"build", {{"version", version_string()}}},
            {"instance", opt_.instance},
            {"dataDir", opt_.data_dir},
            {"configuration", config_to_json(opt_.config)},
            {"phases", all_phase_names()},
            {"startup", {{"ready", ready_.load()}, {"steps", steps}}}};
  }

  // ---- base models ------------------------------------------------------------------------

  Result<json> list_base_models(bool all) override {
    auto rows = store_->list_base_models();
    if (!rows.is_ok()) return rows.status();
    json out = json::array();
    std::set<std::string> selected;
    for (const auto& m : *rows) {
      selected.insert(m["name"].get<std::string>());
      out.push_back(present_base_model(m));
    }
    if (all) {
      for (const auto& a : opt_.config.base_models) {
        if (selected.count(a.name)) continue;
        out.push_back({{"name", a.name}, {"id", base_model_id(a.name)}, {"status", "allowed"}, {"path", a.path}});
      }
    }
    return json{{"baseModels", out}};
  }

  Result<json> get_base_model(const std::string& ref) override {
    auto m = resolve_base_model(ref, "name");
    if (!m.is_ok()) return m.status();
    return present_base_model(*m);
  }

  Result<json> select_base_model(const std::string& name) override {
    const AllowedBaseModel* allowed = find_allowed(name);
    if (!allowed) return not_found("name: " + not_allowed_message(name));
    std::lock_guard<std::mutex> lock(mu_);
    auto existing = find_selected(allowed->name);
    if (!existing.is_ok()) return existing.status();
    if (existing->has_value() && (**existing)["status"] != "failed") return present_base_model(**existing);
    std::error_code ec;
    if (!fs::is_directory(allowed->path, ec)) {
      return failed_precondition("name: the folder of base model '" + allowed->name + "' (" + allowed->path +
                                 ") does not exist on this host; ask the operator to fix the deployment "
                                 "configuration");
    }
    json doc = {{"name", allowed->name},  {"id", base_model_id(allowed->name)}, {"status", "preparing"},
                {"path", allowed->path},  {"selectedAt", now_rfc3339()},       {"contentHash", nullptr},
                {"cachePath", nullptr}};
    TRAINER_RETURN_IF_ERROR(store_->put_base_model(doc));
    start_preparation(allowed->name);
    return present_base_model(doc);
  }

  // ---- datasets ---------------------------------------------------------------------------

  Result<std::pair<json, bool>> register_dataset(const std::optional<std::string>& name,
                                                 const std::string& rows) override {
    if (name) TRAINER_RETURN_IF_ERROR(check_dataset_name(*name));
    auto canon = canonical_rows(rows);
    if (!canon.is_ok()) return canon.status();
    std::string text;
    for (const auto& r : *canon) text += r + "\n";
    const std::string hash = sha256_hex(text);
    const std::string path = dataset_path(hash);
    std::lock_guard<std::mutex> lock(mu_);
    auto existing = store_->get_dataset(hash);
    if (!existing.is_ok()) return existing.status();
    if (!existing->has_value()) {
      // The bytes first: a committed row always has its file.
      TRAINER_RETURN_IF_ERROR(storage::write_file_atomic(path, text));
    }
    bool created = false;
    json doc = {{"hash", hash},
                {"rows", static_cast<int64_t>(canon->size())},
                {"bytes", static_cast<int64_t>(text.size())},
                {"createdAt", now_rfc3339()},
                {"path", path}};
    Status st = store_->transaction([&]() -> Status {
      auto ins = store_->insert_dataset(doc);
      if (!ins.is_ok()) return ins.status();
      created = *ins;
      if (name) TRAINER_RETURN_IF_ERROR(store_->set_alias(*name, hash));
      return Status::ok();
    });
    if (!st.is_ok()) return st;
    auto stored = store_->get_dataset(hash);
    if (!stored.is_ok()) return stored.status();
    auto out = present_dataset(**stored);
    if (!out.is_ok()) return out.status();
    return std::make_pair(*out, created);
  }

  Result<json> list_datasets() override {
    auto rows = store_->list_datasets();
    if (!rows.is_ok()) return rows.status();
    json out = json::array();
    for (const auto& d : *rows) {
      auto p = present_dataset(d);
      if (!p.is_ok()) return p.status();
      out.push_back(*p);
    }
    return json{{"datasets", out}};
  }

  Result<json> get_dataset(const std::string& ref) override {
    auto d = resolve_dataset(ref, "dataset");
    if (!d.is_ok()) return d.status();
    return present_dataset(*d);
  }

  Result<json> measure_dataset(const std::string& ref, const std::string& base_model,
                               std::optional<int> max_seq_length) override {
    auto d = resolve_dataset(ref, "dataset");
    if (!d.is_ok()) return d.status();
    auto m = resolve_base_model(base_model, "baseModel");
    if (!m.is_ok()) return m.status();
    if ((*m)["status"] != "ready") {
      return failed_precondition("baseModel: '" + base_model + "' is " + (*m)["status"].get<std::string>() +
                                 "; wait until it is ready");
    }
    std::vector<std::string> args = {"analyze", "--model", (*m)["cachePath"].get<std::string>(), "--data",
                                     (*d)["path"].get<std::string>(), "-o", "json"};
    if (max_seq_length) {
      args.push_back("--max-seq-length");
      args.push_back(std::to_string(*max_seq_length));
    }
    auto out = backend_->run_tool(args, 120);
    if (!out.is_ok()) return out.status();
    json result = json::parse(*out, nullptr, false);
    if (result.is_discarded() || !result.is_object()) {
      return internal_error("trainer-job analyze printed something other than a JSON object");
    }
    return result;
  }

  // ---- workloads --------------------------------------------------------------------------

  Result<json> create_workload(const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"name", "description", "evaluationDataset", "grader", "gpuQuota"}));
    if (!body.contains("name")) return invalid_argument("name: required");
    if (!body["name"].is_string()) return invalid_argument("name: must be a string, got " + body["name"].dump());
    std::string name = body["name"].get<std::string>();
    TRAINER_RETURN_IF_ERROR(check_workload_name("name", name));
    auto description = optional_string(body, "description");
    if (!description.is_ok()) return description.status();
    auto grader = optional_string(body, "grader");
    if (!grader.is_ok()) return grader.status();
    if (*grader) TRAINER_RETURN_IF_ERROR(check_grader("grader", **grader));
    int quota = opt_.config.default_workload_quota;
    auto q = opt_.config.workload_quotas.find(name);
    if (q != opt_.config.workload_quotas.end()) quota = q->second;
    if (body.contains("gpuQuota")) {
      const json& v = body["gpuQuota"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000) {
        return invalid_argument("gpuQuota: must be a non-negative integer, got " + v.dump());
      }
      quota = static_cast<int>(v.get<int64_t>());
    }
    std::lock_guard<std::mutex> lock(mu_);
    json evaluation = {{"dataset", nullptr}, {"grader", grader->value_or(kDefaultGrader)}};
    auto eval_ref = optional_string(body, "evaluationDataset");
    if (!eval_ref.is_ok()) return eval_ref.status();
    if (*eval_ref) {
      auto d = resolve_dataset(**eval_ref, "evaluationDataset");
      if (!d.is_ok()) return d.status();
      evaluation["dataset"] = (*d)["hash"];
    }
    std::string now = now_rfc3339();
    json doc = {{"id", random_hex(16)},
                {"name", name},
                {"description", description->value_or("")},
                {"evaluation", evaluation},
                {"refs", {{"base", nullptr}, {"candidate", nullptr}, {"champion", nullptr}}},
                {"gpuQuota", quota},
                {"createdAt", now},
                {"updatedAt", now},
                {"history", json::array({{{"time", now}, {"change", "created as '" + name + "'"}}})}};
    TRAINER_RETURN_IF_ERROR(store_->insert_workload(doc));
    return doc;
  }

  Result<json> list_workloads() override {
    auto rows = store_->list_workloads();
    if (!rows.is_ok()) return rows.status();
    return json{{"workloads", *rows}};
  }

  Result<json> get_workload(const std::string& ref) override { return resolve_workload(ref, "workload"); }

  Result<json> update_workload(const std::string& ref, const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"name", "description", "gpuQuota"}));
    std::lock_guard<std::mutex> lock(mu_);
    auto w = resolve_workload(ref, "workload");
    if (!w.is_ok()) return w.status();
    json doc = *w;
    std::string now = now_rfc3339();
    if (body.contains("name")) {
      if (!body["name"].is_string()) return invalid_argument("name: must be a string, got " + body["name"].dump());
      std::string name = body["name"].get<std::string>();
      TRAINER_RETURN_IF_ERROR(check_workload_name("name", name));
      if (name != doc["name"]) {
        doc["history"].push_back({{"time", now}, {"change", "renamed from '" + doc["name"].get<std::string>() +
                                                                "' to '" + name + "'"}});
        doc["name"] = name;
      }
    }
    if (body.contains("description")) {
      auto d = optional_string(body, "description");
      if (!d.is_ok()) return d.status();
      doc["history"].push_back({{"time", now}, {"change", "description: " + d->value_or("")}});
      doc["description"] = d->value_or("");
    }
    if (body.contains("gpuQuota")) {
      const json& v = body["gpuQuota"];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000) {
        return invalid_argument("gpuQuota: must be a non-negative integer, got " + v.dump());
      }
      doc["history"].push_back({{"time", now}, {"change", "gpuQuota: " + v.dump()}});
      doc["gpuQuota"] = v;
    }
    doc["updatedAt"] = now;
    Status st = store_->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(store_->update_workload(doc));
      return admit_locked();  // a larger quota may admit queued claims
    });
    if (!st.is_ok()) return st;
    return doc;
  }

  Result<json> set_evaluation(const std::string& ref, const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"dataset", "grader"}));
    std::lock_guard<std::mutex> lock(mu_);
    auto w = resolve_workload(ref, "workload");
    if (!w.is_ok()) return w.status();
    auto ds = optional_string(body, "dataset");
    if (!ds.is_ok()) return ds.status();
    if (!*ds) return invalid_argument("dataset: required");
    auto d = resolve_dataset(**ds, "dataset");
    if (!d.is_ok()) return d.status();
    auto grader = optional_string(body, "grader");
    if (!grader.is_ok()) return grader.status();
    if (*grader) TRAINER_RETURN_IF_ERROR(check_grader("grader", **grader));
    json doc = *w;
    std::string now = now_rfc3339();
    doc["evaluation"] = {{"dataset", (*d)["hash"]}, {"grader", grader->value_or(kDefaultGrader)}};
    doc["history"].push_back({{"time", now}, {"change", "evaluation: " + doc["evaluation"].dump()}});
    doc["updatedAt"] = now;
    TRAINER_RETURN_IF_ERROR(store_->update_workload(doc));
    return doc;
  }

  Result<json> get_ref(const std::string& ref, const std::string& which) override {
    TRAINER_RETURN_IF_ERROR(check_ref_name(which));
    auto w = resolve_workload(ref, "workload");
    if (!w.is_ok()) return w.status();
    return json{{"workload", {{"id", (*w)["id"]}, {"name", (*w)["name"]}}}, {"ref", which},
                {"target", (*w)["refs"][which]}};
  }

  Result<json> set_ref(const std::string& ref, const std::string& which, const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_ref_name(which));
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"target"}));
    auto target = optional_string(body, "target");
    if (!target.is_ok()) return target.status();
    if (!*target) return invalid_argument("target: required");
    std::lock_guard<std::mutex> lock(mu_);
    auto w = resolve_workload(ref, "workload");
    if (!w.is_ok()) return w.status();
    json value;
    if (which == "base") {
      auto m = resolve_base_model(**target, "target");
      if (!m.is_ok()) return m.status();
      value = {{"kind", "baseModel"}, {"name", (*m)["name"]}, {"id", (*m)["id"]}};
    } else {
      // Until the model registry lands (round 2), a candidate or champion is the final adapter
      // of a completed run of this workload.
      auto r = resolve_run(**target, "target");
      if (!r.is_ok()) return r.status();
      if ((*r)["workload"]["id"] != (*w)["id"]) {
        return invalid_argument("target: run " + (*r)["runId"].get<std::string>() + " belongs to another workload");
      }
      if ((*r)["phase"] != "COMPLETED") {
        return failed_precondition("target: run " + (*r)["runId"].get<std::string>() + " is " +
                                   (*r)["phase"].get<std::string>() + "; only a completed run's adapter can be a " +
                                   which);
      }
      value = {{"kind", "runAdapter"}, {"runId", (*r)["runId"]}, {"adapterPath", (*r)["adapterPath"]}};
    }
    json doc = *w;
    std::string now = now_rfc3339();
    doc["refs"][which] = value;
    doc["history"].push_back({{"time", now}, {"change", "ref " + which + " -> " + value.dump()}});
    doc["updatedAt"] = now;
    TRAINER_RETURN_IF_ERROR(store_->update_workload(doc));
    return json{{"workload", {{"id", doc["id"]}, {"name", doc["name"]}}}, {"ref", which}, {"target", value}};
  }

  // ---- runs -------------------------------------------------------------------------------

  Result<std::pair<json, bool>> submit_run(const json& body, bool dry_run) override {
    if (!body.is_object()) return invalid_argument("plan: must be a JSON object");
    auto parsed = plan::plan_from_json(body, "plan");
    if (!parsed.is_ok()) {
      std::string msg = parsed.status().message();
      if (msg.rfind("plan: ", 0) == 0) msg = msg.substr(6);
      return Status(parsed.status().code(), msg);
    }
    plan::Plan p = std::move(*parsed);
    if (p.kind != "run") return invalid_argument("kind: must be \"run\", got \"" + p.kind + "\"");
    if (p.grader) TRAINER_RETURN_IF_ERROR(check_grader("grader", *p.grader));

    std::lock_guard<std::mutex> lock(mu_);
    const std::string request = body.dump();
    if (p.submissionId) {
      if (p.submissionId->empty() || p.submissionId->size() > 255) {
        return invalid_argument("submissionId: must be 1-255 characters");
      }
      auto seen = store_->run_by_submission(*p.submissionId);
      if (!seen.is_ok()) return seen.status();
      if (seen->has_value()) {
        const json& run = **seen;
        if (run["_"]["request"] != request) {
          return already_exists("submissionId: '" + *p.submissionId + "' was used by run " +
                                run["runId"].get<std::string>() + " with a different plan; use a new submissionId");
        }
        return std::make_pair(present_run(run), false);
      }
    }

    auto w = resolve_workload(p.workload, "workload");
    if (!w.is_ok()) return w.status();
    std::string base_ref;
    if (p.baseModel) {
      base_ref = *p.baseModel;
    } else if ((*w)["refs"]["base"].is_object()) {
      base_ref = (*w)["refs"]["base"]["name"].get<std::string>();
    } else {
      return invalid_argument("baseModel: required: the plan names none and workload '" +
                              (*w)["name"].get<std::string>() + "' has no base ref");
    }
    auto m = resolve_base_model(base_ref, "baseModel");
    if (!m.is_ok()) return m.status();
    if ((*m)["status"] == "failed") {
      return failed_precondition("baseModel: '" + base_ref + "' failed to prepare: " +
                                 (*m).value("failure", std::string("unknown")) + "; select it again");
    }
    auto d = resolve_dataset(p.config.dataset, "config.dataset");
    if (!d.is_ok()) return d.status();
    std::optional<json> v;
    if (p.config.validationDataset) {
      auto vd = resolve_dataset(*p.config.validationDataset, "config.validationDataset");
      if (!vd.is_ok()) return vd.status();
      v = *vd;
    }
    // Devices: a CPU run (execution.gpus 0) takes one device of a CPU pool.
    const int devices = p.execution.gpus > 0 ? p.execution.gpus : 1;
    auto pool = choose_pool(p.execution.gpus, devices);
    if (!pool.is_ok()) return pool.status();
    const int quota = (*w)["gpuQuota"].get<int>();
    if (devices > quota) {
      return failed_precondition("execution.gpus: the run needs " + std::to_string(devices) +
                                 " devices, more than workload '" + (*w)["name"].get<std::string>() +
                                 "' may ever hold (gpuQuota " + std::to_string(quota) + "); raise its quota");
    }

    // The resolved plan: names resolved to what was admitted.
    json resolved = plan::to_json(p);
    resolved["workload"] = (*w)["name"];
    resolved["baseModel"] = (*m)["name"];
    resolved["config"]["dataset"] = (*d)["hash"];
    if (v) resolved["config"]["validationDataset"] = (*v)["hash"];
    if (dry_run) return std::make_pair(json{{"plan", resolved}}, false);

    const double now = now_seconds();
    const std::string id = random_hex(16);
    json run = {
        {"runId", id},
        {"workload", {{"id", (*w)["id"]}, {"name", (*w)["name"]}}},
        {"baseModel", (*m)["name"]},
        {"method", plan::method_name(p.config.method)},
        {"phase", phase_name(Phase::kSizingDataset)},
        {"attempt", 1},
        {"submissionId", p.submissionId ? json(*p.submissionId) : json(nullptr)},
        {"settingsSha", plan::settings_sha(p.config, (*d)["hash"].get<std::string>())},
        {"dataset", {{"hash", (*d)["hash"]}, {"ref", p.config.dataset}}},
        {"createdAt", rfc3339(now)},
        {"updatedAt", rfc3339(now)},
        {"phaseHistory", json::array({{{"phase", phase_name(Phase::kSizingDataset)}, {"enteredAt", rfc3339(now)}}})},
        {"progress", {{"step", 0}, {"totalSteps", nullptr}}},
        {"latest", json::object()},
        {"cost", {{"gpuSeconds", 0.0}, {"estimated", false}}},
        {"grader", p.grader ? json(*p.grader) : (*w)["evaluation"]["grader"]},
        {"plan", resolved},
        {"_",
         {{"request", request},
          {"pool", (*pool)->name},
          {"devices", devices},
          {"enteredAt", now},
          {"createdAt", now},
          {"datasetPath", (*d)["path"]},
          {"validationPath", v ? (*v)["path"] : json(nullptr)},
          {"rows", (*d)["rows"]},
          {"accumulatedSeconds", 0.0}}},
    };
    if (p.description) run["description"] = *p.description;
    if (p.configName) run["configName"] = *p.configName;
    Status st = store_->transaction([&]() -> Status {
      TRAINER_RETURN_IF_ERROR(store_->insert_run(run));
      auto seq = store_->append_run_event(
          id, {{"time", rfc3339(now)}, {"type", "phase"}, {"phase", phase_name(Phase::kSizingDataset)}});
      return seq.status();
    });
    if (!st.is_ok()) return st;
    metrics_.phase_entered(Phase::kSizingDataset);
    notify();
    return std::make_pair(present_run(run), true);
  }

  Result<std::string> list_runs_text(const RunListQuery& q) override {
    store::RunFilter f;
    if (q.phase == "open") {
      for (int i = 0; i < kPhaseCount; ++i) {
        if (!is_terminal(phase_at(i))) f.phases.push_back(phase_name(phase_at(i)));
      }
    } else if (!q.phase.empty()) {
      if (!parse_phase(q.phase)) {
        return invalid_argument("phase: '" + q.phase + "' is not a phase; use open or one of " + phase_list());
      }
      f.phases.push_back(q.phase);
    }
    if (!q.workload.empty()) {
      auto w = resolve_workload(q.workload, "workload");
      if (!w.is_ok()) return w.status();
      f.workload_id = (*w)["id"].get<std::string>();
    }
    if (q.limit < 1 || q.limit > 1000) return invalid_argument("limit: must be between 1 and 1000");
    if (q.offset < 0) return invalid_argument("offset: must not be negative");
    f.limit = q.limit;
    f.offset = q.offset;
    auto page = store_->list_run_rows(f);
    if (!page.is_ok()) return page.status();
    auto claims = claims_by_owner();
    if (!claims.is_ok()) return claims.status();
    auto workloads = store_->list_workloads();
    if (!workloads.is_ok()) return workloads.status();
    std::map<std::string, std::string> names;
    for (const auto& w : *workloads) names[w["id"].get<std::string>()] = w["name"].get<std::string>();
    // The response is assembled from each run's presented text; an ended run's text only changes
    // when its document or its workload's name does, so it is made once and reused.
    std::string body = "{\"runs\":[";
    for (size_t k = 0; k < page->rows.size(); ++k) {
      const store::RunRow& row = page->rows[k];
      if (k) body += ',';
      const bool ended = is_terminal(*parse_phase(row.phase));
      const std::string workload = names.count(row.workload_id) ? names[row.workload_id] : "";
      const size_t key = std::hash<std::string>{}(row.doc) ^ (std::hash<std::string>{}(workload) << 1);
      if (ended) {
        std::lock_guard<std::mutex> lock(presented_mu_);
        auto it = presented_.find(row.id);
        if (it != presented_.end() && it->second.first == key) {
          body += it->second.second;
          continue;
        }
      }
      std::string text = present_run(json::parse(row.doc), &*claims, &names).dump(-1, ' ', false, json::error_handler_t::replace);
      body += text;
      if (ended) {
        std::lock_guard<std::mutex> lock(presented_mu_);
        if (presented_.size() > kPresentedCacheSize) presented_.clear();
        presented_[row.id] = {key, std::move(text)};
      }
    }
    body += "],\"total\":" + std::to_string(page->total);
    if (q.offset + static_cast<int64_t>(page->rows.size()) < page->total) {
      body += ",\"nextOffset\":" + std::to_string(q.offset + static_cast<int64_t>(page->rows.size()));
    }
    body += "}";
    return body;
  }

  Result<json> list_runs(const RunListQuery& q) override {
    auto text = list_runs_text(q);
    if (!text.is_ok()) return text.status();
    return json::parse(*text);
  }

  Result<json> get_run(const std::string& ref) override {
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    return present_run(*r);
  }

  Result<json> run_events(const std::string& ref, int64_t after, std::chrono::milliseconds wait) override {
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    const std::string id = (*r)["runId"];
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (true) {
      uint64_t version;
      {
        std::lock_guard<std::mutex> lock(events_mu_);
        version = events_version_;
      }
      auto events = store_->run_events(id, after, 1000);
      if (!events.is_ok()) return events.status();
      if (!events->empty() || std::chrono::steady_clock::now() >= deadline || stopping_) {
        auto run = store_->get_run(id);
        if (!run.is_ok()) return run.status();
        return json{{"events", *events}, {"run", present_run(**run)}};
      }
      std::unique_lock<std::mutex> lock(events_mu_);
      events_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1)),
                            [&] { return events_version_ != version; });
    }
  }

  void subscribe_run_changes(std::function<void()> on_change) override {
    std::lock_guard<std::mutex> lock(events_mu_);
    subscribers_.push_back(std::move(on_change));
  }

  Result<json> cancel_run(const std::string& ref) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    json run = *r;
    Phase phase = *parse_phase(run["phase"].get<std::string>());
    if (is_terminal(phase)) {
      return failed_precondition("run " + run["runId"].get<std::string>() + " already ended " +
                                 run["phase"].get<std::string>() + "; there is nothing to cancel");
    }
    if (phase == Phase::kCleaningUp || phase == Phase::kFinalizing) {
      // Already on its way out: a repeated cancel has its effect once.
      if (phase == Phase::kFinalizing) {
        return failed_precondition("run " + run["runId"].get<std::string>() +
                                   " has finished training and is being registered; it can no longer be cancelled");
      }
      return present_run(run);
    }
    run["_"]["cancelRequested"] = true;
    run["_"]["terminal"] = phase_name(Phase::kCancelled);
    if (run["_"].contains("job")) {
      // A job may be running: persist the decision, then signal it.
      run["_"]["stopSentAt"] = now_seconds();
      TRAINER_RETURN_IF_ERROR(store_->transaction([&]() -> Status { return transition(run, Phase::kCleaningUp); }));
      backend_->request_stop(handle_of(run));
    } else {
      TRAINER_RETURN_IF_ERROR(store_->transaction([&]() -> Status { return finish(run, Phase::kCancelled); }));
    }
    notify();
    return present_run(run);
  }

  Result<json> annotate_run(const std::string& ref, const json& body) override {
    TRAINER_RETURN_IF_ERROR(check_fields(body, {"description", "configName"}));
    std::lock_guard<std::mutex> lock(mu_);
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    json run = *r;
    for (const char* key : {"description", "configName"}) {
      if (!body.contains(key)) continue;
      auto v = optional_string(body, key);
      if (!v.is_ok()) return v.status();
      if (!*v || (*v)->empty()) {
        run.erase(key);
      } else {
        run[key] = **v;
      }
    }
    run["updatedAt"] = now_rfc3339();
    TRAINER_RETURN_IF_ERROR(store_->update_run(run));
    return present_run(run);
  }

  Result<json> run_metrics(const std::string& ref, int64_t limit) override {
    if (limit < 1 || limit > 100000) return invalid_argument("limit: must be between 1 and 100000");
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    auto steps = store_->step_metrics((*r)["runId"], limit);
    if (!steps.is_ok()) return steps.status();
    return json{{"steps", *steps}};
  }

  Result<json> run_hparams(const std::string& ref) override {
    auto r = resolve_run(ref, "run");
    if (!r.is_ok()) return r.status();
    json config = (*r)["plan"]["config"];
    json flat = json::object();
    flatten(config, "config", flat);
    return json{{"sha", (*r)["settingsSha"]}, {"hparams", flat}};
  }

  // ---- capacity and telemetry -------------------------------------------------------------

  Result<json> capacity() override {
    auto claims = store_->list_claims();
    if (!claims.is_ok()) return claims.status();
    auto workloads = store_->list_workloads();
    if (!workloads.is_ok()) return workloads.status();
    std::map<std::string, std::string> names;
    for (const auto& w : *workloads) names[w["id"]] = w["name"];
    std::map<std::string, int> observed;
    bool read;
    {
      std::lock_guard<std::mutex> lock(observed_mu_);
      observed = observed_;
      read = observed_read_;
    }
    json pools = json::array();
    for (const auto& p : opt_.config.pools) {
      int granted = 0, queued = 0;
      for (const auto& c : *claims) {
        if (c.pool != p.name) continue;
        (c.state == "GRANTED" ? granted : queued) += c.devices;
      }
      json pj = {{"name", p.name},       {"accelerator", p.accelerator}, {"serving", p.serving},
                 {"declared", p.declared}, {"maxClaim", p.max_claim},     {"granted", granted},
                 {"queued", queued},       {"free", std::max(0, p.declared - granted)}};
      if (read) pj["observed"] = observed_for(p, observed);
      pools.push_back(pj);
    }
    json cl = json::array();
    std::map<std::string, std::pair<int, int>> per_workload;
    for (const auto& c : *claims) {
      cl.push_back({{"kind", c.kind},
                    {"owner", c.owner},
                    {"workload", names.count(c.workload_id) ? names[c.workload_id] : c.workload_id},
                    {"devices", c.devices},
                    {"pool", c.pool},
                    {"state", c.state},
                    {"since", c.since}});
      auto& pw = per_workload[c.workload_id];
      (c.state == "GRANTED" ? pw.first : pw.second) += c.devices;
    }
    json quotas = json::array();
    for (const auto& w : *workloads) {
      auto pw = per_workload[w["id"]];
      quotas.push_back({{"workload", w["name"]}, {"quota", w["gpuQuota"]}, {"held", pw.first}, {"queued", pw.second}});
    }
    return json{{"pools", pools}, {"claims", cl}, {"quotas", quotas}};
  }

  std::string metrics_text() override {
    refresh_gauges();
    return metrics_.render();
  }

 private:
  // ---- startup steps ----------------------------------------------------------------------

  void add_step(const std::string& name, bool ok, const std::string& message) {
    std::lock_guard<std::mutex> lock(steps_mu_);
    steps_.push_back({name, ok, message});
  }

  static json all_phase_names() {
    json out = json::array();
    for (int i = 0; i < kPhaseCount; ++i) out.push_back(phase_name(phase_at(i)));
    return out;
  }
  static std::string phase_list() {
    std::string s;
    for (int i = 0; i < kPhaseCount; ++i) s += std::string(i ? ", " : "") + phase_name(phase_at(i));
    return s;
  }

  Status resume_base_models() {
    auto rows = store_->list_base_models();
    if (!rows.is_ok()) return rows.status();
    for (const auto& m : *rows) {
      if (m["status"] == "preparing") start_preparation(m["name"]);
    }
    return Status::ok();
  }

  // Releases claims of runs that ended or vanished and counts the open runs the driver resumes.
  Status recover_runs(std::string* summary) {
    std::lock_guard<std::mutex> lock(mu_);
    auto claims = store_->list_claims();
    if (!claims.is_ok()) return claims.status();
    int released = 0;
    for (const auto& c : *claims) {
      auto run = store_->get_run(c.owner);
      if (!run.is_ok()) return run.status();
      if (!run->has_value() || is_terminal(*parse_phase((**run)["phase"].get<std::string>()))) {
        TRAINER_RETURN_IF_ERROR(store_->delete_claim(c.owner));
        ++released;
      }
    }
    TRAINER_RETURN_IF_ERROR(admit_locked());
    auto open = open_runs();
    if (!open.is_ok()) return open.status();
    int attached = 0, ended = 0;
    for (const auto& r : *open) {
      if (!r["_"].contains("job")) continue;
      auto status = backend_->poll(handle_of(r));
      (status.state == backend::JobState::kRunning ? attached : ended) += 1;
    }
    *summary = std::to_string(open->size()) + " open runs; " + std::to_string(attached) + " jobs found running, " +
               std::to_string(ended) + " jobs ended while trainerd was down (their events decide the outcome); " +
               std::to_string(released) + " claims of ended runs released";
    return Status::ok();
  }

  void read_capacity() {
    auto devices = backend_->observed_devices();
    std::lock_guard<std::mutex> lock(observed_mu_);
    observed_ = devices;
    observed_read_ = true;
  }

  static int observed_for(const PoolConfig& p, const std::map<std::string, int>& observed) {
    if (p.accelerator == "cpu") {
      auto it = observed.find("cpu");
      return it == observed.end() ? 0 : it->second;
    }
    int n = 0;
    for (const auto& [profile, count] : observed) {
      if (profile == "cpu") continue;
      if (p.accelerator == "any" || profile == p.accelerator) n += count;
    }
    return n;
  }

  // ---- base models ------------------------------------------------------------------------

  static std::string base_model_id(const std::string& name) { return sha256_hex(name).substr(0, 16); }

  const AllowedBaseModel* find_allowed(const std::string& name) const {
    for (const auto& a : opt_.config.base_models) {
      if (a.name == name) return &a;
    }
    return nullptr;
  }

  std::string not_allowed_message(const std::string& name) const {
    std::string allowed;
    for (const auto& a : opt_.config.base_models) allowed += (allowed.empty() ? "" : ", ") + a.name;
    return "'" + name + "' is not one of the deployment's base models (allowed: " +
           (allowed.empty() ? "none configured" : allowed) + ")";
  }

  Result<std::optional<json>> find_selected(const std::string& name) {
    auto rows = store_->list_base_models();
    if (!rows.is_ok()) return rows.status();
    for (const auto& m : *rows) {
      if (m["name"] == name) return std::optional<json>(m);
    }
    return std::optional<json>();
  }

  // A selected base model by name, id or unique id prefix.
  Result<json> resolve_base_model(const std::string& ref, const std::string& field) {
    auto rows = store_->list_base_models();
    if (!rows.is_ok()) return rows.status();
    std::vector<json> prefixed;
    for (const auto& m : *rows) {
      if (m["name"] == ref || m["id"] == ref) return m;
      if (ref.size() >= 4 && is_hex(ref) && m["id"].get<std::string>().rfind(ref, 0) == 0) prefixed.push_back(m);
    }
    if (prefixed.size() == 1) return prefixed[0];
    if (prefixed.size() > 1) return invalid_argument(field + ": '" + ref + "' matches more than one base model id");
    if (find_allowed(ref)) {
      return failed_precondition(field + ": base model '" + ref +
                                 "' is allowed but not selected; select it first (trainer base-models select " + ref +
                                 ")");
    }
    return not_found(field + ": " + not_allowed_message(ref));
  }

  json present_base_model(const json& m) const { return m; }

  void start_preparation(const std::string& name) {
    std::lock_guard<std::mutex> lock(prep_mu_);
    preparers_.emplace_back([this, name] { prepare_base_model(name); });
  }

  // Hashes the folder's files, then copies them into the model cache under that hash.
  void prepare_base_model(const std::string& name) {
    const AllowedBaseModel* allowed = find_allowed(name);
    auto finish = [&](const json& changes) {
      std::lock_guard<std::mutex> lock(mu_);
      auto current = find_selected(name);
      if (!current.is_ok() || !current->has_value()) return;
      json doc = **current;
      doc.update(changes);
      (void)store_->put_base_model(doc);
      notify();
    };
    if (!allowed) {
      finish({{"status", "failed"}, {"failure", "no longer in the deployment configuration"}});
      return;
    }
    auto hashed = hash_folder(allowed->path);
    if (!hashed.is_ok()) {
      finish({{"status", "failed"}, {"failure", hashed.status().message()}});
      return;
    }
    const std::string hash = hashed->first;
    fs::path cache = fs::path(opt_.data_dir) / "models" / hash;
    std::error_code ec;
    if (!fs::exists(cache / ".complete", ec)) {
      fs::path tmp = cache.string() + ".tmp";
      fs::remove_all(tmp, ec);
      fs::create_directories(tmp, ec);
      fs::copy(allowed->path, tmp, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
      if (!ec) {
        std::ofstream(tmp / ".complete") << hash << "\n";
        fs::remove_all(cache, ec);
        fs::rename(tmp, cache, ec);
      }
      if (ec) {
        finish({{"status", "failed"}, {"failure", "copying into the model cache: " + ec.message()}});
        return;
      }
    }
    finish({{"status", "ready"},
            {"contentHash", hash},
            {"sizeBytes", hashed->second},
            {"cachePath", cache.string()},
            {"readyAt", now_rfc3339()}});
  }

  // ---- datasets ---------------------------------------------------------------------------

  std::string dataset_path(const std::string& hash) const {
    return (fs::path(opt_.data_dir) / "datasets" / (hash + ".jsonl")).string();
  }

  Result<json> present_dataset(const json& d) {
    auto names = store_->aliases_of(d["hash"]);
    if (!names.is_ok()) return names.status();
    json out = public_view(d);
    out["names"] = *names;
    out["name"] = names->empty() ? json(nullptr) : json(names->front());
    return out;
  }

  // A dataset by alias, full hash or unique hash prefix.
  Result<json> resolve_dataset(const std::string& ref, const std::string& field) {
    if (ref.empty()) return invalid_argument(field + ": must not be empty");
    auto alias = store_->get_alias(ref);
    if (!alias.is_ok()) return alias.status();
    std::string hash = alias->value_or(ref);
    auto d = store_->get_dataset(hash);
    if (!d.is_ok()) return d.status();
    if (d->has_value()) return **d;
    if (is_hex(ref) && ref.size() >= 4) {
      auto matches = store_->datasets_with_prefix(ref);
      if (!matches.is_ok()) return matches.status();
      if (matches->size() == 1) return matches->front();
      if (matches->size() > 1) {
        std::string c;
        for (const auto& m : *matches) c += (c.empty() ? "" : ", ") + m["hash"].get<std::string>().substr(0, 16);
        return invalid_argument(field + ": '" + ref + "' is an ambiguous hash prefix (candidates: " + c + ")");
      }
    }
    return not_found(field + ": no dataset named or hashed '" + ref + "'; register it first (trainer datasets create)");
  }

  // ---- workloads --------------------------------------------------------------------------

  Result<json> resolve_workload(const std::string& ref, const std::string& field) {
    auto by_name = store_->workload_by_name(ref);
    if (!by_name.is_ok()) return by_name.status();
    if (by_name->has_value()) return **by_name;
    auto by_id = store_->get_workload(ref);
    if (!by_id.is_ok()) return by_id.status();
    if (by_id->has_value()) return **by_id;
    if (is_hex(ref) && ref.size() >= 4) {
      auto all = store_->list_workloads();
      if (!all.is_ok()) return all.status();
      std::vector<json> matches;
      for (const auto& w : *all) {
        if (w["id"].get<std::string>().rfind(ref, 0) == 0) matches.push_back(w);
      }
      if (matches.size() == 1) return matches[0];
      if (matches.size() > 1) {
        std::string c;
        for (const auto& m : matches) c += (c.empty() ? "" : ", ") + m["id"].get<std::string>();
        return invalid_argument(field + ": '" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
      }
    }
    return not_found(field + ": no workload named or with id '" + ref + "'");
  }

  static Status check_grader(const std::string& field, const std::string& grader) {
    if (grader == kDefaultGrader || grader.rfind("model:", 0) == 0 || grader.rfind("http:", 0) == 0 ||
        grader.rfind("bundle:", 0) == 0) {
      if (grader != kDefaultGrader && grader.find(':') == grader.size() - 1) {
        return invalid_argument(field + ": '" + grader + "' names nothing after the ':'");
      }
      return Status::ok();
    }
    return invalid_argument(field + ": '" + grader +
                            "' is not a grader; use json-label-match, model:MODEL_ID, http:URL or bundle:REF");
  }

  static Status check_ref_name(const std::string& which) {
    if (which == "base" || which == "candidate" || which == "champion") return Status::ok();
    return invalid_argument("ref: '" + which + "' is not a ref; use base, candidate or champion");
  }

  // ---- runs: resolution and presentation ----------------------------------------------------

  Result<json> resolve_run(const std::string& ref, const std::string& field) {
    if (!is_hex(ref)) return not_found(field + ": no run with id '" + ref + "' (run ids are lowercase hex)");
    auto exact = store_->get_run(ref);
    if (!exact.is_ok()) return exact.status();
    if (exact->has_value()) return **exact;
    auto ids = store_->run_ids_with_prefix(ref, 10);
    if (!ids.is_ok()) return ids.status();
    if (ids->size() == 1) {
      auto r = store_->get_run(ids->front());
      if (!r.is_ok()) return r.status();
      if (r->has_value()) return **r;
    }
    if (ids->size() > 1) {
      std::string c;
      for (const auto& i : *ids) c += (c.empty() ? "" : ", ") + i;
      return invalid_argument(field + ": '" + ref + "' is an ambiguous id prefix (candidates: " + c + ")");
    }
    return not_found(field + ": no run with id '" + ref + "'");
  }

  Result<std::map<std::string, ClaimRow>> claims_by_owner() {
    auto claims = store_->list_claims();
    if (!claims.is_ok()) return claims.status();
    std::map<std::string, ClaimRow> out;
    for (auto& c : *claims) out[c.owner] = c;
    return out;
  }

  // The run as the API shows it: internals dropped, the cost estimated while a job runs, its
  // claim, and its workload's current name (runs keep the workload's id across renames).
  json present_run(const json& run, const std::map<std::string, ClaimRow>* claims = nullptr,
                   const std::map<std::string, std::string>* workload_names = nullptr) {
    json out = public_view(run);
    const std::string workload_id = run["workload"]["id"];
    if (workload_names) {
      auto it = workload_names->find(workload_id);
      if (it != workload_names->end()) out["workload"]["name"] = it->second;
    } else if (auto w = store_->get_workload(workload_id); w.is_ok() && w->has_value()) {
      out["workload"]["name"] = (**w)["name"];
    }
    const json& in = run["_"];
    // Cost: while a job runs, an estimate of elapsed time x devices on top of ended attempts.
    if (in.contains("job") && !in["job"].contains("endedAt")) {
      double elapsed = std::max(0.0, now_seconds() - in["job"]["startedAt"].get<double>());
      out["cost"] = {{"gpuSeconds", in["accumulatedSeconds"].get<double>() + elapsed * in["devices"].get<int>()},
                     {"estimated", true}};
    }
    std::optional<ClaimRow> claim;
    if (claims) {
      auto it = claims->find(run["runId"]);
      if (it != claims->end()) claim = it->second;
    } else {
      auto all = claims_by_owner();
      if (all.is_ok()) {
        auto it = all->find(run["runId"]);
        if (it != all->end()) claim = it->second;
      }
    }
    if (claim) out["claim"] = {{"pool", claim->pool}, {"devices", claim->devices}, {"state", claim->state}, {"since", claim->since}};
    return out;
  }

  Result<const PoolConfig*> choose_pool(int gpus, int devices) {
    const PoolConfig* best = nullptr;
    std::string seen;
    for (const auto& p : opt_.config.pools) {
      if (p.serving) continue;
      bool cpu_pool = p.accelerator == "cpu";
      if ((gpus == 0) != cpu_pool) continue;
      seen += (seen.empty() ? "" : ", ") + p.name + " (maxClaim " + std::to_string(p.max_claim) + ", declared " +
              std::to_string(p.declared) + ")";
      if (devices <= p.max_claim && devices <= p.declared && (!best || p.declared > best->declared)) best = &p;
    }
    if (best) return best;
    std::string kind = gpus == 0 ? "CPU" : "GPU";
    return failed_precondition("execution.gpus: no " + kind + " training pool can ever hold a claim of " +
                               std::to_string(devices) + " device" + (devices == 1 ? "" : "s") +
                               (seen.empty() ? std::string(" (the deployment declares no such pool)")
                                             : " (pools: " + seen + ")") +
                               "; ask for fewer devices");
  }

  static backend::JobHandle handle_of(const json& run) {
    const json& job = run["_"]["job"];
    return backend::JobHandle{job.value("pid", int64_t{0}), job.value("startTime", int64_t{0})};
  }

  static std::string method_label(const json& run) {
    std::string m = run.value("method", std::string("sft"));
    std::transform(m.begin(), m.end(), m.begin(), ::toupper);
    return m;
  }


  // ---- transitions (called with mu_ held, inside a store transaction) -------------------------

  // Persists `run` moved into `to`, records the event and counts the metrics.
  Status transition(json& run, Phase to) {
    const double now = now_seconds();
    Phase from = *parse_phase(run["phase"].get<std::string>());
    double entered = run["_"].value("enteredAt", now);
    run["phase"] = phase_name(to);
    run["updatedAt"] = rfc3339(now);
    run["phaseHistory"].push_back({{"phase", phase_name(to)}, {"enteredAt", rfc3339(now)}});
    run["_"]["enteredAt"] = now;
    TRAINER_RETURN_IF_ERROR(store_->update_run(run));
    json event = {{"time", rfc3339(now)}, {"type", "phase"}, {"phase", phase_name(to)}};
    auto seq = store_->append_run_event(run["runId"], event);
    if (!seq.is_ok()) return seq.status();
    metrics_.phase_left(from, now - entered);
    metrics_.phase_entered(to);
    notify();
    return Status::ok();
  }

  // Ends the run in a terminal phase: releases its claim, settles its cost, records outcome.
  Status finish(json& run, Phase terminal) {
    const double now = now_seconds();
    TRAINER_RETURN_IF_ERROR(store_->delete_claim(run["runId"]));
    settle_cost(run, now);
    std::string outcome = terminal == Phase::kCompleted ? "COMPLETED" : terminal == Phase::kFailed ? "FAILED" : "CANCELLED";
    run["outcome"] = outcome;
    run["endedAt"] = rfc3339(now);
    if (terminal == Phase::kFailed) {
      std::string failed_in = run["_"].value("failedIn", run["phase"].get<std::string>());
      metrics_.run_failed(*parse_phase(failed_in));
    }
    TRAINER_RETURN_IF_ERROR(transition(run, terminal));
    TRAINER_RETURN_IF_ERROR(store_->append_run_event(
                                run["runId"], {{"time", rfc3339(now)}, {"type", "outcome"}, {"outcome", outcome},
                                               {"failureReason", run.value("failureReason", json(nullptr))}})
                                .status());
    metrics_.run_ended(terminal, method_label(run), now - run["_"]["createdAt"].get<double>());
    return admit_locked();
  }

  // Moves the time of an ended job into the run's cost.
  void settle_cost(json& run, double now) {
    json& in = run["_"];
    if (in.contains("job") && !in["job"].contains("endedAt")) {
      double end = now;
      if (in["job"].value("endEstimated", false)) end = in["job"].value("endGuess", now);
      double seconds = std::max(0.0, end - in["job"]["startedAt"].get<double>()) * in["devices"].get<int>();
      in["job"]["endedAt"] = end;
      in["accumulatedSeconds"] = in["accumulatedSeconds"].get<double>() + seconds;
      const PoolConfig* pool = pool_named(in["pool"]);
      metrics_.gpu_time(run["workload"]["name"].get<std::string>(), pool ? pool->accelerator : "unknown", seconds);
    }
    run["cost"] = {{"gpuSeconds", in["accumulatedSeconds"]}, {"estimated", false}};
  }

  const PoolConfig* pool_named(const std::string& name) const {
    for (const auto& p : opt_.config.pools) {
      if (p.name == name) return &p;
    }
    return nullptr;
  }

  int workload_quota(const std::string& workload_id) {
    auto w = store_->get_workload(workload_id);
    if (!w.is_ok() || !w->has_value()) return opt_.config.default_workload_quota;
    return (**w)["gpuQuota"].get<int>();
  }

  // Grants queued claims in order while devices and quotas allow. A claim that does not fit
  // its pool holds back the claims queued after it on that pool (no overtaking); a claim over
  // its workload's quota waits without holding back others.
  Status admit_locked() {
    auto claims = store_->list_claims();
    if (!claims.is_ok()) return claims.status();
    std::map<std::string, int> granted, held;
    for (const auto& c : *claims) {
      if (c.state == "GRANTED") {
        granted[c.pool] += c.devices;
        held[c.workload_id] += c.devices;
      }
    }
    std::set<std::string> blocked;
    for (auto& c : *claims) {
      if (c.state != "QUEUED" || blocked.count(c.pool)) continue;
      const PoolConfig* pool = pool_named(c.pool);
      if (!pool) continue;
      if (held[c.workload_id] + c.devices > workload_quota(c.workload_id)) continue;
      if (granted[c.pool] + c.devices <= pool->declared) {
        c.state = "GRANTED";
        c.since = now_rfc3339();
        TRAINER_RETURN_IF_ERROR(store_->update_claim(c));
        granted[c.pool] += c.devices;
        held[c.workload_id] += c.devices;
      } else {
        blocked.insert(c.pool);
      }
    }
    return Status::ok();
  }

  Result<std::vector<json>> open_runs() {
    store::RunFilter f;
    for (int i = 0; i < kPhaseCount; ++i) {
      Phase p = phase_at(i);
      if (!is_terminal(p) && p != Phase::kPaused) f.phases.push_back(phase_name(p));
    }
    f.limit = 100000;
    auto page = store_->list_runs(f);
    if (!page.is_ok()) return page.status();
    std::reverse(page->runs.begin(), page->runs.end());  // oldest first
    return std::move(page->runs);
  }

  void notify() {
    std::vector<std::function<void()>> subscribers;
    {
      std::lock_guard<std::mutex> lock(events_mu_);
      ++events_version_;
      subscribers = subscribers_;
    }
    events_cv_.notify_all();
    for (const auto& on_change : subscribers) on_change();
  }

  // ---- the driver -------------------------------------------------------------------------

  void drive() {
    auto last_capacity = std::chrono::steady_clock::now();
    while (!stopping_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto open = open_runs();
        if (open.is_ok()) {
          for (auto& run : *open) {
            Status st = store_->transaction([&]() -> Status { return step_run(run); });
            if (!st.is_ok()) {
              std::fprintf(stderr, "trainerd: run %s: %s\n", run["runId"].get<std::string>().c_str(),
                           st.to_string().c_str());
            }
          }
          Status st = store_->transaction([&]() -> Status { return admit_locked(); });
          if (!st.is_ok()) std::fprintf(stderr, "trainerd: admission: %s\n", st.to_string().c_str());
        } else {
          std::fprintf(stderr, "trainerd: listing open runs: %s\n", open.status().to_string().c_str());
        }
      }
      if (std::chrono::steady_clock::now() - last_capacity > std::chrono::seconds(30)) {
        read_capacity();
        last_capacity = std::chrono::steady_clock::now();
      }
      std::this_thread::sleep_for(opt_.tick);
    }
  }

  Status fail(json& run, const std::string& reason) {
    run["failureReason"] = reason;
    run["_"]["failedIn"] = run["phase"];
    run["_"]["terminal"] = phase_name(Phase::kFailed);
    return finish(run, Phase::kFailed);
  }

  // After the base model and before the job: claim devices (or wait for them).
  Status claim_devices(json& run) {
    ClaimRow c;
    c.owner = run["runId"];
    c.kind = run.value("method", std::string("sft"));
    std::transform(c.kind.begin(), c.kind.end(), c.kind.begin(), ::toupper);
    c.workload_id = run["workload"]["id"];
    c.pool = run["_"]["pool"];
    c.devices = run["_"]["devices"];
    c.state = "QUEUED";
    c.since = now_rfc3339();
    auto existing = claims_by_owner();
    if (!existing.is_ok()) return existing.status();
    if (!existing->count(c.owner)) TRAINER_RETURN_IF_ERROR(store_->insert_claim(c));
    TRAINER_RETURN_IF_ERROR(admit_locked());
    auto after = claims_by_owner();
    if (!after.is_ok()) return after.status();
    if ((*after)[c.owner].state == "GRANTED") return transition(run, Phase::kSubmitting);
    return transition(run, Phase::kWaitingForDevices);
  }

  Status after_dataset(json& run) {
    auto m = find_selected(run["baseModel"]);
    if (!m.is_ok()) return m.status();
    if (!m->has_value()) return fail(run, "the base model " + run["baseModel"].get<std::string>() + " is no longer selected");
    const std::string status = (**m)["status"];
    if (status == "failed") {
      return fail(run, "the base model " + run["baseModel"].get<std::string>() + " failed to prepare\n" +
                           (**m).value("failure", std::string("")));
    }
    if (status == "preparing") {
      if (run["phase"] == phase_name(Phase::kWaitingForBaseModel)) return Status::ok();
      return transition(run, Phase::kWaitingForBaseModel);
    }
    run["_"]["baseModelPath"] = (**m)["cachePath"];
    run["baseModelHash"] = (**m)["contentHash"];
    // No judge in an SFT run: DEPLOYING_GRADER and AWAITING_GRADER do not apply.
    return claim_devices(run);
  }

  Status step_run(json& run) {
    Phase phase = *parse_phase(run["phase"].get<std::string>());
    switch (phase) {
      case Phase::kSizingDataset: {
        int64_t rows = run["_"]["rows"].get<int64_t>();
        auto p = plan::plan_from_json(run["plan"], "plan");
        if (p.is_ok()) run["progress"]["totalSteps"] = plan::total_steps(p->config, rows);
        run["progress"]["rowsTotal"] = rows;
        return after_dataset(run);
      }
      case Phase::kWaitingForBaseModel:
        return after_dataset(run);
      case Phase::kDeployingGrader:
      case Phase::kWaitingForGrader:
        return claim_devices(run);
      case Phase::kWaitingForDevices: {
        auto claims = claims_by_owner();
        if (!claims.is_ok()) return claims.status();
        auto it = claims->find(run["runId"]);
        if (it == claims->end()) return claim_devices(run);  // never lose a waiting run's claim
        if (it->second.state == "GRANTED") return transition(run, Phase::kSubmitting);
        return Status::ok();
      }
      case Phase::kSubmitting:
        return submit_job(run);
      case Phase::kQueued:
      case Phase::kPreparing:
      case Phase::kTraining:
      case Phase::kCleaningUp:
        return follow_job(run);
      case Phase::kFinalizing:
        return finalize(run);
      case Phase::kPausing:  // no pause in this round: a run found here has nothing to stop
        return fail(run, "the run was found pausing, which this trainerd does not support");
      case Phase::kPaused:
      case Phase::kCompleted:
      case Phase::kFailed:
      case Phase::kCancelled:
        return Status::ok();
    }
    return Status::ok();
  }

  backend::JobSpec job_spec(const json& run) const {
    const int attempt = run["attempt"].get<int>();
    fs::path dir = fs::path(opt_.data_dir) / "runs" / run["runId"].get<std::string>() / ("attempt-" + std::to_string(attempt));
    backend::JobSpec spec;
    spec.run_id = run["runId"];
    spec.attempt = attempt;
    spec.plan_path = (dir / "plan.json").string();
    spec.output_dir = (dir / "output").string();
    spec.events_path = (dir / "events.jsonl").string();
    spec.log_path = (dir / "job.log").string();
    return spec;
  }

  Status submit_job(json& run) {
    backend::JobSpec spec = job_spec(run);
    const double now = now_seconds();
    // A job started before a crash whose handle was never committed: adopt it.
    if (auto orphan = backend_->find(spec)) {
      run["_"]["job"] = {{"pid", orphan->pid}, {"startTime", orphan->start_time}, {"startedAt", now},
                         {"eventsPath", spec.events_path}, {"logPath", spec.log_path}, {"offset", 0},
                         {"outputDir", spec.output_dir}};
      return transition(run, Phase::kQueued);
    }
    std::error_code ec;
    fs::create_directories(spec.output_dir, ec);
    if (ec) return fail(run, "could not create the run's folder " + spec.output_dir + ": " + ec.message());
    json job_plan = run["plan"];
    job_plan["baseModel"] = run["_"]["baseModelPath"];
    job_plan["config"]["dataset"] = run["_"]["datasetPath"];
    if (!run["_"]["validationPath"].is_null()) job_plan["config"]["validationDataset"] = run["_"]["validationPath"];
    Status st = storage::write_file_atomic(spec.plan_path, job_plan.dump(2) + "\n");
    if (!st.is_ok()) return fail(run, "could not write the resolved plan\n" + st.message());
    auto handle = backend_->start(spec);
    if (!handle.is_ok()) return fail(run, "the backend could not start the training job\n" + handle.status().message());
    run["_"]["job"] = {{"pid", handle->pid}, {"startTime", handle->start_time}, {"startedAt", now},
                       {"eventsPath", spec.events_path}, {"logPath", spec.log_path}, {"offset", 0},
                       {"outputDir", spec.output_dir}};
    return transition(run, Phase::kQueued);
  }

  // Applies new lines of the job's events file; returns how the job said it ended, if it did.
  Status read_events(json& run) {
    json& job = run["_"]["job"];
    std::ifstream in(job["eventsPath"].get<std::string>(), std::ios::binary);
    if (!in) return Status::ok();
    int64_t offset = job.value("offset", int64_t{0});
    in.seekg(offset);
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t consumed = 0;
    const std::string id = run["runId"];
    while (true) {
      size_t nl = chunk.find('\n', consumed);
      if (nl == std::string::npos) break;  // a partial last line waits for its end
      std::string line = chunk.substr(consumed, nl - consumed);
      consumed = nl + 1;
      json ev = json::parse(line, nullptr, false);
      if (ev.is_discarded() || !ev.is_object() || !ev.contains("type") || !ev["type"].is_string()) continue;
      TRAINER_RETURN_IF_ERROR(apply_event(run, ev));
    }
    if (consumed > 0) {
      job["offset"] = offset + static_cast<int64_t>(consumed);
      run["updatedAt"] = now_rfc3339();
      TRAINER_RETURN_IF_ERROR(store_->update_run(run));
      notify();
    }
    return Status::ok();
  }

  Status apply_event(json& run, const json& ev) {
    const std::string type = ev["type"];
    const std::string id = run["runId"];
    Phase phase = *parse_phase(run["phase"].get<std::string>());
    const bool live = phase == Phase::kQueued || phase == Phase::kPreparing || phase == Phase::kTraining;
    json& in = run["_"];
    auto num = [&](const char* k) { return ev.contains(k) && ev[k].is_number(); };
    if (type == "phase" && ev.contains("phase") && ev["phase"].is_string()) {
      auto to = parse_phase(ev["phase"].get<std::string>());
      if (live && to && (*to == Phase::kPreparing || *to == Phase::kTraining) && *to > phase) {
        return transition(run, *to);
      }
    } else if (type == "preparing") {
      if (num("rowsDone")) run["progress"]["rowsDone"] = ev["rowsDone"];
      if (num("rowsTotal")) run["progress"]["rowsTotal"] = ev["rowsTotal"];
      if (live && phase == Phase::kQueued) return transition(run, Phase::kPreparing);
    } else if (type == "data_fit") {
      json fit = ev;
      fit.erase("type");
      run["dataFit"] = fit;
    } else if (type == "resolved") {
      if (ev.contains("settingsSha")) in["jobSettingsSha"] = ev["settingsSha"];
    } else if (type == "step" && num("step")) {
      json m = ev;
      m.erase("type");
      m["time"] = now_rfc3339();
      TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(id, ev["step"].get<int64_t>(), m));
      run["progress"]["step"] = ev["step"];
      if (num("totalSteps")) run["progress"]["totalSteps"] = ev["totalSteps"];
      for (const char* k : {"loss", "learningRate", "gradNorm", "tokenAccuracy", "tokensPerSecond"}) {
        if (num(k)) run["latest"][k] = ev[k];
      }
      json e = m;
      e["type"] = "step";
      TRAINER_RETURN_IF_ERROR(store_->append_run_event(id, e).status());
      if (live && phase < Phase::kTraining) return transition(run, Phase::kTraining);
    } else if (type == "validation" && num("validationLoss")) {
      run["latest"]["validationLoss"] = ev["validationLoss"];
      if (num("step")) {
        auto rows = store_->step_metrics(id, 1000000);
        if (!rows.is_ok()) return rows.status();
        json m = {{"step", ev["step"]}};
        for (const auto& r : *rows) {
          if (r["step"] == ev["step"]) m = r;
        }
        m["validationLoss"] = ev["validationLoss"];
        TRAINER_RETURN_IF_ERROR(store_->put_step_metrics(id, ev["step"].get<int64_t>(), m));
      }
      json e = ev;
      e["time"] = now_rfc3339();
      TRAINER_RETURN_IF_ERROR(store_->append_run_event(id, e).status());
    } else if (type == "completed") {
      in["jobOutcome"] = "completed";
      if (ev.contains("adapterDir")) in["adapterDir"] = ev["adapterDir"];
      if (num("finalLoss")) run["latest"]["loss"] = ev["finalLoss"];
    } else if (type == "failed") {
      in["jobOutcome"] = "failed";
      in["jobReason"] = ev.value("reason", std::string("the job reported a failure without a reason"));
    } else if (type == "cancelled") {
      in["jobOutcome"] = "cancelled";
    }
    return Status::ok();
  }

  Status follow_job(json& run) {
    json& in = run["_"];
    if (!in.contains("job")) {
      // CLEANING_UP of a run whose job never started.
      return finish(run, *parse_phase(in.value("terminal", std::string("CANCELLED"))));
    }
    backend::JobHandle handle = handle_of(run);
    // Poll first, then read: every event written before the exit is seen.
    backend::JobStatus status = backend_->poll(handle);
    TRAINER_RETURN_IF_ERROR(read_events(run));
    Phase phase = *parse_phase(run["phase"].get<std::string>());
    if (status.state == backend::JobState::kRunning) {
      if (in.value("cancelRequested", false)) {
        double sent = in.value("stopSentAt", 0.0);
        if (sent == 0.0) {
          in["stopSentAt"] = now_seconds();
          TRAINER_RETURN_IF_ERROR(store_->update_run(run));
          backend_->request_stop(handle);
        } else if (now_seconds() - sent > opt_.config.limits.cancel_grace_seconds) {
          if (!in.value("killSent", false)) {
            in["killSent"] = true;
            TRAINER_RETURN_IF_ERROR(store_->update_run(run));
          }
          backend_->kill(handle);
        }
      }
      return Status::ok();
    }
    // The job ended.
    if (status.state == backend::JobState::kGone) {
      // Not ours to wait for (it ended while trainerd was down): its events file's last write
      // is the best estimate of when.
      std::error_code ec;
      auto mtime = fs::last_write_time(in["job"]["eventsPath"].get<std::string>(), ec);
      if (!ec) {
        auto sys = std::chrono::file_clock::to_sys(mtime);
        in["job"]["endEstimated"] = true;
        in["job"]["endGuess"] = std::chrono::duration<double>(sys.time_since_epoch()).count();
      }
    }
    in["job"]["exitCode"] = status.exit_code ? json(*status.exit_code) : json(nullptr);
    const std::string outcome = in.value("jobOutcome", std::string(""));
    if (in.value("cancelRequested", false)) {
      if (phase != Phase::kCleaningUp) TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
      return finish(run, Phase::kCancelled);
    }
    if (phase == Phase::kCleaningUp) {
      return finish(run, *parse_phase(in.value("terminal", std::string("FAILED"))));
    }
    if (outcome == "completed" && (!status.exit_code || *status.exit_code == 0)) {
      TRAINER_RETURN_IF_ERROR(transition(run, Phase::kFinalizing));
      return finalize(run);
    }
    std::string reason;
    if (outcome == "failed") {
      reason = in["jobReason"];
    } else if (outcome == "cancelled") {
      reason = "the training job stopped on a signal trainerd did not send (it reported cancelled)";
    } else if (status.state == backend::JobState::kGone) {
      reason = "the training job (pid " + std::to_string(handle.pid) +
               ") ended while trainerd was not running and reported no outcome\nlast lines of its log:\n" +
               last_lines(in["job"]["logPath"], 10);
    } else {
      reason = "the training job exited with code " + std::to_string(status.exit_code.value_or(-1)) +
               " without reporting an outcome\nlast lines of its log:\n" + last_lines(in["job"]["logPath"], 10);
    }
    run["failureReason"] = reason;
    in["failedIn"] = run["phase"];
    in["terminal"] = phase_name(Phase::kFailed);
    TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
    return finish(run, Phase::kFailed);
  }

  // FINALIZING: the job completed; record its adapter and final metrics, then clean up.
  Status finalize(json& run) {
    json& in = run["_"];
    std::string adapter = in.value("adapterDir", std::string(""));
    if (adapter.empty()) adapter = (fs::path(in["job"]["outputDir"].get<std::string>()) / "adapter").string();
    std::error_code ec;
    if (!fs::is_directory(adapter, ec)) {
      run["failureReason"] = "the job reported completion but its adapter folder " + adapter + " does not exist";
      in["failedIn"] = run["phase"];
      in["terminal"] = phase_name(Phase::kFailed);
      TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
      return finish(run, Phase::kFailed);
    }
    run["adapterPath"] = adapter;
    in["terminal"] = phase_name(Phase::kCompleted);
    TRAINER_RETURN_IF_ERROR(transition(run, Phase::kCleaningUp));
    return finish(run, Phase::kCompleted);
  }

  // ---- gauges -----------------------------------------------------------------------------

  void refresh_gauges() {
    auto claims = store_->list_claims();
    auto workloads = store_->list_workloads();
    if (!claims.is_ok() || !workloads.is_ok()) return;
    std::map<std::string, int> observed;
    bool read;
    {
      std::lock_guard<std::mutex> lock(observed_mu_);
      observed = observed_;
      read = observed_read_;
    }
    std::vector<PoolGauge> pools;
    for (const auto& p : opt_.config.pools) {
      PoolGauge g;
      g.accelerator = p.accelerator;
      g.serving = p.serving;
      g.declared = p.declared;
      if (read) g.observed = observed_for(p, observed);
      for (const auto& c : *claims) {
        if (c.pool != p.name) continue;
        if (c.state == "GRANTED") {
          ++g.granted_claims;
          g.granted_devices += c.devices;
        } else {
          ++g.queued_claims;
          g.queued_devices += c.devices;
        }
      }
      pools.push_back(g);
    }
    metrics_.set_pools(pools);
    std::vector<WorkloadGauge> wg;
    for (const auto& w : *workloads) {
      WorkloadGauge g;
      g.name = w["name"];
      g.quota = w["gpuQuota"];
      for (const auto& c : *claims) {
        if (c.workload_id != w["id"]) continue;
        (c.state == "GRANTED" ? g.granted_devices : g.queued_devices) += c.devices;
      }
      wg.push_back(g);
    }
    metrics_.set_workloads(wg);
    std::map<Phase, int> active;
    for (int i = 0; i < kPhaseCount; ++i) {
      Phase p = phase_at(i);
      if (is_terminal(p)) continue;
      store::RunFilter f;
      f.phases = {phase_name(p)};
      f.limit = 0;
      auto page = store_->list_runs(f);
      if (!page.is_ok()) return;
      active[p] = static_cast<int>(page->total);
    }
    metrics_.set_runs_active(active);
  }

  // ---- members ----------------------------------------------------------------------------

  // Constant after construction.
  const ServiceOptions opt_;
  const std::unique_ptr<store::Store> store_;
  const std::unique_ptr<backend::Backend> backend_;
  ServiceTelemetry metrics_;  // thread-safe

  // Serialises every read-modify-write of durable state: submissions, the driver, cancels,
  // admission. Reads that need no consistency with a write go to the store directly.
  std::mutex mu_;

  std::mutex events_mu_;
  std::condition_variable events_cv_;
  uint64_t events_version_ = 0;  // guarded by events_mu_: bumped on every run change
  std::vector<std::function<void()>> subscribers_;  // guarded by events_mu_

  mutable std::mutex steps_mu_;
  std::vector<StartupStep> steps_;  // guarded by steps_mu_

  std::mutex observed_mu_;
  std::map<std::string, int> observed_;  // guarded by observed_mu_
  bool observed_read_ = false;           // guarded by observed_mu_

  std::mutex prep_mu_;
  std::vector<std::thread> preparers_;  // guarded by prep_mu_

  // Presented text of ended runs, by run id, with the key of what it was made from.
  static constexpr size_t kPresentedCacheSize = 20000;
  std::mutex presented_mu_;
  std::map<std::string, std::pair<size_t, std::string>> presented_;  // guarded by presented_mu_

  std::thread driver_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{false};
};

}  // namespace

Result<std::unique_ptr<Service>> make_service(ServiceOptions options, std::unique_ptr<store::Store> store,
                                              std::unique_ptr<backend::Backend> backend) {
  std::error_code ec;
  for (const char* sub : {"datasets", "models", "runs"}) {
    fs::create_directories(fs::path(options.data_dir) / sub, ec);
    if (ec) return unavailable("cannot create " + (fs::path(options.data_dir) / sub).string() + ": " + ec.message());
  }
  return std::unique_ptr<Service>(new ServiceImpl(std::move(options), std::move(store), std::move(backend)));
}

}  // namespace trainer::service
