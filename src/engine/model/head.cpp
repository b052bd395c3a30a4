// The output head and what is computed over its vocabulary: logits, and the log-probabilities of
// chosen tokens (next-token loss, RL's per-token log-probabilities) with their entropy and argmax.
// Declared in model/model.h.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "engine/engine_error.h"
#include "engine/model/model.h"

namespace trainer::engine::model {

at::Tensor row_argmax(const at::Tensor& x) {
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat || x.dim() != 2) return x.argmax(-1);
  const at::Tensor rows = x.contiguous();
  const at::Tensor maxima = rows.amax(-1).contiguous();
  const int64_t B = rows.size(0), V = rows.size(1);
  at::Tensor out = at::empty({B}, at::kLong);
  const float* data = rows.const_data_ptr<float>();
  const float* top = maxima.const_data_ptr<float>();
  int64_t* pick = out.data_ptr<int64_t>();
  std::atomic<bool> unmatched{false};
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* row = data + b * V;
      const float* hit = std::find(row, row + V, top[b]);
      pick[b] = hit - row;
      if (hit == row + V) unmatched = true;  // a NaN maximum equals nothing
    }
  });
  if (unmatched) {
    for (int64_t b = 0; b < B; ++b) {
      if (pick[b] == V) pick[b] = rows[b].argmax().item<int64_t>();
    }
  }
  return out;
}

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
                            c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op.call(x.contiguous(), w, std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

namespace {

// oneDNN's linear on a dense fp32 weight (the operator torch.compile's CPU code uses). For the 151k-wide
// head it ran 1.3-1.8x faster than at::linear, which goes to MKL's sgemm, from 1 to 2,048 rows on this
// AMD EPYC (bench/engine/README.md), with the same sums in another order: logits agree to ~1e-6.
bool onednn_head_applies(const at::Tensor& x, const at::Tensor& w) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && x.dim() == 2 &&
         at::hasMKLDNN();
}

// fp32 logits [N, V] of hidden states [N, H], outside autograd: a new tensor the caller owns (the
// head runs in the model dtype, as transformers does, then upcasts).
at::Tensor head_product(const at::Tensor& x, const at::Tensor& w) {
  if (onednn_head_applies(x, w)) return onednn_linear(x, w);
  return at::linear(x, w).to(at::kFloat).contiguous();
}

// The input's gradient grad @ weight of the head's product, for an fp32 gradient of its logits.
at::Tensor head_input_gradient(const at::Tensor& grad, const at::Tensor& w) {
  if (onednn_head_applies(grad, w)) return onednn_linear(grad, w.t());
  return at::mm(grad.to(w.scalar_type()), w);
}

// The frozen head's product for autograd, both ways through oneDNN: the logits, and the input's
// gradient grad @ weight (as a linear on the transposed weight: 1.4x faster than MKL's at 215 x 151k
// x 512). The head takes no gradient of its own.
struct FrozenHeadProduct : torch::autograd::Function<FrozenHeadProduct> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->saved_data["weight"] = w;
    return onednn_linear(x, w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {head_input_gradient(grads[0], ctx->saved_data["weight"].toTensor()), at::Tensor()};
  }
};

// Rows of logits taken at once by the passes over the vocabulary. On the CPU as many as fit in about
// 4 MiB (6 rows at a 151k vocabulary): the chunk is read from memory once and the passes after the
// first find it in the cache. Measured at 215 and 1,024 rows x 151,669 (2 threads): the loss, the
// argmax and the logits' gradient took 0.09 and 0.40 s this way against 0.19 and 1.08 s through
// cross_entropy and its backward over the whole tensor (log_softmax, the zeroed gradient,
// log_softmax's backward). On a GPU about 256 MiB at once (few kernel launches, bounded temporaries).
int64_t rows_per_chunk(const at::Tensor& logits) {
  const int64_t budget = logits.device().is_cpu() ? (int64_t{4} << 20) : (int64_t{256} << 20);
  const int64_t row_bytes = std::max<int64_t>(1, logits.size(1) * logits.element_size());
  return std::clamp<int64_t>(budget / row_bytes, 1, std::max<int64_t>(1, logits.size(0)));
}

