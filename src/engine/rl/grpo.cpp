// GRPO/GSPO on the shared training loop (declared in rl/grpo.h).
#include "engine/rl/grpo.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>

#include <unistd.h>

#include "engine/data/dataset.h"
#include "engine/device/peak_flops.h"
#include "engine/engine_internal.h"
#include "engine/generate/generate.h"
#include "engine/rl/graders/scorer.h"
#include "engine/rl/loss.h"
#include "engine/rl/rewards.h"
#include "engine/rl/rl_step.h"
#include "engine/rl/tool_rollouts.h"
#include "engine/rl/tools.h"
#include "engine/train/useful_flops.h"

namespace trainer::engine::rl {
namespace {

using train::seconds_since;
using train::SteadyClock;

// Prompt + completion rows of a generation batch as one forward pass's input.
struct RolloutBatch {
  at::Tensor ids;              // [N, P + C] on the device
  at::Tensor mask;             // [N, P + C] bool
  at::Tensor completion_ids;   // [N, C] on the device
  at::Tensor completion_mask;  // [N, C] float on the device
  int64_t prompt_len = 0;
};

// Per-token log-probabilities [n, C] of rows [begin, begin+n) of `b` under the model as it is
// (adapter enabled or not), optionally with their entropies; 0 past a completion's end.
at::Tensor completion_logps(model::CausalLM& model, const RolloutBatch& b, int64_t begin, int64_t n, double temperature,
                            bool training, at::Tensor* entropy = nullptr) {
  const int64_t P = b.prompt_len, C = b.completion_ids.size(1);
  at::Tensor mask = b.mask.narrow(0, begin, n);
  model::ForwardInput in;
  in.input_ids = b.ids.narrow(0, begin, n);
  in.position_ids = generate::positions_of(mask);
  in.attn_mask = generate::attention_mask(mask, P + C);
  at::Tensor hidden = model.hidden_states(in, training);
  return masked_token_logps(model, hidden.narrow(1, P - 1, C), b.completion_ids.narrow(0, begin, n),
                            b.completion_mask.narrow(0, begin, n), temperature, entropy);
}

class GrpoMethod : public train::Method {
 public:
  GrpoMethod(const plan::Plan& plan, train::Setup& setup, const EventSink& emit, const std::string& output_dir)
      : cfg_(plan.config),
        rl_(cfg_.rl),
        model_(*setup.model),
        tok_(*setup.tokenizer),
        device_(setup.device),
        emit_(emit),
        rollouts_path_(output_dir.empty() ? "" : output_dir + "/rollouts.jsonl") {
    std::vector<RlRow> rows = value_or_throw(read_rl_rows(cfg_.dataset));
    const int64_t budget = cfg_.maxSeqLength - rl_.maxCompletionLength;
    int64_t dropped = 0, done = 0;
    const int64_t total_rows = static_cast<int64_t>(rows.size());
    for (auto& r : rows) {
      text::RenderOptions ro;
      ro.add_generation_prompt = true;
      auto ids = tok_.encode_chat(r.chat_messages, r.chat_tools, ro);
      if (!ids.is_ok()) {
        throw EngineError(StatusCode::kInvalidArgument, "config.dataset: " + cfg_.dataset + ":" + std::to_string(r.line) +
                                                            ": " + ids.status().message());
      }
      ++done;
      if (done == total_rows || done % std::max<int64_t>(1, total_rows / 20) == 0) {
        emit(protocol::Preparing{.rows_done = done, .rows_total = total_rows});
      }
      if (static_cast<int64_t>(ids->size()) > budget) {
        ++dropped;  // the prompt leaves no room for a completion within maxSeqLength
        continue;
      }
      prompts_.emplace_back(ids->begin(), ids->end());
      golds_.push_back(r.gold);
      inputs_.push_back(last_user_text(r.messages));
      lines_.push_back(r.line);
      prompt_texts_.push_back(prompt_text(r.messages));
      if (rl_.tools) {
        prompt_messages_.push_back(r.chat_messages);
        prompt_tools_.push_back(r.chat_tools);
        declared_tools_.push_back(declared_tool_names(r.tools));
      }
    }
    emit(protocol::DataFit{.rows = total_rows, .truncated = 0, .exact = 0, .dropped = dropped});
    if (prompts_.empty()) {
      throw EngineError(StatusCode::kInvalidArgument,
                        "config.dataset: " + cfg_.dataset + ": no prompt fits maxSeqLength - rlHyperparams.maxCompletionLength (" +
                            std::to_string(budget) + " tokens)");
    }
    emit(protocol::DataSplit{.train_rows = static_cast<int64_t>(prompts_.size()), .validation_rows = 0, .held_out = false});
    emit(protocol::Resolved{.config = plan::config_to_json(cfg_),
                            .settings_sha = plan::settings_sha(cfg_, train::file_sha256(cfg_.dataset))});
    const GraderContext graders = value_or_throw(grader_context_from_environment(cfg_.dataset));
    scorer_ = value_or_throw(Scorer::create(cfg_.rewardTerms, graders));
    if (rl_.tools && ::access(rl_.tools->command.c_str(), X_OK) != 0) {
      throw EngineError(StatusCode::kInvalidArgument, "config.rlHyperparams.tools.command: " + rl_.tools->command +
                                                          " is not an executable file on the job's host");
    }
    const int64_t batches_per_epoch =
        (static_cast<int64_t>(prompts_.size()) + rl_.promptsPerStep - 1) / rl_.promptsPerStep;
    total_ = cfg_.training.maxSteps ? *cfg_.training.maxSteps
                                    : batches_per_epoch * cfg_.training.epochs * rl_.iterationsPerBatch;
    order_ = data::shuffled_order(prompts_.size(), cfg_.training.seed, 0);
    pad_ = tok_.pad_id().value_or(0);
    if (auto eos = tok_.eos_id()) stop_ids_.push_back(*eos);
    loss_.sequence_level = cfg_.method == plan::Method::kGspo;
    loss_.clip_low = rl_.clipLow;
    loss_.clip_high = rl_.clipHigh;
    loss_.beta = cfg_.klBeta;
    loss_.aggregation = rl_.lossAggregation;
    loss_.max_completion_length = rl_.maxCompletionLength;
  }

