// OpenAI's HTTP shapes over the serving engine (declared in serve_api.h). Requests are parsed
// into a Call (prompts as token ids and the sampling settings), each choice is one engine
// request, and the answers are rendered whole or as server-sent events.
#include "job/serve_api.h"

#include <httplib.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <random>
#include <string_view>

#include <nlohmann/json.hpp>

#include "job/tool_calls.h"

namespace trainer::job {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr int64_t kMaxChoices = 128;     // OpenAI's bound on n
constexpr size_t kMaxStopStrings = 4;    // OpenAI's bound on stop
constexpr int64_t kDefaultCompletionMaxTokens = 16;  // /v1/completions' default, as OpenAI's

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return prefix + buf;
}

// An answer with OpenAI's error shape.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  const char* type = status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
  json err = {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}};
  res.status = status;
  res.set_content(json{{"error", err}}.dump(), "application/json");
}

int http_status_of(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    default: return 500;
  }
}

void send_status(httplib::Response& res, const Status& st) {
  const std::string code = st.code() == StatusCode::kNotFound ? "model_not_found" : "";
  send_error(res, http_status_of(st.code()), st.message(), st.field(), code);
}

// A parse failure that names the request field at fault.
struct BadField {
  std::string field, message;
};

// One completion call: its prompts as token ids and how to sample each of its choices.
struct Call {
  bool chat = false;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  int64_t n = 1;
  engine::CompletionRequest settings;  // everything but model and prompt
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;  // extension (as vLLM's): each choice's token ids in `token_ids`
  bool tools = false;             // the request offered tools (and tool_choice is not "none")
};

double number_field(const json& body, const char* name, double fallback, double lo, double hi) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  if (!body[name].is_number()) throw BadField{name, std::string(name) + " must be a number"};
  const double v = body[name].get<double>();
  if (v < lo || v > hi) {
    throw BadField{name, std::string(name) + " must be between " + json(lo).dump() + " and " + json(hi).dump()};
  }
  return v;
}

std::vector<std::string> stop_field(const json& body) {
  if (!body.contains("stop") || body["stop"].is_null()) return {};
  const json& s = body["stop"];
  if (s.is_string()) return {s.get<std::string>()};
  if (!s.is_array() || s.size() > kMaxStopStrings) throw BadField{"stop", "stop must be a string or up to 4 strings"};
  std::vector<std::string> out;
  for (const auto& v : s) {
    if (!v.is_string()) throw BadField{"stop", "stop must be a string or up to 4 strings"};
    out.push_back(v.get<std::string>());
  }
  return out;
}

std::vector<int32_t> token_list(const json& v) {
  std::vector<int32_t> ids;
  for (const auto& t : v) {
    if (!t.is_number_integer()) throw BadField{"prompt", "a prompt of token ids must hold integers only"};
    ids.push_back(t.get<int32_t>());
  }
  return ids;
}

// The sampling settings and switches shared by both kinds of call.
void parse_common(const json& body, Call* call) {
  if (!body.contains("model") || !body["model"].is_string()) throw BadField{"model", "model must be a string"};
  call->model = body["model"].get<std::string>();
  const double temperature = number_field(body, "temperature", 1.0, 0.0, 2.0);
  call->settings.greedy = temperature == 0;
  call->settings.temperature = temperature == 0 ? 1.0 : temperature;
  call->settings.top_p = number_field(body, "top_p", 1.0, 0.0, 1.0);
  if (call->settings.top_p == 0) throw BadField{"top_p", "top_p must be greater than 0"};
  call->n = static_cast<int64_t>(number_field(body, "n", 1, 1, kMaxChoices));
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) throw BadField{"seed", "seed must be an integer"};
    call->settings.seed = body["seed"].get<int64_t>();
  }
  const char* max_name = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (body.contains(max_name) && !body[max_name].is_null()) {
    if (!body[max_name].is_number_integer() || body[max_name].get<int64_t>() < 1) {
      throw BadField{max_name, std::string(max_name) + " must be a positive integer"};
    }
    call->settings.max_tokens = body[max_name].get<int64_t>();
  } else if (!call->chat) {
    call->settings.max_tokens = kDefaultCompletionMaxTokens;
  }
  call->settings.stop = stop_field(body);
  call->settings.ignore_eos = body.value("ignore_eos", false);
  call->stream = body.value("stream", false);
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    call->include_usage = body["stream_options"].value("include_usage", false);
  }
  call->return_token_ids = body.value("return_token_ids", false);
}

