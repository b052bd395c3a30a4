// Data parallelism's collectives over c10d's Gloo process group (declared in dist/group.h and
// dist/world.h). Built with USE_C10D_GLOO and Debian's Gloo headers (libgloo-dev); the symbols
// are the torch wheel's. Without the headers, group_unavailable.cpp stands in.
#include "engine/dist/group.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>

#include "engine/engine_error.h"

namespace trainer::engine::dist {
namespace {

// How long a rank waits for the others at the rendezvous and in one collective: a rank that
// died closes its connections at once, so this bounds only a rank that hangs.
constexpr std::chrono::minutes kTimeout{10};

}  // namespace

class Rendezvous {
 public:
  explicit Rendezvous(c10::intrusive_ptr<c10d::TCPStore> store) : store(std::move(store)) {}
  c10::intrusive_ptr<c10d::TCPStore> store;
};

Result<std::shared_ptr<Rendezvous>> host_rendezvous(int world_size) {
  try {
    c10d::TCPStoreOptions o;
    o.port = 0;  // ephemeral: the kernel picks a free one, the ranks are told which
    o.isServer = true;
    o.numWorkers = static_cast<size_t>(world_size);
    o.waitWorkers = false;  // the other ranks start after this returns
    o.timeout = kTimeout;
    return std::make_shared<Rendezvous>(c10::make_intrusive<c10d::TCPStore>(kLoopback, o));
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, std::string("hosting the ranks' rendezvous on ") + kLoopback + ": " + e.what());
  }
}

int rendezvous_port(const Rendezvous& rendezvous) { return rendezvous.store->getPort(); }

struct Group::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;

  // A broken collective (a rank died, or hangs past the timeout) is Unavailable: the job then
  // looks for the rank that caused it (job/ranks.h).
  void allreduce(at::Tensor& flat, c10d::ReduceOp op) {
    std::vector<at::Tensor> one{flat};
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    try {
      gloo->allreduce(one, options)->wait();
    } catch (const std::exception& e) {
      throw EngineError(StatusCode::kUnavailable, "a collective with the other ranks failed: " + std::string(e.what()));
    }
  }
};

Group::Group(World world, std::unique_ptr<Impl> impl) : world_(std::move(world)), impl_(std::move(impl)) {}
Group::~Group() = default;

std::unique_ptr<Group> Group::join(const World& world, std::shared_ptr<Rendezvous> hosted) {
  auto impl = std::make_unique<Impl>();
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  try {
    if (hosted) {
      impl->store = hosted->store;
    } else {
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(world.master_port);
      o.isServer = false;
      o.timeout = kTimeout;
      impl->store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, o);
    }
    auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(kLoopback));
    impl->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, world.rank, world.size, options);
  } catch (const std::exception& e) {
    throw EngineError(StatusCode::kUnavailable, "rank " + std::to_string(world.rank) + " of " +
                                                    std::to_string(world.size) + ": joining the ranks at " + where +
                                                    ": " + e.what());
  }
  return std::unique_ptr<Group>(new Group(world, std::move(impl)));
}

void Group::sum(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<at::Tensor> parts;
  parts.reserve(tensors.size());
  for (const auto& t : tensors) parts.push_back(t.detach().reshape({-1}).to(at::kCPU, at::kFloat));
  at::Tensor flat = at::cat(parts);
  impl_->allreduce(flat, c10d::ReduceOp::SUM);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t n = t.numel();
    t.detach().copy_(flat.slice(0, offset, offset + n).view(t.sizes()));
    offset += n;
  }
}

std::vector<double> Group::sum(const std::vector<double>& values) {
  if (values.empty()) return values;
  at::Tensor flat = at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  impl_->allreduce(flat, c10d::ReduceOp::SUM);
  auto a = flat.accessor<double, 1>();
  std::vector<double> out(values.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = a[static_cast<int64_t>(i)];
  return out;
}

std::vector<bool> Group::any(const std::vector<bool>& flags) {
  std::vector<double> v(flags.size());
  for (size_t i = 0; i < flags.size(); ++i) v[i] = flags[i] ? 1.0 : 0.0;
  const std::vector<double> total = sum(v);
  std::vector<bool> out(flags.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = total[i] > 0;
  return out;
}

}  // namespace trainer::engine::dist