struct SoftmaxPass {
  at::Tensor logp;     // [N] log softmax(logits / T)[target]
  at::Tensor entropy;  // [N] when asked
  at::Tensor argmax;   // [N] int64 when asked
};

// The targets' log-probabilities under softmax(x / temperature) for x [N, V] (fp32, contiguous,
// owned by the caller), and what else is asked, a chunk of rows at a time. Each chunk goes through
// ATen's log_softmax, so every value is the one transformers' cross-entropy computes (its fp32
// log_softmax differs from the exact value by up to ~3e-5 on a peaked distribution; parity is with
// it). With `keep_probs` x is overwritten with the softmax (for the backward); otherwise x is
// left scaled by 1 / temperature.
SoftmaxPass softmax_pass(at::Tensor& x, const at::Tensor& targets, double temperature, bool want_entropy,
                         bool want_argmax, bool keep_probs) {
  const int64_t N = x.size(0);
  SoftmaxPass out;
  out.logp = at::empty({N}, x.options());
  if (want_entropy) out.entropy = at::empty({N}, x.options());
  if (want_argmax) out.argmax = at::empty({N}, x.options().dtype(at::kLong));
  const int64_t rows = rows_per_chunk(x);
  at::Tensor scratch = at::empty({std::min(rows, N), x.size(1)}, x.options());
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    at::Tensor c = x.narrow(0, r0, n);
    if (want_argmax) out.argmax.narrow(0, r0, n).copy_(row_argmax(c));
    if (temperature != 1.0) c.div_(temperature);
    at::Tensor logp = scratch.narrow(0, 0, n);
    at::_log_softmax_out(logp, c, 1, false);
    out.logp.narrow(0, r0, n).copy_(logp.gather(1, targets.narrow(0, r0, n).unsqueeze(1)).squeeze(1));
    if (keep_probs || want_entropy) at::exp_out(c, logp);
    if (want_entropy) out.entropy.narrow(0, r0, n).copy_(logp.mul_(c).sum(-1).neg());  // -sum p log p
  }
  return out;
}