// Message content given as a list of parts becomes the text of its text parts.
ojson flatten_messages(const json& messages) {
  ojson out = ojson::array();
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      throw BadField{"messages", "each message must be an object with a string role"};
    }
    ojson msg = ojson::parse(m.dump());
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        if (part.is_object() && part.value("type", "") == "text") text += part.value("text", "");
      }
      msg["content"] = text;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Call parse_call(const json& body, bool chat, const engine::ServingEngine& engine) {
  Call call;
  call.chat = chat;
  parse_common(body, &call);
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
      throw BadField{"messages", "messages must be a non-empty array"};
    }
    ojson tools = body.contains("tools") && body["tools"].is_array() ? ojson::parse(body["tools"].dump()) : ojson(nullptr);
    call.tools = tools.is_array() && !tools.empty() && !(body.contains("tool_choice") && body["tool_choice"] == "none");
    auto ids = engine.encode_chat(flatten_messages(body["messages"]), tools);
    if (!ids.is_ok()) throw BadField{"messages", ids.status().message()};
    call.prompts.push_back(std::move(*ids));
    return call;
  }
  if (!body.contains("prompt")) throw BadField{"prompt", "prompt is required"};
  const json& p = body["prompt"];
  auto text = [&](const json& s) {
    auto ids = engine.encode(s.get<std::string>());
    if (!ids.is_ok()) throw BadField{"prompt", ids.status().message()};
    return std::move(*ids);
  };
  if (p.is_string()) {
    call.prompts.push_back(text(p));
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    call.prompts.push_back(token_list(p));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& one : p) {
      if (one.is_string()) {
        call.prompts.push_back(text(one));
      } else if (one.is_array()) {
        call.prompts.push_back(token_list(one));
      } else {
        throw BadField{"prompt", "prompt must be a string, token ids, or a list of either"};
      }
    }
  } else {
    throw BadField{"prompt", "prompt must be a string, token ids, or a list of either"};
  }
  if (static_cast<int64_t>(call.prompts.size()) * call.n > kMaxChoices) {
    throw BadField{"n", "prompts times n must be at most " + std::to_string(kMaxChoices)};
  }
  return call;
}

// One choice of a call: its engine request and what it produced.
struct Choice {
  std::shared_ptr<engine::CompletionStream> stream;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, taken from the prefix cache
  std::vector<int32_t> tokens;
  std::string finish_reason;
  size_t sent = 0;  // bytes of its text already streamed
  std::string settled_text;   // the text of tokens[0, settled_tokens), ending on a whole character
  size_t settled_tokens = 0;
};

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD: an unfinished UTF-8 character

// The text of all of a choice's tokens, decoded incrementally: only the tokens after the settled
// ones, with a few settled ones before them as context (a decoder may join a token to the one
// before), and their text appended to the settled text, so a stream of N tokens costs O(N) decoding,
// not O(N^2). When the context's text is not a prefix of the window's, the whole is decoded again.
std::string decoded_text(const engine::ServingEngine& engine, Choice& c) {
  constexpr size_t kContext = 4;
  const size_t from = c.settled_tokens > kContext ? c.settled_tokens - kContext : 0;
  auto decode = [&](size_t begin, size_t end) {
    auto d = engine.decode(std::vector<int32_t>(c.tokens.begin() + begin, c.tokens.begin() + end), true);
    return d.is_ok() ? std::optional<std::string>(std::move(*d)) : std::nullopt;
  };
  std::optional<std::string> window = decode(from, c.tokens.size());
  std::optional<std::string> context = decode(from, c.settled_tokens);
  std::string text;
  if (window && context && window->compare(0, context->size(), *context) == 0) {
    text = c.settled_text + window->substr(context->size());
  } else {
    text = decode(0, c.tokens.size()).value_or(std::string());
  }
  if (!text.ends_with(kReplacementChar)) {
    c.settled_text = text;
    c.settled_tokens = c.tokens.size();
  }
  return text;
}

// The text of a choice's tokens, cut before the first stop string (OpenAI leaves it out).
// Unless `final`, text that may yet become a stop string or an unfinished UTF-8 character is
// held back.
std::string choice_text(const engine::ServingEngine& engine, Choice& c, const std::vector<std::string>& stop,
                        bool final) {
  std::string text = decoded_text(engine, c);
  size_t cut = text.size();
  for (const auto& s : stop) {
    const size_t at = s.empty() ? std::string::npos : text.find(s);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  text.resize(cut);
  if (final) return text;
  size_t hold = 0;
  for (const auto& s : stop) hold = std::max(hold, s.empty() ? 0 : s.size() - 1);
  if (text.ends_with(kReplacementChar)) hold = std::max(hold, kReplacementChar.size());
  text.resize(text.size() > hold ? text.size() - hold : 0);
  return text;
}

// OpenAI's `tool_calls` of a message, or of a stream's delta (each with its `index`).
ojson tool_calls_json(const ParsedAnswer& parsed, bool delta) {
  ojson out = ojson::array();
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    ojson one = {{"id", random_id("call_")}, {"type", "function"},
                 {"function", {{"name", parsed.calls[i].name}, {"arguments", parsed.calls[i].arguments}}}};
    if (delta) one["index"] = i;
    out.push_back(std::move(one));
  }
  return out;
}

