// The serving engine's key/value cache: fixed-size blocks from a pool allocated once at start,
// and the KVStore a forward pass over several requests writes and reads them through. Internal
// to the engine (includes torch).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/model/model.h"

namespace trainer::engine::serve {

// Every layer's keys and values in `blocks` blocks of `block_size` positions. Position p of a
// request lives in slot blocks[p / block_size] * block_size + p % block_size.
class BlockPool {
 public:
  BlockPool(const model::CausalLM& model, int64_t blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t total() const { return total_; }
  int64_t used() const { return used_.load(); }

  // `count` free blocks, or false (nothing taken) when fewer are free.
  bool take(int64_t count, std::vector<int64_t>* blocks);
  // Returns `blocks` to the pool and clears it.
  void give_back(std::vector<int64_t>* blocks);

  // Per layer [blocks * block_size, kv_heads, head_dim] in the model's dtype and device.
  std::vector<at::Tensor>& keys() { return k_; }
  std::vector<at::Tensor>& values() { return v_; }

 private:
  const int64_t block_size_;
  const int64_t total_;
  std::vector<at::Tensor> k_, v_;  // allocated once; written only by the scheduler thread
  std::mutex mu_;
  std::vector<int64_t> free_;      // guarded by mu_
  std::atomic<int64_t> used_{0};   // total_ - free_.size(), readable without mu_
};

// One forward pass of B rows of T new positions each, row b's new positions starting at
// past[b]: writes their keys and values into their slots and returns, for attention, the keys
// and values of positions [0, past[b] + T) of every row gathered into [B, kv_heads, L, head_dim]
// (L the longest; shorter rows padded with slot 0, which the pass's mask hides).
class PagedPass : public model::KVStore {
 public:
  // `tables` holds each row's blocks; slots and mask are built on the model's device.
  PagedPass(BlockPool& pool, const std::vector<const std::vector<int64_t>*>& tables, const std::vector<int64_t>& past,
            int64_t T, at::Device device);

  // [B, 1, T, L] bool: query t of row b sees keys at positions <= past[b] + t.
  const at::Tensor& attention_mask() const { return mask_; }

  std::pair<at::Tensor, at::Tensor> append(size_t layer, const at::Tensor& k, const at::Tensor& v) override;
  void advance(int64_t) override {}

 private:
  BlockPool& pool_;
  int64_t B_ = 0, T_ = 0, L_ = 0;
  at::Tensor write_slots_;  // [B * T] int64
  at::Tensor read_slots_;   // [B * L] int64
  at::Tensor mask_;
};

}  // namespace trainer::engine::serve
