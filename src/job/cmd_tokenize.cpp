#include <cstdio>

#include "job/commands.h"

namespace trainer::job {

int cmd_tokenize(int, char**) {
  std::fprintf(stderr, "trainer-job tokenize: not built yet\n");
  return 1;
}

}  // namespace trainer::job
