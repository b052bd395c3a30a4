// Reaching an endpoint's serving process (declared in service/serving_process.h).
#include "service/serving_process.h"

#include <fstream>

namespace trainer::service {
namespace {

using json = nlohmann::json;

constexpr const char* kLoopback = "127.0.0.1";

bool every_interface(const std::string& host) { return host == "0.0.0.0" || host == "::"; }

std::string string_field(const json& doc, const char* key) {
  return doc.is_object() && doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "";
}

}  // namespace

std::optional<ListeningLine> parse_listening_line(const std::string& text) {
  if (text.empty() || text[0] != '{') return std::nullopt;
  const json line = json::parse(text, nullptr, false);
  if (!line.is_object() || string_field(line, "event") != "listening" || !line["port"].is_number_integer()) {
    return std::nullopt;
  }
  return ListeningLine{string_field(line, "host"), line["port"].get<int>(), string_field(line, "hostname")};
}

std::optional<ListeningLine> read_listening_line(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    if (auto line = parse_listening_line(text)) return line;
  }
  return std::nullopt;
}

std::string reachable_host(const ListeningLine& line, const std::string& node_address) {
  if (!line.host.empty() && !every_interface(line.host)) return line.host;
  if (line.host.empty()) return kLoopback;  // an older process: it listened on loopback
  if (!node_address.empty()) return node_address;
  if (!line.hostname.empty()) return line.hostname;
  return kLoopback;
}

std::string serving_origin(const json& job) {
  std::string host = string_field(job, "host");
  if (host.empty()) host = kLoopback;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  const int port = job.is_object() && job.contains("port") && job["port"].is_number_integer() ? job["port"].get<int>() : 0;
  return "http://" + host + ":" + std::to_string(port);
}

HttpRequest serving_call(const json& job, const std::string& method, const std::string& path, double timeout_seconds) {
  HttpRequest call;
  call.method = method;
  call.url = serving_origin(job) + path;
  call.timeout_seconds = timeout_seconds;
  const std::string secret = string_field(job, "secret");
  if (!secret.empty()) call.headers.emplace_back("Authorization", "Bearer " + secret);
  return call;
}

}  // namespace trainer::service
