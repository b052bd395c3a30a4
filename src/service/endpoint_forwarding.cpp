// Endpoints::chat: the forwarding of a chat completion to a READY endpoint's serving process
// (docs/serving.md, "Endpoints"). A whole answer is fetched here; a streamed one (`stream: true`)
// is handed back as the call to make, which the route relays as it comes (http::relay), with a
// tally that feeds the endpoint meters as the events pass.
#include <chrono>
#include <memory>
#include <string_view>

#include "common/http_client.h"
#include "common/json_parse.h"
#include "service/endpoints.h"
#include "service/serving_process.h"

namespace trainer::service {
namespace {

// The longest a forwarded chat completion may take, the serving process's answer included.
constexpr double kForwardSeconds = 600;
// The longest a streamed one may run (its client hanging up ends it sooner).
constexpr double kStreamSeconds = 6 * 3600;

// What the meters see of a streamed answer as it passes: the time to its first token and
// between tokens, and the usage of its last chunk (when the request asked for it).
class StreamTally {
 public:
  StreamTally(EndpointMeters& meters, std::string endpoint, std::string model)
      : meters_(meters), endpoint_(std::move(endpoint)), model_(std::move(model)) {}

  void see(std::string_view bytes) {
    pending_.append(bytes.data(), bytes.size());
    for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) see_chunk(json::parse(event.substr(6), nullptr, false));
    }
  }

  void end(const HttpResponse& answer) {
    const char* outcome = answer.failure == HttpFailure::kNone ? (answer.status < 400 ? "ok" : "error")
                          : answer.stopped                     ? "ok"  // its client hung up
                                                               : "unreachable";
    meters_.request(endpoint_, model_, outcome, prompt_tokens_, completion_tokens_);
  }

 private:
  void see_chunk(const json& chunk) {
    if (!chunk.is_object()) return;  // `[DONE]`
    const json usage = chunk.value("usage", json());
    if (usage.is_object()) {
      prompt_tokens_ = usage.value("prompt_tokens", 0L);
      completion_tokens_ = usage.value("completion_tokens", 0L);
    }
    bool token = false;
    for (const auto& choice : chunk.value("choices", json::array())) {
      const json text = choice.value("delta", json::object()).value("content", json());
      token = token || (text.is_string() && !text.get<std::string>().empty());
    }
    if (!token) return;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - (any_token_ ? last_ : started_)).count();
    if (any_token_) {
      meters_.inter_token(endpoint_, model_, seconds);
    } else {
      meters_.first_token(endpoint_, model_, seconds);
    }
    any_token_ = true;
    last_ = now;
  }

  EndpointMeters& meters_;
  const std::string endpoint_, model_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_;
  bool any_token_ = false;
  std::string pending_;  // the start of an event not yet whole
  long prompt_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace

// The request goes to the process as it came, but for `model` (the endpoint's adapter when it
// serves one, else its base model, when the request names none).
Result<ForwardedAnswer> Endpoints::chat(const std::string& ref, const std::string& body) {
  TRAINER_ASSIGN_OR_RETURN(json doc, resolve(ref));
  const std::string id = doc["endpointId"].get<std::string>();
  const std::string phase = doc.value("phase", std::string());
  if (phase != "READY") {
    return field_status(StatusCode::kFailedPrecondition, "endpoint",
                        "endpoint " + id + " is " + phase + "; it answers once READY (trainer endpoints wait " + id + ")");
  }
  auto request = parse_json(body, "body");
  if (!request.is_ok() || !request->is_object()) {
    return invalid_field("body", "must be a JSON object: a chat completion request");
  }
  if (std::optional<ForwardedAnswer> refused = refusal_for(doc, *request)) {
    meters_.request(id, (*request).value("model", json("")).is_string() ? (*request)["model"].get<std::string>() : "", "refused");
    return *refused;
  }
  const std::string model = (*request)["model"].is_string() ? (*request)["model"].get<std::string>() : "";
  HttpRequest call = serving_call(doc["_job"], "POST", "/v1/chat/completions", kForwardSeconds);
  call.body = request->dump();
  const json stream = request->value("stream", json(false));
  if (stream.is_boolean() && stream.get<bool>()) {
    auto tally = std::make_shared<StreamTally>(meters_, id, model);
    call.timeout_seconds = kStreamSeconds;
    call.on_body = [tally](int, std::string_view bytes) {
      tally->see(bytes);
      return true;
    };
    ForwardedAnswer relayed;
    relayed.stream_call = std::move(call);
    relayed.stream_done = [tally](const HttpResponse& answer) { tally->end(answer); };
    return relayed;
  }
  call.timeout_seconds = kForwardSeconds;
  HttpResponse answer = http_call(call);
  if (answer.failure != HttpFailure::kNone) {
    meters_.request(id, model, "unreachable");
    return unavailable("endpoint " + id + "'s serving process did not answer: " + answer.detail);
  }
  // An answer that is not a JSON object (a broken process) counts, without tokens.
  const json whole = answer.status < 400 ? json::parse(answer.body, nullptr, false) : json();
  const bool has_usage = whole.is_object() && whole.contains("usage") && whole["usage"].is_object();
  const json usage = has_usage ? whole["usage"] : json::object();
  meters_.request(id, model, answer.status < 400 ? "ok" : "error", usage.value("prompt_tokens", 0L),
                  usage.value("completion_tokens", 0L));
  return ForwardedAnswer{answer.status, answer.body};
}

}  // namespace trainer::service
