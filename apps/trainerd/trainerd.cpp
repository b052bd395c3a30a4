// trainerd's wiring: parses its options, opens the store, builds the backend and the service,
// installs the API's routes on the HTTP server (src/http), and stops on SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "api/api.h"
#include "api/authorization.h"
#include "backend/backend.h"
#include "common/clock.h"
#include "common/token_file.h"
#include "common/version.h"
#include "http/server.h"
#include "service/config.h"
#include "service/service.h"
#include "store/store.h"
#include "telemetry/tracing.h"

namespace trainer::apps {
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
  std::string otlp_traces_endpoint;  // --otlp-traces-endpoint
  std::chrono::milliseconds lease{30000};  // --lease-seconds
  bool plaintext_beyond_loopback = false;  // --allow-plaintext-beyond-loopback
  std::string tls_cert;     // --tls-cert (else the configuration's tls.certFile)
  std::string tls_key;      // --tls-key (else tls.keyFile)
  std::string tls_ca;       // --tls-ca (else tls.caFile)
  bool local_token = true;  // --no-local-token: no token written to the token file
  http::ServerOptions http; // --max-connections, --header-timeout, --body-timeout, ...
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

// A positive number of seconds (fractions allowed) as milliseconds.
bool parse_seconds(const std::string& v, std::chrono::milliseconds& out) {
  char* end = nullptr;
  double s = std::strtod(v.c_str(), &end);
  if (!end || *end || !(s > 0) || s > 86400) return false;
  out = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  return out.count() > 0;
}

bool parse_count(const std::string& v, size_t& out, size_t most) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (!end || *end || n < 1 || static_cast<unsigned long long>(n) > most) return false;
  out = static_cast<size_t>(n);
  return true;
}

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
       "where state.db (the SQLite store, unless the configuration's store says otherwise), datasets, the model "
       "cache and run folders live; default $TRAINER_DATA_DIR, "
       "else $XDG_DATA_HOME/trainer, else ./trainer-data",
       [](Options& o, const std::string& v) { o.data_dir = v; return !v.empty(); }},
      {"--port", "N", "TCP port of the HTTP API; default 9001; 0 picks a free port (printed, and see --port-file)",
       parse_port},
      {"--host", "ADDR", "address to listen on; default 127.0.0.1 (0.0.0.0 for every interface)",
       [](Options& o, const std::string& v) { o.host = v; return !v.empty(); }},
      {"--config", "FILE",
       "deployment configuration (JSON): allowed base models {name, path}, GPU pools {name, accelerator, "
       "serving, declared, maxClaim}, quotas {default, workloads}, limits {maxRequestBytes, maxDatasetBytes, "
       "cancelGraceSeconds}, jobBinary, store {kind: sqlite|postgres, url} (where the service's state is kept: "
       "SQLite in the data folder by default, or a PostgreSQL database, url postgresql://USER@HOST:PORT/DATABASE); "
       "see docs/api.md. Default: no base models, one CPU pool of 1 device, workload quota 8, SQLite",
       [](Options& o, const std::string& v) { o.config_path = v; return !v.empty(); }},
      {"--instance", "NAME", "the instance attribute of every service metric; default the host name",
       [](Options& o, const std::string& v) { o.instance = v; return !v.empty(); }},
      {"--lease-seconds", "SECONDS",
       "how long a task lease (a run, an evaluation, ... driven by this replica) lasts unless renewed; another "
       "replica on the same PostgreSQL store takes the work of a replica that stopped within about this long; "
       "default 30",
       [](Options& o, const std::string& v) { return parse_seconds(v, o.lease); }},
      {"--job-binary", "PATH", "the trainer-job executable runs start; default trainer-job beside trainerd",
       [](Options& o, const std::string& v) { o.job_binary = v; return !v.empty(); }},
      {"--otlp-traces-endpoint", "URL",
       "the OpenTelemetry collector's OTLP/HTTP traces URL (http://HOST:4318/v1/traces; a base URL gets /v1/traces) "
       "trainerd and its jobs post spans to, one trace per run (docs/traces.md); default "
       "telemetry.otlpTracesEndpoint, else $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else no traces",
       [](Options& o, const std::string& v) { o.otlp_traces_endpoint = v; return !v.empty(); }},
      {"--port-file", "FILE", "write the port the API listens on into FILE once it listens",
       [](Options& o, const std::string& v) { o.port_file = v; return !v.empty(); }},
      {"--max-connections", "N",
       "open HTTP connections served at once (long polls included); past it a new connection gets 503 and "
       "is closed; default 1024",
       [](Options& o, const std::string& v) { return parse_count(v, o.http.max_connections, 1 << 20); }},
      {"--header-timeout", "SECONDS",
       "a client must send a request's line and headers within this long (also how long an idle keep-alive "
       "connection stays open); default 10",
       [](Options& o, const std::string& v) { return parse_seconds(v, o.http.header_timeout); }},
      {"--body-timeout", "SECONDS", "a client must send a request's body within this long once its headers are in; "
       "default 60",
       [](Options& o, const std::string& v) { return parse_seconds(v, o.http.body_timeout); }},
      {"--max-header-bytes", "N", "the request line and headers may take at most N bytes (else 431); default 16384",
       [](Options& o, const std::string& v) { return parse_count(v, o.http.max_header_bytes, 1 << 24); }},
      {"--max-headers", "N", "a request may carry at most N header fields (else 431); default 100",
       [](Options& o, const std::string& v) { return parse_count(v, o.http.max_header_count, 1 << 16); }},
      {"--http-workers", "N", "threads that run request handlers; default 8",
       [](Options& o, const std::string& v) {
         size_t n = 0;
         if (!parse_count(v, n, 256)) return false;
         o.http.worker_threads = static_cast<int>(n);
         return true;
       }},
      {"--tls-cert", "FILE",
       "serve the API over HTTPS only, with this PEM certificate (chain, leaf first; its names must include the "
       "addresses clients and trainerd's own jobs use, 127.0.0.1 among them); with --tls-key; default "
       "tls.certFile of the configuration, else plain HTTP (docs/security.md, \"Binding and TLS\")",
       [](Options& o, const std::string& v) { o.tls_cert = v; return !v.empty(); }},
      {"--tls-key", "FILE", "the PEM private key (unencrypted) of --tls-cert; default tls.keyFile",
       [](Options& o, const std::string& v) { o.tls_key = v; return !v.empty(); }},
      {"--tls-ca", "FILE",
       "the PEM CA bundle trainerd's jobs verify its API with (TRAINER_CATALOG_CA_FILE); default tls.caFile, else "
       "the certificate file itself (a self-signed certificate)",
       [](Options& o, const std::string& v) { o.tls_ca = v; return !v.empty(); }},
      {"--allow-plaintext-beyond-loopback", nullptr,
       "serve a --host that is not a loopback address without TLS (tokens then cross the network in the clear: "
       "only on a network you trust); without it such a --host refuses to start",
       [](Options& o, const std::string&) { o.plaintext_beyond_loopback = true; return true; }},
      {"--no-local-token", nullptr,
       "do not make a local admin token and write it to the token file ($XDG_CONFIG_HOME/trainer/tokens.json, else "
       "~/.config/trainer/tokens.json); by default trainerd keeps one there for its address (docs/security.md)",
       [](Options& o, const std::string&) { o.local_token = false; return true; }},
      {"--print-roles", nullptr, "print the role table every route is checked against (JSON) and exit", nullptr},
      {"--version", nullptr, "print the version and exit", nullptr},
      {"--help", nullptr, "print this help and exit", nullptr},
  };
  return table;
}