  int64_t total_steps() const { return total_; }

  // The prompt order is shuffled_order(seed, epoch), so an epoch and a cursor say where the data
  // stands: after the current generation batch once its last iteration is taken, else where it
  // began (a run resumed inside a batch samples it again).
  nlohmann::json data_state() const override {
    if (batch_done_) return {{"epoch", epoch_}, {"cursor", cursor_}};
    return {{"epoch", batch_epoch_}, {"cursor", batch_cursor_}};
  }
  void restore_data_state(const nlohmann::json& state) override {
    if (!state.contains("epoch") || !state.contains("cursor")) return;  // a fresh run's empty state
    epoch_ = state.at("epoch").get<int64_t>();
    cursor_ = state.at("cursor").get<size_t>();
    order_ = data::shuffled_order(prompts_.size(), cfg_.training.seed, epoch_);
    if (cursor_ > order_.size()) {
      throw EngineError(StatusCode::kFailedPrecondition, "training state: the data cursor " + std::to_string(cursor_) +
                                                             " is past the " + std::to_string(order_.size()) +
                                                             " prompts of the dataset");
    }
    batch_epoch_ = epoch_;
    batch_cursor_ = cursor_;
  }

  // rl.mfu: 6 FLOPs per linear parameter (head included) per token of the update's sequences,
  // over the policy update's seconds (the specification's convention, as TRL counts it).
  double flops_per_token() const override {
    return device::training_flops_per_token(static_cast<double>(model_.config().linear_parameters()));
  }
  double mfu_seconds(const protocol::Step& ev) const override {
    return ev.forward_backward_seconds + ev.optimizer_seconds;
  }

