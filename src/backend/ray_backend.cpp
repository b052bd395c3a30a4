// The Ray backend: each run attempt is one Ray job, submitted through the Jobs REST API of the
// cluster's dashboard (POST /api/jobs/, GET /api/jobs/ID, POST /api/jobs/ID/stop). The
// submission id is derived from the run and the attempt, so a resubmission after a trainerd
// restart finds the job instead of starting it twice. The job's files (plan, events, log,
// output) are on a folder the cluster's nodes share with trainerd.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "backend/backend.h"
#include "backend/command.h"
#include "common/json_parse.h"

namespace trainer::backend {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct RayHandle {
  std::string submission_id;  // PREFIX-RUN-ATTEMPT
  std::string log_path;       // the job's log, where Ray's own log of it goes when the job wrote none
};

JobHandle encode(const RayHandle& h) {
  return JobHandle{json{{"raySubmissionId", h.submission_id}, {"log", h.log_path}}.dump()};
}

RayHandle decode(const JobHandle& handle) {
  RayHandle h;
  auto doc = parse_json(handle.value, "Ray job handle", 4);
  if (!doc.is_ok() || !doc->is_object()) return h;
  const json& d = *doc;
  if (d.contains("raySubmissionId") && d["raySubmissionId"].is_string()) h.submission_id = d["raySubmissionId"].get<std::string>();
  if (d.contains("log") && d["log"].is_string()) h.log_path = d["log"].get<std::string>();
  for (char c : h.submission_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return RayHandle{};
  }
  return h;
}

// How Ray's job supervisor begins the message of a job whose entrypoint exited non-zero.
constexpr double kNodePin = 0.001;     // of the resource "node:ADDRESS" a scan job asks for
constexpr size_t kMaxBodyChars = 500;  // of an answer quoted in a message
constexpr auto kScanPollInterval = std::chrono::milliseconds(500);  // between looks at the scan jobs

constexpr const char* kEntrypointFailed = "Job entrypoint command failed with exit code ";

// An answer of the REST API: its HTTP status and body, or why there was none.
struct Answer {
  int status = 0;       // 0: no answer (the cluster did not respond)
  std::string body;
  std::string error;    // why there was no answer
};

class RayBackend final : public Backend {
 public:
  RayBackend(std::string job_binary, RayOptions options)
      : job_binary_(std::move(job_binary)), options_(std::move(options)) {
    while (!options_.address.empty() && options_.address.back() == '/') options_.address.pop_back();
  }

  std::string name() const override { return "ray"; }

  std::string describe(const JobHandle& handle) const override {
    return "Ray job " + decode(handle).submission_id;
  }

  bool shares_files() const override { return options_.job_folder.empty(); }

  Result<JobHandle> start(const JobSpec& spec) override {
    const std::string id = submission_id(spec);
    auto entrypoint = options_.job_folder.empty() ? shared_entrypoint(spec) : node_entrypoint(spec, id);
    if (!entrypoint.is_ok()) return entrypoint.status();
    json body = {{"entrypoint", *entrypoint},
                 {"submission_id", id},
                 {"entrypoint_num_cpus", options_.cpus_per_job},
                 {"metadata", {{"trainerRunId", spec.run_id}, {"trainerAttempt", std::to_string(spec.attempt)}}}};
    if (spec.gpus > 0) body["entrypoint_num_gpus"] = spec.gpus;
    // A submission starts Ray's job agent on first use, which can take longer than a status
    // call: it gets a longer timeout, and one that times out is looked up before it counts as failed.
    Answer a = submit(body);
    if (a.status == 200) return encode(RayHandle{id, spec.log_path});
    if (a.status == 0 && request("GET", "/api/jobs/" + id, "").status == 200) {
      return encode(RayHandle{id, spec.log_path});
    }
    // A submission id Ray already holds (Ray 2.60 answers 500 "... already exists"): the job was
    // submitted before; follow it rather than start it twice.
    if (a.body.find("already exists") != std::string::npos) return encode(RayHandle{id, spec.log_path});
    if (a.status == 0) return unavailable("Ray backend: the cluster at " + options_.address + " did not answer: " + a.error);
    return unavailable("Ray backend: the cluster refused the job (HTTP " + std::to_string(a.status) +
                       "): " + a.body.substr(0, 500));
  }

