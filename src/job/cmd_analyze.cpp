#include <cstdio>

#include "job/commands.h"

namespace trainer::job {

int cmd_analyze(int, char**) {
  std::fprintf(stderr, "trainer-job analyze: not built yet\n");
  return 1;
}

}  // namespace trainer::job