void print_help() {
  std::printf(
      "usage: trainerd [OPTIONS]\n\n"
      "The trainer service: HTTP/JSON API (docs/api.md), durable state in SQLite or PostgreSQL (the\n"
      "configuration's store), run lifecycle, GPU\n"
      "pools, claims and quotas, training jobs as local processes, Slurm batch jobs or Ray jobs\n"
      "(compute.backend). With no options it starts on the\n"
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

// Whether `host` is an address of this machine only: 127.0.0.0/8, ::1 or localhost.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// Reads argv into `opt` by the option table, then fills the defaults. Returns the exit status
// when trainerd ends at once: 0 after --version or --help, 2 for a bad option (said on stderr).
std::optional<int> parse_options(int argc, char** argv, Options& opt) {
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
    if (a == "--print-roles") {
      std::printf("%s\n", api::role_table_json().dump(2).c_str());
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
    if (spec->arg == nullptr) {
      if (has_inline) {
        std::fprintf(stderr, "trainerd: %s takes no value\n", spec->name);
        return 2;
      }
    } else if (!has_inline) {
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
  return std::nullopt;
}

// Whether `file` can be opened for reading.
bool readable(const std::string& file) { return std::ifstream(file).good(); }

// The TLS settings: the flags, else the configuration's tls section, as absolute paths (jobs run
// elsewhere). Refuses (said on stderr, naming the setting and the file) a certificate without a
// key or the other way round, a file that cannot be read, and a --host beyond loopback without
// TLS unless --allow-plaintext-beyond-loopback. (Authentication cannot be turned off: every
// route but /v1/info needs a token, so a bind beyond loopback is never unauthenticated.)
bool settle_tls(const Options& opt, service::TlsConfig& tls) {
  struct Setting {
    const char* flag;
    const char* key;
    const std::string& given;
    std::string& value;
  };
  const Setting settings[] = {{"--tls-cert", "tls.certFile", opt.tls_cert, tls.cert_file},
                              {"--tls-key", "tls.keyFile", opt.tls_key, tls.key_file},
                              {"--tls-ca", "tls.caFile", opt.tls_ca, tls.ca_file}};
  for (const Setting& s : settings) {
    const bool from_flag = !s.given.empty();
    if (from_flag) s.value = s.given;
    if (s.value.empty()) continue;
    const char* name = from_flag ? s.flag : s.key;
    if (!readable(s.value)) {
      std::fprintf(stderr, "trainerd: %s: cannot read the file '%s'\n", name, s.value.c_str());
      return false;
    }
    std::error_code ec;
    fs::path absolute = fs::absolute(s.value, ec);
    if (!ec) s.value = absolute.string();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    std::fprintf(stderr, "trainerd: TLS needs both a certificate and its key: %s\n",
                 tls.cert_file.empty() ? "--tls-key (tls.keyFile) is given without --tls-cert (tls.certFile)"
                                       : "--tls-cert (tls.certFile) is given without --tls-key (tls.keyFile)");
    return false;
  }
  if (!tls.ca_file.empty() && tls.cert_file.empty()) {
    std::fprintf(stderr, "trainerd: --tls-ca (tls.caFile) is given without --tls-cert and --tls-key\n");
    return false;
  }
  if (tls.cert_file.empty() && !is_loopback(opt.host) && !opt.plaintext_beyond_loopback) {
    std::fprintf(stderr,
                 "trainerd: --host %s is not a loopback address, and this trainerd serves its API without TLS: API "
                 "tokens would cross the network in the clear. Give it a certificate and key (--tls-cert and "
                 "--tls-key, or tls.certFile and tls.keyFile in the configuration), bind --host 127.0.0.1 (the "
                 "default) behind a TLS-terminating proxy, or pass --allow-plaintext-beyond-loopback on a network "
                 "you trust (docs/security.md)\n",
                 opt.host.c_str());
    return false;
  }
  return true;
}

// This process's replica name: on PostgreSQL, which other trainerds may share, the instance name
// and 8 random hex digits, new at every start, so that a restarted or a second trainerd never
// signs leases with the name of one that may still be running (paused, partitioned). On SQLite, one
// trainerd owns the store: "trainerd", as before, so a restarted one takes its leases back at once.
std::string replica_name(const service::StoreConfig& store, const std::string& instance) {
  if (store.kind != "postgres") return "trainerd";
  std::random_device entropy;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", static_cast<unsigned>(entropy()));
  return instance + "-" + suffix;
}

// The deployment configuration: --config's file, else the embedded default; the job binary from
// --job-binary, else the configuration's, else trainer-job beside trainerd. Nothing when the file
// cannot be read or is invalid (said on stderr).
std::optional<service::DeploymentConfig> load_config(const Options& opt) {
  service::DeploymentConfig config = service::default_config();
  if (!opt.config_path.empty()) {
    std::ifstream in(opt.config_path);
    if (!in) {
      std::fprintf(stderr, "trainerd: cannot read --config %s\n", opt.config_path.c_str());
      return std::nullopt;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = service::parse_config(text.str(), opt.config_path);
    if (!parsed.is_ok()) {
      std::fprintf(stderr, "trainerd: %s\n", parsed.status().describe().c_str());
      return std::nullopt;
    }
    config = std::move(*parsed);
  }
  if (!opt.job_binary.empty()) config.job_binary = opt.job_binary;
  // Traces: the flag, else the configuration's, else OpenTelemetry's standard variable.
  std::string traces = opt.otlp_traces_endpoint;
  const char* source = "--otlp-traces-endpoint";
  if (traces.empty()) {
    traces = config.telemetry.otlp_traces_endpoint;
    source = "telemetry.otlpTracesEndpoint";
  }
  if (const char* env = std::getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); traces.empty() && env != nullptr) {
    traces = env;
    source = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
  }
  if (!traces.empty()) {
    auto url = telemetry::traces_endpoint_url(traces);
    if (!url.is_ok()) {
      std::fprintf(stderr, "trainerd: %s: %s\n", source, url.status().message().c_str());
      return std::nullopt;
    }
    config.telemetry.otlp_traces_endpoint = *url;
    std::fprintf(stderr, "trainerd: traces go to %s\n", url->c_str());
  }
  if (config.job_binary.empty()) config.job_binary = (fs::path(self_dir()) / "trainer-job").string();
  return config;
}

// The tests' hooks, from the environment: pauses at a registration's copy, a comparison, a
// sweep's children or a snapshot's commit, and a kill at a named point (kill tests).
void apply_test_hooks(service::ServiceOptions& sopt) {
  // Hold each registration between its copy and REGISTERED.
  if (const char* pause = std::getenv("TRAINER_TEST_REGISTRATION_PAUSE_MS"); pause && *pause) {
    sopt.registration_pause = std::chrono::milliseconds(std::strtol(pause, nullptr, 10));
  }
  if (const char* kill = std::getenv("TRAINER_TEST_KILL_AFTER"); kill && *kill) sopt.kill_after = kill;
  // Hold a sweep between its children, or a snapshot commit.
  if (const char* pause = std::getenv("TRAINER_TEST_SWEEP_PAUSE_MS"); pause && *pause) {
    sopt.sweep_pause = std::chrono::milliseconds(std::strtol(pause, nullptr, 10));
  }
  // Hold the first start of a run's job between its last lease check and the backend's start.
  if (const char* hold = std::getenv("TRAINER_TEST_LAUNCH_HOLD"); hold && *hold) sopt.launch_hold_file = hold;
  if (const char* pause = std::getenv("TRAINER_TEST_COMMIT_PAUSE_MS"); pause && *pause) {
    sopt.commit_pause = std::chrono::milliseconds(std::strtol(pause, nullptr, 10));
    const char* at = std::getenv("TRAINER_TEST_COMMIT_PAUSE_AT");
    sopt.commit_pause_stored = at != nullptr && std::strcmp(at, "stored") == 0;
  }
  // The service's wall time read from a file the test writes (capacity windows, device-hours).
  if (const char* file = std::getenv("TRAINER_TEST_CLOCK_FILE"); file && *file) {
    sopt.clock = file_clock(file);
    std::fprintf(stderr, "trainerd: the service's time is read from %s (TRAINER_TEST_CLOCK_FILE)\n", file);
  }
}

// The store the configuration names: SQLite in the data folder (or the file store.url names), or
// the PostgreSQL database at store.url. A failure names the field that chose it. On PostgreSQL a
// stopped replica's transaction is ended within half a lease and a lock is waited for at most a
// quarter of one, so the replica that takes its work over is not blocked past the lease's bound.
Result<std::unique_ptr<store::Store>> open_store(const service::StoreConfig& config, const std::string& data_dir,
                                                 std::chrono::milliseconds lease) {
  if (config.kind == "postgres") {
    store::PostgresSessionLimits limits;
    limits.idle_in_transaction_ms = std::clamp<int64_t>(lease.count() / 2, 1, limits.idle_in_transaction_ms);
    limits.lock_timeout_ms = std::clamp<int64_t>(lease.count() / 4, 1, limits.lock_timeout_ms);  // 0 would mean none
    auto pg = store::open_postgres_store(config.url, limits, config.pool_size);
    if (!pg.is_ok()) return pg.status().with_context("store.url");
    std::fprintf(stderr, "trainerd: store: %s, at most %d connections (store.poolSize)\n",
                 (*pg)->description().c_str(), config.pool_size);
    return pg;
  }
  fs::path file = config.url.empty() ? fs::path("state.db") : fs::path(config.url);
  if (file.is_relative()) file = fs::path(data_dir) / file;
  return store::open_sqlite_store(file.string());
}

// The data folder (created), its store, the backend and the service over them. Nothing when one
// of them fails (said on stderr; `exit_status` is then trainerd's exit status).
std::unique_ptr<service::Service> open_service(Options& opt, service::DeploymentConfig& config, int& exit_status) {
  std::error_code ec;
  fs::create_directories(opt.data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "trainerd: cannot create the data folder %s: %s\n", opt.data_dir.c_str(),
                 ec.message().c_str());
    exit_status = 1;
    return nullptr;
  }
  opt.data_dir = fs::absolute(opt.data_dir).string();
  auto store = open_store(config.store, opt.data_dir, opt.lease);
  if (!store.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", store.status().message().c_str());
    exit_status = 1;
    return nullptr;
  }
  config.compute.job_binary = config.job_binary;
  auto backend = backend::make_backend(config.compute);
  if (!backend.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", backend.status().describe().c_str());
    exit_status = 2;
    return nullptr;
  }
  service::ServiceOptions sopt;
  sopt.data_dir = opt.data_dir;
  sopt.config = config;
  sopt.instance = opt.instance;
  sopt.replica = replica_name(config.store, opt.instance);
  sopt.lease_seconds = std::chrono::duration<double>(opt.lease).count();
  apply_test_hooks(sopt);
  auto svc = service::make_service(std::move(sopt), std::move(*store), std::move(*backend));
  if (!svc.is_ok()) {
    std::fprintf(stderr, "trainerd: %s\n", svc.status().message().c_str());
    exit_status = 1;
    return nullptr;
  }
  return std::move(*svc);
}

// Jobs push their metrics to this trainerd, which serves them on /metrics (unless the operator's
// telemetry.otlpEndpoint sends them to a collector instead), and call its snapshot catalog: both
// at the address it listens on, as a job on this host reaches it.
// The address a client on this host reaches trainerd at ("http://127.0.0.1:9001"; https:// when
// it serves TLS).
std::string local_url(const std::string& listen_host, int port, bool tls) {
  std::string host = listen_host;
  if (host.empty() || host == "0.0.0.0" || host == "localhost") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return (tls ? "https://" : "http://") + host + ":" + std::to_string(port);
}

void advertise_address(service::Service& service, const std::string& url) {
  service.set_job_otlp_endpoint(url + "/otlp");
  service.set_catalog_url(url);
}

// The embedded default's local token (docs/security.md, "The token file"): the token file's entry
// for this address when it is still a live token of this service, else a new admin and control
// token on every workload, written there. A failure is said and leaves trainerd running: tokens
// can still be made with another admin token.
void keep_local_token(service::Service& service, const std::string& url) {
  if (auto known = read_token_file(url); known && service.authenticate_token(*known).is_ok()) return;
  auto made = service.create_token(
      {{"name", "local (" + url + ")"}, {"roles", {"admin", "control"}}, {"workloads", {"*"}}});
  Status st = made.is_ok() ? write_token_file(url, (*made)["token"].get<std::string>()) : made.status();
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainerd: warning: no local token written to %s: %s\n", token_file_path().c_str(),
                 st.message().c_str());
    return;
  }
  std::fprintf(stderr, "trainerd: a local admin token for %s is in %s (token %s)\n", url.c_str(),
               token_file_path().c_str(), (*made)["tokenId"].get<std::string>().c_str());
}

// Starts the service's work (recovery, the driver) and says how each startup step went. A failed
// start leaves trainerd serving /v1/info only.
void start_service(service::Service& service) {
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
}

}  // namespace

