#include <cstdio>
#include <cstring>

#include "common/version.h"
#include "engine/engine.h"
#include "job/job.h"

namespace trainer::job {

int job_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    auto info = engine::runtime_info();
    std::printf("trainer-job %s (libtorch %s, cuda %s)\n", version_string(), info.torch_version.c_str(),
                info.cuda_available ? "yes" : "no");
    return 0;
  }
  std::fprintf(stderr, "usage: trainer-job --version\n");
  return 2;
}

}  // namespace trainer::job