  protocol::Step step(int64_t step, train::Updater& updater) override {
    const auto t_step = SteadyClock::now();
    RlStep rl;
    // A resumed run that stopped inside a generation batch samples that batch again (with the
    // batch's seed and prompts, from the policy as it now is).
    const int64_t batch_start = step - step % rl_.iterationsPerBatch;
    const bool fresh = step == batch_start || !batch_.ids.defined();
    if (fresh) rollout(batch_start, &rl);
    else rl = last_rollout_;
    if (fresh) write_rollouts(batch_start + 1, rl);
    batch_done_ = (step + 1) % rl_.iterationsPerBatch == 0;
    // Old log-probabilities are only needed when the batch is reused (ratio != 1).
    const int64_t N = batch_.ids.size(0);
    const int64_t mb = rl_.microBatchSize > 0 ? std::min<int64_t>(rl_.microBatchSize, N) : N;
    const int64_t micro = (N + mb - 1) / mb;
    const double active = batch_.completion_mask.sum().item<double>();
    const auto t_update = SteadyClock::now();
    double loss_sum = 0, kl = 0, clip_low = 0, clip_high = 0, clip_region = 0, entropy = 0, tokens = 0;
    for (int64_t b = 0; b < N; b += mb) {
      const int64_t n = std::min(mb, N - b);
      at::Tensor ent;
      LossInputs in;
      in.logps = completion_logps(model_, batch_, b, n, rl_.temperature, true, &ent);
      if (old_logps_.defined()) in.old_logps = old_logps_.narrow(0, b, n);
      if (ref_logps_.defined()) in.ref_logps = ref_logps_.narrow(0, b, n);
      in.advantages = advantages_.narrow(0, b, n);
      in.mask = batch_.completion_mask.narrow(0, b, n);
      in.active_tokens = active;
      in.micro_batches = micro;
      LossOutput out = policy_loss(in, loss_);
      out.loss.backward();
      loss_sum += out.loss.item<double>();
      kl += out.kl * out.tokens;
      clip_low += out.clip_low * out.tokens;
      clip_high += out.clip_high * out.tokens;
      clip_region += out.clip_region * out.tokens;
      entropy += (ent * in.mask).sum().item<double>();
      tokens += out.tokens;
    }
    const double grad_norm = updater.clip();
    const auto t_opt = SteadyClock::now();
    const double lr = updater.apply(step);
    train::synchronize(device_);
    const double opt_seconds = seconds_since(t_opt);
    const double update_seconds = seconds_since(t_update);
    const double step_seconds = seconds_since(t_step);
    const double t = std::max(tokens, 1.0);
    rl.kl = kl / t;
    rl.clip_ratio_low = clip_low / t;
    rl.clip_ratio_high = clip_high / t;
    rl.clip_ratio = clip_region / t;
    rl.entropy = entropy / t;
    rl.actor_update_seconds = update_seconds;
    if (!fresh) {
      rl.generation_seconds = 0;
      rl.reward_seconds = 0;
      rl.old_logprob_seconds = 0;
    }
    if (step_seconds > 0) {
      rl.trainer_idle = std::clamp((rl.generation_seconds + rl.reward_seconds) / step_seconds, 0.0, 1.0);
      rl.rollout_idle = std::clamp(1.0 - rl.generation_seconds / step_seconds, 0.0, 1.0);
    }
    // Tokens of tool answers inside completions are not the model's: they are not counted.
    const int64_t batch_tokens = static_cast<int64_t>(batch_.mask.sum().item<double>()) - tool_tokens_;
    protocol::Step ev{.epoch = epoch_,
                      .loss = loss_sum,
                      .learning_rate = lr,
                      .grad_norm = grad_norm,
                      .token_accuracy = 0,
                      .tokens_per_second = static_cast<double>(batch_tokens) / step_seconds,
                      .batch_tokens = batch_tokens,
                      .trained_tokens = static_cast<int64_t>(tokens),
                      .step_seconds = step_seconds,
                      .input_seconds = 0,
                      .forward_backward_seconds = update_seconds - opt_seconds,
                      .optimizer_seconds = opt_seconds};
    ev.useful_flops = update_flops_;
    ev.rl = to_json(rl);
    add_tool_figures(rl, &ev.rl);
    return ev;
  }

 private:
  // Token ids to text as stop strings see it: special tokens included (transformers matches
  // stop strings against the tokens' own text).
  std::function<std::string(const std::vector<int64_t>&)> decoder() const {
    return [this](const std::vector<int64_t>& ids) {
      const std::vector<int32_t> narrow(ids.begin(), ids.end());
      return value_or_throw(tok_.decode(narrow, false));
    };
  }