int trainerd_main(int argc, char** argv) {
  Options opt;
  if (auto exit_now = parse_options(argc, argv, opt)) return *exit_now;

  // Signals: handled by sigwait below; every thread (and so every job we start) inherits the block,
  // and the local backend unblocks them in each job.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto config = load_config(opt);
  if (!config) return 2;
  if (!settle_tls(opt, config->tls)) return 2;
  int exit_status = 0;
  std::unique_ptr<service::Service> svc = open_service(opt, *config, exit_status);
  if (!svc) return exit_status;
  service::Service& service = *svc;

  http::Router router;
  api::install_routes(router, service, config->limits);
  opt.http.host = opt.host;
  opt.http.port = opt.port;
  opt.http.tls_cert_file = config->tls.cert_file;
  opt.http.tls_key_file = config->tls.key_file;
  auto served = http::serve(opt.http, router);
  if (!served.is_ok() && (served.status().field() == "tls_cert_file" || served.status().field() == "tls_key_file")) {
    const bool cert = served.status().field() == "tls_cert_file";
    const bool flag = !(cert ? opt.tls_cert : opt.tls_key).empty();
    std::fprintf(stderr, "trainerd: %s: %s\n",
                 cert ? (flag ? "--tls-cert" : "tls.certFile") : (flag ? "--tls-key" : "tls.keyFile"),
                 served.status().message().c_str());
    return 2;
  }
  if (!served.is_ok()) {
    std::fprintf(stderr, "trainerd: %s (in use? pick another with --port)\n", served.status().message().c_str());
    return 1;
  }
  std::unique_ptr<http::Server> server = std::move(*served);
  // Parked long polls look again after every run change. The callback lives as long as the
  // service; it stops reaching the server before the server goes.
  auto wake_target = std::make_shared<std::atomic<http::Server*>>(server.get());
  service.subscribe_run_changes([wake_target] {
    if (http::Server* s = wake_target->load()) s->wake();
  });
  const int port = server->port();
  const bool tls = !config->tls.cert_file.empty();
  const std::string url = local_url(opt.host, port, tls);
  advertise_address(service, url);
  // Before the port file: a client that reads the port finds the token too.
  if (opt.local_token) keep_local_token(service, url);
  if (!opt.port_file.empty()) {
    std::error_code ec;
    std::ofstream(opt.port_file + ".tmp") << port << "\n";
    fs::rename(opt.port_file + ".tmp", opt.port_file, ec);
  }
  std::fprintf(stderr, "trainerd %s: listening on %s://%s:%d (data %s, backend %s, instance %s)\n",
               version_string(), tls ? "https" : "http", opt.host.c_str(), port, opt.data_dir.c_str(), config->compute.backend.c_str(),
               opt.instance.c_str());
  start_service(service);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "trainerd: stopping on signal %d; running jobs keep running and are found again on restart\n",
               sig);
  wake_target->store(nullptr);
  server->stop();
  service.stop();
  return 0;
}

}  // namespace trainer::apps
