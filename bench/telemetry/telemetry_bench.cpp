// Hot-path cost of the metrics SDK: ns per record, on 1 and 2 threads, beside the floor a
// bare relaxed std::atomic fetch_add sets on the same machine (the ratio column).
//
//   build/bench/telemetry/telemetry-bench [records per thread, default 5000000]
//
// "bound" records through a handle from bind() (what per-token code uses); "attributes"
// looks the series up from a typed attribute struct on every call (what per-step code uses).
// With 2 threads, "shared" records into one series from both, "own" into one series each.
// Each figure is the fastest of 3 runs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/instruments.h"

namespace tel = trainer::telemetry;

namespace {

// Each case runs this many times and reports its fastest run: the machine may be shared.
constexpr int kRepeats = 3;

// Runs body(thread, i) for i in [0, n) on `threads` threads; returns ns per call per thread.
double measure(int threads, long n, const std::function<void(int, long)>& body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  std::vector<double> ns(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) body(t, i);
      const auto end = std::chrono::steady_clock::now();
      ns[t] = std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(n);
    });
  }
  while (ready.load() < threads) {
  }
  go.store(true);
  for (auto& thread : pool) thread.join();
  double total = 0;
  for (double v : ns) total += v;
  return total / threads;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 5'000'000;
  tel::MeterProvider provider(tel::Resource{});
  tel::JobMetrics job(provider);

  std::atomic<uint64_t> floor_counter{0};
  std::atomic<uint64_t> floor_own[2][8];  // separate cache lines
  for (auto& line : floor_own) line[0] = 0;

  auto counter = job.sft_step_count.bind();
  auto tokens_in = job.rl_grader_tokens.bind({.rl_term = "t", .rl_grader_token_type = tel::RlGraderTokenType::kInput});
  auto tokens_out = job.rl_grader_tokens.bind({.rl_term = "t", .rl_grader_token_type = tel::RlGraderTokenType::kOutput});
  tel::CounterHandle own_counters[2] = {tokens_in, tokens_out};
  auto histogram = job.sft_step_duration.bind();
  auto exponential = job.rl_completion_length.bind();
  auto gauge = job.sft_loss.bind();
  auto& raw_exponential = provider.instrument({.name = "bench.exp", .description = "Bench.", .unit = "1",
                                               .kind = tel::InstrumentKind::kExponentialHistogram});
  tel::HistogramHandle own_exponential[2] = {
      tel::HistogramHandle(raw_exponential.series(tel::AttributeSet({{"t", int64_t{0}}}))),
      tel::HistogramHandle(raw_exponential.series(tel::AttributeSet({{"t", int64_t{1}}})))};

  struct Case {
    const char* name;
    int threads;
    std::function<void(int, long)> body;
  };
  const std::vector<Case> cases = {
      {"floor: std::atomic fetch_add", 1, [&](int, long) { floor_counter.fetch_add(1, std::memory_order_relaxed); }},
      {"counter add (bound)", 1, [&](int, long) { counter.add(1); }},
      {"gauge set (bound)", 1, [&](int, long i) { gauge.set(static_cast<double>(i)); }},
      {"histogram record (bound, 18 buckets)", 1, [&](int, long i) { histogram.record((i % 4096) * 0.01); }},
      {"exp histogram record (bound)", 1, [&](int, long i) { exponential.record(static_cast<double>(i % 4096 + 1)); }},
      {"counter add (attributes)", 1,
       [&](int, long) {
         job.rl_grader_tokens.add(1, {.rl_term = "model:judge-4b", .rl_grader_token_type = tel::RlGraderTokenType::kInput});
       }},
      {"floor: std::atomic fetch_add, shared", 2,
       [&](int, long) { floor_counter.fetch_add(1, std::memory_order_relaxed); }},
      {"floor: std::atomic fetch_add, own", 2,
       [&](int t, long) { floor_own[t][0].fetch_add(1, std::memory_order_relaxed); }},
      {"counter add (bound, shared)", 2, [&](int, long) { counter.add(1); }},
      {"counter add (bound, own)", 2, [&](int t, long) { own_counters[t].add(1); }},
      {"histogram record (bound, shared)", 2, [&](int, long i) { histogram.record((i % 4096) * 0.01); }},
      {"exp histogram record (bound, shared)", 2,
       [&](int, long i) { exponential.record(static_cast<double>(i % 4096 + 1)); }},
      {"exp histogram record (bound, own)", 2,
       [&](int t, long i) { own_exponential[t].record(static_cast<double>(i % 4096 + 1)); }},
      {"counter add (attributes, shared)", 2,
       [&](int, long) {
         job.rl_grader_tokens.add(1, {.rl_term = "model:judge-4b", .rl_grader_token_type = tel::RlGraderTokenType::kInput});
       }},
  };

  std::printf("%-42s %8s %12s %8s\n", "case", "threads", "ns/record", "x floor");
  double floor1 = 0;
  double floor2 = 0;
  for (const auto& c : cases) {
    const long count = std::string(c.name).find("attributes") != std::string::npos ? n / 10 : n;
    double ns = measure(c.threads, count, c.body);
    for (int repeat = 1; repeat < kRepeats; ++repeat) ns = std::min(ns, measure(c.threads, count, c.body));
    if (std::string(c.name) == "floor: std::atomic fetch_add") floor1 = ns;
    if (std::string(c.name) == "floor: std::atomic fetch_add, shared") floor2 = ns;
    const double floor = c.threads == 1 ? floor1 : floor2;
    std::printf("%-42s %8d %12.1f %8.1f\n", c.name, c.threads, ns, ns / floor);
  }
  // Keep the results observable.
  return provider.collect().metrics.empty() ? 1 : 0;
}
