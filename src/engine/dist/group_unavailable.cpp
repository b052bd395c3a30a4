// Data parallelism in a build without Gloo's headers (libgloo-dev absent at configure time, as on
// a GPU machine with no registry): a world of one trains as ever; asking for several ranks is an
// error that says what the build lacks. The Gloo build is group_gloo.cpp.
#include "engine/dist/group.h"

#include "engine/engine_error.h"

namespace trainer::engine::dist {
namespace {

constexpr const char* kNotBuilt =
    "execution.gpus: data parallelism was not built: Gloo's headers (Debian's libgloo-dev) were missing when "
    "the engine was configured; install them and rebuild, or train with execution.gpus 1";

}  // namespace

class Rendezvous {};
struct Group::Impl {};

Result<std::shared_ptr<Rendezvous>> host_rendezvous(int /*world_size*/) {
  return Status(StatusCode::kFailedPrecondition, kNotBuilt);
}

int rendezvous_port(const Rendezvous& /*rendezvous*/) { return 0; }

Group::Group(World world, std::unique_ptr<Impl> impl) : world_(std::move(world)), impl_(std::move(impl)) {}
Group::~Group() = default;

std::unique_ptr<Group> Group::join(const World& /*world*/, std::shared_ptr<Rendezvous> /*hosted*/) {
  throw EngineError(StatusCode::kFailedPrecondition, kNotBuilt);
}

void Group::sum(const std::vector<at::Tensor>& /*tensors*/) { throw EngineError(StatusCode::kInternal, kNotBuilt); }

std::vector<double> Group::sum(const std::vector<double>& /*values*/) {
  throw EngineError(StatusCode::kInternal, kNotBuilt);
}

std::vector<bool> Group::any(const std::vector<bool>& /*flags*/) { throw EngineError(StatusCode::kInternal, kNotBuilt); }

}  // namespace trainer::engine::dist