ojson usage_json(const Call& call, const std::vector<Choice>& choices) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i % static_cast<size_t>(call.n) == 0) {  // each prompt once
      prompt += choices[i].prompt_tokens;
      cached += choices[i].cached_tokens;
    }
    completion += static_cast<int64_t>(choices[i].tokens.size());
  }
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

class HttpServer final : public ServeHttp {
 public:
  HttpServer(engine::ServingEngine& engine, const ServeHttpOptions& options)
      : engine_(engine), created_(now_seconds()), api_key_(options.api_key), fetch_input_(options.fetch_input) {
    const int threads = options.threads;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_.set_payload_max_length(options.max_body_bytes);
    install();
  }
  int port() const override { return port_; }
  std::string host() const override { return host_; }
  void run() override { server_.listen_after_bind(); }
  void stop() override { server_.stop(); }

  Status bind(const std::string& host, int port) {
    host_ = host;
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
      if (port_ < 0) return unavailable("cannot listen on " + host);
    } else {
      if (!server_.bind_to_port(host, port)) return unavailable("cannot listen on " + host + ":" + std::to_string(port));
      port_ = port;
    }
    return Status::ok();
  }

 private:
  void install();
  void models(httplib::Response& res) const;
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  void answer_whole(const Call& call, std::vector<Choice>& choices, httplib::Response& res);
  void answer_stream(Call call, std::shared_ptr<std::vector<Choice>> choices, httplib::Response& res);
  ojson chunk(const Call& call, const std::string& id, size_t index, const std::string& text, bool first,
              const std::string& finish) const;

  engine::ServingEngine& engine_;
  const int64_t created_;
  const std::string api_key_;  // "": every request is answered
  const std::function<Status(const std::string&, std::string*)> fetch_input_;  // null: paths as given
  httplib::Server server_;
  std::string host_;
  int port_ = 0;
};

