// The greedy next token through an fp32 head, screened in bf16 and settled exactly (docs/serving.md,
// "Greedy picks"). On a CPU with native bf16 (AVX512-BF16 or AMX) the product of a 151k-wide head
// with 32 rows took 11 ms in bf16 against 21 ms in fp32 (oneDNN, 2 threads, this AMD EPYC). The
// bf16 logits are not the answer: each row's error is bounded (below), every token whose bf16 logit
// is within twice that bound of the row's best is a candidate, and the candidates' logits are
// computed exactly (float64 sums of the fp32 weights and hidden state). The pick is the candidate
// with the highest exact logit, the lowest id on a tie: the token the fp32 logits' argmax gives,
// up to fp32's own rounding (which orders near-ties differently between kernels anyway).
//
// The bound: with u = 2^-9 (bf16's rounding to nearest), a logit's bf16 product differs from the
// exact sum by at most (2u + u^2 + 2 H 2^-24) * sum_i |h_i| |w_i| (the inputs' rounding, fp32
// accumulation over H terms, and the exact side's own fp32 inputs' products), and sum_i |h_i| |w_i|
// <= |h|_2 * max_v |w_v|_2 (Cauchy-Schwarz); the bf16 output's rounding adds at most 2u * max |logit|.
// A row with a non-finite value, or with more than kMaxCandidates candidates (a flat distribution),
// takes the fp32 product and its argmax instead.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/model/model.h"

namespace trainer::engine::model {

class GreedyHead {
 public:
  // Candidates a row may have before it takes the fp32 product instead.
  static constexpr int64_t kMaxCandidates = 4096;

  // The screened head of `model`, or nullptr where screening does not pay: a head that is not fp32
  // on the CPU, or (unless `force`) a CPU without native bf16, where oneDNN emulates it. Holds a
  // bf16 copy of the head (half the head's bytes); `model` must outlive it.
  static std::unique_ptr<GreedyHead> for_model(CausalLM& model, bool force = false);
  // Whether this CPU computes bf16 products natively.
  static bool cpu_has_bf16();

  // The greedy token of each row of hidden [N, hidden] (fp32, final-normed): [N] int64 on the CPU,
  // equal to row_argmax(model.step_logits(hidden)) up to fp32's rounding.
  at::Tensor pick(const at::Tensor& hidden);

  // Since start: rows picked, candidates settled exactly, rows that took the fp32 product. Read
  // from any thread.
  struct Counts {
    int64_t rows = 0;
    int64_t candidates = 0;
    int64_t fp32_rows = 0;
  };
  Counts counts() const { return {rows_.load(), candidates_.load(), fp32_rows_.load()}; }

 private:
  GreedyHead(CausalLM& model, at::Tensor head_bf16, double max_row_norm)
      : model_(model), head_bf16_(std::move(head_bf16)), max_row_norm_(max_row_norm) {}

  CausalLM& model_;
  at::Tensor head_bf16_;  // [vocab, hidden]
  double max_row_norm_;   // max over the vocabulary of |w_v|_2 (fp32 head)
  std::atomic<int64_t> rows_{0}, candidates_{0}, fp32_rows_{0};
};

}  // namespace trainer::engine::model
