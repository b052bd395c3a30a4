#include "engine/serve/kv_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace trainer::engine::serve {

BlockPool::BlockPool(const model::CausalLM& model, int64_t blocks, int64_t block_size)
    : block_size_(block_size), total_(blocks) {
  const model::ModelConfig& c = model.config();
  const auto opts = at::TensorOptions().dtype(model.dtype()).device(model.device());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    k_.push_back(at::zeros({blocks * block_size, c.num_key_value_heads, c.head_dim}, opts));
    v_.push_back(at::zeros({blocks * block_size, c.num_key_value_heads, c.head_dim}, opts));
  }
  free_.reserve(static_cast<size_t>(blocks));
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockPool::take(int64_t count, std::vector<int64_t>* blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(free_.size()) < count) return false;
  for (int64_t i = 0; i < count; ++i) {
    blocks->push_back(free_.back());
    free_.pop_back();
  }
  used_ += count;
  return true;
}

void BlockPool::give_back(std::vector<int64_t>* blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(free_.end(), blocks->begin(), blocks->end());
  used_ -= static_cast<int64_t>(blocks->size());
  blocks->clear();
}

PagedPass::PagedPass(BlockPool& pool, const std::vector<const std::vector<int64_t>*>& tables,
                     const std::vector<int64_t>& past, int64_t T, at::Device device)
    : pool_(pool), B_(static_cast<int64_t>(tables.size())), T_(T) {
  const int64_t bs = pool.block_size();
  for (int64_t p : past) L_ = std::max(L_, p + T);
  at::Tensor write = at::empty({B_ * T_}, at::kLong);
  at::Tensor read = at::zeros({B_ * L_}, at::kLong);
  at::Tensor mask = at::zeros({B_, 1, T_, L_}, at::kBool);
  int64_t* w = write.data_ptr<int64_t>();
  int64_t* r = read.data_ptr<int64_t>();
  auto m = mask.accessor<bool, 4>();
  for (int64_t b = 0; b < B_; ++b) {
    const std::vector<int64_t>& blocks = *tables[static_cast<size_t>(b)];
    auto slot = [&](int64_t pos) { return blocks[static_cast<size_t>(pos / bs)] * bs + pos % bs; };
    const int64_t p0 = past[static_cast<size_t>(b)];
    for (int64_t t = 0; t < T_; ++t) w[b * T_ + t] = slot(p0 + t);
    for (int64_t j = 0; j < p0 + T_; ++j) r[b * L_ + j] = slot(j);
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t j = 0; j <= p0 + t; ++j) m[b][0][t][j] = true;
    }
  }
  write_slots_ = write.to(device);
  read_slots_ = read.to(device);
  mask_ = mask.to(device);
}

std::pair<at::Tensor, at::Tensor> PagedPass::append(size_t layer, const at::Tensor& k, const at::Tensor& v) {
  at::Tensor& K = pool_.keys()[layer];
  at::Tensor& V = pool_.values()[layer];
  const int64_t kv = K.size(1), hd = K.size(2);
  // [B, kv, T, hd] -> one row per position: [B * T, kv, hd].
  K.index_copy_(0, write_slots_, k.permute({0, 2, 1, 3}).reshape({B_ * T_, kv, hd}));
  V.index_copy_(0, write_slots_, v.permute({0, 2, 1, 3}).reshape({B_ * T_, kv, hd}));
  at::Tensor keys = K.index_select(0, read_slots_).view({B_, L_, kv, hd}).permute({0, 2, 1, 3});
  at::Tensor values = V.index_select(0, read_slots_).view({B_, L_, kv, hd}).permute({0, 2, 1, 3});
  return {keys, values};
}

}  // namespace trainer::engine::serve