// log p[target] through the frozen head for autograd, from hidden states [N, H], with the logits
// never given to autograd: the forward turns them into the softmax in place and keeps only that
// ([N, V] once, where log_softmax, cross_entropy's zeroed gradient and log_softmax's backward each
// held one), and the backward turns it in place into the logits' gradient (onehot - p) g / T and
// multiplies by the head. Entropy and argmax come out beside it, not differentiable.
struct HeadTokenLogProb : torch::autograd::Function<HeadTokenLogProb> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden,
                                                const at::Tensor& w, const at::Tensor& targets, double temperature,
                                                bool want_entropy, bool want_argmax) {
    at::Tensor probs = head_product(hidden, w);
    SoftmaxPass pass = softmax_pass(probs, targets, temperature, want_entropy, want_argmax, /*keep_probs=*/true);
    ctx->saved_data["probs"] = probs;
    ctx->saved_data["weight"] = w;
    ctx->saved_data["targets"] = targets;
    ctx->saved_data["temperature"] = temperature;
    at::Tensor entropy = want_entropy ? pass.entropy : at::empty({0}, probs.options());
    at::Tensor argmax = want_argmax ? pass.argmax : at::empty({0}, probs.options().dtype(at::kLong));
    ctx->mark_non_differentiable({entropy, argmax});
    return {pass.logp, entropy, argmax};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor probs = ctx->saved_data["probs"].toTensor();
    if (!probs.defined()) {
      throw EngineError(StatusCode::kInternal, "the head's log-probabilities were differentiated twice (their softmax is consumed by the first backward)");
    }
    ctx->saved_data["probs"] = at::Tensor();
    const at::Tensor w = ctx->saved_data["weight"].toTensor();
    const at::Tensor targets = ctx->saved_data["targets"].toTensor();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    at::Tensor hidden_grad;
    if (grads[0].defined()) {
      at::Tensor g = (grads[0].reshape({-1}) / temperature).to(probs.scalar_type()).unsqueeze(1);  // [N, 1]
      probs.mul_(-g);
      probs.scatter_add_(1, targets.unsqueeze(1), g);
      hidden_grad = head_input_gradient(probs, w);
    }
    return {hidden_grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CausalLM::logits(const at::Tensor& hidden) {
  if (hidden.dim() > 2) {
    // One [rows, hidden] product: a strided slice of [B, T, H] (RL's completion positions) would
    // reach matmul's batched path with the head broadcast per row, a third slower on the CPU.
    std::vector<int64_t> sizes = hidden.sizes().vec();
    sizes.back() = lm_head.size(0);
    return logits(hidden.reshape({-1, hidden.size(-1)})).view(sizes);
  }
  if (lm_head.requires_grad()) return at::linear(hidden, lm_head).to(at::kFloat);
  if (hidden.requires_grad() && at::GradMode::is_enabled() && onednn_head_applies(hidden, lm_head)) {
    return FrozenHeadProduct::apply(hidden, lm_head);
  }
  return head_product(hidden, lm_head);
}

at::Tensor CausalLM::step_logits(const at::Tensor& hidden) { return logits(hidden); }

at::Tensor CausalLM::token_logps(const at::Tensor& hidden, const at::Tensor& targets, double temperature,
                                 TokenStats* stats) {
  if (lm_head.requires_grad()) {
    throw EngineError(StatusCode::kInternal, "token log-probabilities through a trained output head are not supported (the head is frozen)");
  }
  if (temperature <= 0.0) {
    throw EngineError(StatusCode::kInvalidArgument, "temperature must be positive for log-probabilities, got " + std::to_string(temperature));
  }
  const bool want_entropy = stats != nullptr && stats->want_entropy;
  const bool want_argmax = stats != nullptr && stats->want_argmax;
  at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  at::Tensor t = targets.reshape({-1}).to(at::kLong);
  if (t.size(0) != h.size(0)) {
    throw EngineError(StatusCode::kInternal, "token_logps: " + std::to_string(h.size(0)) + " hidden rows for " +
                                                 std::to_string(t.size(0)) + " targets");
  }
  at::Tensor logp, entropy, argmax;
  if (h.requires_grad() && at::GradMode::is_enabled()) {
    auto outs = HeadTokenLogProb::apply(h, lm_head, t, temperature, want_entropy, want_argmax);
    logp = outs[0];
    entropy = outs[1];
    argmax = outs[2];
  } else {
    at::NoGradGuard no_grad;
    at::Tensor probs = head_product(h, lm_head);
    SoftmaxPass pass = softmax_pass(probs, t, temperature, want_entropy, want_argmax, /*keep_probs=*/false);
    logp = pass.logp;
    entropy = pass.entropy;
    argmax = pass.argmax;
  }
  if (want_entropy) stats->entropy = entropy.view(targets.sizes());
  if (want_argmax) stats->argmax = argmax.view(targets.sizes());
  return logp.view(targets.sizes());
}

at::Tensor shift_labels(const at::Tensor& labels) {
  at::Tensor out = at::full_like(labels, -100);
  if (labels.size(1) > 1) out.slice(1, 0, labels.size(1) - 1).copy_(labels.slice(1, 1));
  return out;
}

LossParts next_token_loss(CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels) {
  at::Tensor target = shift_labels(labels).reshape({-1});
  at::Tensor idx = (target != -100).nonzero().squeeze(1);
  LossParts out;
  out.tokens = idx.numel();
  if (out.tokens == 0) {
    out.loss_sum = (hidden.sum() * 0).to(at::kFloat);
    out.correct = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(hidden.device()));
    return out;
  }
  at::Tensor h = hidden.reshape({-1, hidden.size(-1)}).index_select(0, idx);
  at::Tensor t = target.index_select(0, idx);
  TokenStats stats;
  stats.want_argmax = true;
  out.loss_sum = -model.token_logps(h, t, 1.0, &stats).sum();
  out.correct = (stats.argmax == t).sum();
  return out;
}

}  // namespace trainer::engine::model
