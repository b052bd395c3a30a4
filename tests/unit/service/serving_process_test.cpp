// Reaching an endpoint's serving process (src/service/serving_process.h): the host trainerd calls
// it at, from its listening line and the backend's word for its node; the secret on every call;
// and a job record from before hosts and secrets read as 127.0.0.1 without a secret.
#include "service/serving_process.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace trainer::service {
namespace {

using json = nlohmann::json;

std::string log_with(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(ServingProcess, TheListeningLineIsReadPastOtherOutput) {
  const std::string log = log_with("serve-a.log",
                                   "loading the model\n{\"event\":\"other\",\"port\":1}\n"
                                   "{\"event\":\"listening\",\"host\":\"0.0.0.0\",\"port\":8123,\"hostname\":\"node7\"}\n");
  const auto line = read_listening_line(log);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->host, "0.0.0.0");
  EXPECT_EQ(line->port, 8123);
  EXPECT_EQ(line->hostname, "node7");
  EXPECT_FALSE(read_listening_line(log_with("serve-b.log", "still loading\n")).has_value());
  EXPECT_FALSE(read_listening_line("/no/such/serve.log").has_value());
}

// A process on a node that shares no folder with trainerd: its listening line arrives as one of the
// log lines it posts, read one by one.
TEST(ServingProcess, APostedLogLineIsAListeningLineOnlyWhenItSaysSo) {
  const auto line = parse_listening_line("{\"event\":\"listening\",\"host\":\"0.0.0.0\",\"port\":8123,\"models\":[\"m\"]}");
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->host, "0.0.0.0");
  EXPECT_EQ(line->port, 8123);
  EXPECT_EQ(line->hostname, "");
  for (const char* other : {"", "trainer-job run: --model s3://b/inputs/models/ab: fetched 12 bytes",
                            "{\"event\":\"listening\",\"port\":\"8123\"}", "{\"event\":\"hello\",\"port\":1}",
                            "{\"event\":\"listening\"", "[1,2]"}) {
    EXPECT_FALSE(parse_listening_line(other).has_value()) << other;
  }
}

TEST(ServingProcess, OnEveryInterfaceItIsReachedAtTheNodeTheBackendNames) {
  const ListeningLine wildcard{"0.0.0.0", 8123, "node7"};
  EXPECT_EQ(reachable_host(wildcard, "10.0.3.7"), "10.0.3.7");
  EXPECT_EQ(reachable_host(wildcard, ""), "node7");  // the backend does not say: the machine's name
  EXPECT_EQ(reachable_host(ListeningLine{"0.0.0.0", 8123, ""}, ""), "127.0.0.1");
  // One address it listens on is the one to call, whatever the backend says.
  EXPECT_EQ(reachable_host(ListeningLine{"127.0.0.1", 8123, ""}, "10.0.3.7"), "127.0.0.1");
  // A line without a host (an older process) listened on loopback.
  EXPECT_EQ(reachable_host(ListeningLine{"", 8123, ""}, "10.0.3.7"), "127.0.0.1");
}

TEST(ServingProcess, EveryCallCarriesTheSecretToTheRecordedHost) {
  const json job = {{"host", "127.0.0.2"}, {"port", 8123}, {"secret", "s3cret"}};
  const HttpRequest call = serving_call(job, "DELETE", "/v1/adapters/a1", 5);
  EXPECT_EQ(call.url, "http://127.0.0.2:8123/v1/adapters/a1");
  EXPECT_EQ(call.method, "DELETE");
  EXPECT_EQ(call.timeout_seconds, 5);
  ASSERT_EQ(call.headers.size(), 1u);
  EXPECT_EQ(call.headers[0], (std::pair<std::string, std::string>{"Authorization", "Bearer s3cret"}));
  EXPECT_EQ(call.outbound, nullptr);  // trainerd's call to its own job: no outbound.allow check
  EXPECT_EQ(serving_origin(json{{"host", "fd00::7"}, {"port", 9}}), "http://[fd00::7]:9");
}

TEST(ServingProcess, ARecordFromBeforeHostsAndSecretsIsLoopbackWithoutASecret) {
  const json old = {{"handle", "{\"pid\":1}"}, {"port", 8123}};
  const HttpRequest call = serving_call(old, "GET", "/health", 1);
  EXPECT_EQ(call.url, "http://127.0.0.1:8123/health");
  EXPECT_TRUE(call.headers.empty());
}

}  // namespace
}  // namespace trainer::service
