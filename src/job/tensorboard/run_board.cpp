#include "job/tensorboard/run_board.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace trainer::job::tensorboard {
namespace {

using json = nlohmann::json;
using Scalars = std::vector<std::pair<std::string, double>>;

// Longest completion text shown per rollout (the rollouts file keeps the whole).
constexpr size_t kShownCompletionBytes = 1500;

// The plan's fields as hyperparameters, named by their path ("config.hyperparams.training.maxSteps").
void flatten(const json& v, const std::string& name, std::vector<HParam>* out) {
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) flatten(child, name + "." + k, out);
  } else if (v.is_boolean()) {
    out->push_back({name, v.get<bool>()});
  } else if (v.is_number()) {
    out->push_back({name, v.get<double>()});
  } else if (v.is_string()) {
    out->push_back({name, v.get<std::string>()});
  } else if (v.is_array()) {
    out->push_back({name, v.dump()});
  }
}

// The step's RL figures: every number of the `rl` object ("rl/kl", "rl/clipRatio", ...) and each
// reward term's mean ("rl/reward/NAME").
void add_rl_scalars(const json& rl, Scalars* out) {
  if (!rl.is_object()) return;
  for (const auto& [k, v] : rl.items()) {
    if (v.is_number()) out->emplace_back("rl/" + k, v.get<double>());
  }
  for (const auto& term : rl.value("terms", json::array())) {
    if (!term.is_object() || !term.contains("name") || !term["name"].is_string()) continue;
    const json mean = term.value("mean", json(nullptr));
    if (mean.is_number()) out->emplace_back("rl/reward/" + term["name"].get<std::string>(), mean.get<double>());
  }
}

// A few of the step's rollouts as Markdown: the prompt's index, the reward, the completion.
std::string rollouts_markdown(const json& rl, int most) {
  std::string md;
  int shown = 0;
  for (const auto& r : rl.value("rollouts", json::array())) {
    if (!r.is_object() || shown >= most) continue;
    ++shown;
    std::string completion = r.value("completion", std::string());
    if (completion.size() > kShownCompletionBytes) {
      size_t cut = kShownCompletionBytes;
      while (cut > 0 && (static_cast<unsigned char>(completion[cut]) & 0xC0) == 0x80) --cut;
      completion = completion.substr(0, cut) + " ...";
    }
    char reward[32];
    std::snprintf(reward, sizeof reward, "%.4g", r.value("reward", 0.0));
    md += "**prompt " + std::to_string(r.value("promptIndex", int64_t{0})) + "**, reward " + reward + "\n\n";
    // An indented block: the completion shown as written, whatever Markdown it holds.
    std::istringstream lines(completion);
    std::string line;
    while (std::getline(lines, line)) md += "    " + line + "\n";
    md += "\n";
  }
  return md;
}

}  // namespace

Result<std::unique_ptr<RunBoard>> RunBoard::open(RunBoardOptions options) {
  const double now = options.clock->now_seconds();
  auto file = EventFile::create(options.local_dir, event_file_name(now, options.host, options.pid), now);
  if (!file.is_ok()) return file.status();
  return std::unique_ptr<RunBoard>(new RunBoard(std::move(options), std::move(*file)));
}

RunBoard::RunBoard(RunBoardOptions options, std::unique_ptr<EventFile> file)
    : options_(std::move(options)), file_(std::move(file)), dirty_(true) {}

RunBoard::~RunBoard() {
  if (dirty_) (void)publish();
}

std::string RunBoard::key() const { return protocol::tensorboard_key_prefix(options_.run_id) + "/" + file_->name(); }

void RunBoard::append(const std::string& event) {
  if (Status st = file_->append(event); !st.is_ok()) {
    if (!warned_write_) std::fprintf(stderr, "trainer-job: warning: TensorBoard events: %s\n", st.message().c_str());
    warned_write_ = true;
    return;
  }
  dirty_ = true;
}

void RunBoard::on_step(const protocol::Step& s) {
  const double now = options_.clock->now_seconds();
  if (!started_) {
    // This attempt's steps start here: what an earlier attempt logged from here on is replaced.
    append(session_start_event(now, s.step));
    started_ = true;
  }
  Scalars scalars = {{"train/loss", s.loss},
                     {"train/learning_rate", s.learning_rate},
                     {"train/grad_norm", s.grad_norm},
                     {"train/token_accuracy", s.token_accuracy},
                     {"train/tokens_per_second", s.tokens_per_second},
                     {"train/step_seconds", s.step_seconds},
                     {"train/epoch", static_cast<double>(s.epoch)}};
  if (s.mfu) scalars.emplace_back("train/mfu", *s.mfu);
  if (s.padding_share) scalars.emplace_back("train/padding_share", *s.padding_share);
  add_rl_scalars(s.rl, &scalars);
  append(scalars_event(now, s.step, scalars));
  if (s.rl.is_object() && options_.rollouts_per_step > 0) {
    const std::string md = rollouts_markdown(s.rl, options_.rollouts_per_step);
    if (!md.empty()) append(text_event(now, s.step, "rl/rollouts", md));
  }
}

void RunBoard::on_event(const protocol::Event& event) {
  const double now = options_.clock->now_seconds();
  if (const auto* s = std::get_if<protocol::Step>(&event)) {
    on_step(*s);
  } else if (const auto* v = std::get_if<protocol::Validation>(&event)) {
    append(scalars_event(now, v->step, {{"eval/loss", v->validation_loss}}));
  } else if (const auto* r = std::get_if<protocol::Resolved>(&event)) {
    std::vector<HParam> hparams;
    flatten(r->config, "config", &hparams);
    if (!r->settings_sha.empty()) hparams.push_back({"settingsSha", r->settings_sha});
    append(hparams_event(now, hparams, options_.run_id));
  }
  const auto steady = options_.clock->steady_now();
  const bool due = !last_publish_ || steady - *last_publish_ >= options_.publish_every;
  if (dirty_ && (protocol::ends_attempt(event) || (due && std::holds_alternative<protocol::Step>(event)))) {
    (void)publish();
  }
}

Status RunBoard::publish() {
  if (options_.artifacts == nullptr) return Status::ok();
  last_publish_ = options_.clock->steady_now();
  std::ifstream in(file_->path(), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  Status st = in ? options_.artifacts->put(key(), bytes.str())
                 : internal_error(file_->path() + ": cannot read the event file back");
  if (!st.is_ok()) {
    ++publish_failures_;
    std::fprintf(stderr, "trainer-job: warning: copying the TensorBoard events to %s failed (%s); retrying later\n",
                 key().c_str(), st.message().c_str());
    return st;
  }
  dirty_ = false;
  return st;
}

}  // namespace trainer::job::tensorboard
