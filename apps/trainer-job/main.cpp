#include "job/job.h"

#include <cstdlib>  // defines __GLIBC__ on glibc
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

// A training step allocates and frees tensors of tens of MB (logits over a 151k vocabulary, their
// softmax) many times over. glibc serves each from a fresh mmap and unmaps it on free, so every
// one of them is paid again in page faults: a CPU generation spent more time in the kernel than
// computing (bench/rl/README.md). The heap grows in large steps and keeps what it freed for the
// next step (the job's footprint repeats every step anyway), and blocks below 32 MiB come from it.
void tune_allocator() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 32 << 20;   // glibc's upper limit on 64-bit
  constexpr int kTrimThreshold = 1 << 30;    // return freed heap to the system above 1 GiB only
  constexpr int kTopPad = 256 << 20;         // grow the heap in 256 MiB steps
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
  mallopt(M_TOP_PAD, kTopPad);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  tune_allocator();
  return trainer::job::job_main(argc, argv);
}
