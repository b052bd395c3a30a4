// The collectives data-parallel training needs, over torch's c10d Gloo process group on
// loopback; CUDA tensors travel through host memory (see docs/data-parallel.md on NCCL).
// Internal to the engine (includes torch).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <memory>
#include <vector>

#include "engine/dist/world.h"

namespace trainer::engine::dist {

class Group {
 public:
  // Joins the ranks of `world`: rank 0 passes the rendezvous it hosts (host_rendezvous), the
  // others connect to world.master_addr:master_port. Blocks until every rank has joined or the
  // timeout passes; throws EngineError (kUnavailable) naming the rendezvous on failure.
  static std::unique_ptr<Group> join(const World& world, std::shared_ptr<Rendezvous> hosted);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return world_.rank; }
  int size() const { return world_.size; }

  // The collectives throw EngineError kUnavailable when another rank is gone.
  // Sums `tensors` across the ranks, in place (one flat float32 buffer on the wire; each tensor
  // keeps its dtype and device). Undefined tensors are not allowed.
  void sum(const std::vector<at::Tensor>& tensors);
  // Sums plain numbers across the ranks (float64).
  std::vector<double> sum(const std::vector<double>& values);
  // For each flag, whether any rank set it.
  std::vector<bool> any(const std::vector<bool>& flags);

 private:
  struct Impl;
  Group(World world, std::unique_ptr<Impl> impl);
  World world_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::engine::dist
