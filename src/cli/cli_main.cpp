#include <cstdio>
#include <cstring>

#include "cli/cli.h"
#include "common/version.h"

namespace trainer::cli {

int cli_main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("trainer %s\n", version_string());
    return 0;
  }
  std::fprintf(stderr, "usage: trainer --version\n");
  return 2;
}

}  // namespace trainer::cli
