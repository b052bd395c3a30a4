// The Slurm backend: each run attempt is one batch job (sbatch), followed with squeue and
// scontrol (sacct where accounting runs), stopped with scancel. The job's files (plan, events,
// log, output) are on a folder the cluster's nodes share with trainerd (its data folder).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <future>
#include <set>
#include <sstream>

#include "backend/backend.h"
#include "backend/command.h"
#include "common/json_parse.h"

namespace trainer::backend {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kCommandTimeoutS = 30;
constexpr size_t kMaxErrorChars = 500;  // of a command's standard error quoted in an answer

struct SlurmHandle {
  std::string job_id;  // Slurm's job id ("123")
  std::string name;    // the job name trainerd gave it (trainer-RUN-ATTEMPT)
};

JobHandle encode(const SlurmHandle& h) { return JobHandle{json{{"slurmJobId", h.job_id}, {"name", h.name}}.dump()}; }

// A handle this backend did not write decodes to an empty job id, which no operation touches.
SlurmHandle decode(const JobHandle& handle) {
  SlurmHandle h;
  auto doc = parse_json(handle.value, "Slurm job handle", 4);
  if (!doc.is_ok() || !doc->is_object()) return h;
  const json& d = *doc;
  if (d.contains("slurmJobId") && d["slurmJobId"].is_string()) h.job_id = d["slurmJobId"].get<std::string>();
  if (d.contains("name") && d["name"].is_string()) h.name = d["name"].get<std::string>();
  if (h.job_id.empty() || h.job_id.find_first_not_of("0123456789_") != std::string::npos) h.job_id.clear();
  return h;
}

// Slurm's job states that mean the job has not ended (squeue's %T).
bool still_active(const std::string& state) {
  static const std::set<std::string> kActive = {"PENDING",  "CONFIGURING", "RUNNING",   "COMPLETING", "SUSPENDED",
                                                "REQUEUED", "RESIZING",    "SIGNALING", "STAGE_OUT",  "STOPPED",
                                                "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"};
  return kActive.count(state) > 0;
}

// "KEY=VALUE" of `scontrol show job -o` output (one line of space-separated pairs).
std::string scontrol_field(const std::string& line, const std::string& key) {
  const std::string needle = key + "=";
  size_t pos = 0;
  while ((pos = line.find(needle, pos)) != std::string::npos) {
    if (pos == 0 || line[pos - 1] == ' ') {
      const size_t start = pos + needle.size();
      const size_t end = line.find(' ', start);
      return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += needle.size();
  }
  return "";
}

// What an ended job's state and "EXIT:SIGNAL" exit code (scontrol/sacct) mean to the service.
JobStatus ended_status(const std::string& job_id, const std::string& state_in, const std::string& exit_pair) {
  std::string state = state_in.substr(0, state_in.find(' '));  // sacct: "CANCELLED by 0"
  int code = 0, sig = 0;
  const size_t colon = exit_pair.find(':');
  try {
    if (!exit_pair.empty()) code = std::stoi(exit_pair.substr(0, colon));
    if (colon != std::string::npos) sig = std::stoi(exit_pair.substr(colon + 1));
  } catch (const std::exception&) {
    code = 1;
  }
  JobStatus st;
  st.state = JobState::kExited;
  st.exit_code = sig != 0 ? 128 + sig : code;
  if (state == "COMPLETED" || state == "FAILED") return st;
  if (state == "CANCELLED") {
    if (*st.exit_code == 0) st.exit_code = 128 + 15;
    st.reason = "Slurm job " + job_id + " was cancelled";
    return st;
  }
  // TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY: the cluster ended it.
  if (*st.exit_code == 0) st.exit_code = 1;
  st.reason = "Slurm ended job " + job_id + ": " + state;
  return st;
}

// "nvidia-<type>" for a Slurm GPU gres type ("h100" -> "nvidia-h100"), "gpu" when untyped.
std::string gres_profile(const std::string& type) { return type.empty() ? "gpu" : "nvidia-" + type; }

class SlurmBackend final : public Backend {
 public:
  SlurmBackend(std::string job_binary, SlurmOptions options)
      : job_binary_(std::move(job_binary)), options_(std::move(options)) {}

  std::string name() const override { return "slurm"; }

  std::string describe(const JobHandle& handle) const override {
    return "Slurm job " + decode(handle).job_id;
  }

  Result<JobHandle> start(const JobSpec& spec) override {
    const std::string name = job_name(spec);
    const fs::path dir = fs::path(spec.plan_path).parent_path();
    const fs::path script = dir / "slurm-job.sh";
    std::string text = "#!/bin/sh\n# Written by trainerd: one attempt of run " + spec.run_id + ".\n";
    for (const auto& [k, v] : job_environment(spec)) text += "export " + k + "=" + shell_quote(v) + "\n";
    // A CPU run sees no GPU; a GPU run sees the ones Slurm allocated it (it sets CUDA_VISIBLE_DEVICES).
    if (spec.gpus == 0) text += "export CUDA_VISIBLE_DEVICES=''\n";
    text += "exec " + shell_quote(job_binary_);
    for (const auto& arg : protocol::job_arguments(spec)) text += " " + shell_quote(arg);
    text += "\n";
    {
      const fs::path tmp = script.string() + ".tmp";
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      std::error_code ec;
      fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read, ec);
      if (!out || std::rename(tmp.c_str(), script.c_str()) != 0) {
        return internal_error("Slurm backend: cannot write the batch script " + script.string());
      }
    }
    std::vector<std::string> argv = {tool("sbatch"), "--parsable", "--job-name=" + name, "--output=" + spec.log_path,
                                     "--open-mode=append", "--chdir=" + dir.string(), "--nodes=1", "--ntasks=1"};
    if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
    if (spec.gpus > 0) {
      argv.push_back("--gres=" + options_.gres_name + ":" + std::to_string(spec.gpus));
      argv.push_back("--cpus-per-task=" + std::to_string(std::max(1, options_.cpus_per_gpu * spec.gpus)));
    } else {
      argv.push_back("--cpus-per-task=" + std::to_string(std::max(spec.cpus, options_.cpus_per_task)));
    }
    argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
    argv.push_back(script.string());
    auto r = run_command(argv, env(), kCommandTimeoutS);
    if (!r.is_ok()) return unavailable("Slurm backend: " + r.status().message());
    if (r->exit_code != 0) {
      return unavailable("Slurm backend: sbatch refused the job (exit " + std::to_string(r->exit_code) +
                         "): " + trim(r->err.empty() ? r->out : r->err));
    }
    std::string id = trim(r->out);
    id = id.substr(0, id.find(';'));  // "ID;CLUSTER" on a federation
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      return unavailable("Slurm backend: sbatch answered '" + trim(r->out) + "', not a job id");
    }
    return encode(SlurmHandle{id, name});
  }

