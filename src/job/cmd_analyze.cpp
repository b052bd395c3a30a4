// trainer-job analyze: measures a dataset under a model's tokenizer and chat template, so a user
// can choose maxSeqLength before spending a GPU (the service's measure route prints the same).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "job/commands.h"

namespace trainer::job {
namespace {

constexpr int kDefaultMaxSeqLength = 2048;  // config.maxSeqLength's default

constexpr const char* kUsage =
    "usage: trainer-job analyze --model DIR --data FILE.jsonl [--max-seq-length N] [-o text|json]\n"
    "\n"
    "Renders every row with the model's chat template, tokenizes it, and prints the token length\n"
    "distribution and how the rows fit maxSeqLength (default 2048): rows over it (cut to it), rows\n"
    "exactly at it, and rows left with nothing to train once cut (dropped from training).\n"
    "DIR is a model folder with tokenizer.json and tokenizer_config.json.\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "trainer-job analyze: %s\n", message.c_str());
  return 1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainer-job analyze: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int cmd_analyze(int argc, char** argv) {
  std::string model, data_path, output = "text";
  int max_seq_length = kDefaultMaxSeqLength;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--model" || arg == "--tokenizer") {
      if (!value(model)) return usage_error(arg + ": needs a folder");
    } else if (arg == "--data") {
      if (!value(data_path)) return usage_error("--data: needs a JSONL file");
    } else if (arg == "--max-seq-length") {
      std::string text;
      if (!value(text)) return usage_error("--max-seq-length: needs a number");
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || n <= 0 || n > (1L << 30))
        return usage_error("--max-seq-length: must be a positive integer, got '" + text + "'");
      max_seq_length = static_cast<int>(n);
    } else if (arg == "-o" || arg == "--output") {
      if (!value(output) || (output != "json" && output != "text"))
        return usage_error("-o: must be 'text' or 'json'");
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  if (model.empty()) return usage_error("--model DIR is required");
  if (data_path.empty()) return usage_error("--data FILE.jsonl is required");

  engine::DatasetMeasureRequest request;
  request.model_dir = model;
  request.data_path = data_path;
  request.max_seq_length = max_seq_length;
  if (isatty(STDERR_FILENO)) {
    request.progress = [](int64_t done, int64_t total) {
      if (done % 1000 == 0 || done == total) std::fprintf(stderr, "\rtokenizing rows: %lld/%lld", (long long)done, (long long)total);
      if (done == total) std::fputc('\n', stderr);
    };
  }
  auto measured = engine::measure_dataset(request);
  if (!measured.is_ok()) return fail(measured.status().message());
  const engine::DatasetMeasure& m = *measured;

  if (output == "json") {
    nlohmann::ordered_json out;
    out["rows"] = m.rows;
    out["minTokens"] = m.min_tokens;
    out["maxTokens"] = m.max_tokens;
    out["meanTokens"] = m.mean_tokens;
    out["p50"] = m.p50;
    out["p90"] = m.p90;
    out["p99"] = m.p99;
    out["rowsOverMaxSeqLength"] = m.truncated;
    out["rowsAtMaxSeqLength"] = m.exact;
    out["rowsWithNothingToTrain"] = m.dropped;
    out["maxSeqLength"] = max_seq_length;
    out["tokens"] = m.tokens;
    out["trainedTokens"] = m.trained_tokens;
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("dataset         %s\n", data_path.c_str());
  std::printf("rows            %lld\n", (long long)m.rows);
  std::printf("tokens per row  min %lld  p50 %lld  p90 %lld  p99 %lld  max %lld  mean %.1f\n",
              (long long)m.min_tokens, (long long)m.p50, (long long)m.p90, (long long)m.p99,
              (long long)m.max_tokens, m.mean_tokens);
  std::printf("maxSeqLength    %d: %lld rows over it (cut), %lld exactly at it, %lld left with nothing to train (dropped)\n",
              max_seq_length, (long long)m.truncated, (long long)m.exact, (long long)m.dropped);
  std::printf("trained tokens  %lld of %lld tokens after fitting\n", (long long)m.trained_tokens, (long long)m.tokens);
  return 0;
}

}  // namespace trainer::job
