// LoRA SFT on the shared training loop: data, micro-batches with gradient accumulation, the
// next-token loss normalised over the update's trained tokens, validation loss. With several
// ranks (docs/data-parallel.md), each takes its share of every micro-batch; the token counts,
// losses and gradients are summed over the ranks.
#include "engine/sft/sft.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "engine/data/dataset.h"
#include "engine/device/peak_flops.h"
#include "engine/engine_internal.h"
#include "engine/train/batch_tensors.h"
#include "engine/train/useful_flops.h"

namespace trainer::engine {
namespace sft {
namespace {

using train::seconds_since;
using train::SteadyClock;

struct Evaluation {
  double loss = 0;
  int64_t tokens = 0;
};

Evaluation evaluate(model::CausalLM& model, const std::vector<data::TokenizedRow>& rows, int batch_size, int max_seq_length,
                    int32_t pad) {
  at::NoGradGuard no_grad;
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  data::SequenceOptions so;
  so.max_seq_length = max_seq_length;
  auto seqs = data::plan_sequences(rows, order, so);
  at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  Evaluation e;
  for (size_t b = 0; b < seqs.size(); b += static_cast<size_t>(batch_size)) {
    data::Batch batch = data::make_batch(rows, seqs, b, static_cast<size_t>(batch_size), pad);
    train::BatchTensors t = train::to_tensors(batch, model.device(), false);
    at::Tensor hidden = model.hidden_states(t.input, false);
    auto parts = model::next_token_loss(model, hidden, t.labels);
    sum += parts.loss_sum.to(at::kDouble);
    e.tokens += parts.tokens;
  }
  e.loss = e.tokens > 0 ? sum.item<double>() / static_cast<double>(e.tokens) : 0.0;
  return e;
}

class SftMethod : public train::Method {
 public:
  SftMethod(const plan::Plan& plan, train::Setup& setup, const EventSink& emit)
      : cfg_(plan.config),
        tr_(cfg_.training),
        lora_(plan.config.lora),
        model_(*setup.model),
        device_(setup.device),
        group_(setup.group.get()) {
    text::Tokenizer& tok = *setup.tokenizer;
    data::LoadOptions lo;
    lo.max_seq_length = cfg_.maxSeqLength;
    int64_t last_reported = -1;
    lo.progress = [&](int64_t done, int64_t total) {
      const int64_t every = std::max<int64_t>(1, total / 20);
      if (done == total || done - last_reported >= every) {
        emit(protocol::Preparing{.rows_done = done, .rows_total = total});
        last_reported = done;
      }
    };
    data::Dataset ds = value_or_throw(data::load_dataset(cfg_.dataset, tok, lo));
    emit(protocol::DataFit{
        .rows = ds.fit.rows, .truncated = ds.fit.truncated, .exact = ds.fit.exact, .dropped = ds.fit.dropped});
    if (cfg_.validationDataset) {
      data::LoadOptions vo;
      vo.max_seq_length = cfg_.maxSeqLength;
      validation_rows_ = value_or_throw(data::load_dataset(*cfg_.validationDataset, tok, vo)).rows;
      train_rows_ = std::move(ds.rows);
    } else {
      data::Split split = data::split_validation(std::move(ds.rows), tr_.validationSplit, tr_.seed);
      train_rows_ = std::move(split.train);
      validation_rows_ = std::move(split.validation);
    }
    if (train_rows_.empty()) {
      throw EngineError(StatusCode::kInvalidArgument,
                        "config.dataset: " + cfg_.dataset + ": no row left to train on (" + std::to_string(ds.fit.rows) +
                            " read, " + std::to_string(ds.fit.dropped) + " with nothing to train within maxSeqLength)");
    }
    emit(protocol::DataSplit{.train_rows = static_cast<int64_t>(train_rows_.size()),
                             .validation_rows = static_cast<int64_t>(validation_rows_.size()),
                             .held_out = !cfg_.validationDataset && !validation_rows_.empty()});
    emit(protocol::Resolved{.config = plan::config_to_json(cfg_),
                            .settings_sha = plan::settings_sha(cfg_, train::file_sha256(cfg_.dataset))});
    so_.packing = tr_.packing;
    so_.max_seq_length = cfg_.maxSeqLength;
    seqs_ = plan_epoch(0);
    total_ = plan::total_steps(cfg_, static_cast<int64_t>(seqs_.size()));
    pad_ = tok.pad_id().value_or(0);
    flops_per_token_ = device::training_flops_per_token(static_cast<double>(model_.config().linear_parameters()));
  }

