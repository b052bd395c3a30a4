#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <thread>

#include "telemetry/telemetry.h"

namespace trainer::telemetry {
namespace {

TEST(PrometheusName, TranslatesLikeOpenTelemetry) {
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.rl.step.count", .unit = "{step}",
                             .kind = InstrumentKind::kCounter}),
            "akka_optimize_training_rl_step_count_total");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.cost.gpu.time", .unit = "s",
                             .kind = InstrumentKind::kCounter}),
            "akka_optimize_training_cost_gpu_time_seconds_total");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.sft.padding.ratio", .unit = "1",
                             .kind = InstrumentKind::kGauge}),
            "akka_optimize_training_sft_padding_ratio");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.sft.mfu", .unit = "1", .kind = InstrumentKind::kGauge}),
            "akka_optimize_training_sft_mfu_ratio");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.sft.throughput", .unit = "{token}/s",
                             .kind = InstrumentKind::kGauge}),
            "akka_optimize_training_sft_throughput_per_second");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.checkpoint.transfer.size", .unit = "By",
                             .kind = InstrumentKind::kExponentialHistogram}),
            "akka_optimize_training_checkpoint_transfer_size_bytes");
  EXPECT_EQ(prometheus_name({.name = "akka.optimize.training.gpu.clock.frequency", .unit = "Hz",
                             .kind = InstrumentKind::kGauge}),
            "akka_optimize_training_gpu_clock_frequency_hertz");
}

TEST(PrometheusText, ExposesCountersGaugesHistogramsAndTargetInfo) {
  MeterProvider provider(Resource{AttributeSet({{"service.name", std::string("trainerd")}})});
  provider.instrument({.name = "t.steps", .description = "Steps.", .unit = "{step}", .kind = InstrumentKind::kCounter})
      .add(3, AttributeSet{});
  provider.instrument({.name = "t.level", .description = "Level \\ with \"quote\".", .unit = "1"})
      .set(0.5, AttributeSet({{"a.b", std::string("x\"y")}, {"flag", true}}));
  provider.instrument({.name = "t.latency", .description = "Latency.", .unit = "s", .kind = InstrumentKind::kHistogram,
                       .buckets = {1, 2}})
      .record(1.5, AttributeSet{});
  const std::string text = prometheus_exposition(provider).body;
  EXPECT_NE(text.find("target_info{service_name=\"trainerd\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE t_steps_total counter\nt_steps_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP t_level_ratio Level \\\\ with \"quote\".\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_level_ratio{a_b=\"x\\\"y\",flag=\"true\"} 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_latency_seconds_bucket{le=\"1\"} 0\n"
                      "t_latency_seconds_bucket{le=\"2\"} 1\n"
                      "t_latency_seconds_bucket{le=\"+Inf\"} 1\n"
                      "t_latency_seconds_sum 1.5\n"
                      "t_latency_seconds_count 1\n"),
            std::string::npos)
      << text;
}

TEST(PrometheusText, ExposesAnExponentialHistogramAsCumulativeClassicBuckets) {
  MeterProvider provider(Resource{});
  auto& histogram = provider.instrument(
      {.name = "t.size", .description = "Size.", .unit = "By", .kind = InstrumentKind::kExponentialHistogram,
       .max_scale = 0});
  for (double v : {-3.0, 0.0, 1.0, 3.0, 3.5}) histogram.record(v, AttributeSet{});
  const std::string text = prometheus_exposition(provider).body;
  EXPECT_NE(text.find("t_size_bytes_bucket{le=\"-2\"} 1\n"
                      "t_size_bytes_bucket{le=\"0\"} 2\n"
                      "t_size_bytes_bucket{le=\"1\"} 3\n"
                      "t_size_bytes_bucket{le=\"2\"} 3\n"
                      "t_size_bytes_bucket{le=\"4\"} 5\n"
                      "t_size_bytes_bucket{le=\"+Inf\"} 5\n"),
            std::string::npos)
      << text;
}

