// Decoder-only causal language models of the Llama family (Llama 3.x, Qwen2, Qwen3) on ATen,
// with optional LoRA adapters on their projections. Internal to the engine: includes torch.
//
// Errors are thrown as EngineError (engine/engine_error.h) and turned into a Status at the
// engine's public boundary (engine.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/config.h"

namespace trainer::engine::model {

// A projection y = x W^T + b, plus (when `lora_A` is defined) the LoRA update
// scale * B A dropout(x). Base weights never require grad.
struct Linear {
  at::Tensor weight;       // [out, in], the run's dtype, frozen
  at::Tensor bias;         // [out] or undefined
  at::Tensor lora_A;       // [r, in], fp32, requires grad; undefined when not adapted
  at::Tensor lora_B;       // [out, r], fp32, requires grad
  double lora_scale = 0;   // alpha / r
  double lora_dropout = 0; // probability, applied to the adapter's input in training
};

struct DecoderLayer {
  at::Tensor input_norm, post_attention_norm;  // RMSNorm weights [hidden]
  at::Tensor q_norm, k_norm;                   // Qwen3 only: [head_dim]
  Linear q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;

  // The projection called `name` ("q_proj", ..., "down_proj"); nullptr for another name.
  Linear* projection(const std::string& name);
};

// One LoRA adapter's matrices on one projection, kept apart from the model (serving holds
// several adapters at once; see AdapterRows).
struct LoraWeights {
  at::Tensor A;       // [r, in], the dtype of the rows it is applied to; undefined: not adapted
  at::Tensor B;       // [out, r]
  double scale = 0;   // alpha / r (alpha / sqrt(r) with rsLoRA)
};

// An adapter's matrices for every layer, projections in lora::supported_targets() order.
using AdapterWeights = std::vector<std::vector<LoraWeights>>;

// Rows of a batch that add one adapter's low-rank product to the base projections: the base
// matrices run once for the whole batch, then each group adds its own B A x to its rows.
struct AdapterRows {
  at::Tensor rows;                  // [n] int64 on the model's device: batch rows (dim 0)
  const AdapterWeights* weights = nullptr;  // not owned; outlives the forward pass
};

// Several adapters side by side, for a batch whose rows use different ones (serving): for each
// projection, every adapter's A stacked on the rank axis and its B, scaled, on the input axis (an
// adapter that does not adapt the projection, or adapts it at a lower rank, as zeros). With a
// mask of each row's own columns, a projection adds ((x Aᵀ) ⊙ mask) Bᵀ for every row at once: two
// products whatever the number of adapters, where one group per adapter costs four small
// operations per adapter (S-LoRA's and Punica's grouping, without a gather).
struct StackedAdapters {
  std::vector<std::vector<at::Tensor>> A;  // [layer][target]: [R, in]; undefined: no adapter adapts it
  std::vector<std::vector<at::Tensor>> B;  // [layer][target]: [out, R], each adapter's columns times its scale
  std::vector<int64_t> offsets;            // adapter i's columns: offsets[i] up to offsets[i + 1] (R last)
};

// `adapters` (not empty) stacked in their order, in the dtype and on the device of their weights.
StackedAdapters stack_adapters(const std::vector<const AdapterWeights*>& adapters);

// The mask of StackedAdapters for a batch: row b keeps the columns of adapter `adapter_of_row[b]`
// (an index into the stacked adapters; -1: none, the base model). [B, R] in `options`.
at::Tensor stacked_mask(const StackedAdapters& stacked, const std::vector<int64_t>& adapter_of_row,
                        const at::TensorOptions& options);

// Everything one forward pass needs about its batch.
struct ForwardInput {
  at::Tensor input_ids;     // [B, T] int64, on the model's device
  at::Tensor position_ids;  // [B, T] int64: positions restart at 0 for every packed row
  at::Tensor attn_mask;     // [B, 1, T, T] bool, true = may attend; undefined = causal only
                            // (right padding needs no mask: real tokens never see the pads)
  std::vector<AdapterRows> adapter_rows;  // per-row adapters (serving); empty = none
  // Per-row adapters stacked (serving, several adapters in the batch), used instead of
  // adapter_rows when set: not owned, outlives the pass; with its mask [B, R].
  const StackedAdapters* stacked = nullptr;
  at::Tensor stacked_mask;
};

class CausalLM;

// Where a cached forward pass keeps keys and values. For each layer in order, `append` stores
// the new keys and values [B, kv_heads, T, head_dim] and returns every key and value the T
// queries attend to, [B, kv_heads, L, head_dim] (the attention mask is [B, 1, T, L]); `advance`
// is called once after the last layer.
class KVStore {
 public:
  virtual ~KVStore() = default;
  virtual std::pair<at::Tensor, at::Tensor> append(size_t layer, const at::Tensor& k, const at::Tensor& v) = 0;
  virtual void advance(int64_t positions) = 0;
};

// Keys and values of the positions seen so far, per layer, for incremental decoding.
struct KVCache : KVStore {
  std::vector<at::Tensor> k, v;  // per layer [B, kv_heads, capacity, head_dim], the model's dtype
  int64_t length = 0;            // positions filled
  std::pair<at::Tensor, at::Tensor> append(size_t layer, const at::Tensor& k, const at::Tensor& v) override;
  void advance(int64_t positions) override { length += positions; }
  // An empty cache for `batch` rows of up to `capacity` positions on the model's device.
  static KVCache allocate(const CausalLM& model, int64_t batch, int64_t capacity);
  // Repeats every row `times` times (row i becomes rows i*times .. i*times+times-1).
  void repeat_interleave(int64_t times);
};

// argmax(-1) of a [rows, vocabulary] tensor, the first index of each row's maximum as at::argmax
// gives it. On the CPU in fp32 in two passes, the row's maximum (vectorised) and a scan to its first
// occurrence: 32 x 151,669 took 0.8 ms against at::argmax's 2.1 ms (2 threads); a NaN row falls back
// to at::argmax. Elsewhere at::argmax.
at::Tensor row_argmax(const at::Tensor& x);

// oneDNN's linear x @ w^T (mkldnn::_linear_pointwise) for a CPU x [rows, in] and a dense weight w
// [out, in] of x's dtype (fp32 or bf16), in that dtype.
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w);

