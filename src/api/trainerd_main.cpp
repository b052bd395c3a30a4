#include <cstdio>
#include <cstring>

#include "api/api.h"
#include "common/version.h"

namespace trainer::api {

int trainerd_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("trainerd %s\n", version_string());
    return 0;
  }
  std::fprintf(stderr, "usage: trainerd --version\n");
  return 2;
}

}  // namespace trainer::api
