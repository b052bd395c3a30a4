// Step profiling with libtorch's (Kineto) profiler (declared in train/step_profile.h).
#include "engine/train/step_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace trainer::engine::train {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

std::string shapes_text(const c10::ArrayRef<std::vector<int64_t>>& shapes) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out << ", ";
    out << '[';
    for (size_t j = 0; j < shapes[i].size(); ++j) out << (j ? ", " : "") << shapes[i][j];
    out << ']';
  }
  out << ']';
  return out.str();
}

}  // namespace

StepProfile StepProfile::from_environment() {
  StepProfile p;
  const char* step = std::getenv("TRAINER_PROFILE_STEP");
  if (step == nullptr || *step == '\0') return p;
  char* end = nullptr;
  const long long n = std::strtoll(step, &end, 10);
  if (end == step || *end != '\0' || n < 1) return p;
  p.step_ = n - 1;
  const char* out = std::getenv("TRAINER_PROFILE_OUT");
  p.out_ = out != nullptr && *out != '\0' ? out : "profile-step-" + std::to_string(n) + ".json";
  return p;
}

void StepProfile::begin(int64_t step) {
  if (step != step_) return;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  active_ = true;
}

void StepProfile::end(int64_t step, double step_seconds) {
  if (!active_ || step != step_) return;
  active_ = false;
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::vector<ProfiledEvent> events;
  for (const prof::KinetoEvent& e : result->events()) {
    if (e.endNs() <= e.startNs()) continue;
    events.push_back(ProfiledEvent{.name = e.name(),
                                   .shapes = e.hasShapes() ? shapes_text(e.shapes()) : "",
                                   .thread = e.startThreadId(),
                                   .start_ns = e.startNs(),
                                   .end_ns = e.endNs()});
  }
  nlohmann::json doc = summarize_profile(std::move(events), 60);
  doc["step"] = step + 1;
  doc["stepSeconds"] = step_seconds;
  std::ofstream(out_) << doc.dump(1) << '\n';
}

nlohmann::json summarize_profile(std::vector<ProfiledEvent> events, size_t top) {
  // Per thread, by start (the longer first at a tie, so a parent precedes the child it starts with).
  std::sort(events.begin(), events.end(), [](const ProfiledEvent& a, const ProfiledEvent& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<double> child_ns(events.size(), 0.0);
  std::vector<size_t> open;  // the enclosing events of the current one, innermost last
  for (size_t i = 0; i < events.size(); ++i) {
    while (!open.empty() && (events[open.back()].thread != events[i].thread ||
                             events[open.back()].end_ns <= events[i].start_ns)) {
      open.pop_back();
    }
    if (!open.empty()) child_ns[open.back()] += static_cast<double>(events[i].end_ns - events[i].start_ns);
    open.push_back(i);
  }
  struct Row {
    int64_t calls = 0;
    double self_ns = 0, total_ns = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;
  double all_self_ns = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const double total = static_cast<double>(events[i].end_ns - events[i].start_ns);
    const double self = std::max(0.0, total - child_ns[i]);
    Row& r = rows[{events[i].name, events[i].shapes}];
    r.calls += 1;
    r.self_ns += self;
    r.total_ns += total;
    all_self_ns += self;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.self_ns > b.second.self_ns; });
  nlohmann::json ops = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    const auto& [key, r] = sorted[i];
    ops.push_back({{"name", key.first},
                   {"shapes", key.second},
                   {"calls", r.calls},
                   {"selfSeconds", r.self_ns / 1e9},
                   {"totalSeconds", r.total_ns / 1e9}});
  }
  return {{"operators", std::move(ops)}, {"recordedSelfSeconds", all_self_ns / 1e9}};
}

}  // namespace trainer::engine::train
