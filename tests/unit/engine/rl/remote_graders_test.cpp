// http: evaluators and model: judges (src/engine/rl/graders/) against a real HTTP server on
// loopback: verdicts, causes, retries, tokens, refusals.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "engine/rl/graders/grader.h"

namespace trainer::engine::rl {
namespace {

using json = nlohmann::json;

class Server {
 public:
  Server() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });  // bound: connections queue until it runs
  }
  ~Server() {
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    server_.stop();
    thread_.join();
  }
  httplib::Server& operator*() { return server_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

std::string chat(const std::string& content) {
  return json{{"choices", json::array({{{"message", {{"role", "assistant"}, {"content", content}}}}})},
              {"usage", {{"prompt_tokens", 11}, {"completion_tokens", 3}}}}
      .dump();
}

std::vector<GradeItem> items(const std::vector<std::string>& outputs) {
  std::vector<GradeItem> out;
  for (const auto& o : outputs) out.push_back({.input = "request", .output = o, .expected = "gold", .row = 1});
  return out;
}

plan::RewardTermSpec judge_term(const std::string& url, int retries = 0) {
  plan::RewardTermSpec t;
  t.kind = "model:j";
  t.judge = plan::JudgeEndpoint{.url = url, .model = "judge-model", .apiKeyEnv = "", .caFile = "", .jobIdEnv = "", .proxy = ""};
  t.retries = retries;
  t.timeoutSeconds = 0.5;
  t.graderInstructions = "Be fair.";
  return t;
}

TEST(JudgeGrader, SendsInstructionsAndTheAnswerReadsVerdictsAndCountsTokens) {
  Server s;
  std::atomic<int> calls{0};
  (*s).Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    ++calls;
    const json body = json::parse(req.body);
    EXPECT_EQ(body["model"], "judge-model");
    EXPECT_EQ(body["max_tokens"], 512);  // the term's maxTokens default: a judge's answer is bounded
    EXPECT_EQ(body["messages"][0]["content"], "Be fair.");
    const std::string user = body["messages"][1]["content"];
    EXPECT_EQ(user.find("gold"), std::string::npos);  // never the expected answer
    const std::string answer = user.substr(user.rfind('\n') + 1);
    if (answer == "good") res.set_content(chat(R"({"score": 0.9})"), "application/json");
    else if (answer == "vague") res.set_content(chat("nice work"), "application/json");
    else if (answer == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      res.set_content(chat("1"), "application/json");
    } else if (answer == "notchat") res.set_content(R"({"score": 1})", "application/json");
    else res.status = 503;
  });
  auto g = make_grader(judge_term(s.url()), "config.reward.terms[0]", {});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto v = (*g)->grade(items({"good", "vague", "slow", "notchat", "down"}));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_DOUBLE_EQ((*v)[0].score, 0.9);
  EXPECT_EQ((*v)[0].input_tokens, 11);
  EXPECT_EQ((*v)[0].output_tokens, 3);
  EXPECT_EQ((*v)[1].failure, FailureCause::kNoVerdict);
  EXPECT_EQ((*v)[1].input_tokens, 11);  // a reply without a verdict still used tokens
  EXPECT_EQ((*v)[2].failure, FailureCause::kTimeout);
  EXPECT_EQ((*v)[3].failure, FailureCause::kUnreachable);
  EXPECT_EQ((*v)[4].failure, FailureCause::kUnreachable);
  EXPECT_EQ(calls.load(), 5);
}