  JobStatus poll(const JobHandle& job) override {
    const SlurmHandle h = decode(job);
    if (h.job_id.empty()) return {JobState::kGone, std::nullopt, "not a Slurm job handle"};
    // Its state and batch host ("RUNNING node7").
    auto q = run_command({tool("squeue"), "-h", "--states=all", "-j", h.job_id, "-o", "%T %B"}, env(), kCommandTimeoutS);
    if (q.is_ok() && q->exit_code == 0) {
      const std::string line = trim(q->out);
      const size_t space = line.find(' ');
      const std::string state = line.substr(0, space);
      const std::string host = space == std::string::npos ? "" : trim(line.substr(space + 1));
      if (!state.empty() && still_active(state)) {
        return {JobState::kRunning, std::nullopt, "", host == "n/a" || host == "(null)" ? "" : host};
      }
    } else if (q.is_ok() && q->err.find("Invalid job id") == std::string::npos) {
      // The controller did not answer: the job's state is unknown, so it is taken to run on.
      return {JobState::kRunning, std::nullopt, ""};
    } else if (!q.is_ok()) {
      return {JobState::kRunning, std::nullopt, ""};
    }
    // Ended (or purged from the controller's memory): its final state and exit code.
    auto s = run_command({tool("scontrol"), "show", "job", "-o", h.job_id}, env(), kCommandTimeoutS);
    if (s.is_ok() && s->exit_code == 0) {
      const std::string state = scontrol_field(s->out, "JobState");
      if (still_active(state)) return {JobState::kRunning, std::nullopt, ""};
      if (!state.empty()) return ended_status(h.job_id, state, scontrol_field(s->out, "ExitCode"));
    }
    auto a = run_command({tool("sacct"), "-n", "-X", "-P", "-j", h.job_id, "-o", "State,ExitCode"}, env(),
                         kCommandTimeoutS);
    if (a.is_ok() && a->exit_code == 0) {
      const std::string line = trim(a->out.substr(0, a->out.find('\n')));
      const size_t bar = line.find('|');
      if (bar != std::string::npos) {
        const std::string state = line.substr(0, bar);
        if (still_active(state.substr(0, state.find(' ')))) return {JobState::kRunning, std::nullopt, ""};
        return ended_status(h.job_id, state, line.substr(bar + 1));
      }
    }
    return {JobState::kGone, std::nullopt, "Slurm no longer knows job " + h.job_id};
  }

