// The local backend: trainer-job as a child process of trainerd, one per run attempt.
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <vector>

#include "backend/backend.h"
#include "backend/command.h"
#include "common/json_parse.h"
#include "common/subprocess.h"

namespace trainer::backend {
namespace {

using json = nlohmann::json;

// What a local job handle holds: the process and when it started, so that a recycled pid is
// never mistaken for the job.
struct LocalHandle {
  int64_t pid = 0;         // process id
  int64_t start_time = 0;  // process start time in clock ticks since boot (/proc/PID/stat field 22)
};

JobHandle encode(const LocalHandle& h) { return JobHandle{json{{"pid", h.pid}, {"startTime", h.start_time}}.dump()}; }

// A handle this backend did not write decodes to pid 0, which no operation touches.
LocalHandle decode(const JobHandle& handle) {
  auto doc = parse_json(handle.value, "local job handle", 4);
  LocalHandle h;
  if (!doc.is_ok() || !doc->is_object()) return h;
  const json& d = *doc;
  if (d.contains("pid") && d["pid"].is_number_integer()) h.pid = d["pid"].get<int64_t>();
  if (d.contains("startTime") && d["startTime"].is_number_integer()) h.start_time = d["startTime"].get<int64_t>();
  if (h.pid <= 0) h.pid = 0;
  return h;
}

namespace fs = std::filesystem;

// Field 22 (starttime) and field 3 (state) of /proc/PID/stat; nullopt when the process is absent.
struct ProcStat {
  char state = '?';
  int64_t start_time = 0;
};

std::optional<ProcStat> read_proc_stat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  // The command name (field 2) is in parentheses and may hold spaces: parse after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  std::string f;
  while (rest >> f) fields.push_back(f);
  // fields[0] is field 3 (state); field 22 is fields[19].
  if (fields.size() < 20) return std::nullopt;
  ProcStat st;
  st.state = fields[0].empty() ? '?' : fields[0][0];
  st.start_time = std::stoll(fields[19]);
  return st;
}

std::string profile_name(std::string model) {
  std::string out = "nvidia-";
  std::transform(model.begin(), model.end(), model.begin(), [](unsigned char c) { return std::tolower(c); });
  if (model.rfind("nvidia ", 0) == 0) model = model.substr(7);
  for (char c : model) out += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  return out;
}

// "0,1": device indices as CUDA_VISIBLE_DEVICES lists them.
std::string device_list(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(LocalBackendOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "local"; }
  bool on_this_host() const override { return true; }

  std::string describe(const JobHandle& handle) const override {
    return "pid " + std::to_string(decode(handle).pid);
  }

  Result<JobHandle> start(const JobSpec& spec) override {
    if (::access(options_.job_binary.c_str(), X_OK) != 0) {
      return unavailable("local backend: job binary " + options_.job_binary + " is not executable: " +
                         std::strerror(errno));
    }
    int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return internal_error("local backend: cannot open job log " + spec.log_path + ": " + std::strerror(errno));
    }
    // The job sees exactly the devices its claim was granted (none for a CPU run).
    SpawnOptions options;
    options.argv = {options_.job_binary};
    for (auto& arg : protocol::job_arguments(spec)) options.argv.push_back(std::move(arg));
    options.env = job_environment(spec);
    options.env.emplace_back("CUDA_VISIBLE_DEVICES", spec.gpus > 0 ? device_list(spec.device_ids) : "");
    options.stdin_stream = ChildStream::null();
    options.stdout_stream = ChildStream::to(log_fd);
    options.stderr_stream = ChildStream::to(log_fd);
    // Its own session, so a signal to trainerd's group does not reach it and a restarted
    // trainerd can still stop it by pid.
    options.group = ChildGroup::kNewSession;
    options.unblock_signals = true;
    options.restore_sigpipe = true;
    Result<pid_t> pid = spawn(options);
    ::close(log_fd);
    if (!pid.is_ok()) return Status(pid.status().code(), "local backend: " + pid.status().message());
    LocalHandle h;
    h.pid = *pid;
    auto st = read_proc_stat(*pid);
    h.start_time = st ? st->start_time : 0;
    return encode(h);
  }

  JobStatus poll(const JobHandle& job) override {
    const LocalHandle handle = decode(job);
    if (handle.pid == 0) return {JobState::kGone, std::nullopt, ""};
    std::lock_guard<std::mutex> lock(mu_);
    auto known = exited_.find(handle.pid);
    if (known != exited_.end() && known->second.first == handle.start_time) {
      return {JobState::kExited, known->second.second, ""};
    }
    // A process under this pid that started at another time is not the job: the pid was reused.
    auto current = read_proc_stat(handle.pid);
    if (current && current->start_time != handle.start_time) return {JobState::kGone, std::nullopt, ""};
    int wstatus = 0;
    pid_t r = ::waitpid(static_cast<pid_t>(handle.pid), &wstatus, WNOHANG);
    if (r == handle.pid) {
      int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      exited_[handle.pid] = {handle.start_time, code};
      return {JobState::kExited, code, ""};
    }
    if (r == 0) return {JobState::kRunning, std::nullopt, ""};
    // Not our child (a job started before a restart): judge by /proc, matching the start time
    // so that a recycled pid is not mistaken for the job.
    auto st = read_proc_stat(handle.pid);
    if (st && st->start_time == handle.start_time && st->state != 'Z' && st->state != 'X') {
      return {JobState::kRunning, std::nullopt, ""};
    }
    return {JobState::kGone, std::nullopt, ""};
  }

