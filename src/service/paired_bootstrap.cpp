// The paired bootstrap (paired_bootstrap.h): a fixed, documented procedure, recomputable outside.
#include "service/paired_bootstrap.h"

#include <algorithm>
#include <cmath>

namespace trainer::service {
namespace {

// splitmix64 (Steele, Lea and Flood): small, fast and easy to reproduce in any language.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

}  // namespace

const char* bootstrap_verdict(const BootstrapInterval& interval) {
  if (interval.low > 0) return "better";
  if (interval.high < 0) return "worse";
  return "no clear difference";
}

std::optional<BootstrapInterval> paired_bootstrap(const std::vector<double>& differences, const BootstrapOptions& options) {
  if (differences.empty() || options.resamples < 1) return std::nullopt;
  const uint64_t n = differences.size();
  double sum = 0;
  for (double d : differences) sum += d;
  BootstrapInterval out{.mean_difference = sum / static_cast<double>(n), .rows = static_cast<int64_t>(n)};
  SplitMix64 rng{options.seed};
  std::vector<double> means(static_cast<size_t>(options.resamples));
  for (auto& mean : means) {
    double s = 0;
    for (uint64_t j = 0; j < n; ++j) s += differences[rng.next() % n];
    mean = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const auto k = static_cast<size_t>(std::floor(static_cast<double>(options.resamples) * (1 - options.confidence) / 2));
  out.low = means[std::min(k, means.size() - 1)];
  out.high = means[means.size() - 1 - std::min(k, means.size() - 1)];
  return out;
}

std::vector<double> paired_differences(const std::map<int64_t, double>& target, const std::map<int64_t, double>& reference) {
  std::vector<double> out;
  for (const auto& [line, score] : target) {
    auto it = reference.find(line);
    if (it != reference.end()) out.push_back(score - it->second);
  }
  return out;
}

nlohmann::json bootstrap_json(const BootstrapInterval& interval) {
  return {{"meanDifference", interval.mean_difference},
          {"low", interval.low},
          {"high", interval.high},
          {"rows", interval.rows},
          {"verdict", bootstrap_verdict(interval)}};
}

nlohmann::json bootstrap_method_json(const BootstrapOptions& options) {
  return {{"method", "paired bootstrap"},
          {"resamples", options.resamples},
          {"confidence", options.confidence},
          {"seed", options.seed},
          {"pairing", "rows both evaluations scored, by dataset line"}};
}

}  // namespace trainer::service
