// trainer-job debug-forward: the hidden test hook of the parity tests (tests/python/engine).
#include <cstdio>
#include <string>

#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"

namespace trainer::job {

// Hidden test hook: trainer-job debug-forward --model DIR --inputs IN.safetensors --output OUT.safetensors
//                   [--adapter DIR] [--grads] [--precision FP32|BF16]
int cmd_debug_forward(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"model", "adapter", "inputs", "output", "precision"}, {"grads"});
  if (!args.error.empty() || !args.has("model") || !args.has("inputs") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job debug-forward: %s\n",
                 args.error.empty() ? "--model, --inputs and --output are required" : args.error.c_str());
    return 2;
  }
  engine::DebugForwardRequest req;
  req.model_dir = args.get("model");
  req.adapter_dir = args.get("adapter");
  req.inputs_path = args.get("inputs");
  req.output_path = args.get("output");
  req.grads = args.flags.count("grads") != 0;
  const std::string precision = args.get("precision", "FP32");
  req.precision = (precision == "BF16" || precision == "bf16") ? plan::Precision::kBf16 : plan::Precision::kFp32;
  Status st = engine::debug_forward(req);
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainer-job debug-forward: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace trainer::job
