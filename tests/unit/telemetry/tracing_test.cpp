#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "telemetry/tracing.h"

namespace trainer::telemetry {
namespace {

using nlohmann::json;

constexpr const char* kTraceId = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kSpanId = "00f067aa0ba902b7";

TEST(Traceparent, ParsesTheW3CExample) {
  auto context = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(context.is_ok()) << context.status().message();
  EXPECT_EQ(context->trace_id, kTraceId);
  EXPECT_EQ(context->span_id, kSpanId);
}

TEST(Traceparent, FormatsWhatItParses) {
  const SpanContext context{kTraceId, kSpanId};
  EXPECT_EQ(format_traceparent(context), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  auto back = parse_traceparent(format_traceparent(context));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, context);
}

void expect_refused(const std::string& text, const std::string& why) {
  auto context = parse_traceparent(text);
  ASSERT_FALSE(context.is_ok()) << text;
  EXPECT_EQ(context.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(context.status().message().find(why), std::string::npos) << context.status().message();
}

TEST(Traceparent, RefusesMalformedValues) {
  const std::string shape = "is not 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>";
  expect_refused("", shape);
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", shape);           // no flags
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", shape);       // too long
  expect_refused("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", shape);        // separators
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", shape);        // id lengths
  expect_refused("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "only version 00");
  expect_refused("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "only version 00");
  expect_refused("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "trace id must be 32 lowercase hex");
  expect_refused("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id must be 32 lowercase hex");
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "trace id must be 32 lowercase hex");
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent span id must be 16");
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01", "parent span id must be 16");
  expect_refused("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "flags must be 2 lowercase hex");
}

TEST(TraceIds, AreRandomHexNeverZero) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string trace = random_trace_id(), span = random_span_id();
    EXPECT_TRUE(valid_trace_hex(trace, 32)) << trace;
    EXPECT_TRUE(valid_trace_hex(span, 16)) << span;
    seen.insert(trace);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(TracesEndpoint, AppendsThePathToABaseUrl) {
  EXPECT_EQ(*traces_endpoint_url("http://collector:4318"), "http://collector:4318/v1/traces");
  EXPECT_EQ(*traces_endpoint_url("http://collector:4318/"), "http://collector:4318/v1/traces");
  EXPECT_EQ(*traces_endpoint_url("http://collector:4318/custom/traces"), "http://collector:4318/custom/traces");
  auto https = traces_endpoint_url("https://collector:4318");
  ASSERT_FALSE(https.is_ok());
  EXPECT_EQ(https.status().message(),
            "OTLP traces endpoint 'https://collector:4318' must start with http:// "
            "(e.g. http://collector:4318/v1/traces)");
  EXPECT_FALSE(traces_endpoint_url("http://").is_ok());
}

SpanData a_span() {
  SpanData s;
  s.trace_id = kTraceId;
  s.span_id = kSpanId;
  s.parent_span_id = "b7ad6b7169203331";
  s.name = "step";
  s.start_ns = 1700000000123456789ull;
  s.end_ns = 1700000001123456789ull;
  s.attributes = {{"trainer.step", int64_t{3}}, {"trainer.run.id", std::string("abc")}, {"ok", true},
                  {"seconds", 0.5}};
  s.status = SpanStatus::kError;
  s.status_message = "it broke";
  s.links = {{"0af7651916cd43dd8448eb211c80319c", "b9c7c989f97918e1"}};
  return s;
}

TEST(OtlpTracesJson, EncodesAnExportTraceServiceRequest) {
  Resource resource{AttributeSet({{"service.name", std::string("trainer-job")}})};
  const json request = json::parse(otlp_traces_json(resource, {a_span()}));
  const json& rs = request.at("resourceSpans").at(0);
  EXPECT_EQ(rs.at("resource").at("attributes").at(0),
            json({{"key", "service.name"}, {"value", {{"stringValue", "trainer-job"}}}}));
  const json& scope = rs.at("scopeSpans").at(0);
  EXPECT_EQ(scope.at("scope").at("name"), "trainer");
  const json& span = scope.at("spans").at(0);
  EXPECT_EQ(span.at("traceId"), kTraceId);
  EXPECT_EQ(span.at("spanId"), kSpanId);
  EXPECT_EQ(span.at("parentSpanId"), "b7ad6b7169203331");
  EXPECT_EQ(span.at("name"), "step");
  EXPECT_EQ(span.at("kind"), 1);
  EXPECT_EQ(span.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(span.at("endTimeUnixNano"), "1700000001123456789");
  EXPECT_EQ(span.at("attributes"),
            json::parse(R"([{"key":"trainer.step","value":{"intValue":"3"}},
                            {"key":"trainer.run.id","value":{"stringValue":"abc"}},
                            {"key":"ok","value":{"boolValue":true}},
                            {"key":"seconds","value":{"doubleValue":0.5}}])"));
  EXPECT_EQ(span.at("status"), json({{"code", 2}, {"message", "it broke"}}));
  EXPECT_EQ(span.at("links"),
            json::parse(R"([{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b9c7c989f97918e1"}])"));
}

TEST(OtlpTracesJson, ARootSpanHasNoParentAndAnUnsetStatus) {
  SpanData s = a_span();
  s.parent_span_id.clear();
  s.status = SpanStatus::kUnset;
  s.status_message.clear();
  s.links.clear();
  const json span = json::parse(otlp_traces_json(Resource{}, {s}))["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_FALSE(span.contains("parentSpanId"));
  EXPECT_FALSE(span.contains("links"));
  EXPECT_EQ(span.at("status"), json({{"code", 0}}));
}

TEST(SpanExporter, PostsSpansInTheBackground) {
  httplib::Server server;
  std::atomic<int> spans{0};
  server.Post("/v1/traces", [&](const httplib::Request& request, httplib::Response& response) {
    const json body = json::parse(request.body);
    spans.fetch_add(static_cast<int>(body["resourceSpans"][0]["scopeSpans"][0]["spans"].size()));
    response.status = 200;
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  {
    SpanExporter exporter(Resource{}, {.endpoint = "http://127.0.0.1:" + std::to_string(port) + "/v1/traces",
                                       .interval = std::chrono::hours(1)});
    for (int i = 0; i < 3; ++i) exporter.add(a_span());
    EXPECT_TRUE(exporter.flush(std::chrono::seconds(10)));
    EXPECT_EQ(exporter.spans_exported(), 3u);
    EXPECT_EQ(exporter.spans_dropped(), 0u);
  }
  server.stop();
  serving.join();
  EXPECT_EQ(spans.load(), 3);
}

TEST(SpanExporter, CountsWhatAnUnreachableCollectorLoses) {
  // Port 1 on loopback: nothing listens, connecting is refused at once.
  SpanExporter exporter(Resource{}, {.endpoint = "http://127.0.0.1:1/v1/traces",
                                     .interval = std::chrono::hours(1),
                                     .timeout = std::chrono::milliseconds(500),
                                     .max_queue = 2});
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) exporter.add(a_span());  // the third does not fit the queue
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));  // add() never waits
  EXPECT_TRUE(exporter.flush(std::chrono::seconds(10)));
  EXPECT_EQ(exporter.spans_exported(), 0u);
  EXPECT_EQ(exporter.spans_dropped(), 3u);
}

}  // namespace
}  // namespace trainer::telemetry
