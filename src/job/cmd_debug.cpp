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

namespace trainer::job {

// Hidden test and benchmark hook: trainer-job debug-generate --model DIR --request REQ.json
//                   --output OUT.json [--adapter DIR] [--precision FP32|BF16]
int cmd_debug_generate(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"model", "adapter", "request", "output", "precision"}, {});
  if (!args.error.empty() || !args.has("model") || !args.has("request") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job debug-generate: %s\n",
                 args.error.empty() ? "--model, --request and --output are required" : args.error.c_str());
    return 2;
  }
  engine::DebugGenerateRequest req;
  req.model_dir = args.get("model");
  req.adapter_dir = args.get("adapter");
  req.request_path = args.get("request");
  req.output_path = args.get("output");
  const std::string precision = args.get("precision", "FP32");
  req.precision = (precision == "BF16" || precision == "bf16") ? plan::Precision::kBf16 : plan::Precision::kFp32;
  Status st = engine::debug_generate(req);
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainer-job debug-generate: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

// Hidden test hook: trainer-job debug-rl-loss --model DIR --adapter DIR --inputs IN.safetensors
//                   --settings S.json --output OUT.safetensors
int cmd_debug_rl_loss(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"model", "adapter", "inputs", "settings", "output"}, {});
  if (!args.error.empty() || !args.has("model") || !args.has("adapter") || !args.has("inputs") ||
      !args.has("settings") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job debug-rl-loss: %s\n",
                 args.error.empty() ? "--model, --adapter, --inputs, --settings and --output are required"
                                    : args.error.c_str());
    return 2;
  }
  engine::DebugRlLossRequest req;
  req.model_dir = args.get("model");
  req.adapter_dir = args.get("adapter");
  req.inputs_path = args.get("inputs");
  req.settings_path = args.get("settings");
  req.output_path = args.get("output");
  Status st = engine::debug_rl_loss(req);
  if (!st.is_ok()) {
    std::fprintf(stderr, "trainer-job debug-rl-loss: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace trainer::job