  JobStatus poll(const JobHandle& job) override {
    const RayHandle h = decode(job);
    if (h.submission_id.empty()) return {JobState::kGone, std::nullopt, "not a Ray job handle"};
    Answer a = request("GET", "/api/jobs/" + h.submission_id, "");
    // No answer: the cluster's state is unknown, so the job is taken to run on.
    if (a.status == 0 || a.status >= 500) return {JobState::kRunning, std::nullopt, ""};
    if (a.status == 404) {
      return {JobState::kGone, std::nullopt,
              "the Ray cluster at " + options_.address + " no longer knows job " + h.submission_id +
                  " (the cluster lost it, e.g. its head restarted)"};
    }
    auto doc = parse_json(a.body, "Ray job status", 16);
    if (!doc.is_ok() || !doc->is_object() || !(*doc).contains("status") || !(*doc)["status"].is_string()) {
      return {JobState::kRunning, std::nullopt, ""};
    }
    const std::string status = (*doc)["status"].get<std::string>();
    const std::string message = (*doc).value("message", std::string());
    if (status == "PENDING" || status == "RUNNING") {
      return {JobState::kRunning, std::nullopt, "", host_of((*doc).value("driver_agent_http_address", json()))};
    }
    save_ray_log(h);
    if (status == "SUCCEEDED") return {JobState::kExited, 0, ""};
    if (status == "STOPPED") return {JobState::kExited, 128 + 15, "Ray job " + h.submission_id + " was stopped"};
    // FAILED: the entrypoint's own failure has its exit code; anything else is the cluster's.
    if ((*doc).contains("driver_exit_code") && (*doc)["driver_exit_code"].is_number_integer()) {
      const int code = (*doc)["driver_exit_code"].get<int>();
      return {JobState::kExited, code < 0 ? 128 - code : code, ""};
    }
    // Only Ray's report of the entrypoint's own exit carries its code. Other failures are the
    // cluster's, whatever their text says: e.g. the record Ray's job manager writes anew for a job
    // whose supervisor actor it found gone ("Job supervisor actor died: ... exit ...").
    const size_t at = message.rfind(kEntrypointFailed, 0) == 0 ? message.find("exit code ") : std::string::npos;
    if (at != std::string::npos) {
      int code = 1;
      try {
        code = std::stoi(message.substr(at + 10));
      } catch (const std::exception&) {
      }
      return {JobState::kExited, code < 0 ? 128 - code : code, ""};
    }
    return {JobState::kExited, 1, "the Ray cluster failed job " + h.submission_id + ": " + message};
  }

  void request_stop(const JobHandle& handle) override { stop(handle); }
  // Ray's stop is SIGTERM, then SIGKILL after the cluster's RAY_JOB_STOP_WAIT_TIME_S: asking again is all there is.
  void kill(const JobHandle& handle) override { stop(handle); }

  std::optional<JobHandle> find(const JobSpec& spec) override {
    const std::string id = submission_id(spec);
    Answer a = request("GET", "/api/jobs/" + id, "");
    if (a.status != 200) return std::nullopt;
    return encode(RayHandle{id, spec.log_path});
  }

  Result<std::string> run_tool(const std::vector<std::string>& args, int timeout_s) override {
    return backend::run_tool(job_binary_, args, timeout_s);
  }

