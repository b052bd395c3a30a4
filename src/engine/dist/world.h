// Data parallelism's ranks as a job sees them: which rank this process is, how many there are,
// and where rank 0's rendezvous listens. Torch-free: trainer-job reads the world from its
// environment and hands it to the engine (engine.h, TrainRequest). docs/data-parallel.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace trainer::engine::dist {

// The environment variables naming a rank, as torch's launchers name them.
inline constexpr const char* kRankVar = "RANK";
inline constexpr const char* kWorldSizeVar = "WORLD_SIZE";
inline constexpr const char* kMasterAddrVar = "MASTER_ADDR";
inline constexpr const char* kMasterPortVar = "MASTER_PORT";
// Rank 0 hosts the rendezvous on loopback: every rank of a job runs on one host.
inline constexpr const char* kLoopback = "127.0.0.1";

struct World {
  int rank = 0;                          // this process (RANK); 0 writes events, metrics, checkpoints
  int size = 1;                          // processes of the job, one per device (WORLD_SIZE)
  std::string master_addr = kLoopback;   // rank 0's rendezvous host (MASTER_ADDR)
  int master_port = 0;                   // its port (MASTER_PORT); 0 = rank 0 has not hosted it yet
  bool distributed() const { return size > 1; }
};

// The world of a started rank: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; a single-process world
// when RANK is unset. InvalidArgument names the malformed variable.
Result<World> world_from_environment(const std::function<const char*(const char*)>& getenv);

// Rank 0's rendezvous: a key-value store on loopback that the other ranks connect to, hosted
// before they start (so its port is known and never raced for). Opaque outside the engine.
class Rendezvous;

// Hosts the rendezvous of `world_size` ranks on an ephemeral loopback port. Thread-compatible.
Result<std::shared_ptr<Rendezvous>> host_rendezvous(int world_size);
// The port the other ranks connect to (MASTER_PORT).
int rendezvous_port(const Rendezvous& rendezvous);

}  // namespace trainer::engine::dist
