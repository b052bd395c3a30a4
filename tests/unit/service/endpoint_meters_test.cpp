// Endpoint meters: the forwarded requests' families in Prometheus' text format.
#include <gtest/gtest.h>

#include "service/endpoint_meters.h"

namespace trainer::service {
namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(EndpointMeters, CountsRequestsByOutcomeAndTokensByModel) {
  EndpointMeters m;
  m.request("e1", "base", "ok", 10, 4);
  m.request("e1", "base", "ok", 5, 2);
  m.request("e1", "run1", "refused");
  const std::string text = m.render({"e1"}, {{"e1", 3, 64, 5}});
  EXPECT_TRUE(has(text, "trainer_endpoint_requests_total{endpoint=\"e1\",model=\"base\",outcome=\"ok\"} 2")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_requests_total{endpoint=\"e1\",model=\"run1\",outcome=\"refused\"} 1")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_prompt_tokens_total{endpoint=\"e1\",model=\"base\"} 15")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_completion_tokens_total{endpoint=\"e1\",model=\"base\"} 6")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_kv_blocks{endpoint=\"e1\",state=\"used\"} 3")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_kv_blocks{endpoint=\"e1\",state=\"total\"} 64")) << text;
  EXPECT_TRUE(has(text, "trainer_endpoint_kv_blocks{endpoint=\"e1\",state=\"cached\"} 5")) << text;
  EXPECT_TRUE(has(text, "# TYPE trainer_endpoint_requests_total counter")) << text;
}

TEST(EndpointMeters, LatencyHistogramsAreCumulative) {
  EndpointMeters m;
  m.first_token("e1", "base", 0.004);
  m.first_token("e1", "base", 0.3);
  m.first_token("e1", "base", 60);
  const std::string text = m.render({"e1"}, {});
  const std::string name = "trainer_endpoint_time_to_first_token_seconds";
  EXPECT_TRUE(has(text, name + "_bucket{endpoint=\"e1\",model=\"base\",le=\"0.005\"} 1")) << text;
  EXPECT_TRUE(has(text, name + "_bucket{endpoint=\"e1\",model=\"base\",le=\"0.25\"} 1")) << text;
  EXPECT_TRUE(has(text, name + "_bucket{endpoint=\"e1\",model=\"base\",le=\"0.5\"} 2")) << text;
  EXPECT_TRUE(has(text, name + "_bucket{endpoint=\"e1\",model=\"base\",le=\"+Inf\"} 3")) << text;
  EXPECT_TRUE(has(text, name + "_count{endpoint=\"e1\",model=\"base\"} 3")) << text;
  EXPECT_TRUE(has(text, name + "_sum{endpoint=\"e1\",model=\"base\"} 60.304")) << text;
}

TEST(EndpointMeters, SeriesOfEndpointsThatEndedAreDropped) {
  EndpointMeters m;
  m.request("gone", "base", "ok", 1, 1);
  m.inter_token("gone", "base", 0.01);
  m.request("e2", "a\"b", "error");
  const std::string text = m.render({"e2"}, {});
  EXPECT_FALSE(has(text, "endpoint=\"gone\"")) << text;
  EXPECT_TRUE(has(text, "model=\"a\\\"b\",outcome=\"error\"} 1")) << text;
  EXPECT_EQ(m.render({}, {}), "");  // no endpoint open: no family at all
}

}  // namespace
}  // namespace trainer::service