  // One Ray job per alive node, all submitted at once, each pinned to its node by a sliver of the
  // resource "node:ADDRESS" that Ray gives every node (and no CPU, so a busy node still runs it),
  // then followed until each ends or `timeout_s` passes (a job still running is stopped then). A
  // node's answer is the last line its job printed.
  Result<std::vector<NodeScan>> scan_nodes(const std::vector<std::string>& args, int timeout_s) override {
    auto nodes = alive_nodes();
    if (!nodes.is_ok()) return nodes.status();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    const std::string batch = std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    std::string entrypoint = shell_quote(job_binary_);
    for (const auto& arg : args) entrypoint += " " + shell_quote(arg);
    std::vector<NodeScan> out;
    std::vector<std::string> ids;  // the submission id of each node's job; "" when none was submitted
    for (size_t i = 0; i < nodes->size(); ++i) {
      const AliveNode& node = (*nodes)[i];
      out.push_back(NodeScan{node.name, "", ""});
      ids.push_back(options_.submission_prefix + "-scan-" + batch + "-" + std::to_string(i));
      if (node.address.empty()) {
        out.back().error = "Ray listed the node without an address to pin its scan to";
        ids.back().clear();
        continue;
      }
      json body = {{"entrypoint", entrypoint},
                   {"submission_id", ids.back()},
                   {"entrypoint_num_cpus", 0},
                   {"entrypoint_resources", {{"node:" + node.address, kNodePin}}},
                   {"metadata", {{"trainerScanNode", node.name}}}};
      Answer a = submit(body);
      if (a.status != 200) {
        out.back().error = a.status == 0 ? "the cluster did not answer the scan job's submission: " + a.error
                                         : "the cluster refused the scan job (HTTP " + std::to_string(a.status) +
                                               "): " + a.body.substr(0, kMaxBodyChars);
        ids.back().clear();
      }
    }
    std::vector<bool> done(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) done[i] = ids[i].empty();
    while (std::find(done.begin(), done.end(), false) != done.end()) {
      const bool late = std::chrono::steady_clock::now() >= deadline;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (done[i]) continue;
        Answer a = request("GET", "/api/jobs/" + ids[i], "");
        auto doc = a.status == 200 ? parse_json(a.body, "Ray job status", 16) : Result<json>(json());
        const std::string status = doc.is_ok() && doc->is_object() ? doc->value("status", std::string()) : "";
        if (status == "SUCCEEDED") {
          out[i].output = last_line(job_logs(ids[i]));
          done[i] = true;
        } else if (status == "FAILED" || status == "STOPPED") {
          const std::string tail = last_line(job_logs(ids[i]));
          out[i].error = "Ray job " + ids[i] + " " + lower(status) + ": " + doc->value("message", std::string()) +
                         (tail.empty() ? "" : " (" + tail.substr(0, kMaxBodyChars) + ")");
          done[i] = true;
        } else if (late) {
          (void)request("POST", "/api/jobs/" + ids[i] + "/stop", "");
          out[i].error = "timed out after " + std::to_string(timeout_s) + "s: Ray job " + ids[i] + " was " +
                         (status.empty() ? "not reported" : status);
          done[i] = true;
        }
      }
      if (std::find(done.begin(), done.end(), false) != done.end()) std::this_thread::sleep_for(kScanPollInterval);
    }
    return out;
  }

  std::map<std::string, int> observed_devices() override {
    std::map<std::string, int> out;
    auto nodes = alive_nodes();
    if (!nodes.is_ok()) return out;
    for (const auto& node : *nodes) {
      out["cpu"] += 1;  // one CPU device per node, as on one host
      if (!node.resources.is_object()) continue;
      // "GPU" counts the node's GPUs.
      const json& gpus = node.resources.value("GPU", json(nullptr));
      if (gpus.is_number()) out[gpu_profile(node)] += static_cast<int>(gpus.get<double>());
    }
    return out;
  }

  // What the cluster's resource report (GET /api/cluster_status, its usage by node) says is in
  // use on each alive node: its GPUs in use, and the node as one "cpu" device while any of its
  // CPUs or GPUs is.
  std::optional<std::map<std::string, int>> devices_in_use() override {
    auto nodes = alive_nodes();
    if (!nodes.is_ok()) return std::nullopt;
    Answer a = request("GET", "/api/cluster_status?format=0", "");
    if (a.status != 200) return std::nullopt;
    auto doc = parse_json(a.body, "Ray cluster status", 64);
    if (!doc.is_ok()) return std::nullopt;
    const json usage = doc->value("/data/clusterStatus/loadMetricsReport/usageByNode"_json_pointer, json(nullptr));
    if (!usage.is_object()) return std::nullopt;
    // A resource's [used, total].
    auto used = [](const json& node_usage, const char* resource) {
      const json& pair = node_usage.value(resource, json(nullptr));
      return pair.is_array() && !pair.empty() && pair[0].is_number() ? pair[0].get<double>() : 0.0;
    };
    std::map<std::string, int> out;
    for (const auto& node : *nodes) {
      const json node_usage = usage.value(node.id, json(nullptr));
      if (!node_usage.is_object()) continue;
      const double gpus = used(node_usage, "GPU");
      if (used(node_usage, "CPU") > 0 || gpus > 0) out["cpu"] += 1;
      if (gpus > 0) out[gpu_profile(node)] += static_cast<int>(std::ceil(gpus));
    }
    return out;
  }

  std::string observed_source() const override {
    return "Ray: the alive nodes of the cluster at " + options_.address +
           " (one CPU device each) and their GPU resources";
  }

