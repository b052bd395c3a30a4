// Reading a rank's world from its environment (declared in dist/world.h).
#include <cstdlib>
#include <string>

#include "engine/dist/world.h"

namespace trainer::engine::dist {
namespace {

Result<int> integer_var(const std::function<const char*(const char*)>& getenv, const char* name, int min) {
  const char* v = getenv(name);
  const std::string text = v == nullptr ? "" : v;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < min || value > 65535) {
    return invalid_field(name, "'" + text + "' is not an integer from " + std::to_string(min) + " to 65535");
  }
  return static_cast<int>(value);
}

}  // namespace

Result<World> world_from_environment(const std::function<const char*(const char*)>& getenv) {
  World w;
  const char* rank = getenv(kRankVar);
  if (rank == nullptr || *rank == '\0') return w;
  TRAINER_ASSIGN_OR_RETURN(w.rank, integer_var(getenv, kRankVar, 0));
  TRAINER_ASSIGN_OR_RETURN(w.size, integer_var(getenv, kWorldSizeVar, 1));
  if (w.rank >= w.size) {
    return invalid_field(kRankVar, std::to_string(w.rank) + " is not below WORLD_SIZE " + std::to_string(w.size));
  }
  if (const char* addr = getenv(kMasterAddrVar); addr != nullptr && *addr != '\0') w.master_addr = addr;
  TRAINER_ASSIGN_OR_RETURN(w.master_port, integer_var(getenv, kMasterPortVar, 1));
  return w;
}

}  // namespace trainer::engine::dist