  int64_t total_steps() const { return total_; }
  double flops_per_token() const override { return flops_per_token_; }

  // The epoch being read and the cursor into its seeded order (the order itself derives from
  // training.seed and the epoch, so these two place the data exactly).
  nlohmann::json data_state() const override {
    return {{"epoch", epoch_}, {"cursor", static_cast<int64_t>(cursor_)}, {"seed", tr_.seed}};
  }
  void restore_data_state(const nlohmann::json& state) override {
    if (!state.is_object() || !state.contains("epoch") || !state["epoch"].is_number_integer() ||
        !state.contains("cursor") || !state["cursor"].is_number_integer()) {
      throw EngineError(StatusCode::kInvalidArgument, "training state: field 'data' must hold integer epoch and cursor");
    }
    if (state.value("seed", tr_.seed) != tr_.seed) {
      throw EngineError(StatusCode::kInvalidArgument, "training state: field 'data.seed' differs from training.seed");
    }
    epoch_ = state["epoch"].get<int64_t>();
    seqs_ = plan_epoch(epoch_);
    cursor_ = static_cast<size_t>(state["cursor"].get<int64_t>());
  }

  protocol::Step step(int64_t step, train::Updater& updater) override {
    // Input: the micro-batches of this update, on the device.
    const auto t_input = SteadyClock::now();
    batches_.clear();
    tensors_.clear();
    const size_t bs = static_cast<size_t>(tr_.batchSize);
    // This rank's share of every micro-batch: its slice of the micro-batch's sequences.
    const size_t ranks = group_ != nullptr ? static_cast<size_t>(group_->size()) : 1;
    const size_t rank = group_ != nullptr ? static_cast<size_t>(group_->rank()) : 0;
    const size_t share_first = bs * rank / ranks, share_end = bs * (rank + 1) / ranks;
    for (int m = 0; m < tr_.gradientAccumulation; ++m) {
      if (cursor_ >= seqs_.size()) {
        if (m > 0) break;  // the epoch's last update takes the micro-batches that are left
        seqs_ = plan_epoch(++epoch_);
        cursor_ = 0;
      }
      batches_.push_back(data::make_batch(train_rows_, seqs_, cursor_ + share_first, share_end - share_first, pad_));
      cursor_ += bs;
      if (batches_.back().rows > 0) tensors_.push_back(train::to_tensors(batches_.back(), device_, tr_.packing));
    }
    int64_t trained = 0, real = 0, padding = 0, positions = 0;
    // The update's useful work: every row forward and backward, the head at the labelled positions.
    train::PassShape pass;
    for (const auto& b : batches_) {
      trained += b.trained_tokens;
      real += b.real_tokens;
      padding += b.padding_tokens;
      positions += b.rows * b.seq_len;
      pass.sequence_lengths.insert(pass.sequence_lengths.end(), b.row_lengths.begin(), b.row_lengths.end());
      pass.head_positions += b.trained_tokens;
    }
    double useful_flops = train::lora_update_flops(model_.config(), lora_, pass).total();
    if (group_ != nullptr) {  // the whole update's figures
      const std::vector<double> all = group_->sum(std::vector<double>{
          static_cast<double>(trained), static_cast<double>(real), static_cast<double>(padding),
          static_cast<double>(positions), useful_flops});
      trained = static_cast<int64_t>(all[0]);
      real = static_cast<int64_t>(all[1]);
      padding = static_cast<int64_t>(all[2]);
      positions = static_cast<int64_t>(all[3]);
      useful_flops = all[4];
    }
    train::synchronize(device_);
    const double input_seconds = seconds_since(t_input);

    // Forward and backward, loss normalised over the update's trained tokens (as transformers
    // does with num_items_in_batch), then clipping.
    const auto t_step = SteadyClock::now();
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
    at::Tensor correct = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device_));
    const double norm = static_cast<double>(std::max<int64_t>(trained, 1));
    for (auto& t : tensors_) {
      at::Tensor hidden = model_.hidden_states(t.input, true);
      model::LossParts parts = model::next_token_loss(model_, hidden, t.labels);
      (parts.loss_sum / norm).backward();
      loss_sum += parts.loss_sum.detach().to(at::kDouble);
      correct += parts.correct;
    }
    double loss_total = loss_sum.item<double>();
    double correct_total = static_cast<double>(correct.item<int64_t>());
    if (group_ != nullptr) {
      const std::vector<double> all = group_->sum(std::vector<double>{loss_total, correct_total});
      loss_total = all[0];
      correct_total = all[1];
    }
    const double grad_norm = updater.clip();  // sums the ranks' gradients first
    const double fb_seconds = seconds_since(t_step);

