// The serving engine's key/value cache: fixed-size blocks from a pool allocated once at start,
// and the KVStore a forward pass over several requests writes and reads them through. Internal
// to the engine (includes torch).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/model/model.h"

namespace trainer::engine::serve {

// A full block of prompt positions, named by everything its keys and values depend on: the
// adapter that computed them (its attach generation; 0 is the base model) and every token from
// the start of the prompt to the block's end, chained block by block.
struct PrefixBlock {
  uint64_t key = 0;                // hash of (parent, adapter, tokens)
  uint64_t parent = 0;             // the previous block's key; 0 for the first
  uint64_t adapter = 0;
  std::vector<int64_t> tokens;     // the block's own tokens, compared on a hit (no false sharing)
};

// The PrefixBlocks of the first `blocks` full blocks of `prompt`, computed by `adapter`.
std::vector<PrefixBlock> prefix_blocks(std::span<const int64_t> prompt, int64_t block_size, int64_t blocks,
                                       uint64_t adapter);

// Every layer's keys and values in `blocks` blocks of `block_size` positions. Position p of a
// request lives in slot blocks[p / block_size] * block_size + p % block_size.
//
// Prefix sharing: a block whose positions a request has computed may be published under its
// PrefixBlock; a later request whose prompt starts with the same blocks (same adapter) holds
// those blocks too instead of computing them (`reuse`). Blocks are counted by their holders; one
// that nobody holds but that is published stays cached, the least recently released first to be
// taken back when free blocks run out. A held block is never written again: a request writes
// only at positions after what it reused.
class BlockPool {
 public:
  BlockPool(const model::CausalLM& model, int64_t blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t total() const { return total_; }
  int64_t used() const { return used_.load(); }      // held by a request
  int64_t cached() const { return cached_.load(); }  // held by none, kept for their prefix
  int64_t available() const { return total_ - used(); }  // free or cached: what take() can give

  // `count` blocks (free ones first, then the oldest cached), or false (nothing taken).
  bool take(int64_t count, std::vector<int64_t>* blocks);
  // Releases `blocks` and clears it; published blocks stay cached, the others are free.
  void give_back(std::vector<int64_t>* blocks);
  // Holds the published blocks of the longest prefix of `wanted` (in order), appending them to
  // `blocks`; returns how many.
  int64_t reuse(const std::vector<PrefixBlock>& wanted, std::vector<int64_t>* blocks);
  // `block` (held by the caller) now holds `what`'s keys and values; no-op when another block
  // already holds them.
  void publish(const PrefixBlock& what, int64_t block);

  // Per layer [blocks * block_size, kv_heads, head_dim] in the model's dtype and device.
  std::vector<at::Tensor>& keys() { return k_; }
  std::vector<at::Tensor>& values() { return v_; }

 private:
  void unpublish_locked(int64_t block);

  const int64_t block_size_;
  const int64_t total_;
  std::vector<at::Tensor> k_, v_;  // allocated once; written only by the scheduler thread
  std::mutex mu_;
  // Guarded by mu_:
  std::vector<int64_t> free_;                         // neither held nor published
  std::vector<int32_t> holders_;                      // per block
  std::vector<PrefixBlock> published_;                // per block; key 0: not published
  std::unordered_map<uint64_t, int64_t> by_key_;      // published key -> block
  std::list<int64_t> idle_;                           // published, held by none; oldest first
  std::vector<std::list<int64_t>::iterator> idle_at_; // per block, valid while in idle_
  std::atomic<int64_t> used_{0};    // blocks with holders, readable without mu_
  std::atomic<int64_t> cached_{0};  // idle_.size(), readable without mu_
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
