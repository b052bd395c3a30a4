// Judges in the deployment configuration, and the service's checks of a plan's external reward
// terms (src/service/judges.h).
#include <gtest/gtest.h>

#include <fstream>

#include "plan/plan.h"
#include "service/config.h"
#include "service/judges.h"

namespace trainer::service {
namespace {

DeploymentConfig with_judges() {
  auto c = parse_config(R"({"judges": [
      {"name": "judge-4b", "url": "http://127.0.0.1:8000", "model": "Qwen/Qwen3-4B", "apiKeyEnv": "K"},
      {"name": "tiny", "url": "http://127.0.0.1:8001/prefix", "readyTimeoutSeconds": 5}]})",
                        "deploy.json");
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return *c;
}

plan::RunConfig rl_config(const std::string& terms) {
  auto p = plan::parse_plan(R"({"kind": "run", "workload": "w", "baseModel": "m", "config": {"dataset": "d",
      "method": "grpo", "reward": {"terms": )" + terms + "}}}",
                            "plan.json");
  EXPECT_TRUE(p.is_ok()) << p.status().describe();
  return p->config;
}

TEST(Judges, AreDeclaredByNameAndShownByInfo) {
  DeploymentConfig c = with_judges();
  ASSERT_EQ(c.judges.size(), 2u);
  EXPECT_EQ(c.judges[0].model, "Qwen/Qwen3-4B");
  EXPECT_EQ(c.judges[0].api_key_env, "K");
  EXPECT_EQ(c.judges[0].ready_timeout_seconds, 300);
  EXPECT_EQ(c.judges[1].ready_timeout_seconds, 5);
  ASSERT_NE(find_judge(c, "tiny"), nullptr);
  EXPECT_EQ(find_judge(c, "nobody"), nullptr);
  const auto shown = config_to_json(c)["judges"];
  EXPECT_EQ(shown[1]["model"], "tiny");  // the request's model defaults to the name
  EXPECT_TRUE(shown[1]["apiKeyEnv"].is_null());
}