    const auto t_opt = SteadyClock::now();
    const double lr = updater.apply(step);
    train::synchronize(device_);
    const double opt_seconds = seconds_since(t_opt);
    const double step_seconds = seconds_since(t_step);

    protocol::Step ev{.epoch = epoch_,
                      .loss = loss_total / norm,
                      .learning_rate = lr,
                      .grad_norm = grad_norm,
                      .token_accuracy = correct_total / norm,
                      .tokens_per_second = static_cast<double>(real) / step_seconds,
                      .batch_tokens = real,
                      .trained_tokens = trained,
                      .step_seconds = step_seconds,
                      .input_seconds = input_seconds,
                      .forward_backward_seconds = fb_seconds,
                      .optimizer_seconds = opt_seconds};
    ev.useful_flops = useful_flops;
    if (!tr_.packing && positions > 0) ev.padding_share = static_cast<double>(padding) / static_cast<double>(positions);
    return ev;
  }

  std::optional<protocol::Validation> validate(int64_t step) override {
    if (validation_rows_.empty()) return std::nullopt;
    const auto t0 = SteadyClock::now();
    Evaluation e = evaluate(model_, validation_rows_, tr_.batchSize, cfg_.maxSeqLength, pad_);
    return protocol::Validation{
        .step = step, .validation_loss = e.loss, .tokens = e.tokens, .evaluation_seconds = seconds_since(t0)};
  }

 private:
  std::vector<data::Sequence> plan_epoch(int64_t epoch) {
    return data::plan_sequences(train_rows_, data::shuffled_order(train_rows_.size(), tr_.seed, epoch), so_);
  }

  const plan::RunConfig& cfg_;
  const plan::TrainingSettings& tr_;
  const plan::LoraSettings& lora_;  // the adapter the Updater attaches (for the useful FLOPs)
  model::CausalLM& model_;
  const at::Device device_;
  dist::Group* const group_;  // the ranks' collectives (owned by the Setup); null = one rank
  std::vector<data::TokenizedRow> train_rows_, validation_rows_;
  data::SequenceOptions so_;
  std::vector<data::Sequence> seqs_;
  int64_t total_ = 0, epoch_ = 0;
  size_t cursor_ = 0;  // next sequence of the epoch
  int32_t pad_ = 0;
  double flops_per_token_ = 0;
  std::vector<data::Batch> batches_;
  std::vector<train::BatchTensors> tensors_;
};

}  // namespace

std::unique_ptr<train::Method> make_method(const plan::Plan& plan, train::Setup& setup, const EventSink& emit,
                                           int64_t* total_steps) {
  auto m = std::make_unique<SftMethod>(plan, setup, emit);
  *total_steps = m->total_steps();
  return m;
}

}  // namespace sft

Result<TrainResult> train_sft(const TrainRequest& request, const EventSink& events) {
  TrainResult result;
  Status st = guard(
      [&] {
        const plan::Plan& plan = request.plan;
        const plan::RunConfig& cfg = plan.config;
        if (cfg.method != plan::Method::kSft) {
          throw EngineError(StatusCode::kInvalidArgument,
                            std::string("config.method: the native engine trains \"sft\"; got \"") +
                                plan::method_name(cfg.method) + "\"");
        }
        train::Setup setup = train::prepare(plan, events, request.world, request.rendezvous);
        int64_t total = 0;
        std::unique_ptr<train::Method> method = sft::make_method(plan, setup, events, &total);
        train::Updater updater(*setup.model, cfg.lora, cfg.optimizer, cfg.training.seed, total);
        updater.set_group(setup.group.get());
        train::LoopOptions options = train::loop_options(request);
        options.validation_every = cfg.training.validationFrequencySteps;
        result = train::run(*method, setup, updater, options, events);
      },
      "");
  if (!st.is_ok()) return st;
  return result;
}

}  // namespace trainer::engine