TEST(OtlpJson, EncodesInt64AsStringsAndHistogramsCumulatively) {
  MeterProvider provider(Resource{AttributeSet({{"service.name", std::string("trainer-job")},
                                                {"akka.optimize.training.run.attempt", int64_t{2}}})},
                         {.scope_version = "1.2.3", .clock = [] { return uint64_t{42}; }});
  provider.instrument({.name = "t.steps", .description = "Steps.", .unit = "{step}", .kind = InstrumentKind::kCounter,
                       .value_type = ValueType::kInt})
      .add(7, AttributeSet{});
  provider.instrument({.name = "t.size", .description = "Size.", .unit = "By",
                       .kind = InstrumentKind::kExponentialHistogram, .max_scale = 0})
      .record(3, AttributeSet{});
  const auto request = nlohmann::json::parse(otlp_json(provider.collect()));
  const auto& resource_metrics = request.at("resourceMetrics").at(0);
  EXPECT_EQ(resource_metrics.at("resource").at("attributes").at(0).at("value").at("intValue"), "2");
  const auto& scope = resource_metrics.at("scopeMetrics").at(0);
  EXPECT_EQ(scope.at("scope").at("version"), "1.2.3");
  const auto& sum = scope.at("metrics").at(0).at("sum");
  EXPECT_EQ(sum.at("aggregationTemporality"), 2);
  EXPECT_EQ(sum.at("isMonotonic"), true);
  EXPECT_EQ(sum.at("dataPoints").at(0).at("asInt"), "7");
  EXPECT_EQ(sum.at("dataPoints").at(0).at("timeUnixNano"), "42");
  const auto& exponential = scope.at("metrics").at(1).at("exponentialHistogram").at("dataPoints").at(0);
  EXPECT_EQ(exponential.at("scale"), 0);
  EXPECT_EQ(exponential.at("positive").at("offset"), 1);
  EXPECT_EQ(exponential.at("positive").at("bucketCounts"), nlohmann::json::array({"1"}));
  EXPECT_EQ(exponential.at("count"), "1");
}

TEST(OtlpPush, RefusesAnEndpointThatIsNotHttp) {
  MeterProvider provider(Resource{});
  const Status status = otlp_push(provider.collect(), {.endpoint = "collector:4318"});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "OTLP endpoint 'collector:4318' must start with http:// or https:// (e.g. "
            "http://collector:4318/v1/metrics)");
}

TEST(OtlpPush, ReportsAnUnreachableCollectorAsUnavailable) {
  // A loopback port held by a socket that does not listen: connecting is refused.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/v1/metrics";
  MeterProvider provider(Resource{});
  const Status status = otlp_push(provider.collect(), {.endpoint = endpoint, .timeout = std::chrono::milliseconds(500)});
  ::close(fd);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message().rfind("OTLP push to " + endpoint + " failed: ", 0), 0u) << status.message();
}

// A loopback port bound by a socket that does not listen (connecting is refused) until the
// returned fd is closed and a server takes the port.
int reserve_port(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

// The receiver restarting as the pusher stops (a job ending while trainerd restarts): with a final
// push deadline, the last push is retried until the receiver answers; without, one try.
void stop_while_the_receiver_starts_late(std::chrono::milliseconds final_deadline, int* pushes_received) {
  int port = 0;
  const int held = reserve_port(&port);
  ASSERT_GT(port, 0);
  MeterProvider provider(Resource{});
  provider.instrument({.name = "job.steps", .description = "Steps.", .unit = "{step}",
                       .kind = InstrumentKind::kCounter, .value_type = ValueType::kInt})
      .add(12, AttributeSet{});
  OtlpPusher pusher(provider, {.endpoint = "http://127.0.0.1:" + std::to_string(port) + "/v1/metrics",
                               .interval = std::chrono::hours(1),
                               .timeout = std::chrono::milliseconds(500),
                               .final_push_deadline = final_deadline});
  std::atomic<int> received{0};
  httplib::Server server;
  server.Post("/v1/metrics", [&](const httplib::Request& request, httplib::Response& response) {
    if (request.body.find("job.steps") != std::string::npos) received.fetch_add(1);
    response.status = 200;
  });
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the receiver's restart
    ::close(held);
    server.listen("127.0.0.1", port);
  });
  pusher.stop();
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server.stop();
  late.join();
  *pushes_received = received.load();
}

TEST(OtlpPusher, RetriesItsLastPushUntilTheFinalDeadline) {
  int received = 0;
  stop_while_the_receiver_starts_late(std::chrono::seconds(20), &received);
  EXPECT_EQ(received, 1);
}

TEST(OtlpPusher, TriesItsLastPushOnceWithoutAFinalDeadline) {
  int received = 0;
  stop_while_the_receiver_starts_late(std::chrono::milliseconds(0), &received);
  EXPECT_EQ(received, 0);
}

}  // namespace
}  // namespace trainer::telemetry