TEST(Judges, BadDeclarationsAreRefusedByField) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {R"({"judges": {}})", "deploy.json: judges: must be a list of {name, url, model, apiKeyEnv}"},
      {R"({"judges": [{"name": "j"}]})", "deploy.json: judges[0].url: required"},
      {R"({"judges": [{"name": "j", "url": "ftp://x"}]})",
       "deploy.json: judges[0].url: 'ftp://x' must be an http:// or https:// URL"},
      {R"({"judges": [{"name": "j", "url": "https://x", "caFile": "/no/such/ca.pem"}]})",
       "deploy.json: judges[0].caFile: '/no/such/ca.pem': no such file (an absolute path of a PEM file of CA certificates)"},
      {R"({"judges": [{"name": "j", "url": "https://x", "caFile": "ca.pem"}]})",
       "deploy.json: judges[0].caFile: 'ca.pem': no such file (an absolute path of a PEM file of CA certificates)"},
      {R"({"judges": [{"name": "j", "url": "http://x", "key": "k"}]})",
       "deploy.json: judges[0].key: unknown field; the fields here are apiKeyEnv, caFile, model, name, readyTimeoutSeconds, "
       "url"},
      {R"({"judges": [{"name": "j", "url": "http://x"}, {"name": "j", "url": "http://y"}]})",
       "deploy.json: judges[1].name: 'j' listed twice"},
      {R"({"judges": [{"name": "j", "url": "http://x", "readyTimeoutSeconds": 0}]})",
       "deploy.json: judges[0].readyTimeoutSeconds: must be at least 1"},
  };
  for (const auto& c : cases) {
    auto r = parse_config(c.text, "deploy.json");
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(Judges, ASubmittedPlanNamesDeclaredJudgesAndExistingRuleFiles) {
  DeploymentConfig c = with_judges();
  const std::string tmp = ::testing::TempDir();
  c.paths.allow = {tmp};  // paths.allow (docs/security.md, "Paths")
  EXPECT_TRUE(check_reward_terms(rl_config(R"([{"kind": "model:tiny"}, {"kind": "json-label-match"}])"), c).is_ok());

  Status st = check_reward_terms(rl_config(R"([{"kind": "json-label-match"}, {"kind": "model:big"}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[1].kind");
  EXPECT_EQ(st.message(), "judge 'big' is not declared by this trainerd; declared: judge-4b, tiny");

  st = check_reward_terms(rl_config(R"([{"kind": "model:tiny", "judge": {"url": "http://elsewhere"}}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].judge");

  st = check_reward_terms(rl_config(R"([{"kind": "rule:score.py"}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].kind");
  EXPECT_NE(st.message().find("must be an absolute path"), std::string::npos) << st.message();

  st = check_reward_terms(rl_config(R"([{"kind": "bundle:)" + tmp + R"(/no/such/folder#pkg.mod"}])"), c);
  EXPECT_NE(st.message().find("no such folder"), std::string::npos) << st.message();
  // Outside paths.allow: refused alike whether it exists or not.
  st = check_reward_terms(rl_config(R"([{"kind": "rule:/etc/passwd"}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].kind");
  EXPECT_NE(st.message().find("is outside the folders this trainerd lets requests name"), std::string::npos)
      << st.message();

  const std::string file = ::testing::TempDir() + "/judges_test_score.py";
  std::ofstream(file) << "def compute_score(a, b, c, d):\n    return 1\n";
  EXPECT_TRUE(check_reward_terms(rl_config(R"([{"kind": "rule:)" + file + R"("}])"), c).is_ok());

  // An http: term's URL only where outbound.allow lets it: loopback through a rule naming it.
  st = check_reward_terms(rl_config(R"([{"kind": "http:https://127.0.0.1:9/score"}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].kind");
  EXPECT_NE(st.message().find("outbound.allow"), std::string::npos) << st.message();
  c.outbound.allow = {{"127.0.0.1", 9}};
  // An http: term's caFile is a file on trainerd's host.
  const std::string missing = tmp + "/no-such-ca.pem";
  st = check_reward_terms(rl_config(R"([{"kind": "http:https://127.0.0.1:9/score", "caFile": ")" + missing + R"("}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].caFile");
  EXPECT_NE(st.message().find("'" + missing + "': no such file on trainerd's host"), std::string::npos) << st.message();
  st = check_reward_terms(rl_config(R"([{"kind": "http:https://127.0.0.1:9/score", "caFile": "/etc/hostname"}])"), c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].caFile");
  EXPECT_NE(st.message().find("is outside"), std::string::npos) << st.message();
  EXPECT_TRUE(check_reward_terms(rl_config(R"([{"kind": "http:https://127.0.0.1:9/score", "caFile": ")" + file + R"("}])"), c)
                  .is_ok());

  // A rule term's declared network: every entry allowed by outbound.allow, else refused naming
  // the entry's field, the term and the entry.
  EXPECT_TRUE(check_reward_terms(rl_config(R"([{"kind": "rule:)" + file + R"(", "network": {"allow": ["127.0.0.1:9"]}}])"), c)
                  .is_ok());
  st = check_reward_terms(
      rl_config(R"([{"kind": "rule:)" + file + R"(", "name": "net", "network": {"allow": ["127.0.0.1:9", "127.0.0.1:10"]}}])"),
      c);
  EXPECT_EQ(st.field(), "config.reward.terms[0].network.allow[1]");
  EXPECT_NE(st.message().find("term 'net' declares network access that trainerd does not allow: '127.0.0.1:10'"),
            std::string::npos)
      << st.message();
}

TEST(Judges, TheOperatorsJudgesAreCalledThroughItsProxy) {
  auto c = parse_config(R"({"judges": [{"name": "j", "url": "http://judge.internal:8000"}],
                            "outbound": {"allow": [], "proxy": "http://proxy.internal:3128"}})",
                        "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->outbound.proxy, "http://proxy.internal:3128");
  EXPECT_EQ(c->judges[0].proxy, "http://proxy.internal:3128");
  EXPECT_EQ(judge_endpoint_json(c->judges[0])["proxy"], "http://proxy.internal:3128");
  auto bad = parse_config(R"({"outbound": {"proxy": "socks5://proxy.internal:1080"}})", "deploy.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("outbound.proxy"), std::string::npos) << bad.status().message();
}

TEST(Judges, AnHttpsJudgeDeclaresItsCaFile) {
  const std::string ca = ::testing::TempDir() + "/judges_test_ca.pem";
  std::ofstream(ca) << "not checked here\n";
  auto c = parse_config(R"({"judges": [{"name": "j", "url": "https://judge.internal", "caFile": ")" + ca + R"("}]})",
                        "deploy.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->judges[0].ca_file, ca);
  EXPECT_EQ(config_to_json(*c)["judges"][0]["caFile"], ca);
  EXPECT_EQ(judge_endpoint_json(c->judges[0])["caFile"], ca);
}

TEST(Judges, TheJobsPlanGetsEachJudgesEndpoint) {
  const DeploymentConfig c = with_judges();
  nlohmann::json plan = {{"config",
                          {{"reward",
                            {{"terms", nlohmann::json::array({{{"kind", "json-label-match"}},
                                                               {{"kind", "model:judge-4b"}},
                                                               {{"kind", "model:tiny"}}})}}}}}};
  std::string missing;
  EXPECT_EQ(judges_of(plan, c, &missing).size(), 2u);
  EXPECT_TRUE(missing.empty());
  fill_judges(plan, c);
  const auto& terms = plan["config"]["reward"]["terms"];
  EXPECT_FALSE(terms[0].contains("judge"));
  EXPECT_EQ(terms[1]["judge"], (nlohmann::json{{"url", "http://127.0.0.1:8000"}, {"model", "Qwen/Qwen3-4B"}, {"apiKeyEnv", "K"}, {"caFile", ""}}));
  EXPECT_EQ(terms[2]["judge"]["model"], "tiny");
  // The job's plan parses, with the endpoint on the term.
  nlohmann::json full = {{"kind", "run"}, {"workload", "w"}, {"baseModel", "m"}, {"config", plan["config"]}};
  full["config"]["dataset"] = "d";
  full["config"]["method"] = "grpo";
  auto p = plan::plan_from_json(full, "plan.json");
  ASSERT_TRUE(p.is_ok()) << p.status().describe();
  EXPECT_EQ(p->config.rewardTerms[2].judge->url, "http://127.0.0.1:8001/prefix");
  plan["config"]["reward"]["terms"].push_back({{"kind", "model:gone"}});
  judges_of(plan, c, &missing);
  EXPECT_EQ(missing, "gone");
}

}  // namespace
}  // namespace trainer::service