// What CausalLM::token_logps computes beside the log-probabilities, when asked.
struct TokenStats {
  bool want_entropy = false;
  bool want_argmax = false;
  at::Tensor entropy;  // fp32 nats, shaped as the targets
  at::Tensor argmax;   // int64 most likely token, shaped as the targets
};

class CausalLM {
 public:
  // Loads `dir` (config.json + safetensors weights) in `dtype` on `device`. Weights whose file
  // dtype already matches on the CPU are used in place from the read-only mapping.
  static std::unique_ptr<CausalLM> load(const std::string& dir, at::ScalarType dtype, at::Device device);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  std::vector<DecoderLayer>& layers() { return layers_; }

  // Final-normed hidden states [B, T, hidden]. `training` enables LoRA dropout. With `cache`,
  // the T positions follow the cache's earlier ones: their keys and values are written into it
  // and attention covers what it returns (a KVCache: its `length` earlier positions and these,
  // and length grows by T); in.attn_mask [B, 1, T, L] is then required.
  at::Tensor hidden_states(const ForwardInput& in, bool training, KVStore* cache = nullptr);

  // Whether the LoRA adapters take part in forward passes (on by default). Off, the model is
  // the base model: the reference policy of RL without a second copy of the weights.
  void set_adapters_enabled(bool enabled) { adapters_enabled_ = enabled; }
  bool adapters_enabled() const { return adapters_enabled_; }

