// One judge call of a curation, with its retries (curation_judge.h).
#include "service/curation_judge.h"

#include "common/http_client.h"
#include "common/json_parse.h"
#include "grading/verdict.h"

namespace trainer::service {
namespace {

using json = nlohmann::json;

const char* const kDefaultInstructionsText =
    "You grade an AI assistant's answer. Read the user's request and the assistant's answer, and judge how well "
    "the answer does what the request asks: correct, complete, in the requested format. Reply with JSON only: "
    "{\"score\": <a number from 0 (useless) to 1 (perfect)>, \"explanation\": \"<one sentence>\"}.";

std::string text_of(const json& m) {
  const json c = m.value("content", json(""));
  return c.is_string() ? c.get<std::string>() : c.dump();
}

// The request: the conversation before the answer (one user message as its text; more as
// "ROLE: text" paragraphs).
std::string request_of(const json& messages) {
  if (messages.size() == 2 && messages[0].value("role", std::string()) == "user") return text_of(messages[0]);
  std::string out;
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    out += (out.empty() ? "" : "\n\n") + messages[i].value("role", std::string("user")) + ": " + text_of(messages[i]);
  }
  return out;
}

// A refusal is an answer the judge will give again: a 4xx but 408 and 429.
bool is_refusal(int status) { return status >= 400 && status < 500 && status != 408 && status != 429; }

JudgeAnswer ask_once(const CurationJudge& judge, const json& messages, const std::function<bool()>& keep_going) {
  const json request = {
      {"model", judge.model},
      {"temperature", 0},
      {"max_tokens", judge.max_tokens},
      {"messages", json::array({{{"role", "system"}, {"content", judge.instructions}},
                                {{"role", "user"},
                                 {"content", "The user's request:\n" + request_of(messages) +
                                                 "\n\nThe assistant's answer:\n" + text_of(messages.back())}}})}};
  HttpResponse r = http_call({.method = "POST",
                              .url = judge.url,
                              .headers = judge.headers,
                              .body = request.dump(-1, ' ', false, json::error_handler_t::replace),
                              .timeout_seconds = judge.timeout_seconds,
                              .ca_file = judge.ca_file,
                              .keep_going = keep_going,
                              .proxy = judge.proxy});
  JudgeAnswer a;
  if (r.failure != HttpFailure::kNone) {
    a.failure = (r.failure == HttpFailure::kTimeout ? "timeout: " : "unreachable: ") + r.detail;
    return a;
  }
  // The reply's own bytes never go into a reason (docs/graders.md).
  const std::string answered =
      judge.label + " answered HTTP " + std::to_string(r.status) + " (a reply of " + std::to_string(r.body.size()) +
      " bytes, not shown)";
  if (is_refusal(r.status)) {
    a.refused = true;
    a.failure = answered;
    return a;
  }
  auto reply = parse_json(r.body, "the judge's reply");
  std::optional<grading::ChatReply> chat;
  if (r.status >= 200 && r.status < 300 && reply.is_ok()) chat = grading::read_chat_completion(*reply);
  if (!chat) {
    a.failure = "unreachable: " + answered + " with no chat completion";
    return a;
  }
  a.score = grading::judge_verdict(chat->content);
  if (!a.score) a.failure = "no_verdict: the judge's reply carries no 0-1 score";
  return a;
}

}  // namespace

const char* const kDefaultJudgeInstructions = kDefaultInstructionsText;

JudgeAnswer ask_judge(const CurationJudge& judge, const json& messages, const std::function<bool()>& keep_going) {
  JudgeAnswer a;
  for (int attempt = 0; attempt <= judge.retries && keep_going(); ++attempt) {
    a = ask_once(judge, messages, keep_going);
    if (a.score || a.refused) return a;
  }
  return a;
}

}  // namespace trainer::service
