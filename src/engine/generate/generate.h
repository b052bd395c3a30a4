// Batched sampling from a CausalLM with a key/value cache: greedy, temperature, top-k, top-p,
// a maximum number of new tokens, stop at the end-of-sequence token(s) or stop strings,
// `group_size` completions per prompt (the prompt is prefilled once and its cache repeated),
// seeded and reproducible (one CPU generator draws every sample, on any device). LoRA adapters
// attached to the model are applied. Internal to the engine (includes torch).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace trainer::engine::generate {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  bool greedy = false;         // argmax; temperature/top-k/top-p ignored
  double temperature = 1.0;    // logits / temperature before softmax (> 0)
  int64_t top_k = 0;           // keep the k most likely tokens; 0 = all
  double top_p = 1.0;          // keep the smallest set whose probability reaches top_p; 1 = all
  int64_t group_size = 1;      // completions per prompt
  uint64_t seed = 0;           // seeds the sampler's generator
  std::vector<int64_t> stop_ids;  // end-of-sequence ids: a completion ends after emitting one
  int64_t pad_id = 0;          // written after a completion ended
  // Also return each sampled token's log-probability under logits / temperature (the whole
  // distribution, before top-k/top-p; plain logits when greedy): what the policy assigns it.
  bool logprobs = false;
  // Stop strings: a completion ends once the text of its tokens contains one of them, checked
  // after every token with `decode` (which must be given when stop_strings is not empty) over
  // the last tokens that can hold one, as transformers' stop_strings does. The tokens are kept,
  // the last one included (its text may run past the stop string).
  std::vector<std::string> stop_strings;
  std::function<std::string(const std::vector<int64_t>&)> decode;
};

struct Generation {
  // prompt_count * group_size rows, prompt-major (rows g*group_size .. +group_size-1 are prompt g's).
  at::Tensor prompt_ids;       // [N, P] int64 on the CPU, left-padded with pad_id
  at::Tensor prompt_mask;      // [N, P] bool: real prompt tokens
  at::Tensor completion_ids;   // [N, C] int64 on the CPU, right-padded with pad_id (C <= max_new_tokens)
  at::Tensor completion_mask;  // [N, C] bool: tokens of the completion (the stop token included)
  at::Tensor completion_logps; // [N, C] float on the CPU when options.logprobs (0 at padding), else undefined
  std::vector<int64_t> lengths;   // completion tokens per row
  std::vector<bool> terminated;   // ended by a stop id or stop string (not by max_new_tokens)
  int64_t generated_tokens = 0;   // sum of lengths
  double seconds = 0;             // wall time of generate()
};

// Left-pads `prompts` into [N, P] ids and a mask (on the CPU).
void left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id, at::Tensor* ids, at::Tensor* mask);

// Position ids of left-padded rows: 0 at the first real token (pads get 0).
at::Tensor positions_of(const at::Tensor& mask);

// Attention mask [B, 1, Tq, Tk] (true = may attend) for queries at key positions
// [Tk - Tq, Tk): each query sees the real keys up to itself, and itself (so a padding query is
// never fully masked).
at::Tensor attention_mask(const at::Tensor& key_mask, int64_t queries);

// Next tokens [B] (int64, on the CPU) from last-position logits [B, V] fp32, by `options`'
// greedy, temperature, top_k and top_p, one uniform draw per row from `gen`. With `logps`, also
// each pick's log-probability under logits / temperature (the whole distribution, before
// top-k/top-p; plain logits when greedy) [B] fp32 on the CPU.
at::Tensor sample(const at::Tensor& logits, const SamplingOptions& options, at::Generator& gen, at::Tensor* logps);

// Whether a stop string first appears in the text of `tokens` with its last token (checked after
// every token, over the last tokens that can hold one, as transformers' stop_strings does).
bool ends_in_stop_string(const std::vector<int64_t>& tokens, const std::vector<std::string>& stop_strings,
                         const std::function<std::string(const std::vector<int64_t>&)>& decode);

// Samples completions for `prompts` (token ids, no padding) with the model's current adapters.
Generation generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                    const SamplingOptions& options);

}  // namespace trainer::engine::generate