  // Logits in fp32 for hidden states [..., hidden] (the head runs in the model dtype, as
  // transformers does, then upcasts).
  at::Tensor logits(const at::Tensor& hidden);
  // On the CPU in fp32 a frozen head runs through oneDNN on lm_head as it is (no copy): from 1 to
  // 2,048 rows at a 151k vocabulary it took 55-75% of at::linear's time, which goes to MKL
  // (bench/engine/README.md); the input's gradient is at::linear's (grad @ lm_head).
  // The same for the few rows [B, hidden] of one decoding step.
  at::Tensor step_logits(const at::Tensor& hidden);
  // The head's weight [vocab, hidden] (the embedding when tied), for kernels of their own over it
  // (model/greedy_head.h).
  const at::Tensor& head_weight() const { return lm_head; }

  // log softmax(head(hidden) / temperature)[target] for hidden states [..., hidden] and targets
  // [...] (fp32, shaped as the targets; differentiable to `hidden` in grad mode), with the
  // entropy and argmax of that distribution in `stats` when it asks for them (not differentiable).
  // The [N, vocabulary] logits never reach autograd: they are turned into the softmax in place a
  // few rows at a time, kept for the backward and turned in place into their own gradient there
  // (head.cpp). The next-token loss and RL's per-token log-probabilities go through here.
  at::Tensor token_logps(const at::Tensor& hidden, const at::Tensor& targets, double temperature = 1.0,
                         TokenStats* stats = nullptr);

  // Bytes held by the base weights and norms (for memory reports); with `include`, only of the
  // tensors it accepts.
  int64_t weight_bytes(const std::function<bool(const at::Tensor&)>& include = nullptr) const;
  // Elements of the base weights and norms (the frozen parameters; adapters not counted).
  int64_t parameter_count() const;

 private:
  CausalLM() : device_(at::kCPU) {}
  at::Tensor project(const Linear& lin, const at::Tensor& x, bool training) const;
  // project() plus each group's adapter on its rows (projection `target` of layer `layer`).
  at::Tensor project_rows(const Linear& lin, const at::Tensor& x, bool training, const std::vector<AdapterRows>& groups,
                          size_t layer, size_t target) const;
  // project() plus every row's adapter from `in`'s stacked adapters.
  at::Tensor project_stacked(const Linear& lin, const at::Tensor& x, bool training, const ForwardInput& in,
                             size_t layer, size_t target) const;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  void ensure_rope_cache(int64_t positions);
  // Calls `visit` with each base weight and norm once (a tied head is the embedding).
  void for_each_weight(const std::function<void(const at::Tensor&)>& visit) const;

  std::string dir_;
  ModelConfig config_;
  at::ScalarType dtype_ = at::kFloat;
  at::Device device_;
  at::Tensor embed_tokens;  // [vocab, hidden]
  at::Tensor final_norm;    // [hidden]
  at::Tensor lm_head;       // [vocab, hidden]; the embedding when tied
  std::vector<DecoderLayer> layers_;
  at::Tensor inv_freq_;     // [head_dim/2] fp32
  at::Tensor rope_cos_, rope_sin_;  // [positions, head_dim] fp32 tables
  bool adapters_enabled_ = true;
};

// Token-level cross-entropy of next-token prediction. `labels` [B, T] (-100 = not trained) are
// the unshifted labels as in transformers: position t predicts labels[t+1]. Only the trained
// positions go through the output head.
struct LossParts {
  at::Tensor loss_sum;  // scalar fp32 sum of the token losses (differentiable)
  at::Tensor correct;   // scalar int64: argmax == label
  int64_t tokens = 0;   // trained tokens
};
LossParts next_token_loss(CausalLM& model, const at::Tensor& hidden, const at::Tensor& labels);

// Shifted labels: out[:, t] = labels[:, t+1], last column -100.
at::Tensor shift_labels(const at::Tensor& labels);

at::ScalarType scalar_type_of(const std::string& safetensors_dtype);  // kUndefined if unknown
std::string safetensors_dtype_of(at::ScalarType t);

}  // namespace trainer::engine::model

namespace trainer::engine::model {

// [B, 1, T, T] bool attention mask of packed rows: query i may attend key j when j <= i and
// both carry the same sequence id (padding, id -1, only sees padding). Built once per batch.
at::Tensor packed_attention_mask(const at::Tensor& sequence_ids);

}  // namespace trainer::engine::model