// Whether `header` ("Bearer KEY") carries `key`, compared in time independent of where they differ.
bool bearer_matches(const std::string& header, const std::string& key) {
  const std::string prefix = "Bearer ";
  if (header.size() != prefix.size() + key.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(header[prefix.size() + i] ^ key[i]);
  return diff == 0;
}

void HttpServer::install() {
  // With an API key (an endpoint's secret, TRAINER_SERVE_SECRET), nothing is answered without it.
  if (!api_key_.empty()) {
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (bearer_matches(req.get_header_value("Authorization"), api_key_)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, 401, "this serving process answers only requests with its endpoint's secret "
                           "(Authorization: Bearer SECRET); call it through trainerd's "
                           "/v1/endpoints/{id}/v1/chat/completions", "", "invalid_api_key");
      res.set_header("WWW-Authenticate", "Bearer");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
  server_.Post("/v1/chat/completions",
               [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  server_.Post("/v1/completions",
               [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  server_.Get("/v1/adapters", [this](const httplib::Request&, httplib::Response& res) {
    ojson list = ojson::array();
    for (const auto& a : engine_.adapters()) list.push_back({{"name", a.name}, {"path", a.dir}, {"rank", a.rank}});
    res.set_content(ojson{{"object", "list"}, {"data", list}}.dump(), "application/json");
  });
  server_.Post("/v1/adapters", [this](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("name") || !body["name"].is_string() || !body.contains("path") ||
        !body["path"].is_string()) {
      return send_error(res, 400, "the body must be {\"name\": string, \"path\": string}", "name");
    }
    const std::string name = body["name"].get<std::string>(), path = body["path"].get<std::string>();
    std::string dir = path;
    if (fetch_input_) {
      if (Status fetched = fetch_input_("path", &dir); !fetched.is_ok()) {
        return send_error(res, 400, "adapter '" + name + "': " + fetched.message(), "path");
      }
    }
    Status st = engine_.attach_adapter(name, dir);
    if (!st.is_ok()) return send_status(res, st);
    res.status = 201;
    res.set_content(ojson{{"name", name}, {"path", path}}.dump(), "application/json");
  });
  server_.Delete(R"(/v1/adapters/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    Status st = engine_.detach_adapter(req.matches[1].str());
    if (!st.is_ok()) return send_status(res, st);
    res.set_content(ojson{{"name", req.matches[1].str()}, {"deleted", true}}.dump(), "application/json");
  });
  server_.Get("/v1/stats", [this](const httplib::Request&, httplib::Response& res) {
    const engine::ServeStats s = engine_.stats();
    ojson out = {{"kv_blocks_total", s.blocks_total}, {"kv_blocks_used", s.blocks_used},
                 {"kv_blocks_cached", s.blocks_cached}, {"prompt_tokens_cached", s.prompt_tokens_cached},
                 {"requests_running", s.running}, {"requests_waiting", s.waiting},
                 {"prompt_tokens", s.prompt_tokens}, {"completion_tokens", s.completion_tokens},
                 {"requests_finished", s.requests_finished}, {"requests_cancelled", s.requests_cancelled},
                 {"context_limit", engine_.context_limit()},
                 {"greedy_head", s.greedy_head_screened ? "screened" : "fp32"},
                 {"greedy_rows_screened", s.greedy_rows_screened}, {"greedy_rows_fp32", s.greedy_rows_fp32},
                 {"greedy_candidates", s.greedy_candidates}};
    res.set_content(out.dump(), "application/json");
  });
  server_.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
  server_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return send_error(res, 404, "no route " + req.method + " " + req.path);
    if (res.status == 413) return send_error(res, 413, "the request body is too large");
    send_error(res, res.status, "the request failed (HTTP " + std::to_string(res.status) + ")");
  });
}

void HttpServer::models(httplib::Response& res) const {
  ojson data = ojson::array();
  data.push_back({{"id", engine_.base_name()}, {"object", "model"}, {"created", created_}, {"owned_by", "trainer"},
                  {"root", engine_.base_name()}, {"parent", nullptr}});
  for (const auto& a : engine_.adapters()) {
    data.push_back({{"id", a.name}, {"object", "model"}, {"created", created_}, {"owned_by", "trainer"},
                    {"root", a.dir}, {"parent", engine_.base_name()}});
  }
  res.set_content(ojson{{"object", "list"}, {"data", data}}.dump(), "application/json");
}

void HttpServer::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, 400, "the request body is not a JSON object", "", "invalid_json");
  }
  Call call;
  try {
    call = parse_call(body, chat, engine_);
  } catch (const BadField& bad) {
    return send_error(res, 400, bad.message, bad.field);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type (json::value)
    return send_error(res, 400, std::string("a field has the wrong type: ") + e.what());
  }
  auto choices = std::make_shared<std::vector<Choice>>();
  for (const auto& prompt : call.prompts) {
    for (int64_t i = 0; i < call.n; ++i) {
      engine::CompletionRequest r = call.settings;
      r.model = call.model;
      r.prompt = prompt;
      if (call.settings.seed) r.seed = *call.settings.seed + static_cast<uint64_t>(i);  // choices differ, reproducibly
      auto stream = engine_.submit(std::move(r));
      if (!stream.is_ok()) {
        for (auto& c : *choices) c.stream->cancel();
        const Status& st = stream.status();
        // A chat's prompt is its messages.
        if (chat && st.field() == "prompt") return send_status(res, Status(st.code(), "messages", st.message()));
        return send_status(res, st);
      }
      Choice c;
      c.stream = *stream;
      c.prompt_tokens = static_cast<int64_t>(prompt.size());
      choices->push_back(std::move(c));
    }
  }
  if (call.stream) return answer_stream(std::move(call), choices, res);
  answer_whole(call, *choices, res);
}

void HttpServer::answer_whole(const Call& call, std::vector<Choice>& choices, httplib::Response& res) {
  ojson list = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Choice& c = choices[i];
    engine::CompletionUpdate u;
    while (c.stream->next(&u)) {
      c.tokens.insert(c.tokens.end(), u.tokens.begin(), u.tokens.end());
      c.cached_tokens = u.cached_prompt_tokens;
      if (u.finished) c.finish_reason = u.finish_reason;
    }
    const std::string text = choice_text(engine_, c, call.settings.stop, true);
    ojson one = {{"index", i}};
    std::optional<ParsedAnswer> parsed = call.tools ? parse_tool_calls(text) : std::nullopt;
    if (parsed) {
      one["message"] = {{"role", "assistant"},
                        {"content", parsed->content.empty() ? ojson(nullptr) : ojson(parsed->content)},
                        {"tool_calls", tool_calls_json(*parsed, false)}};
      c.finish_reason = "tool_calls";
    } else if (call.chat) {
      one["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      one["text"] = text;
    }
    one["logprobs"] = nullptr;
    one["finish_reason"] = c.finish_reason;
    if (call.return_token_ids) one["token_ids"] = c.tokens;
    list.push_back(std::move(one));
  }
  ojson out = {{"id", random_id(call.chat ? "chatcmpl-" : "cmpl-")},
               {"object", call.chat ? "chat.completion" : "text_completion"},
               {"created", now_seconds()},
               {"model", call.model},
               {"choices", list},
               {"usage", usage_json(call, choices)}};
  res.set_content(out.dump(), "application/json");
}

