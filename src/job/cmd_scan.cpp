// trainer-job scan: a short read-only look at the node it runs on (`trainer capacity scan`): the
// GPUs NVML sees, the free space of the data, temporary and shared-memory folders, the job
// folders left in the data folder, and this trainer-job's version. A reading that fails is
// reported with its reason in the answer; it never changes the exit status.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/version.h"
#include "job/commands.h"
#include "job/nvml.h"

namespace trainer::job {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: trainer-job scan --data DIR\n"
    "\n"
    "Prints one JSON object on stdout: {node, version, devices: {gpus: [{index, uuid, name}], error?},\n"
    "disks: [{role: data|tmp|shm, path, freeBytes | error}], jobFolders: [{path, runId, attempt}]}.\n"
    "DIR is trainerd's data folder as this node sees it; its runs/RUN/attempt-N folders are the job\n"
    "folders. Reads only; a reading that fails is named in the answer and the exit status stays 0.\n";

constexpr int kMaxGpus = 64;  // NVML indices tried

json devices() {
  auto nvml = Nvml::load();
  if (!nvml.is_ok()) return {{"gpus", json::array()}, {"error", nvml.status().message()}};
  json gpus = json::array();
  for (int i = 0; i < kMaxGpus; ++i) {
    auto gpu = (*nvml)->gpu(std::to_string(i));
    if (!gpu.is_ok()) break;
    gpus.push_back({{"index", i}, {"uuid", gpu->uuid}, {"name", gpu->name}});
  }
  return {{"gpus", gpus}};
}

json disk(const std::string& role, const fs::path& path) {
  std::error_code ec;
  const fs::space_info space = fs::space(path, ec);
  if (ec) return {{"role", role}, {"path", path.string()}, {"error", ec.message()}};
  return {{"role", role}, {"path", path.string()}, {"freeBytes", space.available}};
}

json job_folders(const fs::path& data) {
  json out = json::array();
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(data / "runs", ec)) {
    if (!run.is_directory()) continue;
    std::error_code inner;
    for (const auto& attempt : fs::directory_iterator(run.path(), inner)) {
      const std::string name = attempt.path().filename().string();
      if (!attempt.is_directory() || name.rfind("attempt-", 0) != 0) continue;
      const std::string number = name.substr(8);
      if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos || number.size() > 6) continue;
      out.push_back({{"path", attempt.path().string()},
                     {"runId", run.path().filename().string()},
                     {"attempt", std::stoi(number)}});
    }
  }
  return out;
}

}  // namespace

int cmd_scan(int argc, char** argv) {
  std::string data;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--data" && i + 1 < argc) {
      data = argv[++i];
      continue;
    }
    std::fprintf(stderr, "trainer-job scan: unexpected argument '%s'\n\n%s", arg.c_str(), kUsage);
    return 2;
  }
  if (data.empty()) {
    std::fprintf(stderr, "trainer-job scan: --data DIR is required\n\n%s", kUsage);
    return 2;
  }
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const char* tmp = std::getenv("TMPDIR");
  json out = {{"node", std::string(host)},
              {"version", version_string()},
              {"devices", devices()},
              {"disks", json::array({disk("data", data), disk("tmp", tmp && *tmp ? tmp : "/tmp"),
                                     disk("shm", "/dev/shm")})},
              {"jobFolders", job_folders(data)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace trainer::job
