#include <cstdio>

#include "job/commands.h"

namespace trainer::job {

int cmd_run(int, char**) {
  std::fprintf(stderr, "trainer-job run: not built yet\n");
  return 1;
}

}  // namespace trainer::job