 private:
  // POST /api/jobs/ with `body`. A submission starts Ray's job agent on first use, which can take
  // longer than a status call: it gets a longer timeout, and a head whose job agent is not up yet
  // says "try again later": it does, briefly.
  Answer submit(const json& body) const {
    constexpr int kTries = 5;
    constexpr auto kRetryWait = std::chrono::seconds(2);
    Answer a;
    for (int attempt = 0; attempt < kTries; ++attempt) {
      a = request("POST", "/api/jobs/", body.dump(), 6 * options_.request_timeout_s);
      if (a.body.find("try again later") == std::string::npos) break;
      std::this_thread::sleep_for(kRetryWait);
    }
    return a;
  }

  struct AliveNode {
    std::string id;       // the raylet's node id (hex)
    std::string name;     // the raylet's node name (its address unless the node was started with --node-name)
    std::string address;  // the raylet's address: Ray gives each node the resource "node:ADDRESS"
    json resources;       // the raylet's resourcesTotal (an object; null when it reported none)
  };

  // A node's GPU profile: "nvidia-h100" from its resource "accelerator_type:H100", "gpu" without one.
  static std::string gpu_profile(const AliveNode& node) {
    if (node.resources.is_object()) {
      for (const auto& [key, value] : node.resources.items()) {
        if (key.rfind("accelerator_type:", 0) == 0) return "nvidia-" + lower(key.substr(17));
      }
    }
    return "gpu";
  }

  // The cluster's alive nodes (GET /nodes?view=summary); unavailable when the dashboard does not answer.
  Result<std::vector<AliveNode>> alive_nodes() const {
    Answer a = request("GET", "/nodes?view=summary", "");
    if (a.status != 200) {
      return unavailable("Ray backend: the dashboard at " + options_.address + " did not list its nodes" +
                         (a.status == 0 ? ": " + a.error : " (HTTP " + std::to_string(a.status) + ")"));
    }
    auto doc = parse_json(a.body, "Ray nodes", 64);
    if (!doc.is_ok()) return unavailable("Ray backend: " + doc.status().message());
    const json* summary = nullptr;
    if (doc->contains("data") && (*doc)["data"].is_object() && (*doc)["data"].contains("summary")) {
      summary = &(*doc)["data"]["summary"];
    }
    if (summary == nullptr || !summary->is_array()) {
      return unavailable("Ray backend: the dashboard's node list has no data.summary array");
    }
    std::vector<AliveNode> out;
    for (const auto& node : *summary) {
      if (!node.is_object() || !node.contains("raylet") || !node["raylet"].is_object()) continue;
      const json& raylet = node["raylet"];
      if (raylet.value("state", std::string()) != "ALIVE") continue;
      AliveNode n;
      n.id = raylet.value("nodeId", std::string());
      n.address = raylet.value("nodeManagerAddress", std::string());
      n.name = raylet.value("nodeName", std::string());
      if (n.name.empty()) n.name = n.address;
      if (raylet.contains("resourcesTotal") && raylet["resourcesTotal"].is_object()) n.resources = raylet["resourcesTotal"];
      out.push_back(std::move(n));
    }
    return out;
  }

  // The host of the URL of the agent on the node that runs a job's entrypoint
  // ("http://10.0.3.7:52365" -> "10.0.3.7"); "" when Ray gave none (a job not started yet).
  static std::string host_of(const json& url) {
    if (!url.is_string()) return "";
    std::string host = url.get<std::string>();
    if (const size_t scheme = host.find("://"); scheme != std::string::npos) host.erase(0, scheme + 3);
    host = host.substr(0, host.find('/'));
    if (!host.empty() && host.front() == '[') return host.substr(1, host.find(']') - 1);  // [IPv6]:PORT
    return host.substr(0, host.rfind(':'));
  }

  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  // The job's environment, as shell lines.
  std::string exports(const JobSpec& spec) const {
    std::string text;
    for (const auto& [k, v] : job_environment(spec)) text += "export " + k + "=" + shell_quote(v) + "\n";
    // A CPU run sees no GPU; a GPU run sees the ones Ray assigned it (it sets CUDA_VISIBLE_DEVICES).
    if (spec.gpus == 0) text += "export CUDA_VISIBLE_DEVICES=''\n";
    return text;
  }

