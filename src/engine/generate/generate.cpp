// Batched sampling with a key/value cache (declared in generate/generate.h).
#include "engine/generate/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>

#include "engine/engine_error.h"

namespace trainer::engine::generate {

void left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id, at::Tensor* ids, at::Tensor* mask) {
  const int64_t N = static_cast<int64_t>(prompts.size());
  int64_t P = 1;
  for (const auto& p : prompts) P = std::max<int64_t>(P, static_cast<int64_t>(p.size()));
  *ids = at::full({N, P}, pad_id, at::kLong);
  *mask = at::zeros({N, P}, at::kBool);
  auto id = ids->accessor<int64_t, 2>();
  auto m = mask->accessor<bool, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    const int64_t off = P - static_cast<int64_t>(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      id[i][off + static_cast<int64_t>(j)] = p[j];
      m[i][off + static_cast<int64_t>(j)] = true;
    }
  }
}

at::Tensor positions_of(const at::Tensor& mask) {
  return (mask.to(at::kLong).cumsum(1) - 1).clamp_min(0);
}

at::Tensor attention_mask(const at::Tensor& key_mask, int64_t queries) {
  const int64_t Tk = key_mask.size(1);
  const auto opts = at::TensorOptions().dtype(at::kLong).device(key_mask.device());
  at::Tensor q_pos = at::arange(Tk - queries, Tk, opts).unsqueeze(1);  // [Tq, 1]
  at::Tensor k_pos = at::arange(Tk, opts).unsqueeze(0);                // [1, Tk]
  at::Tensor causal = (k_pos <= q_pos).unsqueeze(0);                   // [1, Tq, Tk]
  at::Tensor self = (k_pos == q_pos).unsqueeze(0);
  return ((causal & key_mask.unsqueeze(1)) | self).unsqueeze(1);       // [B, 1, Tq, Tk]
}

namespace {

// Inverse-CDF draw over each row of `weights` [B, K] (non-negative, fp32, contiguous, on the
// CPU): with u_b uniform in [0, 1), row b picks the first k whose running sum (in double, left
// to right) reaches u_b times the row's total, as counting the entries of
// `weights.double().cumsum(-1)` below the target would, without the [B, K] double temporaries.
// The row is summed in blocks of kBlock entries, each with independent accumulators (a single
// running double sum is a chain of dependent additions: at a 151k vocabulary it cost as much as
// the rest of the draw); the search then skips whole blocks and scans only the one the target
// falls in. Summing in another order moves the totals by rounding only.
std::vector<int64_t> inverse_cdf(const at::Tensor& weights, const at::Tensor& u) {
  constexpr int64_t kBlock = 1024;
  constexpr int kLanes = 8;
  const int64_t B = weights.size(0), K = weights.size(1);
  const float* w = weights.data_ptr<float>();
  const double* uu = u.data_ptr<double>();
  std::vector<int64_t> picks(static_cast<size_t>(B), 0);
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    const int64_t blocks = (K + kBlock - 1) / kBlock;
    std::vector<double> block_sum(static_cast<size_t>(blocks));
    for (int64_t b = begin; b < end; ++b) {
      const float* row = w + b * K;
      double total = 0;
      for (int64_t j = 0; j < blocks; ++j) {
        const int64_t lo = j * kBlock, hi = std::min(K, lo + kBlock);
        double lane[kLanes] = {};
        int64_t k = lo;
        for (; k + kLanes <= hi; k += kLanes) {
          for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(row[k + l]);
        }
        double sum = 0;
        for (int l = 0; l < kLanes; ++l) sum += lane[l];
        for (; k < hi; ++k) sum += static_cast<double>(row[k]);
        block_sum[static_cast<size_t>(j)] = sum;
        total += sum;
      }
      const double target = uu[b] * total;
      double running = 0;
      int64_t j = 0;
      for (; j + 1 < blocks && running + block_sum[static_cast<size_t>(j)] < target; ++j) {
        running += block_sum[static_cast<size_t>(j)];
      }
      // Scan from that block on (past its end only when rounding left the target beyond it).
      int64_t k = j * kBlock;
      for (; k < K; ++k) {
        running += static_cast<double>(row[k]);
        if (!(running < target)) break;
      }
      picks[static_cast<size_t>(b)] = std::min(k, K - 1);
    }
  });
  return picks;
}

}  // namespace