  // What `runs rollouts` shows as a rollout's prompt: the last user message's text (the whole
  // last message when no user message has text).
  static std::string prompt_text(const nlohmann::json& messages) {
    if (!messages.is_array() || messages.empty()) return "";
    for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
      if (it->value("role", std::string()) == "user" && it->contains("content") && (*it)["content"].is_string()) {
        return (*it)["content"].get<std::string>();
      }
    }
    const nlohmann::json& last = messages.back();
    return last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : last.dump();
  }

  // Appends the generation batch's rollouts to output_dir/rollouts.jsonl (rl/rl_step.h): `step`
  // is the batch's first (1-based) optimizer step.
  void write_rollouts(int64_t step, const RlStep& rl) {
    if (rollouts_path_.empty()) return;
    std::vector<RolloutTerm> terms;
    for (size_t k = 0; k < scorer_->size(); ++k) terms.push_back({scorer_->label(k), scorer_->weight(k)});
    throw_if_error(append_rollouts(rollouts_path_, step, rl, terms, prompt_texts_, rl_.tools.has_value()));
  }

  // The tool loop of a generation batch of the prompts `which` (rlHyperparams.tools).
  ToolLoop tool_loop(const std::vector<size_t>& which) const {
    ToolLoop loop;
    loop.command = rl_.tools->command;
    loop.network = !rl_.tools->networkAllow.empty();
    loop.timeout_seconds = rl_.tools->timeoutSeconds;
    loop.max_calls = rl_.tools->maxCalls;
    for (size_t p : which) loop.declared.push_back(declared_tools_[p]);
    // The template's own tool turn: the conversation with the call's assistant turn (a marker
    // for its text) and the answer in the tool role, rendered with the generation prompt; what
    // follows the marker closes the call's turn, shows the answer and opens the next turn.
    loop.tool_turn = [this, which](size_t prompt, const std::string& answer) {
      static const std::string kMarker = "\x1e\x1ftool-call-turn\x1f\x1e";
      const size_t p = which[prompt];
      text::Json messages = prompt_messages_[p];
      messages.push_back({{"role", "assistant"}, {"content", kMarker}});
      messages.push_back({{"role", "tool"}, {"content", answer}});
      text::RenderOptions ro;
      ro.add_generation_prompt = true;
      const std::string text = value_or_throw(tok_.chat_template().render(messages, prompt_tools_[p], ro));
      const size_t at = text.rfind(kMarker);
      if (at == std::string::npos) {
        throw EngineError(StatusCode::kInvalidArgument, "the chat template drops the assistant's tool call text; "
                                                        "it cannot show a tool's answer");
      }
      std::vector<int32_t> ids = value_or_throw(tok_.encode(text.substr(at + kMarker.size()), false));
      return std::vector<int64_t>(ids.begin(), ids.end());
    };
    return loop;
  }

  // Samples, scores and prepares a new generation batch.
  void rollout(int64_t step, RlStep* rl) {
    at::NoGradGuard no_grad;
    batch_epoch_ = epoch_;
    batch_cursor_ = cursor_;
    std::vector<std::vector<int64_t>> prompts;
    const std::vector<size_t> which = next_prompts(&prompts);
    generate::SamplingOptions so = sampling_options(step);
    generate::Generation gen;
    ToolGeneration tools;
    if (rl_.tools) {
      tools = generate_with_tools(model_, prompts, so, tool_loop(which));
      gen = std::move(tools.gen);
    } else {
      gen = generate::generate(model_, prompts, so);
    }
    rl->generation_seconds = gen.seconds;
    rl->generated_tokens = gen.generated_tokens;
    rl->generation_tokens_per_second = gen.seconds > 0 ? static_cast<double>(gen.generated_tokens) / gen.seconds : 0;

    const Scored scored = score(gen, tools, which, rl);
    record_lengths(gen, rl);
    load_batch(gen, tools, rl);
    sampling_logps(gen.completion_ids.size(0), rl);
    record_rollouts(gen, tools, which, scored, rl);
    last_rollout_ = *rl;
    // The attempt's first rollout: what generating and scoring left in memory (engine_runtime).
    if (!rollout_reported_) {
      rollout_reported_ = true;
      emit_(protocol::EngineRuntime{
          .engine = "native", .report = {{"memory", {{"afterFirstRollout", train::memory_moment(device_, model_)}}}}});
    }
  }