  // The job's files in trainerd's data folder, shared with the nodes: a script written beside the plan.
  Result<std::string> shared_entrypoint(const JobSpec& spec) const {
    const fs::path script = fs::path(spec.plan_path).parent_path() / "ray-job.sh";
    std::string text = "#!/bin/sh\n# Written by trainerd: one attempt of run " + spec.run_id + ".\n" + exports(spec);
    text += "exec " + shell_quote(job_binary_);
    for (const auto& arg : protocol::job_arguments(spec)) text += " " + shell_quote(arg);
    text += " >> " + shell_quote(spec.log_path) + " 2>&1\n";
    const std::string tmp = script.string() + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out || std::rename(tmp.c_str(), script.c_str()) != 0) {
      return internal_error("Ray backend: cannot write the job script " + script.string());
    }
    return "sh " + shell_quote(script.string());
  }

  // Nothing shared (jobFolder): the entrypoint carries the plan and works in a folder of the node;
  // the job's output goes to Ray's log, its events and log lines to trainerd's API.
  Result<std::string> node_entrypoint(const JobSpec& spec, const std::string& id) const {
    std::ifstream in(spec.plan_path, std::ios::binary);
    const std::string plan((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && plan.empty()) return internal_error("Ray backend: cannot read the plan " + spec.plan_path);
    const std::string dir = (fs::path(options_.job_folder) / id).string();
    std::string text = exports(spec);
    text += "mkdir -p " + shell_quote(dir) + " || exit 1\n";
    text += "printf '%s' " + shell_quote(plan) + " > " + shell_quote(dir + "/plan.json") + " || exit 1\n";
    protocol::JobRequest on_node = spec;  // the same request, its files in the node's folder
    on_node.plan_path = dir + "/plan.json";
    on_node.output_dir = dir + "/output";
    on_node.events_path = dir + "/events.jsonl";
    text += "exec " + shell_quote(job_binary_);
    for (const auto& arg : protocol::job_arguments(on_node)) text += " " + shell_quote(arg);
    text += " 2>&1\n";
    return "sh -c " + shell_quote(text);
  }

  std::string submission_id(const JobSpec& spec) const {
    return options_.submission_prefix + "-" + spec.run_id + "-" + std::to_string(spec.attempt);
  }

  void stop(const JobHandle& handle) {
    const RayHandle h = decode(handle);
    if (!h.submission_id.empty()) (void)request("POST", "/api/jobs/" + h.submission_id + "/stop", "");
  }

  // What a job printed (its Ray log); "" when the cluster does not say.
  std::string job_logs(const std::string& id) const {
    Answer a = request("GET", "/api/jobs/" + id + "/logs", "");
    if (a.status != 200) return "";
    auto doc = parse_json(a.body, "Ray job logs", 4);
    if (!doc.is_ok() || !doc->is_object() || !doc->contains("logs") || !(*doc)["logs"].is_string()) return "";
    return (*doc)["logs"].get<std::string>();
  }

  static std::string last_line(const std::string& text) {
    const std::string t = trim(text);
    const size_t nl = t.rfind('\n');
    return nl == std::string::npos ? t : trim(t.substr(nl + 1));
  }

  // A job that ended without writing its own log (its entrypoint failed before trainer-job ran):
  // Ray's log of it goes where the service reads the job's log.
  void save_ray_log(const RayHandle& h) {
    if (h.log_path.empty()) return;
    std::error_code ec;
    if (fs::exists(h.log_path, ec) && fs::file_size(h.log_path, ec) > 0) return;
    Answer a = request("GET", "/api/jobs/" + h.submission_id + "/logs", "");
    if (a.status != 200) return;
    auto doc = parse_json(a.body, "Ray job logs", 4);
    if (!doc.is_ok() || !doc->is_object() || !doc->contains("logs") || !(*doc)["logs"].is_string()) return;
    std::ofstream out(h.log_path, std::ios::app);
    out << (*doc)["logs"].get<std::string>();
  }

  Answer request(const std::string& method, const std::string& path, const std::string& body,
                 int timeout_s = 0) const {
    if (timeout_s <= 0) timeout_s = options_.request_timeout_s;
    httplib::Client client(options_.address);
    client.set_connection_timeout(options_.request_timeout_s, 0);
    client.set_read_timeout(timeout_s, 0);
    client.set_write_timeout(timeout_s, 0);
    httplib::Result r = method == "POST" ? client.Post(path, body, "application/json") : client.Get(path);
    Answer a;
    if (!r) {
      a.error = httplib::to_string(r.error());
      return a;
    }
    a.status = r->status;
    a.body = r->body;
    return a;
  }

  const std::string job_binary_;
  RayOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_ray_backend(const std::string& job_binary, const RayOptions& options) {
  return std::make_unique<RayBackend>(job_binary, options);
}

}  // namespace trainer::backend
