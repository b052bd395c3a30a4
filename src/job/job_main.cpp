#include <cstdio>
#include <cstring>

#include "common/version.h"
#include "engine/engine.h"
#include "job/commands.h"
#include "job/job.h"

namespace trainer::job {
namespace {

constexpr const char* kHelp =
    "trainer-job: runs the native training engine.\n"
    "\n"
    "usage: trainer-job COMMAND [options]   (trainer-job COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  run       --plan FILE --output DIR [--events FILE]   train a plan's LoRA adapter (SFT)\n"
    "  score     --model DIR [--adapter DIR] --data FILE     mean next-token loss over trained tokens\n"
    "  evaluate  --spec FILE --output DIR                    answer a dataset's prompts and grade the answers\n"
    "  tokenize  --tokenizer DIR                             token ids of the text on stdin\n"
    "  analyze   --model DIR --data FILE [--max-seq-length N] token lengths of a dataset\n"
    "  serve     --model DIR [--adapter NAME=DIR]... [--port N] an OpenAI-compatible endpoint\n"
    "  merge     --model DIR --adapter DIR --output DIR       the adapter merged into the base: an HF model folder\n"
    "  scan      --data DIR                                  a read-only look at this node (devices, disks, job folders)\n"
    "  --version                                             version, libtorch, CUDA\n";

struct Command {
  const char* name;
  int (*fn)(int, char**);
};

constexpr Command kCommands[] = {
    {"run", cmd_run},
    {"score", cmd_score},
    {"evaluate", cmd_evaluate},
    {"tokenize", cmd_tokenize},
    {"analyze", cmd_analyze},
    {"serve", cmd_serve},
    {"merge", cmd_merge},
    {"scan", cmd_scan},
    {"debug-forward", cmd_debug_forward},
    {"debug-generate", cmd_debug_generate},
    {"debug-rl-loss", cmd_debug_rl_loss},
};

}  // namespace

int job_main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kHelp, stderr);
    return 2;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    auto info = engine::runtime_info();
    std::printf("trainer-job %s (libtorch %s, cuda %s)\n", version_string(), info.torch_version.c_str(),
                info.cuda_available ? "yes" : "no");
    return 0;
  }
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.fn(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "trainer-job: unknown command '%s'\n\n%s", argv[1], kHelp);
  return 2;
}

}  // namespace trainer::job
