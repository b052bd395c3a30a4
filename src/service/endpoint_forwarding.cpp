// Endpoints::chat: the forwarding of a chat completion to a READY endpoint's serving process
// (docs/serving.md, "Endpoints"). A whole answer is fetched here; a streamed one (`stream: true`)
// is handed back as the call to make, which the route relays as it comes (http::relay).
#include "common/http_client.h"
#include "common/json_parse.h"
#include "service/endpoints.h"

namespace trainer::service {
namespace {

// The longest a forwarded chat completion may take, the serving process's answer included.
constexpr double kForwardSeconds = 600;
// The longest a streamed one may run (its client hanging up ends it sooner).
constexpr double kStreamSeconds = 6 * 3600;

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
  if (!request->contains("model")) (*request)["model"] = doc["models"].back().value("name", std::string());
  HttpRequest call;
  call.url = "http://127.0.0.1:" + std::to_string(doc["_job"].value("port", 0)) + "/v1/chat/completions";
  call.body = request->dump();
  const json stream = request->value("stream", json(false));
  if (stream.is_boolean() && stream.get<bool>()) {
    call.timeout_seconds = kStreamSeconds;
    ForwardedAnswer relayed;
    relayed.stream_call = std::move(call);
    return relayed;
  }
  call.timeout_seconds = kForwardSeconds;
  HttpResponse answer = http_call(call);
  if (answer.failure != HttpFailure::kNone) {
    return unavailable("endpoint " + id + "'s serving process did not answer: " + answer.detail);
  }
  return ForwardedAnswer{answer.status, answer.body, std::nullopt};
}

}  // namespace trainer::service