  void request_stop(const JobHandle& handle) override { signal_job(handle, SIGTERM); }
  bool supports_pause() const override { return true; }
  void request_pause(const JobHandle& handle) override { signal_job(handle, SIGUSR1); }
  void kill(const JobHandle& handle) override { signal_job(handle, SIGKILL); }

  std::optional<JobHandle> find(const JobSpec& spec) override {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      if (cmdline.find(" run ") == std::string::npos) continue;
      if (cmdline.find(" --events " + spec.events_path + " ") == std::string::npos &&
          !(cmdline.size() >= spec.events_path.size() + 1 &&
            cmdline.find(" --events " + spec.events_path) != std::string::npos)) {
        continue;
      }
      int64_t pid = std::stoll(name);
      auto st = read_proc_stat(pid);
      if (!st || st->state == 'Z') continue;
      return encode(LocalHandle{pid, st->start_time});
    }
    return std::nullopt;
  }

  std::optional<int64_t> launch_fence_of(const JobHandle& job) override {
    const LocalHandle handle = decode(job);
    auto st = read_proc_stat(handle.pid);
    if (handle.pid == 0 || !st || st->start_time != handle.start_time) return std::nullopt;
    std::ifstream in("/proc/" + std::to_string(handle.pid) + "/environ", std::ios::binary);
    std::string entry;
    const std::string key = "TRAINER_LAUNCH_FENCE=";
    while (std::getline(in, entry, '\0')) {
      if (entry.rfind(key, 0) != 0) continue;
      char* end = nullptr;
      const long long fence = std::strtoll(entry.c_str() + key.size(), &end, 10);
      if (*end != '\0' || fence <= 0) return std::nullopt;
      return static_cast<int64_t>(fence);
    }
    return std::nullopt;
  }

  Result<std::string> run_tool(const std::vector<std::string>& args, int timeout_s) override {
    return backend::run_tool(options_.job_binary, args, timeout_s);
  }

  // One node: this host, the tool run beside trainerd.
  Result<std::vector<NodeScan>> scan_nodes(const std::vector<std::string>& args, int timeout_s) override {
    auto out = run_tool(args, timeout_s);
    if (!out.is_ok()) return std::vector<NodeScan>{{host_name(), "", out.status().message()}};
    return std::vector<NodeScan>{{host_name(), *out, ""}};
  }

  std::map<std::string, int> observed_devices() override {
    std::map<std::string, int> out;
    out["cpu"] = 1;  // this host
    std::error_code ec;
    fs::path gpus = "/proc/driver/nvidia/gpus";
    if (fs::is_directory(gpus, ec)) {
      for (const auto& entry : fs::directory_iterator(gpus, ec)) {
        std::ifstream info(entry.path() / "information");
        std::string line, model = "unknown";
        while (std::getline(info, line)) {
          if (line.rfind("Model:", 0) == 0) {
            model = line.substr(6);
            model.erase(0, model.find_first_not_of(" \t"));
          }
        }
        out[profile_name(model)] += 1;
      }
    }
    return out;
  }

  std::string observed_source() const override {
    return "this host: one CPU device, and the GPUs the NVIDIA driver lists in /proc/driver/nvidia/gpus";
  }

 private:
  void signal_job(const JobHandle& job, int sig) {
    const LocalHandle handle = decode(job);
    if (handle.pid == 0) return;
    auto st = read_proc_stat(handle.pid);
    if (!st || st->start_time != handle.start_time) return;  // gone, or the pid was reused
    // The job leads its own process group: signal the group so its workers stop too.
    if (::kill(-static_cast<pid_t>(handle.pid), sig) != 0) ::kill(static_cast<pid_t>(handle.pid), sig);
  }

  const LocalBackendOptions options_;
  std::mutex mu_;
  std::map<int64_t, std::pair<int64_t, int>> exited_;  // pid -> (start time, exit code); guarded by mu_
};

}  // namespace

std::unique_ptr<Backend> make_local_backend(const LocalBackendOptions& options) {
  return std::make_unique<LocalBackend>(options);
}

Result<std::unique_ptr<Backend>> make_backend(const ComputeConfig& config) {
  if (config.backend == "local") return make_local_backend({config.job_binary});
  if (config.backend == "slurm") return make_slurm_backend(config.job_binary, config.slurm);
  if (config.backend == "ray") {
    if (config.ray.address.empty()) return invalid_field("compute.ray.address", "required for the ray backend");
    return make_ray_backend(config.job_binary, config.ray);
  }
  return invalid_field("compute.backend",
                       "'" + config.backend + "' is not a compute backend of this build; use local, slurm or ray");
}

}  // namespace trainer::backend
