// trainer-job score: mean next-token loss of a dataset under a model and optional adapter.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "job/args.h"
#include "job/commands.h"

namespace trainer::job {

namespace {
constexpr const char* kUsage =
    "usage: trainer-job score --model DIR [--adapter DIR] --data FILE.jsonl\n"
    "                         [--max-seq-length N (2048)] [--precision FP32|BF16 (FP32)] [--batch-size N (8)]\n"
    "Prints one JSON object: {\"mean_loss\", \"tokens\", \"rows\", \"token_accuracy\"}; mean_loss is the mean\n"
    "next-token cross-entropy (nats) over the trained (assistant / completion) tokens.\n";

bool parse_positive(const std::string& text, int* out) {
  try {
    size_t used = 0;
    int v = std::stoi(text, &used);
    if (used != text.size() || v <= 0) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

int cmd_score(int argc, char** argv) {
  Args args = parse_args(argc, argv, {"model", "adapter", "data", "max-seq-length", "precision", "batch-size"}, {"help"});
  if (args.flags.count("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.error.empty() || !args.has("model") || !args.has("data")) {
    std::fprintf(stderr, "trainer-job score: %s\n%s", args.error.empty() ? "--model and --data are required" : args.error.c_str(), kUsage);
    return 2;
  }
  engine::ScoreRequest req;
  req.model_dir = args.get("model");
  req.adapter_dir = args.get("adapter");
  req.data_path = args.get("data");
  if (args.has("max-seq-length") && !parse_positive(args.get("max-seq-length"), &req.max_seq_length)) {
    std::fprintf(stderr, "trainer-job score: --max-seq-length must be a positive integer\n");
    return 2;
  }
  if (args.has("batch-size") && !parse_positive(args.get("batch-size"), &req.batch_size)) {
    std::fprintf(stderr, "trainer-job score: --batch-size must be a positive integer\n");
    return 2;
  }
  const std::string precision = args.get("precision", "FP32");
  if (precision == "BF16" || precision == "bf16") {
    req.precision = plan::Precision::kBf16;
  } else if (precision != "FP32" && precision != "fp32") {
    std::fprintf(stderr, "trainer-job score: --precision must be FP32 or BF16, got '%s'\n", precision.c_str());
    return 2;
  }
  auto result = engine::score(req);
  if (!result.is_ok()) {
    std::fprintf(stderr, "trainer-job score: %s\n", result.status().message().c_str());
    return 1;
  }
  nlohmann::json out = {{"mean_loss", result->mean_loss},
                        {"tokens", result->tokens},
                        {"rows", result->rows},
                        {"token_accuracy", result->token_accuracy}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace trainer::job