TEST(JudgeGrader, RetriesACallWithoutAScoreAndStopsOnARefusal) {
  Server s;
  std::atomic<int> calls{0};
  (*s).Post("/prefix/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    const bool refuse = req.body.find("refuse") != std::string::npos;
    if (refuse) {
      res.status = 401;
      res.set_content(R"({"error": "bad key"})", "application/json");
      return;
    }
    // The first attempt fails, the retry answers.
    if (calls++ % 2 == 0) res.status = 500;
    else res.set_content(chat("Score: 3/4"), "application/json");
  });
  auto g = make_grader(judge_term(s.url() + "/prefix/", /*retries=*/1), "config.reward.terms[2]", {});
  ASSERT_TRUE(g.is_ok());
  auto v = (*g)->grade(items({"a"}));
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ((*v)[0].failure, FailureCause::kNone);
  EXPECT_DOUBLE_EQ((*v)[0].score, 0.75);
  EXPECT_EQ(calls.load(), 2);
  auto refused = (*g)->grade(items({"b", "refuse", "c"}));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message().substr(0, 62), "reward term config.reward.terms[2] (model:j) was refused: the ");
  EXPECT_NE(refused.status().message().find("HTTP 401"), std::string::npos) << refused.status().message();
}

TEST(JudgeGrader, AKeyVariableThatIsNotSetIsRefusedBeforeAnyCall) {
  plan::RewardTermSpec t = judge_term("http://127.0.0.1:9");
  t.judge->apiKeyEnv = "TRAINER_TEST_NO_SUCH_KEY_VARIABLE";
  auto g = make_grader(t, "config.reward.terms[0]", {});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("TRAINER_TEST_NO_SUCH_KEY_VARIABLE is not set"), std::string::npos);
}

TEST(HttpGrader, PostsTheEnvelopeAndReadsScoreOkOrPassed) {
  Server s;
  (*s).Post("/score", [&](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body);
    EXPECT_EQ(body["input"], "request");
    EXPECT_EQ(body["expected"], "gold");
    const std::string out = body["output"];
    if (out == "a") res.set_content(R"({"score": 0.25, "explanation": "x"})", "application/json");
    else if (out == "b") res.set_content(R"({"passed": true})", "application/json");
    else if (out == "c") res.set_content(R"({"ok": false})", "application/json");
    else if (out == "d") res.set_content(R"({"score": 2})", "application/json");
    else if (out == "e") res.set_content("not json", "text/plain");
    else {
      res.status = 403;
      res.set_content("SECRET-REPLY-403", "text/plain");
    }
  });
  plan::RewardTermSpec t;
  t.kind = "http:" + s.url() + "/score";
  t.retries = 0;
  auto g = make_grader(t, "config.reward.terms[0]", {});
  ASSERT_TRUE(g.is_ok());
  auto v = (*g)->grade(items({"a", "b", "c", "d", "e"}));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_DOUBLE_EQ((*v)[0].score, 0.25);
  EXPECT_DOUBLE_EQ((*v)[1].score, 1.0);
  EXPECT_DOUBLE_EQ((*v)[2].score, 0.0);
  EXPECT_EQ((*v)[2].failure, FailureCause::kNone);
  EXPECT_EQ((*v)[3].failure, FailureCause::kNoVerdict);
  EXPECT_EQ((*v)[4].failure, FailureCause::kUnreachable);
  auto refused = (*g)->grade(items({"f"}));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("the evaluator answered HTTP 403 (a reply of 16 bytes, not shown)"),
            std::string::npos)
      << refused.status().message();
  // A listener's own words never reach the reason (issue 32).
  EXPECT_EQ(refused.status().message().find("SECRET-REPLY"), std::string::npos) << refused.status().message();
}

TEST(HttpGrader, AnEvaluatorThatIsNotThereIsUnreachable) {
  plan::RewardTermSpec t;
  {
    Server gone;  // a port that was just free
    t.kind = "http:" + gone.url() + "/score";
  }
  t.retries = 0;
  auto g = make_grader(t, "config.reward.terms[0]", {});
  ASSERT_TRUE(g.is_ok());
  auto v = (*g)->grade(items({"a"}));
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ((*v)[0].failure, FailureCause::kUnreachable);
}

}  // namespace
}  // namespace trainer::engine::rl
