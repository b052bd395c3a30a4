#include <cstdio>

#include "job/commands.h"

namespace trainer::job {

int cmd_score(int, char**) {
  std::fprintf(stderr, "trainer-job score: not built yet\n");
  return 1;
}

}  // namespace trainer::job