ojson HttpServer::chunk(const Call& call, const std::string& id, size_t index, const std::string& text, bool first,
                        const std::string& finish) const {
  ojson choice = {{"index", index}};
  if (call.chat) {
    ojson delta = ojson::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish.empty() ? ojson(nullptr) : ojson(finish);
  ojson out = {{"id", id}, {"object", call.chat ? "chat.completion.chunk" : "text_completion"}, {"created", now_seconds()},
               {"model", call.model}, {"choices", ojson::array({choice})}};
  if (call.include_usage) out["usage"] = nullptr;
  return out;
}

// Server-sent events, one choice after the other (all of them run in the engine at once; the
// later ones wait in their streams): `data: {chunk}` per step, the usage chunk when asked,
// then `data: [DONE]`. A client that goes away cancels every choice, freeing their blocks.
void HttpServer::answer_stream(Call call, std::shared_ptr<std::vector<Choice>> choices, httplib::Response& res) {
  auto id = random_id(call.chat ? "chatcmpl-" : "cmpl-");
  auto next = std::make_shared<size_t>(0);
  auto started = std::make_shared<bool>(false);
  auto provider = [this, call, choices, id, next, started](size_t, httplib::DataSink& sink) {
    auto send = [&](const std::string& data) {
      const std::string event = "data: " + data + "\n\n";
      return sink.write(event.data(), event.size());
    };
    if (*next == choices->size()) {
      if (call.include_usage) {
        ojson last = {{"id", id}, {"object", call.chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", now_seconds()}, {"model", call.model}, {"choices", ojson::array()},
                      {"usage", usage_json(call, *choices)}};
        if (!send(last.dump())) return false;
      }
      if (!send("[DONE]")) return false;
      sink.done();
      return true;
    }
    Choice& c = (*choices)[*next];
    const bool first = !*started;
    if (first && call.chat && !send(chunk(call, id, *next, "", true, "").dump())) return false;
    *started = true;
    engine::CompletionUpdate u;
    if (!c.stream->next(&u)) return false;
    c.tokens.insert(c.tokens.end(), u.tokens.begin(), u.tokens.end());
    c.cached_tokens = u.cached_prompt_tokens;
    const std::string text = choice_text(engine_, c, call.settings.stop, u.finished);
    // With tools offered, what may be a tool call is held back until the answer ends.
    std::optional<ParsedAnswer> parsed = call.tools && u.finished ? parse_tool_calls(text) : std::nullopt;
    const size_t ready = !call.tools || (u.finished && !parsed) ? text.size() : std::min(text.size(), tool_safe_prefix(text));
    if (ready > c.sent) {
      if (!send(chunk(call, id, *next, text.substr(c.sent, ready - c.sent), false, "").dump())) return false;
      c.sent = ready;
    }
    if (u.finished) {
      c.finish_reason = u.finish_reason;
      if (parsed) {
        ojson calls = chunk(call, id, *next, "", false, "");
        calls["choices"][0]["delta"] = {{"tool_calls", tool_calls_json(*parsed, true)}};
        if (!send(calls.dump())) return false;
        c.finish_reason = "tool_calls";
      }
      if (!send(chunk(call, id, *next, "", false, c.finish_reason).dump())) return false;
      ++*next;
      *started = false;
    }
    return true;
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", provider, [choices](bool) {
    for (auto& c : *choices) c.stream->cancel();
  });
}

}  // namespace

Result<std::unique_ptr<ServeHttp>> bind_serve_http(engine::ServingEngine& engine, const ServeHttpOptions& options) {
  auto server = std::make_unique<HttpServer>(engine, options);
  TRAINER_RETURN_IF_ERROR(server->bind(options.host, options.port));
  return std::unique_ptr<ServeHttp>(std::move(server));
}

}  // namespace trainer::job
