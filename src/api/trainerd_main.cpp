// trainerd: parses its options, opens the store, builds the service and serves the API.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/api.h"
#include "backend/backend.h"
#include "common/version.h"
#include "service/config.h"
#include "service/service.h"
#include "store/store.h"

namespace trainer::api {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::string data_dir;     // --data-dir
  int port = 9001;          // --port
  std::string host = "127.0.0.1";
  std::string config_path;  // --config
  std::string instance;     // --instance
  std::string job_binary;   // --job-binary
  std::string port_file;    // --port-file
};

std::string default_data_dir() {
  if (const char* env = std::getenv("TRAINER_DATA_DIR"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return (fs::path(xdg) / "trainer").string();
  return "trainer-data";
}

std::string default_instance() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host) return "trainerd";
  return host;
}

// One table: the options, their help, and how each is applied. --help is generated from it.
struct OptionSpec {
  const char* name;
  const char* arg;  // nullptr: a flag without a value
  const char* help;
  std::function<bool(Options&, const std::string&)> apply;
};

bool parse_port(Options& o, const std::string& v) {
  char* end = nullptr;
  long p = std::strtol(v.c_str(), &end, 10);
  if (!end || *end || p < 0 || p > 65535) return false;
  o.port = static_cast<int>(p);
  return true;
}

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = {
      {"--data-dir", "DIR",
       "where state.db (SQLite), datasets, the model cache and run folders live; default $TRAINER_DATA_DIR, "
       "else $XDG_DATA_HOME/trainer, else ./trainer-data",
       [](Options& o, const std::string& v) { o.data_dir = v; return !v.empty(); }},
      {"--port", "N", "TCP port of the HTTP API; default 9001; 0 picks a free port (printed, and see --port-file)",
       parse_port},
      {"--host", "ADDR", "address to listen on; default 127.0.0.1 (0.0.0.0 for every interface)",
       [](Options& o, const std::string& v) { o.host = v; return !v.empty(); }},
      {"--config", "FILE",
       "deployment configuration (JSON): allowed base models {name, path}, GPU pools {name, accelerator, "
       "serving, declared, maxClaim}, quotas {default, workloads}, limits {maxRequestBytes, maxDatasetBytes, "
       "cancelGraceSeconds}, jobBinary; see docs/api.md. Default: no base models, one CPU pool of 1 device, "
       "workload quota 8",
       [](Options& o, const std::string& v) { o.config_path = v; return !v.empty(); }},
      {"--instance", "NAME", "the instance attribute of every service metric; default the host name",
       [](Options& o, const std::string& v) { o.instance = v; return !v.empty(); }},
      {"--job-binary", "PATH", "the trainer-job executable runs start; default trainer-job beside trainerd",
       [](Options& o, const std::string& v) { o.job_binary = v; return !v.empty(); }},
      {"--port-file", "FILE", "write the port the API listens on into FILE once it listens",
       [](Options& o, const std::string& v) { o.port_file = v; return !v.empty(); }},
      {"--version", nullptr, "print the version and exit", nullptr},
      {"--help", nullptr, "print this help and exit", nullptr},
  };
  return table;
}

void print_help() {
  std::printf(
      "usage: trainerd [OPTIONS]\n\n"
      "The trainer service: HTTP/JSON API (docs/api.md), durable state in SQLite, run lifecycle, GPU\n"
      "pools, claims and quotas, training jobs as local processes. With no options it starts on the\n"
      "embedded default: SQLite in the data folder, the local backend, port 9001, a CPU pool.\n\n"
      "options:\n");
  for (const auto& o : option_table()) {
    std::string head = std::string(o.name) + (o.arg ? std::string(" ") + o.arg : "");
    std::printf("  %-22s %s\n", head.c_str(), o.help);
  }
}

std::string self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

}  // namespace