  // The prompts of the next batch, in the epoch's shuffled order: their indices, their ids.
  std::vector<size_t> next_prompts(std::vector<std::vector<int64_t>>* prompts) {
    std::vector<size_t> which;
    for (int i = 0; i < rl_.promptsPerStep; ++i) {
      if (cursor_ >= order_.size()) {
        order_ = data::shuffled_order(prompts_.size(), cfg_.training.seed, ++epoch_);
        cursor_ = 0;
      }
      which.push_back(order_[cursor_++]);
      const auto& p = prompts_[which.back()];
      prompts->emplace_back(p.begin(), p.end());
    }
    return which;
  }

  generate::SamplingOptions sampling_options(int64_t step) {
    generate::SamplingOptions so;
    so.max_new_tokens = rl_.maxCompletionLength;
    so.temperature = rl_.temperature;
    so.top_p = rl_.topP;
    so.top_k = rl_.topK;
    so.group_size = rl_.groupSize;
    so.seed = cfg_.training.seed * 1000003ULL + static_cast<uint64_t>(step);
    so.stop_ids = stop_ids_;
    so.pad_id = pad_;
    so.stop_strings = rl_.stopStrings;
    if (!so.stop_strings.empty() || rl_.tools) so.decode = decoder();
    return so;
  }

  // A batch's completions as `runs rollouts` shows them, their total rewards and each term's scores.
  struct Scored {
    std::vector<std::string> shown;
    std::vector<double> total;
    std::vector<TermScores> scores;
  };

