// How trainerd reaches an endpoint's serving process (`trainer-job serve`), which may run on
// another node of a cluster: the host and port of its `listening` line, and the secret it answers
// only with (TRAINER_SERVE_SECRET). They live in the endpoint's job record (`_job`: host, port,
// secret). A record written before hosts and secrets (a process an older trainerd started, then
// re-adopted) has neither: 127.0.0.1 and no Authorization header, as that process expects.
//
// These are trainerd's calls to its own jobs: no outbound.allow check applies to them
// (common/outbound.h governs the URLs users' plans name), wherever the process runs.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/http_client.h"

namespace trainer::service {

// What a serving process's "listening" line says (its log, the backend's copy of its stdout).
struct ListeningLine {
  std::string host;      // the address it listens on; "" when the line names none (an older process)
  int port = 0;
  std::string hostname;  // its machine's name, given when it listens on every interface
};

// What one log line says when it is a "listening" line; nullopt for any other line.
std::optional<ListeningLine> parse_listening_line(const std::string& text);

// The first "listening" line of the log at `path`; nullopt until the process has printed one.
std::optional<ListeningLine> read_listening_line(const std::string& path);

// The host trainerd calls a process at: the address it listens on when that is one address; on
// every interface ("0.0.0.0"), the node the backend says the job runs on (`node_address`), else
// the machine name the process gave; 127.0.0.1 when nothing says more.
std::string reachable_host(const ListeningLine& line, const std::string& node_address);

// A call to `path` ("/v1/chat/completions") of the process that the endpoint's job record `job`
// (doc["_job"]) names, with its secret as a Bearer token when the record holds one.
HttpRequest serving_call(const nlohmann::json& job, const std::string& method, const std::string& path,
                         double timeout_seconds);

// "http://HOST:PORT" of the process the job record names (an IPv6 host in brackets).
std::string serving_origin(const nlohmann::json& job);

}  // namespace trainer::service