at::Tensor sample(const at::Tensor& logits, const SamplingOptions& o, at::Generator& gen, at::Tensor* logps) {
  at::Tensor scores = !o.greedy && o.temperature != 1.0 ? logits / o.temperature : logits;
  if (o.greedy) {
    at::Tensor pick = model::row_argmax(logits);
    if (logps != nullptr) *logps = at::log_softmax(scores, -1).gather(-1, pick.unsqueeze(1)).squeeze(1).cpu();
    return pick.cpu();
  }
  const int64_t V = scores.size(-1);
  at::Tensor probs, index;  // candidate probabilities [B, K] (descending when sorted) and their ids
  if (o.top_k > 0 && o.top_k < V) {
    auto [vals, idx] = scores.topk(o.top_k, -1, true, true);
    probs = at::softmax(vals, -1);
    index = idx;
  } else if (o.top_p < 1.0) {
    auto [vals, idx] = scores.sort(-1, true);
    probs = at::softmax(vals, -1);
    index = idx;
  } else {
    probs = at::softmax(scores, -1);
  }
  if (o.top_p < 1.0) {
    // Keep the tokens whose preceding cumulative probability is below top_p (always the first).
    at::Tensor before = probs.cumsum(-1) - probs;
    probs = probs.masked_fill(before >= o.top_p, 0.0);
  }
  // One uniform draw per row from the CPU generator.
  at::Tensor u = at::rand({probs.size(0)}, gen, at::kDouble);
  at::Tensor host = probs.to(at::kCPU, at::kFloat).contiguous();
  const std::vector<int64_t> picks = inverse_cdf(host, u);
  at::Tensor pick = at::tensor(picks, at::kLong);  // [B] positions among the candidates
  at::Tensor chosen = index.defined() ? index.gather(-1, pick.to(index.device()).unsqueeze(1)).squeeze(1).cpu() : pick;
  if (logps != nullptr) {
    if (!index.defined()) {
      // probs is the whole distribution: log p of the pick, unless it underflowed to zero.
      at::Tensor p = host.gather(-1, pick.unsqueeze(1)).squeeze(1);
      *logps = p.log();
      if (!(p > 0).all().item<bool>()) {
        *logps = at::log_softmax(scores, -1).gather(-1, chosen.to(scores.device()).unsqueeze(1)).squeeze(1).cpu();
      }
    } else {
      *logps = at::log_softmax(scores, -1).gather(-1, chosen.to(scores.device()).unsqueeze(1)).squeeze(1).cpu();
    }
  }
  return chosen;
}

bool ends_in_stop_string(const std::vector<int64_t>& tokens, const std::vector<std::string>& stop_strings,
                         const std::function<std::string(const std::vector<int64_t>&)>& decode) {
  // A stop string not seen before ends in the last token, so it lies within the last
  // longest-stop-string tokens (each token is at least one byte of text).
  size_t longest = 0;
  for (const auto& s : stop_strings) longest = std::max(longest, s.size());
  const size_t window = std::min(tokens.size(), longest + 1);
  const std::string text = decode(std::vector<int64_t>(tokens.end() - static_cast<std::ptrdiff_t>(window), tokens.end()));
  for (const auto& s : stop_strings) {
    if (!s.empty() && text.find(s) != std::string::npos) return true;
  }
  return false;
}

