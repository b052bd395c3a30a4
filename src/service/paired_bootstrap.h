// The paired bootstrap a comparison and a workload's score table use to say whether one model's
// mean score beats another's by more than chance (docs/comparisons.md, "Is the difference real?").
//
// Rows are paired by their dataset line: only lines both evaluations scored count. The
// differences (target minus reference) are resampled with replacement `resamples` times; each
// resample draws n row indices as `splitmix64() % n` from a generator seeded with `seed`, in
// order, and takes the mean of the drawn differences. The interval is the percentile interval of
// those means: sorted, the k-th smallest and the k-th largest, k = floor(resamples * (1 -
// confidence) / 2). The procedure is fixed so that anyone can recompute it (the CLI test does,
// with numpy). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::service {

struct BootstrapOptions {
  int64_t resamples = 2000;  // resamples drawn; >= 1
  double confidence = 0.95;  // the interval's coverage, in (0, 1)
  uint64_t seed = 20261204;  // the generator's seed: the same rows give the same interval
};

// The interval of the mean paired difference (target - reference).
struct BootstrapInterval {
  double mean_difference = 0;  // the mean over the paired rows
  double low = 0;              // the interval's lower end
  double high = 0;             // the interval's upper end
  int64_t rows = 0;            // the paired rows
};

// The verdict an interval gives: "better" (low > 0), "worse" (high < 0), else "no clear difference".
const char* bootstrap_verdict(const BootstrapInterval& interval);

// The interval of the mean of `differences`; nullopt when there are none.
std::optional<BootstrapInterval> paired_bootstrap(const std::vector<double>& differences,
                                                  const BootstrapOptions& options = {});

// target minus reference on the lines both scored (scores by dataset line), in line order.
std::vector<double> paired_differences(const std::map<int64_t, double>& target, const std::map<int64_t, double>& reference);

// {meanDifference, low, high, rows, verdict}: an interval as the API shows it.
nlohmann::json bootstrap_json(const BootstrapInterval& interval);
// {method, resamples, confidence, seed, pairing}: how the intervals were made.
nlohmann::json bootstrap_method_json(const BootstrapOptions& options = {});

}  // namespace trainer::service
