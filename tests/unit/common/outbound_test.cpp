// common/outbound.h: rules parsed and refused by name; internal addresses reached only through a
// rule that names them; the check at connection time (common/http_client.h) against a real
// loopback server, including a name whose answer changes between the check and the call (through
// the test hosts file, a fake named as such: no DNS server can be made to rebind here).
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "common/outbound.h"
#include "loopback_server.h"

namespace trainer {
namespace {

OutboundPolicy policy(std::initializer_list<const char*> rules) {
  nlohmann::json list = nlohmann::json::array();
  for (const char* r : rules) list.push_back(r);
  auto p = parse_outbound_policy(list, "outbound.allow");
  EXPECT_TRUE(p.is_ok()) << p.status().describe();
  return p.is_ok() ? *p : OutboundPolicy{};
}

TEST(Outbound, BadRulesAreRefusedNamingTheRule) {
  for (const char* bad : {"judge.example.com", "judge.example.com:0", "judge.example.com:70000", "a b:80", ":80",
                          "10.0.0.0/40:80", "*.:80"}) {
    auto p = parse_outbound_policy(nlohmann::json::array({"ok.example.com:443", bad}), "outbound.allow");
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_EQ(p.status().field(), "outbound.allow[1]") << bad;
  }
  EXPECT_FALSE(parse_outbound_policy(nlohmann::json::array({5}), "outbound.allow").is_ok());
  EXPECT_FALSE(parse_outbound_policy(nlohmann::json::object(), "outbound.allow").is_ok());
  EXPECT_EQ(outbound_policy_json(policy({"Judge.Example.com:443", "*:*", "[::1]:8080"})),
            nlohmann::json::array({"judge.example.com:443", "*:*", "[::1]:8080"}));
}

TEST(Outbound, InternalAddressesAreToldApart) {
  EXPECT_EQ(internal_address_kind("127.0.0.1"), "a loopback address");
  EXPECT_EQ(internal_address_kind("::1"), "a loopback address");
  EXPECT_NE(internal_address_kind("169.254.169.254").find("metadata"), std::string::npos);
  for (const char* a : {"10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "fd00::1", "0.0.0.0", "fe80::1"}) {
    EXPECT_NE(internal_address_kind(a), "") << a;
  }
  for (const char* a : {"8.8.8.8", "172.32.0.1", "2001:4860::1", "203.0.113.7"}) EXPECT_EQ(internal_address_kind(a), "") << a;
}

TEST(Outbound, WildcardsNeverReachInternalAddresses) {
  const OutboundPolicy any = policy({"*:*"});
  EXPECT_EQ(outbound_refusal(any, "eval.example.com", 443, "203.0.113.7"), "");
  const std::string loop = outbound_refusal(any, "rebind.example.com", 443, "127.0.0.1");
  EXPECT_NE(loop.find("loopback"), std::string::npos) << loop;
  EXPECT_NE(outbound_refusal(policy({"*.example.com:443"}), "x.example.com", 443, "169.254.169.254"), "");
  // Named explicitly: by address or block, or by the host's exact name.
  EXPECT_EQ(outbound_refusal(policy({"127.0.0.1:8080"}), "127.0.0.1", 8080, "127.0.0.1"), "");
  EXPECT_EQ(outbound_refusal(policy({"127.0.0.0/8:*"}), "localhost", 9, "127.0.0.1"), "");
  EXPECT_EQ(outbound_refusal(policy({"localhost:9"}), "localhost", 9, "127.0.0.1"), "");
  // The port counts; an empty list allows nothing.
  EXPECT_NE(outbound_refusal(policy({"127.0.0.1:8080"}), "127.0.0.1", 8081, "127.0.0.1"), "");
  const std::string none = outbound_refusal(OutboundPolicy{}, "eval.example.com", 443, "203.0.113.7");
  EXPECT_NE(none.find("empty"), std::string::npos) << none;
}

TEST(Outbound, UrlsAreCheckedOnEveryAddressTheirHostResolvesTo) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(url_host_port("https://User@Eval.Example.com/score", &host, &port));
  EXPECT_EQ(host, "eval.example.com");
  EXPECT_EQ(port, 443);
  ASSERT_TRUE(url_host_port("http://[::1]:8080/x", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 8080);
  EXPECT_FALSE(url_host_port("ftp://x/", &host, &port));
  EXPECT_TRUE(check_outbound_url(policy({"127.0.0.1:8080"}), "http://127.0.0.1:8080/score", "f").is_ok());
  const Status refused = check_outbound_url(policy({"*:*"}), "http://localhost:8080/score", "config.reward.terms[0].kind");
  EXPECT_EQ(refused.field(), "config.reward.terms[0].kind");
  EXPECT_NE(refused.message().find("loopback"), std::string::npos) << refused.message();
}

// An evaluator that counts the calls that reached it.
class Server : public LoopbackServer {
 public:
  Server()
      : LoopbackServer([this](httplib::Server& s) {
          s.Post("/score", [this](const httplib::Request&, httplib::Response& res) {
            ++calls;
            res.set_content("{\"score\": 1}", "application/json");
          });
        }) {}
  std::atomic<int> calls{0};
};

TEST(Outbound, TheCallIsCheckedAsItConnects) {
  Server s;
  const std::string url = "http://127.0.0.1:" + std::to_string(s.port()) + "/score";
  const OutboundPolicy listed = policy({("127.0.0.1:" + std::to_string(s.port())).c_str()});
  HttpResponse ok = http_call({.url = url, .body = "{}", .timeout_seconds = 5, .outbound = &listed});
  EXPECT_EQ(ok.status, 200) << ok.detail;
  const OutboundPolicy any = policy({"*:*"});
  HttpResponse refused = http_call({.url = url, .body = "{}", .timeout_seconds = 5, .outbound = &any});
  EXPECT_EQ(refused.failure, HttpFailure::kRefused);
  EXPECT_TRUE(refused.outbound_refused);
  EXPECT_NE(refused.detail.find("loopback"), std::string::npos) << refused.detail;
  EXPECT_EQ(s.calls.load(), 1);  // the refused call never reached the server
}

TEST(Outbound, ANameThatRebindsBetweenTheCheckAndTheCallIsRefusedAtTheCall) {
  Server s;
  const auto hosts = std::filesystem::temp_directory_path() / ("outbound-hosts-" + std::to_string(::getpid()));
  ASSERT_EQ(setenv("TRAINER_TEST_HOSTS_FILE", hosts.c_str(), 1), 0);
  const OutboundPolicy any = policy({"*:*"});
  const std::string url = "http://rebind.test:" + std::to_string(s.port()) + "/score";
  std::ofstream(hosts) << "rebind.test 203.0.113.7\n";  // a public (documentation) address when checked
  EXPECT_TRUE(check_outbound_url(any, url, "f").is_ok());
  std::ofstream(hosts) << "rebind.test 127.0.0.1\n";  // loopback when called
  HttpResponse r = http_call({.url = url, .body = "{}", .timeout_seconds = 5, .outbound = &any});
  EXPECT_TRUE(r.outbound_refused) << r.detail;
  EXPECT_NE(r.detail.find("rebind.test"), std::string::npos) << r.detail;
  EXPECT_EQ(s.calls.load(), 0);
  unsetenv("TRAINER_TEST_HOSTS_FILE");
  std::filesystem::remove(hosts);
}

TEST(Outbound, AProxyIsAnHttpUrlWithAPortAndNoCredentials) {
  auto ok = parse_outbound_proxy("http://proxy.internal:3128/", "outbound.proxy");
  ASSERT_TRUE(ok.is_ok()) << ok.status().describe();
  EXPECT_EQ(*ok, "http://proxy.internal:3128");
  EXPECT_EQ(*parse_outbound_proxy("", "outbound.proxy"), "");
  for (const char* bad : {"https://proxy:3128", "socks5://proxy:1080", "http://proxy", "http://proxy:3128/path",
                          "http://user:secret@proxy:3128"}) {
    auto p = parse_outbound_proxy(bad, "outbound.proxy");
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_EQ(p.status().field(), "outbound.proxy") << bad;
    EXPECT_NE(p.status().message().find("http://HOST:PORT"), std::string::npos) << p.status().message();
    EXPECT_EQ(p.status().message().find("secret"), std::string::npos) << p.status().message();
  }
  EXPECT_FALSE(parse_outbound_proxy(3128, "outbound.proxy").is_ok());
}

TEST(Outbound, DeclaredEntriesAreAllowedAsUrlsToThemWouldBe) {
  const OutboundPolicy p = policy({"127.0.0.1:8080", "*:443"});
  EXPECT_TRUE(check_outbound_entry(p, "127.0.0.1:8080", "f").is_ok());
  EXPECT_TRUE(check_outbound_entry(p, "203.0.113.7:443", "f").is_ok());
  const Status loopback = check_outbound_entry(p, "127.0.0.1:9090", "t.network.allow[0]");
  EXPECT_EQ(loopback.field(), "t.network.allow[0]");
  EXPECT_NE(loopback.message().find("'127.0.0.1:9090'"), std::string::npos) << loopback.message();
  EXPECT_NE(loopback.message().find("a loopback address"), std::string::npos) << loopback.message();
  // A wildcard never reaches an internal address.
  EXPECT_FALSE(check_outbound_entry(p, "169.254.169.254:443", "f").is_ok());
  for (const char* bad : {"no-port", "h:0", "h:70000", ":80", "h:port", "a b:80"}) {
    const Status st = check_outbound_entry(p, bad, "f");
    EXPECT_FALSE(st.is_ok()) << bad;
    EXPECT_NE(st.message().find("is not HOST:PORT"), std::string::npos) << bad << ": " << st.message();
  }
}

// Stands for an HTTP proxy: answers every POST, keeping the request targets that reached it.
class ProxyStandIn : public LoopbackServer {
 public:
  ProxyStandIn()
      : LoopbackServer([this](httplib::Server& s) {
          s.Post(R"(.*)", [this](const httplib::Request& req, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu);
            targets.push_back(req.path);
            ++calls;
            res.set_content("{\"score\": 1}", "application/json");
          });
        }) {}
  std::mutex mu;
  std::vector<std::string> targets;  // guarded by mu
  std::atomic<int> calls{0};
};

TEST(Outbound, ThroughAProxyTheTargetIsCheckedBeforeAndTheProxyCarriesTheCall) {
  ProxyStandIn proxy;
  OutboundPolicy p = policy({"203.0.113.7:80"});
  p.proxy = "http://127.0.0.1:" + std::to_string(proxy.port());
  HttpResponse through = http_call({.url = "http://203.0.113.7/score", .body = "{}", .timeout_seconds = 5, .outbound = &p});
  EXPECT_EQ(through.status, 200) << through.detail;
  EXPECT_EQ(proxy.calls.load(), 1);  // the call went to the proxy, not to 203.0.113.7
  {
    std::lock_guard<std::mutex> lock(proxy.mu);
    EXPECT_EQ(proxy.targets, std::vector<std::string>{"http://203.0.113.7/score"});  // the absolute URL
  }
  HttpResponse refused = http_call({.url = "http://203.0.113.8/score", .body = "{}", .timeout_seconds = 5, .outbound = &p});
  EXPECT_TRUE(refused.outbound_refused) << refused.detail;
  EXPECT_NE(refused.detail.find("203.0.113.8"), std::string::npos) << refused.detail;
  EXPECT_EQ(proxy.calls.load(), 1);  // never sent to the proxy
  // Without the policy's proxy the same call connects directly: the environment's proxy is not read.
  ASSERT_EQ(setenv("http_proxy", p.proxy.c_str(), 1), 0);
  HttpResponse direct = http_call({.url = "http://127.0.0.1:1/", .timeout_seconds = 5});
  EXPECT_EQ(direct.failure, HttpFailure::kRefused) << direct.detail;
  EXPECT_EQ(proxy.calls.load(), 1);
  unsetenv("http_proxy");
}

}  // namespace
}  // namespace trainer
