// OTLP/JSON logs of captured model calls (sessions.h): the GenAI semantic conventions' events,
// grouped into calls by (traceId, spanId). Records that are not GenAI message events are counted
// ("not_gen_ai"), as are those without a trace context ("no_trace_context"); a call without a
// choice of index 0 is dropped ("no_choice"), one whose message content was not captured
// ("content_not_captured"), and one that does not make a chat row ("invalid_conversation").
#include <optional>
#include <set>

#include "dataset/sessions.h"

namespace trainer::dataset {
namespace {

using json = nlohmann::json;

// An OTLP AnyValue as plain JSON; errors name `at`.
Result<json> plain(const json& v, const std::string& at) {
  if (!v.is_object()) return invalid_field(at, "expected an AnyValue object, got " + std::string(v.type_name()));
  if (v.empty()) return json(nullptr);
  if (auto s = v.find("stringValue"); s != v.end() && s->is_string()) return *s;
  if (auto b = v.find("boolValue"); b != v.end() && b->is_boolean()) return *b;
  if (auto d = v.find("doubleValue"); d != v.end() && d->is_number()) return *d;
  if (auto i = v.find("intValue"); i != v.end()) {  // int64 is a decimal string in OTLP/JSON
    if (i->is_number_integer()) return *i;
    if (i->is_string()) {
      try {
        return json(std::stoll(i->get<std::string>()));
      } catch (const std::exception&) {
      }
    }
    return invalid_field(at + ".intValue", "expected an integer, got " + i->dump());
  }
  if (auto a = v.find("arrayValue"); a != v.end() && a->is_object()) {
    json out = json::array();
    const json values = a->value("values", json::array());
    if (!values.is_array()) return invalid_field(at + ".arrayValue.values", "expected an array");
    for (size_t k = 0; k < values.size(); ++k) {
      TRAINER_ASSIGN_OR_RETURN(json x, plain(values[k], at + ".arrayValue.values[" + std::to_string(k) + "]"));
      out.push_back(std::move(x));
    }
    return out;
  }
  if (auto kv = v.find("kvlistValue"); kv != v.end() && kv->is_object()) {
    json out = json::object();
    const json values = kv->value("values", json::array());
    if (!values.is_array()) return invalid_field(at + ".kvlistValue.values", "expected an array");
    for (size_t k = 0; k < values.size(); ++k) {
      const std::string here = at + ".kvlistValue.values[" + std::to_string(k) + "]";
      if (!values[k].is_object() || !values[k].value("key", json()).is_string()) {
        return invalid_field(here + ".key", "expected a string key");
      }
      TRAINER_ASSIGN_OR_RETURN(json x, plain(values[k].value("value", json::object()), here + ".value"));
      out[values[k]["key"].get<std::string>()] = std::move(x);
    }
    return out;
  }
  if (auto b = v.find("bytesValue"); b != v.end() && b->is_string()) return *b;
  return invalid_field(at, "not an OTLP AnyValue: " + v.dump().substr(0, 80));
}

// One captured call, as its events came.
struct Call {
  json messages = json::array();  // system, user, assistant and tool messages before the answer
  json choice;                    // the answer (choice 0); null until seen
  bool content_missing = false;   // a message event carried no content (capture was off)
};

const std::set<std::string> kMessageEvents = {"gen_ai.system.message", "gen_ai.user.message",
                                              "gen_ai.assistant.message", "gen_ai.tool.message"};

// The event's name: the record's eventName, else its event.name attribute; "" when neither.
Result<std::string> event_name(const json& record, const std::string& at) {
  if (auto n = record.find("eventName"); n != record.end() && n->is_string() && !n->get<std::string>().empty()) {
    return n->get<std::string>();
  }
  const json attributes = record.value("attributes", json::array());
  if (!attributes.is_array()) return invalid_field(at + ".attributes", "expected an array of {key, value}");
  for (size_t i = 0; i < attributes.size(); ++i) {
    if (!attributes[i].is_object() || attributes[i].value("key", json()) != "event.name") continue;
    const std::string here = at + ".attributes[" + std::to_string(i) + "].value";
    TRAINER_ASSIGN_OR_RETURN(json v, plain(attributes[i].value("value", json::object()), here));
    if (!v.is_string()) return invalid_field(here, "event.name must be a string");
    return v.get<std::string>();
  }
  return std::string();
}

// A message event's content: the body's "content" string; null when it is absent.
Result<json> content_of(const json& body, const std::string& at) {
  if (!body.is_object() || !body.contains("content") || body["content"].is_null()) return json(nullptr);
  if (!body["content"].is_string()) return invalid_field(at + ".content", "expected a string");
  return body["content"];
}

// One GenAI event read from a record, not yet joined to its call.
struct Event {
  std::string call;          // "traceId/spanId"
  json message;              // the message (or, for a choice, the answer)
  bool choice = false;       // a gen_ai.choice of index 0
  bool content_missing = false;
};

// Reads one record: an event, or nothing (counted in `dropped`) for a record that is none.
Result<std::optional<Event>> read_record(const json& record, const std::string& at,
                                         std::map<std::string, int64_t>& dropped) {
  if (!record.is_object()) return invalid_field(at, "expected a log record object");
  TRAINER_ASSIGN_OR_RETURN(std::string name, event_name(record, at));
  if (name != "gen_ai.choice" && kMessageEvents.count(name) == 0) {
    ++dropped["not_gen_ai"];
    return std::optional<Event>();
  }
  const json trace = record.value("traceId", json("")), span = record.value("spanId", json(""));
  if (!trace.is_string() || !span.is_string()) return invalid_field(at + ".traceId", "traceId and spanId are hex strings");
  if (trace.get<std::string>().empty() || span.get<std::string>().empty()) {
    ++dropped["no_trace_context"];
    return std::optional<Event>();
  }
  json body = nullptr;
  if (record.contains("body")) {
    TRAINER_ASSIGN_OR_RETURN(body, plain(record["body"], at + ".body"));
  }
  Event e;
  e.call = trace.get<std::string>() + "/" + span.get<std::string>();
  if (name == "gen_ai.choice") {
    const json i = body.is_object() ? body.value("index", json(0)) : json(0);
    if (i != json(0)) {
      ++dropped["other_choices"];
      return std::optional<Event>();
    }
    const json message = body.is_object() ? body.value("message", json::object()) : json::object();
    if (!message.is_object()) return invalid_field(at + ".body.message", "expected an object");
    TRAINER_ASSIGN_OR_RETURN(json content, content_of(message, at + ".body.message"));
    e.message = {{"role", "assistant"}, {"content", content.is_null() ? json("") : content}};
    if (message.contains("tool_calls")) e.message["tool_calls"] = message["tool_calls"];
    e.content_missing = content.is_null() && !e.message.contains("tool_calls");
    e.choice = true;
    return std::optional<Event>(std::move(e));
  }
  TRAINER_ASSIGN_OR_RETURN(json content, content_of(body, at + ".body"));
  // "gen_ai.ROLE.message"
  const std::string role = name.substr(std::string("gen_ai.").size(), name.size() - std::string("gen_ai..message").size());
  e.message = {{"role", role}, {"content", content.is_null() ? json("") : content}};
  if (role == "assistant" && body.is_object() && body.contains("tool_calls")) e.message["tool_calls"] = body["tool_calls"];
  if (role == "tool" && body.is_object() && body.value("id", json()).is_string()) e.message["tool_call_id"] = body["id"];
  e.content_missing = content.is_null() && !e.message.contains("tool_calls");
  return std::optional<Event>(std::move(e));
}

// The array `key` of `parent` (absent: empty); errors name `at`.
Result<json> array_of(const json& parent, const char* key, const std::string& at) {
  if (!parent.is_object()) return invalid_field(at, "expected an object");
  if (!parent.contains(key)) return json::array();
  if (!parent[key].is_array()) return invalid_field(at.empty() ? key : at + "." + key, "expected an array");
  return parent[key];
}

}  // namespace

SessionCandidates read_otel(std::string_view text) {
  SessionCandidates out;
  std::map<std::string, size_t> index;  // "traceId/spanId" -> calls[i]
  std::vector<Call> calls;
  for_each_json_line(text, out, [&](int64_t, const json& batch) -> Status {
    if (!batch.is_object() || !batch.contains("resourceLogs")) {
      return invalid_field("resourceLogs", "missing: each line is one OTLP/JSON logs export {\"resourceLogs\": [...]}");
    }
    // Records join their calls only when the whole line reads.
    std::vector<Event> events;
    std::map<std::string, int64_t> dropped;
    TRAINER_ASSIGN_OR_RETURN(json resources, array_of(batch, "resourceLogs", ""));
    for (size_t r = 0; r < resources.size(); ++r) {
      const std::string at_r = "resourceLogs[" + std::to_string(r) + "]";
      TRAINER_ASSIGN_OR_RETURN(json scopes, array_of(resources[r], "scopeLogs", at_r));
      for (size_t s = 0; s < scopes.size(); ++s) {
        const std::string at_s = at_r + ".scopeLogs[" + std::to_string(s) + "]";
        TRAINER_ASSIGN_OR_RETURN(json records, array_of(scopes[s], "logRecords", at_s));
        for (size_t k = 0; k < records.size(); ++k) {
          TRAINER_ASSIGN_OR_RETURN(std::optional<Event> e,
                                   read_record(records[k], at_s + ".logRecords[" + std::to_string(k) + "]", dropped));
          if (e) events.push_back(std::move(*e));
        }
      }
    }
    for (Event& e : events) {
      auto [it, fresh] = index.try_emplace(e.call, calls.size());
      if (fresh) calls.emplace_back();
      Call& call = calls[it->second];
      call.content_missing = call.content_missing || e.content_missing;
      if (e.choice) {
        call.choice = std::move(e.message);
      } else {
        call.messages.push_back(std::move(e.message));
      }
    }
    for (const auto& [why, n] : dropped) out.dropped[why] += n;
    return Status::ok();
  });
  for (Call& call : calls) {
    if (call.choice.is_null()) {
      ++out.dropped["no_choice"];
      continue;
    }
    if (call.content_missing) {
      ++out.dropped["content_not_captured"];
      continue;
    }
    call.messages.push_back(std::move(call.choice));
    json row = {{"messages", std::move(call.messages)}};
    if (!check_row(row).is_ok()) {
      ++out.dropped["invalid_conversation"];
      continue;
    }
    out.candidates.push_back(std::move(row));
  }
  return out;
}

}  // namespace trainer::dataset