namespace trainer::telemetry {
namespace {

TEST(PrometheusText, ExposesFineExponentialHistogramsAtScaleThree) {
  MeterProvider provider(Resource{});
  auto& histogram = provider.instrument(
      {.name = "t.len", .description = "Length.", .unit = "{token}", .kind = InstrumentKind::kExponentialHistogram});
  histogram.record(100, AttributeSet{});  // one value: the series stays at scale 20
  const std::string text = prometheus_exposition(provider).body;
  // At scale 3, 100 lies in (2^(53/8), 2^(54/8)] = (98.70, 107.63].
  const std::string le = "t_len_bucket{le=\"";
  const auto at = text.find(le);
  ASSERT_NE(at, std::string::npos) << text;
  const double upper = std::stod(text.substr(at + le.size()));
  EXPECT_NEAR(upper, std::exp2(54.0 / 8), 1e-9) << text;
  EXPECT_NE(text.find("t_len_bucket{le=\"+Inf\"} 1\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace trainer::telemetry

namespace trainer::telemetry {
namespace {

std::function<const char*(const char*)> environment(std::map<std::string, std::string> values) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(OtlpOptionsFromEnvironment, IsOffWithoutAnEndpoint) {
  auto options = otlp_options_from_environment(environment({}));
  ASSERT_TRUE(options.is_ok());
  EXPECT_FALSE(options.value().has_value());
}

TEST(OtlpOptionsFromEnvironment, ReadsTheStandardVariables) {
  auto options = otlp_options_from_environment(environment({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"},
                                                            {"OTEL_METRIC_EXPORT_INTERVAL", "15000"},
                                                            {"OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=x=y"}}));
  ASSERT_TRUE(options.is_ok()) << options.status().to_string();
  ASSERT_TRUE(options.value().has_value());
  const OtlpOptions& o = *options.value();
  EXPECT_EQ(o.endpoint, "http://collector:4318/v1/metrics");
  EXPECT_EQ(o.interval, std::chrono::milliseconds(15000));
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(o.headers, (std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "x=y"}}));
  auto metrics_only = otlp_options_from_environment(
      environment({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"}, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:2/m"}}));
  EXPECT_EQ((*metrics_only.value()).endpoint, "http://b:2/m");
}

TEST(OtlpOptionsFromEnvironment, NamesAMalformedVariable) {
  auto options = otlp_options_from_environment(
      environment({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_METRIC_EXPORT_INTERVAL", "soon"}}));
  ASSERT_FALSE(options.is_ok());
  EXPECT_EQ(options.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(options.status().message(), "OTEL_METRIC_EXPORT_INTERVAL='soon' is not a positive number of milliseconds");
}

}  // namespace
}  // namespace trainer::telemetry

namespace trainer::telemetry {
namespace {

TEST(PrometheusExposition, ServesProtobufOnlyToAScraperThatAsksForIt) {
  MeterProvider provider(Resource{});
  provider.instrument({.name = "t.len", .description = "Length.", .unit = "{token}",
                       .kind = InstrumentKind::kExponentialHistogram})
      .record(100, AttributeSet{});
  EXPECT_EQ(prometheus_exposition(provider).content_type, kPrometheusTextContentType);
  EXPECT_EQ(prometheus_exposition(provider, "text/plain;version=0.0.4;q=0.5,*/*;q=0.1").content_type,
            kPrometheusTextContentType);
  // What Prometheus 2.42 sends with native histograms enabled.
  const auto exposition = prometheus_exposition(
      provider,
      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,"
      "text/plain;version=0.0.4;q=0.3,*/*;q=0.2");
  EXPECT_EQ(exposition.content_type, kPrometheusProtobufContentType);
  // One length-delimited MetricFamily: length, then field 1 (name).
  const std::string& body = exposition.body;
  ASSERT_GE(body.size(), 3u);
  EXPECT_EQ(static_cast<size_t>(static_cast<unsigned char>(body[0])), body.size() - 1);
  EXPECT_EQ(body[1], 0x0a);
  EXPECT_EQ(body.substr(3, 5), "t_len");
}

}  // namespace
}  // namespace trainer::telemetry

namespace trainer::telemetry {
namespace {

TEST(OtlpJson, WritesNonFiniteValuesAsProtobufJsonStrings) {
  MeterProvider provider(Resource{});
  provider.instrument({.name = "t.loss", .description = "Loss.", .unit = "1"}).set(std::nan(""), AttributeSet{});
  const auto request = nlohmann::json::parse(otlp_json(provider.collect()));
  const auto& point = request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0];
  EXPECT_EQ(point.at("asDouble"), "NaN");
}

}  // namespace
}  // namespace trainer::telemetry