int trainerd_main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--version") {
      std::printf("trainerd %s\n", version_string());
      return 0;
    }
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
    std::string value;
    bool has_inline = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    const OptionSpec* spec = nullptr;
    for (const auto& o : option_table()) {
      if (a == o.name) spec = &o;
    }
    if (!spec || !spec->apply) {
      std::fprintf(stderr, "trainerd: unknown option '%s'; see trainerd --help\n", argv[i]);
      return 2;
    }
    if (!has_inline) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "trainerd: %s needs a value (%s)\n", spec->name, spec->arg);
        return 2;
      }
      value = argv[++i];
    }
    if (!spec->apply(opt, value)) {
      std::fprintf(stderr, "trainerd: %s: invalid value '%s'\n", spec->name, value.c_str());
      return 2;
    }
  }
  if (opt.data_dir.empty()) opt.data_dir = default_data_dir();
  if (opt.instance.empty()) opt.instance = default_instance();

  // Signals: handled by sigwait below; every thread (and so every job we start) inherits the block,
  // and the local backend unblocks them in each job.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  service::DeploymentConfig config = service::default_config();
  if (!opt.config_path.empty()) {
    std::ifstream in(opt.config_path);
    if (!in) {
      std::fprintf(stderr, "trainerd: cannot read --config %s\n", opt.config_path.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = service::parse_config(text.str(), opt.config_path);
    if (!parsed.is_ok()) {
      std::fprintf(stderr, "trainerd: %s\n", parsed.status().describe().c_str());
      return 2;
    }
    config = std::move(*parsed);
  }
  if (!opt.job_binary.empty()) config.job_binary = opt.job_binary;
  if (config.job_binary.empty()) config.job_binary = (fs::path(self_dir()) / "trainer-job").string();

  std::error_code ec;
  fs::create_directories(opt.data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "trainerd: cannot create the data folder %s: %s\n", opt.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  opt.data_dir = fs::absolute(opt.data_dir).string();
  auto store = store::open_sqlite_store((fs::path(opt.data_dir) / "state.db").string());
  if (!store.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", store.status().message().c_str());
    return 1;
  }
  config.compute.job_binary = config.job_binary;
  auto backend = backend::make_backend(config.compute);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", backend.status().describe().c_str());
    return 2;
  }
  service::ServiceOptions sopt;
  sopt.data_dir = opt.data_dir;
  sopt.config = config;
  sopt.instance = opt.instance;
  auto svc = service::make_service(std::move(sopt), std::move(*store), std::move(*backend));
  if (!svc.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", svc.status().message().c_str());
    return 1;
  }
  service::Service& service = **svc;

  httplib::Server server;
  // Long polls hold a thread each; size the pool for them (httplib owns what it returns).
  server.new_task_queue = [] { return new httplib::ThreadPool(64); };
  // httplib's own limit is the largest body any route accepts; routes check their own.
  server.set_payload_max_length(std::max(config.limits.max_dataset_bytes, config.limits.max_request_bytes));
  server.set_read_timeout(30, 0);
  // Headers and body go out in separate writes: without this, Nagle and delayed ACKs add ~40 ms
  // to every keep-alive request.
  server.set_tcp_nodelay(true);
  install_routes(server, service, config.limits);

  int port = opt.port;
  if (port == 0) {
    port = server.bind_to_any_port(opt.host);
    if (port < 0) {
      std::fprintf(stderr, "trainerd: cannot listen on %s\n", opt.host.c_str());
      return 1;
    }
  } else if (!server.bind_to_port(opt.host, port)) {
    std::fprintf(stderr, "trainerd: cannot listen on %s:%d (in use? pick another with --port)\n", opt.host.c_str(),
                 port);
    return 1;
  }
  std::thread http([&server] { server.listen_after_bind(); });
  if (!opt.port_file.empty()) {
    std::ofstream(opt.port_file + ".tmp") << port << "\n";
    fs::rename(opt.port_file + ".tmp", opt.port_file, ec);
  }
  std::fprintf(stderr, "trainerd %s: listening on http://%s:%d (data %s, backend local, instance %s)\n",
               version_string(), opt.host.c_str(), port, opt.data_dir.c_str(), opt.instance.c_str());

  Status st = service.start();
  for (const auto& step : service.startup_steps()) {
    std::fprintf(stderr, "trainerd: startup: %s: %s%s\n", step.name.c_str(), step.ok ? "" : "FAILED: ",
                 step.message.c_str());
  }
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainerd: startup failed: %s (serving /v1/info only)\n", st.message().c_str());
  } else {
    std::fprintf(stderr, "trainerd: ready\n");
  }

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "trainerd: stopping on signal %d; running jobs keep running and are found again on restart\n",
               sig);
  server.stop();
  http.join();
  service.stop();
  return 0;
}

}  // namespace trainer::api
