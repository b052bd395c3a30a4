// Compute backends: where training jobs run (local processes now; Slurm and Ray later).
#pragma once

#include <string>

namespace trainer::backend {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "local", "slurm", "ray"
};

}  // namespace trainer::backend
