// trainer-job merge: a PEFT LoRA adapter merged into its base model, written as a Hugging Face
// model folder. trainerd runs it as a tool (Backend::run_tool) for `trainer trained-models
// export --merged`; it also works by hand on any base folder and adapter folder.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"

namespace trainer::job {

namespace {
constexpr const char* kUsage =
    "usage: trainer-job merge --model DIR --adapter DIR --output DIR\n"
    "Writes into --output (which must not exist) the base model folder --model with the PEFT LoRA\n"
    "adapter --adapter merged into its weights (W' = W + scale * B @ A, in the base's dtype, as\n"
    "PEFT's merge_and_unload() does): config.json and the tokenizer files of the base, and one\n"
    "model.safetensors. Prints one JSON object: {\"output\", \"mergedModules\", \"files\"}.\n";
}  // namespace

int cmd_merge(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"model", "adapter", "output"}, {"help"});
  if (args.flags.count("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.error.empty() || !args.has("model") || !args.has("adapter") || !args.has("output")) {
    std::fprintf(stderr, "trainer-job merge: %s\n%s",
                 args.error.empty() ? "--model, --adapter and --output are required" : args.error.c_str(), kUsage);
    return 2;
  }
  engine::MergeRequest req;
  req.model_dir = args.get("model");
  req.adapter_dir = args.get("adapter");
  req.output_dir = args.get("output");
  auto result = engine::merge_adapter(req);
  if (!result.is_ok()) {
    std::fprintf(stderr, "trainer-job merge: %s\n", result.status().message().c_str());
    return 1;
  }
  nlohmann::json out = {{"output", req.output_dir}, {"mergedModules", result->merged_modules}, {"files", result->files}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace trainer::job