  // Rewards: every term scores every completion; the advantages follow.
  Scored score(const generate::Generation& gen, const ToolGeneration& tools, const std::vector<size_t>& which,
               RlStep* rl) {
    const auto t_reward = SteadyClock::now();
    const int64_t G = rl_.groupSize;
    const int64_t N = gen.completion_ids.size(0);
    Scored out;
    // What the terms score: the completion, or with tools its answer after the last tool turn;
    // what `runs rollouts` shows: the whole completion.
    std::vector<std::string> completions;
    std::vector<GradeItem> items;
    for (int64_t i = 0; i < N; ++i) {
      at::Tensor row = gen.completion_ids[i].narrow(0, 0, gen.lengths[static_cast<size_t>(i)]);
      std::vector<int32_t> ids(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      out.shown.push_back(value_or_throw(tok_.decode(ids, true)));
      if (rl_.tools) {
        const auto from = static_cast<std::ptrdiff_t>(tools.answer_start[static_cast<size_t>(i)]);
        completions.push_back(value_or_throw(tok_.decode(std::vector<int32_t>(ids.begin() + from, ids.end()), true)));
      } else {
        completions.push_back(out.shown.back());
      }
      const size_t p = which[static_cast<size_t>(i / G)];
      items.push_back({.input = inputs_[p], .output = completions.back(), .expected = golds_[p], .row = lines_[p]});
    }
    out.total.assign(static_cast<size_t>(N), 0.0);
    rl->terms.clear();
    for (size_t k = 0; k < scorer_->size(); ++k) {
      const auto t0 = SteadyClock::now();
      TermScores s = value_or_throw(scorer_->score(k, items));
      RlTermStep ts;
      ts.name = scorer_->label(k);
      ts.seconds = seconds_since(t0);
      ts.call_seconds = s.call_seconds;
      ts.input_tokens = s.input_tokens;
      ts.output_tokens = s.output_tokens;
      double sum = 0, sq = 0;
      for (size_t i = 0; i < s.raw.size(); ++i) {
        const double w = scorer_->weight(k) * s.raw[i];
        out.total[i] += w;
        sum += w;
        sq += w * w;
        for (size_t c = 0; c < kCauses.size(); ++c) {
          if (s.failures[i] == kCauses[c]) {
            ++ts.failures;
            ++ts.failures_by_cause[c];
          }
        }
      }
      ts.mean = sum / static_cast<double>(N);
      ts.std = N > 1 ? std::sqrt(std::max(0.0, (sq - sum * sum / static_cast<double>(N)) / static_cast<double>(N - 1))) : 0.0;
      rl->terms.push_back(ts);
      out.scores.push_back(std::move(s));
    }
    rl->reward_seconds = seconds_since(t_reward);
    at::Tensor rewards = at::tensor(out.total, at::kDouble).to(at::kFloat);
    advantages_ = advantages(rewards, G, rl_.scaleRewards).to(device_);
    rl->reward_mean = rewards.mean().item<double>();
    rl->reward_std = N > 1 ? ((rewards - rewards.mean()).pow(2).sum() / static_cast<double>(N - 1)).sqrt().item<double>() : 0.0;
    rl->reward_zero_share = (rewards == 0).to(at::kFloat).mean().item<double>();
    rl->reward_full_share = (rewards >= 1.0 - 1e-9).to(at::kFloat).mean().item<double>();
    at::Tensor grouped = rewards.view({-1, G});
    at::Tensor group_std = (grouped - grouped.mean(1, true)).pow(2).sum(1).sqrt();  // zero iff all equal
    rl->zero_std_group_share = (group_std.abs() < 1e-8).to(at::kFloat).mean().item<double>();
    rl->completions_scored = N;
    rl->rewards.assign(out.total.begin(), out.total.end());
    return out;
  }

  static void record_lengths(const generate::Generation& gen, RlStep* rl) {
    const auto N = static_cast<double>(gen.completion_ids.size(0));
    int64_t mn = INT64_MAX, mx = 0, term_sum = 0, term_n = 0, truncated = 0;
    for (size_t i = 0; i < gen.lengths.size(); ++i) {
      mn = std::min(mn, gen.lengths[i]);
      mx = std::max(mx, gen.lengths[i]);
      if (gen.terminated[i]) {
        term_sum += gen.lengths[i];
        ++term_n;
      } else {
        ++truncated;
      }
    }
    rl->completion_lengths = gen.lengths;
    rl->completion_length_mean = static_cast<double>(gen.generated_tokens) / N;
    rl->completion_length_min = mn;
    rl->completion_length_max = mx;
    rl->completion_length_terminated_mean = term_n > 0 ? static_cast<double>(term_sum) / static_cast<double>(term_n) : 0.0;
    rl->truncated_share = static_cast<double>(truncated) / N;
  }

  // The batch on the device; tool turns are attended to but not trained on.
  void load_batch(const generate::Generation& gen, const ToolGeneration& tools, RlStep* rl) {
    const int64_t N = gen.completion_ids.size(0);
    batch_.prompt_len = gen.prompt_ids.size(1);
    batch_.ids = at::cat({gen.prompt_ids, gen.completion_ids}, 1).to(device_);
    batch_.mask = at::cat({gen.prompt_mask, gen.completion_mask}, 1).to(device_);
    batch_.completion_ids = gen.completion_ids.to(device_);
    at::Tensor trained = rl_.tools ? gen.completion_mask & tools.tool_mask.logical_not() : gen.completion_mask;
    batch_.completion_mask = trained.to(device_, at::kFloat);
    tool_tokens_ = rl_.tools ? tools.tool_mask.sum().item<int64_t>() : 0;
    // Each update over this batch runs every row's real tokens (tool turns included) forward and
    // backward, and the head at the completion positions (the old and reference log-probs are
    // computed here, before the update's span: not counted).
    auto lengths_of = [](const at::Tensor& mask) {
      const at::Tensor n = mask.sum(1).to(at::kCPU, at::kLong).contiguous();
      return std::vector<int64_t>(n.data_ptr<int64_t>(), n.data_ptr<int64_t>() + n.numel());
    };
    update_flops_ = train::lora_update_flops(model_.config(), cfg_.lora,
                                             train::rl_update_shape(lengths_of(gen.prompt_mask),
                                                                    lengths_of(gen.completion_mask)))
                        .total();
    if (rl_.tools) {
      int64_t calls = 0, failures = 0;
      for (int64_t i = 0; i < N; ++i) {
        calls += tools.calls[static_cast<size_t>(i)];
        failures += tools.failures[static_cast<size_t>(i)];
      }
      rl->tool_calls = calls;
      rl->tool_calls_mean = static_cast<double>(calls) / static_cast<double>(N);
      rl->tool_failure_share = calls > 0 ? static_cast<double>(failures) / static_cast<double>(calls) : 0.0;
    }
  }

  // Old (sampling-policy) and reference log-probabilities of the batch, without gradients.
  void sampling_logps(int64_t N, RlStep* rl) {
    const auto t_old = SteadyClock::now();
    old_logps_ = at::Tensor();
    ref_logps_ = at::Tensor();
    const int64_t mb = rl_.microBatchSize > 0 ? std::min<int64_t>(rl_.microBatchSize, N) : N;
    auto all_logps = [&]() {
      std::vector<at::Tensor> parts;
      for (int64_t b = 0; b < N; b += mb) {
        parts.push_back(completion_logps(model_, batch_, b, std::min(mb, N - b), rl_.temperature, false));
      }
      return at::cat(parts, 0);
    };
    if (rl_.iterationsPerBatch > 1) old_logps_ = all_logps();
    if (cfg_.klBeta != 0.0) {
      model_.set_adapters_enabled(false);
      ref_logps_ = all_logps();
      model_.set_adapters_enabled(true);
    }
    rl->old_logprob_seconds = seconds_since(t_old);
  }

  // The rollouts `runs rollouts` shows (written by write_rollouts()).
  void record_rollouts(const generate::Generation& gen, const ToolGeneration& tools, const std::vector<size_t>& which,
                       const Scored& scored, RlStep* rl) const {
    const int64_t G = rl_.groupSize;
    const int64_t N = gen.completion_ids.size(0);
    rl->rollouts.clear();
    for (int64_t i = 0; i < N; ++i) {
      Rollout r;
      r.prompt_index = static_cast<int64_t>(which[static_cast<size_t>(i / G)]);
      r.completion = scored.shown[static_cast<size_t>(i)];
      r.reward = scored.total[static_cast<size_t>(i)];
      for (const auto& ts : scored.scores) {
        r.raw.push_back(ts.raw[static_cast<size_t>(i)]);
        r.failed.push_back(ts.failures[static_cast<size_t>(i)] != FailureCause::kNone);
      }
      r.length = gen.lengths[static_cast<size_t>(i)];
      r.terminated = gen.terminated[static_cast<size_t>(i)];
      if (rl_.tools) {
        r.tool_calls = tools.calls[static_cast<size_t>(i)];
        r.tool_failures = tools.failures[static_cast<size_t>(i)];
      }
      rl->rollouts.push_back(std::move(r));
    }
  }

  const plan::RunConfig& cfg_;
  const plan::RlSettings& rl_;
  model::CausalLM& model_;
  text::Tokenizer& tok_;
  const at::Device device_;
  const EventSink emit_;              // the job's events (engine_runtime's afterFirstRollout)
  bool rollout_reported_ = false;     // afterFirstRollout written
  const std::string rollouts_path_;  // output_dir/rollouts.jsonl; "" = not written
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::string> golds_;
  std::vector<std::string> inputs_;  // per prompt: its last user message, what graders see as the input
  std::vector<int64_t> lines_;       // per prompt: its row's line in the dataset file
  std::unique_ptr<Scorer> scorer_;
  std::vector<std::string> prompt_texts_;  // per prompt: what `runs rollouts` shows of it
  // Runs with tools, per prompt: its conversation, its declared tools and their names.
  std::vector<text::Json> prompt_messages_, prompt_tools_;
  std::vector<std::vector<std::string>> declared_tools_;
  int64_t tool_tokens_ = 0;  // tokens of tool turns in the current generation batch
  double update_flops_ = 0;  // useful FLOPs of one policy update over the current generation batch
  std::vector<size_t> order_;
  size_t cursor_ = 0;
  int64_t epoch_ = 0, total_ = 0;
  size_t batch_cursor_ = 0;  // cursor_ and epoch_ where the current generation batch began
  int64_t batch_epoch_ = 0;
  bool batch_done_ = false;  // the last step taken was the generation batch's last iteration
  int64_t pad_ = 0;
  std::vector<int64_t> stop_ids_;
  LossSettings loss_;
  RolloutBatch batch_;
  at::Tensor advantages_, old_logps_, ref_logps_;
  RlStep last_rollout_;
};

}  // namespace

std::unique_ptr<train::Method> make_method(const plan::Plan& plan, train::Setup& setup, const EventSink& emit,
                                           const std::string& output_dir, int64_t* total_steps) {
  auto m = std::make_unique<GrpoMethod>(plan, setup, emit, output_dir);
  *total_steps = m->total_steps();
  return m;
}

}  // namespace trainer::engine::rl
