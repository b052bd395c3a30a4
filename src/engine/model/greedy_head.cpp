// The greedy pick through a bf16-screened fp32 head (greedy_head.h has the argument and the bound).
#include "engine/model/greedy_head.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace trainer::engine::model {
namespace {

// A bf16 value's bits as an int16 ordered as the values are (finite ones; -0 just below +0), so a
// block's maximum is an integer maximum the compiler vectorises.
inline int16_t order_key(uint16_t bits) {
  const auto flip = static_cast<uint16_t>(static_cast<uint16_t>(static_cast<int16_t>(bits) >> 15) & 0x7FFF);
  return static_cast<int16_t>(bits ^ flip);
}

inline uint16_t bits_of_key(int16_t key) {
  const auto k = static_cast<uint16_t>(key);
  return key < 0 ? static_cast<uint16_t>(k ^ 0x7FFF) : k;
}

inline float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

constexpr int64_t kBlock = 64;            // logits per block of the first pass
constexpr uint16_t kNonFinite = 0x7F80;   // bf16 magnitudes from here up are infinities and NaNs
constexpr int64_t kNormRows = 4096;       // head rows whose norms are taken at once

// What one row's scan found: its candidates in ascending id order, or that it takes the fp32 product.
struct RowPick {
  std::vector<int64_t> candidates;
  bool fp32 = false;
  int64_t token = -1;
};

// One row of bf16 logits: the candidates within the bound of the best.
void scan_row(const uint16_t* row, int64_t V, double h_norm, double max_row_norm, int64_t H, RowPick* out) {
  const int64_t blocks = V / kBlock;
  std::vector<int16_t> block_top(static_cast<size_t>(blocks));
  int16_t top = std::numeric_limits<int16_t>::min();
  uint16_t magnitude = 0;
  for (int64_t j = 0; j < blocks; ++j) {
    const uint16_t* p = row + j * kBlock;
    int16_t m = std::numeric_limits<int16_t>::min();
    uint16_t a = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      m = std::max(m, order_key(p[k]));
      a = std::max<uint16_t>(a, static_cast<uint16_t>(p[k] & 0x7FFF));
    }
    block_top[static_cast<size_t>(j)] = m;
    top = std::max(top, m);
    magnitude = std::max(magnitude, a);
  }
  for (int64_t v = blocks * kBlock; v < V; ++v) {
    top = std::max(top, order_key(row[v]));
    magnitude = std::max<uint16_t>(magnitude, static_cast<uint16_t>(row[v] & 0x7FFF));
  }
  if (magnitude >= kNonFinite || !std::isfinite(h_norm)) {
    out->fp32 = true;
    return;
  }
  constexpr double u = 1.0 / 512;  // bf16's unit roundoff
  const double product = (2 * u + u * u + 2.0 * static_cast<double>(H) * std::ldexp(1.0, -24)) * h_norm * max_row_norm;
  const double rounding = 2 * u * static_cast<double>(bf16_value(magnitude));
  const double bound = (product + rounding) * (1 + 1e-3) + 1e-30;
  const double threshold = static_cast<double>(bf16_value(bits_of_key(top))) - 2 * bound;
  auto take = [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      if (static_cast<double>(bf16_value(row[v])) < threshold) continue;
      if (static_cast<int64_t>(out->candidates.size()) >= GreedyHead::kMaxCandidates) {
        out->fp32 = true;
        return false;
      }
      out->candidates.push_back(v);
    }
    return true;
  };
  for (int64_t j = 0; j < blocks; ++j) {
    if (static_cast<double>(bf16_value(bits_of_key(block_top[static_cast<size_t>(j)]))) < threshold) continue;
    if (!take(j * kBlock, (j + 1) * kBlock)) return;
  }
  take(blocks * kBlock, V);
}

// The candidate with the highest exact logit (float64 sums), the lowest id on a tie.
int64_t settle(const float* h, const float* head, int64_t H, const std::vector<int64_t>& candidates) {
  int64_t best = -1;
  double best_logit = -std::numeric_limits<double>::infinity();
  for (int64_t v : candidates) {
    const float* w = head + v * H;
    double s = 0;
    for (int64_t i = 0; i < H; ++i) s += static_cast<double>(h[i]) * static_cast<double>(w[i]);
    if (best < 0 || s > best_logit) {
      best = v;
      best_logit = s;
    }
  }
  return best;
}

}  // namespace

bool GreedyHead::cpu_has_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

std::unique_ptr<GreedyHead> GreedyHead::for_model(CausalLM& model, bool force) {
  const at::Tensor& head = model.head_weight();
  if (!head.device().is_cpu() || head.scalar_type() != at::kFloat || head.dim() != 2 || !at::hasMKLDNN()) {
    return nullptr;
  }
  if (!force && !cpu_has_bf16()) return nullptr;
  // In float64 a few thousand rows at a time: the whole head in float64 would be four times its size.
  double max_row_norm = 0;
  for (int64_t r = 0; r < head.size(0); r += kNormRows) {
    const at::Tensor rows = head.narrow(0, r, std::min(kNormRows, head.size(0) - r)).to(at::kDouble);
    max_row_norm = std::max(max_row_norm, rows.norm(2, {1}).max().item<double>());
  }
  return std::unique_ptr<GreedyHead>(new GreedyHead(model, head.to(at::kBFloat16).contiguous(), max_row_norm));
}

at::Tensor GreedyHead::pick(const at::Tensor& hidden) {
  const at::Tensor h = hidden.to(at::kFloat).contiguous();
  const at::Tensor head = model_.head_weight().contiguous();
  const int64_t N = h.size(0), H = h.size(1), V = head.size(0);
  const at::Tensor logits = onednn_linear(h.to(at::kBFloat16), head_bf16_).contiguous();  // [N, V] bf16
  const at::Tensor norms = h.to(at::kDouble).norm(2, {1}).contiguous();
  const auto* bits = reinterpret_cast<const uint16_t*>(logits.const_data_ptr<at::BFloat16>());
  const double* h_norm = norms.const_data_ptr<double>();
  const float* h_data = h.const_data_ptr<float>();
  const float* w_data = head.const_data_ptr<float>();
  std::vector<RowPick> rows(static_cast<size_t>(N));
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      RowPick& p = rows[static_cast<size_t>(r)];
      scan_row(bits + r * V, V, h_norm[r], max_row_norm_, H, &p);
      if (!p.fp32) p.token = settle(h_data + r * H, w_data, H, p.candidates);
    }
  });
  at::Tensor out = at::empty({N}, at::kLong);
  int64_t* token = out.data_ptr<int64_t>();
  std::vector<int64_t> fp32_rows;
  for (int64_t r = 0; r < N; ++r) {
    const RowPick& p = rows[static_cast<size_t>(r)];
    if (p.fp32) {
      fp32_rows.push_back(r);
    } else {
      token[r] = p.token;
      candidates_ += static_cast<int64_t>(p.candidates.size());
    }
  }
  if (!fp32_rows.empty()) {
    const at::Tensor which = at::tensor(fp32_rows, at::kLong);
    const at::Tensor picks = row_argmax(model_.step_logits(h.index_select(0, which))).cpu();
    for (size_t i = 0; i < fp32_rows.size(); ++i) token[fp32_rows[i]] = picks.data_ptr<int64_t>()[i];
  }
  rows_ += N;
  fp32_rows_ += static_cast<int64_t>(fp32_rows.size());
  return out;
}

}  // namespace trainer::engine::model
