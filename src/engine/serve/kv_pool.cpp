#include "engine/serve/kv_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace trainer::engine::serve {

namespace {

// splitmix64's finaliser: a well-mixed 64-bit hash step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<PrefixBlock> prefix_blocks(std::span<const int64_t> prompt, int64_t block_size, int64_t blocks,
                                       uint64_t adapter) {
  std::vector<PrefixBlock> out;
  uint64_t parent = 0;
  for (int64_t b = 0; b < blocks && (b + 1) * block_size <= static_cast<int64_t>(prompt.size()); ++b) {
    PrefixBlock pb;
    pb.parent = parent;
    pb.adapter = adapter;
    pb.tokens.assign(prompt.begin() + b * block_size, prompt.begin() + (b + 1) * block_size);
    uint64_t h = mix(parent ^ mix(adapter + 1));
    for (int64_t t : pb.tokens) h = mix(h ^ static_cast<uint64_t>(t));
    pb.key = h == 0 ? 1 : h;  // 0 means "not published"
    parent = pb.key;
    out.push_back(std::move(pb));
  }
  return out;
}

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
  holders_.assign(static_cast<size_t>(blocks), 0);
  published_.resize(static_cast<size_t>(blocks));
  idle_at_.resize(static_cast<size_t>(blocks), idle_.end());
}

void BlockPool::unpublish_locked(int64_t block) {
  PrefixBlock& p = published_[static_cast<size_t>(block)];
  by_key_.erase(p.key);
  p = PrefixBlock{};
}

bool BlockPool::take(int64_t count, std::vector<int64_t>* blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int64_t>(free_.size() + idle_.size()) < count) return false;
  for (int64_t i = 0; i < count; ++i) {
    int64_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // the cached block released longest ago
      b = idle_.front();
      idle_.pop_front();
      idle_at_[static_cast<size_t>(b)] = idle_.end();
      unpublish_locked(b);
    }
    holders_[static_cast<size_t>(b)] = 1;
    blocks->push_back(b);
  }
  used_ += count;
  cached_ = static_cast<int64_t>(idle_.size());
  return true;
}

void BlockPool::give_back(std::vector<int64_t>* blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t b : *blocks) {
    if (--holders_[static_cast<size_t>(b)] > 0) continue;
    --used_;
    if (published_[static_cast<size_t>(b)].key != 0) {
      idle_at_[static_cast<size_t>(b)] = idle_.insert(idle_.end(), b);
    } else {
      free_.push_back(b);
    }
  }
  cached_ = static_cast<int64_t>(idle_.size());
  blocks->clear();
}

int64_t BlockPool::reuse(const std::vector<PrefixBlock>& wanted, std::vector<int64_t>* blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const PrefixBlock& w : wanted) {
    auto it = by_key_.find(w.key);
    if (it == by_key_.end()) break;
    const int64_t b = it->second;
    const PrefixBlock& p = published_[static_cast<size_t>(b)];
    if (p.parent != w.parent || p.adapter != w.adapter || p.tokens != w.tokens) break;  // a hash collision
    if (holders_[static_cast<size_t>(b)]++ == 0) {
      idle_.erase(idle_at_[static_cast<size_t>(b)]);
      idle_at_[static_cast<size_t>(b)] = idle_.end();
      ++used_;
    }
    blocks->push_back(b);
    ++n;
  }
  cached_ = static_cast<int64_t>(idle_.size());
  return n;
}

void BlockPool::publish(const PrefixBlock& what, int64_t block) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_key_.count(what.key) != 0 || published_[static_cast<size_t>(block)].key != 0) return;
  published_[static_cast<size_t>(block)] = what;
  by_key_[what.key] = block;
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