Generation generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                    const SamplingOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.group_size < 1) throw EngineError(StatusCode::kInvalidArgument, "group_size must be at least 1");
  if (!o.greedy && !(o.temperature > 0)) throw EngineError(StatusCode::kInvalidArgument, "temperature must be > 0");
  if (!o.stop_strings.empty() && !o.decode) throw EngineError(StatusCode::kInternal, "stop strings need a decoder");
  at::NoGradGuard no_grad;
  const at::Device dev = model.device();
  const int64_t G = o.group_size;
  at::Tensor ids, mask;
  left_pad(prompts, o.pad_id, &ids, &mask);
  const int64_t Np = ids.size(0), P = ids.size(1), N = Np * G, C = o.max_new_tokens;

  // Prefill every prompt once, then repeat its cache for the group.
  model::KVCache cache = model::KVCache::allocate(model, Np, P + C);
  at::Tensor dev_mask = at::zeros({Np, P + C}, at::TensorOptions().dtype(at::kBool).device(dev));
  dev_mask.slice(1, 0, P).copy_(mask);
  model::ForwardInput in;
  in.input_ids = ids.to(dev);
  in.position_ids = positions_of(mask).to(dev);
  in.attn_mask = attention_mask(dev_mask.slice(1, 0, P), P);
  at::Tensor hidden = model.hidden_states(in, false, &cache);
  at::Tensor last = model.step_logits(hidden.select(1, P - 1));  // [Np, V]
  at::Tensor next_pos = in.position_ids.select(1, P - 1) + 1;  // [Np]
  if (G > 1) {
    cache.repeat_interleave(G);
    dev_mask = dev_mask.repeat_interleave(G, 0);
    last = last.repeat_interleave(G, 0);
    next_pos = next_pos.repeat_interleave(G, 0);
  }

  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  Generation out;
  out.prompt_ids = ids.repeat_interleave(G, 0);
  out.prompt_mask = mask.repeat_interleave(G, 0);
  std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(N));
  out.terminated.assign(static_cast<size_t>(N), false);
  std::vector<bool> done(static_cast<size_t>(N), false);
  int64_t live = N;
  at::Tensor pad_col = at::full({N}, o.pad_id, at::kLong);
  std::vector<at::Tensor> step_logps;  // [N] per generated position, when o.logprobs
  for (int64_t t = 0; t < C && live > 0; ++t) {
    at::Tensor logps;
    at::Tensor next = sample(last, o, gen, o.logprobs ? &logps : nullptr);  // [N] on the CPU
    if (o.logprobs) step_logps.push_back(logps);
    const int64_t* nx = next.data_ptr<int64_t>();
    at::Tensor alive = at::zeros({N}, at::kBool);
    bool* al = alive.data_ptr<bool>();
    for (int64_t i = 0; i < N; ++i) {
      const size_t r = static_cast<size_t>(i);
      if (done[r]) continue;
      tokens[r].push_back(nx[i]);
      al[i] = true;
      bool stop = std::find(o.stop_ids.begin(), o.stop_ids.end(), nx[i]) != o.stop_ids.end();
      if (!stop && !o.stop_strings.empty()) stop = ends_in_stop_string(tokens[r], o.stop_strings, o.decode);
      if (stop) {
        done[r] = true;
        out.terminated[r] = true;
        --live;
      }
    }
    if (t + 1 == C || live == 0) break;
    // Feed the sampled tokens (pads for finished rows, masked out) and extend the cache.
    at::Tensor feed = at::where(alive, next, pad_col);
    dev_mask.select(1, P + t).copy_(alive.to(dev));
    in.input_ids = feed.to(dev).unsqueeze(1);
    in.position_ids = next_pos.unsqueeze(1);
    in.attn_mask = attention_mask(dev_mask.slice(1, 0, P + t + 1), 1);
    hidden = model.hidden_states(in, false, &cache);
    last = model.step_logits(hidden.select(1, 0));
    next_pos = next_pos + 1;
  }
  int64_t width = 1;
  for (const auto& t : tokens) width = std::max<int64_t>(width, static_cast<int64_t>(t.size()));
  out.completion_ids = at::full({N, width}, o.pad_id, at::kLong);
  out.completion_mask = at::zeros({N, width}, at::kBool);
  if (o.logprobs) {
    out.completion_logps = at::zeros({N, width}, at::kFloat);
    if (!step_logps.empty()) {
      const int64_t steps = static_cast<int64_t>(step_logps.size());
      out.completion_logps.narrow(1, 0, steps).copy_(at::stack(step_logps, 1));
    }
  }
  auto ci = out.completion_ids.accessor<int64_t, 2>();
  auto cm = out.completion_mask.accessor<bool, 2>();
  for (int64_t i = 0; i < N; ++i) {
    const auto& t = tokens[static_cast<size_t>(i)];
    for (size_t j = 0; j < t.size(); ++j) {
      ci[i][static_cast<int64_t>(j)] = t[j];
      cm[i][static_cast<int64_t>(j)] = true;
    }
    if (o.logprobs) out.completion_logps[i].narrow(0, static_cast<int64_t>(t.size()), width - static_cast<int64_t>(t.size())).zero_();
    out.lengths.push_back(static_cast<int64_t>(t.size()));
    out.generated_tokens += static_cast<int64_t>(t.size());
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace trainer::engine::generate