  void request_stop(const JobHandle& handle) override {
    const SlurmHandle h = decode(handle);
    if (h.job_id.empty()) return;
    // A running job gets SIGTERM (it stops at its next step boundary); a pending one is removed.
    (void)run_command({tool("scancel"), "--full", "--signal=TERM", h.job_id}, env(), kCommandTimeoutS);
    (void)run_command({tool("scancel"), "--state=PENDING", h.job_id}, env(), kCommandTimeoutS);
  }

  void kill(const JobHandle& handle) override {
    const SlurmHandle h = decode(handle);
    if (h.job_id.empty()) return;
    (void)run_command({tool("scancel"), "--full", "--signal=KILL", h.job_id}, env(), kCommandTimeoutS);
    (void)run_command({tool("scancel"), h.job_id}, env(), kCommandTimeoutS);
  }

  std::optional<JobHandle> find(const JobSpec& spec) override {
    const std::string name = job_name(spec);
    auto q = run_command({tool("squeue"), "-h", "--states=all", "--name=" + name, "-o", "%i"}, env(), kCommandTimeoutS);
    if (!q.is_ok() || q->exit_code != 0) return std::nullopt;
    std::istringstream lines(q->out);
    std::string id, newest;
    while (std::getline(lines, id)) {
      id = trim(id);
      if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos &&
          (newest.empty() || std::stoll(id) > std::stoll(newest))) {
        newest = id;
      }
    }
    if (newest.empty()) return std::nullopt;
    return encode(SlurmHandle{newest, name});
  }

  Result<std::string> run_tool(const std::vector<std::string>& args, int timeout_s) override {
    return backend::run_tool(job_binary_, args, timeout_s);
  }

  // One srun per node that sinfo lists up, all at once, each pinned to its node (--nodelist=NODE
  // -N1 -n1, one task of the partition's default size). A node whose CPUs are all allocated keeps
  // its scan pending until `timeout_s`, when srun is killed and the node is answered as timed out.
  Result<std::vector<NodeScan>> scan_nodes(const std::vector<std::string>& args, int timeout_s) override {
    auto nodes = up_nodes();
    if (!nodes.is_ok()) return nodes.status();
    std::vector<std::future<NodeScan>> pending;
    for (const auto& node : *nodes) {
      pending.push_back(std::async(std::launch::async, [this, name = node.name, &args, timeout_s] {
        std::vector<std::string> argv = {tool("srun"), "--nodelist=" + name, "--nodes=1", "--ntasks=1",
                                         "--job-name=" + options_.job_name_prefix + "-scan", "--quiet"};
        if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
        argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
        argv.push_back(job_binary_);
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = run_command(argv, env(), timeout_s);
        if (!r.is_ok()) return NodeScan{name, "", "srun: " + r.status().message()};
        if (r->exit_code != 0) {
          const std::string err = trim(r->err);
          return NodeScan{name, "", "srun exited " + std::to_string(r->exit_code) + ": " +
                                        (err.empty() ? "no message" : err.substr(0, kMaxErrorChars))};
        }
        return NodeScan{name, r->out, ""};
      }));
    }
    std::vector<NodeScan> out;
    for (auto& p : pending) out.push_back(p.get());
    return out;
  }

  std::map<std::string, int> observed_devices() override {
    std::map<std::string, int> out;
    auto nodes = up_nodes();
    if (!nodes.is_ok()) return out;
    for (const auto& node : *nodes) {
      out["cpu"] += 1;  // one CPU device per node, as on one host
      add_gres(node.gres, out);
    }
    return out;
  }

  // sinfo's GresUsed of the same nodes; a node is one "cpu" device in use while it is allocated
  // or mixed (any job holds part of it).
  std::optional<std::map<std::string, int>> devices_in_use() override {
    auto nodes = up_nodes();
    if (!nodes.is_ok()) return std::nullopt;
    std::map<std::string, int> out;
    for (const auto& node : *nodes) {
      if (node.state.rfind("alloc", 0) == 0 || node.state.rfind("mix", 0) == 0 ||
          node.state.rfind("completing", 0) == 0) {
        out["cpu"] += 1;
      }
      add_gres(node.gres_used, out);
    }
    return out;
  }

  std::string observed_source() const override {
    return "Slurm: the nodes sinfo lists" +
           (options_.partition.empty() ? std::string() : " in partition " + options_.partition) +
           " that are up (one CPU device each) and their '" + options_.gres_name + "' gres";
  }

 private:
  struct Node {
    std::string name;       // sinfo's NodeList
    std::string state;      // sinfo's StateLong ("idle", "mixed", "allocated", ...)
    std::string gres;       // sinfo's Gres ("gpu:h100:8(S:0-1),...")
    std::string gres_used;  // sinfo's GresUsed ("gpu:h100:2(IDX:0-1),...")
  };

  // Adds the devices of a gres list ("gpu:h100:8(S:0-1),gpu:2") named options_.gres_name to
  // `out`, by profile.
  void add_gres(const std::string& list, std::map<std::string, int>& out) const {
    std::istringstream gres(list);
    std::string item;
    while (std::getline(gres, item, ',')) {
      item = item.substr(0, item.find('('));  // "gpu:h100:8(S:0-1)"
      if (item.rfind(options_.gres_name + ":", 0) != 0) continue;
      std::vector<std::string> parts;
      std::string p;
      std::istringstream colon(item);
      while (std::getline(colon, p, ':')) parts.push_back(p);
      try {
        if (parts.size() == 2) out[gres_profile("")] += std::stoi(parts[1]);
        if (parts.size() >= 3) out[gres_profile(parts[1])] += std::stoi(parts[2]);
      } catch (const std::exception&) {
      }
    }
  }

  // The nodes sinfo lists (in the partition, when one is set) that are up: not down, drained,
  // failing, unknown or unresponsive ('*'); unavailable when sinfo does not answer.
  Result<std::vector<Node>> up_nodes() const {
    // -O with '|' after each field: no padding, no truncation.
    std::vector<std::string> argv = {tool("sinfo"), "-h", "-N", "-O", "NodeList:|,StateLong:|,Gres:|,GresUsed:|"};
    if (!options_.partition.empty()) argv.push_back("--partition=" + options_.partition);
    auto r = run_command(argv, env(), kCommandTimeoutS);
    if (!r.is_ok()) return unavailable("Slurm backend: sinfo: " + r.status().message());
    if (r->exit_code != 0) {
      return unavailable("Slurm backend: sinfo exited " + std::to_string(r->exit_code) + ": " + trim(r->err));
    }
    std::vector<Node> out;
    std::set<std::string> seen;
    std::istringstream lines(r->out);
    std::string line;
    while (std::getline(lines, line)) {
      std::vector<std::string> f;
      std::string item;
      std::istringstream fields(trim(line));
      while (std::getline(fields, item, '|')) f.push_back(item);
      if (f.size() < 4 || !seen.insert(f[0]).second) continue;
      const std::string& state = f[1];
      if (state.rfind("down", 0) == 0 || state.rfind("drain", 0) == 0 || state.rfind("fail", 0) == 0 ||
          state.rfind("unknown", 0) == 0 || state.find('*') != std::string::npos) {
        continue;
      }
      out.push_back({f[0], state, f[2] == "(null)" ? "" : f[2], f[3] == "(null)" ? "" : f[3]});
    }
    return out;
  }

  std::string job_name(const JobSpec& spec) const {
    return options_.job_name_prefix + "-" + spec.run_id + "-" + std::to_string(spec.attempt);
  }
  std::string tool(const std::string& name) const {
    return options_.bin_dir.empty() ? name : (fs::path(options_.bin_dir) / name).string();
  }
  std::vector<std::pair<std::string, std::string>> env() const {
    if (options_.slurm_conf.empty()) return {};
    return {{"SLURM_CONF", options_.slurm_conf}};
  }

  const std::string job_binary_;
  const SlurmOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_slurm_backend(const std::string& job_binary, const SlurmOptions& options) {
  return std::make_unique<SlurmBackend>(job_binary, options);
}

}  // namespace trainer::backend
