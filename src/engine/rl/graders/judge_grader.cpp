// model: terms (declared in graders/grader.h): a judge behind an OpenAI-compatible
// /v1/chat/completions. The judge is sent its instructions (the term's graderInstructions, else
// the plan's, else the built-in ones) and the prompt and completion, never the gold answer; its reply's text is
// read for a 0-1 verdict (graders/verdict.h) and its usage block for tokens.
#include <cstdlib>

#include "common/json_parse.h"
#include "engine/rl/graders/remote_grader.h"
#include "engine/rl/graders/verdict.h"

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;

constexpr const char* kDefaultInstructions =
    "You grade an AI assistant's answer. Read the user's request and the assistant's answer, and judge how well "
    "the answer does what the request asks: correct, complete, in the requested format. Reply with JSON only: "
    "{\"score\": <a number from 0 (useless) to 1 (perfect)>, \"explanation\": \"<one sentence>\"}.";

class JudgeGrader final : public RemoteGrader {
 public:
  JudgeGrader(const plan::RewardTermSpec& term, std::string at, std::string url, std::string model,
              std::string instructions, std::vector<std::pair<std::string, std::string>> headers, std::string ca_file,
              std::string proxy)
      : RemoteGrader(term, std::move(at)),
        url_(std::move(url)),
        model_(std::move(model)),
        instructions_(std::move(instructions)),
        headers_(std::move(headers)),
        ca_file_(std::move(ca_file)),
        proxy_(std::move(proxy)),
        timeout_(term.timeoutSeconds),
        max_tokens_(term.maxTokens) {}

 protected:
  Attempt call(const GradeItem& item) const override {
    Attempt a;
    const json request = {
        {"model", model_},
        {"temperature", 0},
        {"max_tokens", max_tokens_},
        {"messages",
         json::array({{{"role", "system"}, {"content", instructions_}},
                      {{"role", "user"},
                       {"content", "The user's request:\n" + item.input + "\n\nThe assistant's answer:\n" + item.output}}})}};
    HttpAnswer r = post_json(url_, request.dump(-1, ' ', false, json::error_handler_t::replace), timeout_, headers_, ca_file_,
                              nullptr, proxy_);
    Verdict& v = a.verdict;
    if (r.transport != FailureCause::kNone) {
      v.failure = r.transport;
      v.detail = r.detail;
      return a;
    }
    if (is_refusal(r.status)) {
      a.refusal = remote_answer("the judge", r.status, r.body.size());
      return a;
    }
    auto reply = parse_json(r.body, "the judge's reply");
    std::optional<ChatReply> chat;
    if (r.status >= 200 && r.status < 300 && reply.is_ok()) chat = read_chat_completion(*reply);
    if (!chat) {
      v.failure = FailureCause::kUnreachable;
      v.detail = remote_answer("the judge", r.status, r.body.size()) + " with no chat completion";
      return a;
    }
    v.input_tokens = chat->input_tokens;
    v.output_tokens = chat->output_tokens;
    if (auto score = judge_verdict(chat->content)) {
      v.score = *score;
      return a;
    }
    v.failure = FailureCause::kNoVerdict;
    v.detail = "the judge's reply carries no 0-1 score: " + chat->content.substr(0, 200);
    return a;
  }

 private:
  const std::string url_, model_, instructions_;
  const std::vector<std::pair<std::string, std::string>> headers_;
  const std::string ca_file_;  // "" = the system's CA store
  const std::string proxy_;    // the judge's proxy (plan::JudgeEndpoint::proxy); "" = directly
  const double timeout_;
  const int max_tokens_;
};

}  // namespace

Result<std::unique_ptr<Grader>> make_judge_grader(const plan::RewardTermSpec& term, const std::string& at) {
  const std::string name = plan::term_target(term.kind);
  if (!term.judge) {
    return Status(StatusCode::kInvalidArgument, at + ".judge: a model: term needs its judge's url; trainerd fills it "
                                                "from its `judges` configuration, a plan run by hand writes {url, model, apiKeyEnv}");
  }
  std::string url = term.judge->url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  std::vector<std::pair<std::string, std::string>> headers;
  if (!term.judge->apiKeyEnv.empty()) {
    const char* key = std::getenv(term.judge->apiKeyEnv.c_str());
    if (key == nullptr || *key == '\0') {
      return Status(StatusCode::kFailedPrecondition, at + ".kind: " + term.kind + ": the judge's API key variable " +
                                                         term.judge->apiKeyEnv + " is not set in the job's environment");
    }
    headers.emplace_back("Authorization", std::string("Bearer ") + key);
  }
  if (!term.judge->jobIdEnv.empty()) {
    const char* id = std::getenv(term.judge->jobIdEnv.c_str());
    if (id == nullptr || *id == '\0') {
      return Status(StatusCode::kFailedPrecondition, at + ".kind: " + term.kind + ": the judge's job id variable " +
                                                         term.judge->jobIdEnv + " is not set in the job's environment");
    }
    headers.emplace_back("X-Trainer-Job", id);
  }
  return std::unique_ptr<Grader>(std::make_unique<JudgeGrader>(
      term, at, url + "/v1/chat/completions", term.judge->model.empty() ? name : term.judge->model,
      term.graderInstructions.value_or(term.planGraderInstructions.value_or(kDefaultInstructions)), std::move(headers), term.judge->caFile,
      term.judge->proxy));
}

}  // namespace trainer::engine::rl
