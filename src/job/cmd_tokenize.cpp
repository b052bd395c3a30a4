// trainer-job tokenize: the token ids of text under a model folder's tokenizer, or how one
// dataset row is rendered, tokenized and masked for training.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "job/commands.h"

namespace trainer::job {
namespace {

constexpr const char* kUsage =
    "usage: trainer-job tokenize --tokenizer DIR [--no-special | --chat | --decode]\n"
    "\n"
    "Reads stdin and prints JSON on stdout:\n"
    "  (default)     the text's token ids as a JSON array, with the special tokens the tokenizer\n"
    "                adds (as transformers' tokenizer(text))\n"
    "  --no-special  the same without added special tokens (add_special_tokens=False)\n"
    "  --chat        one dataset row ({\"messages\": [...]} or prompt/completion): {\"text\", \"input_ids\",\n"
    "                \"trained\"} as training renders it, trained = 1 where the loss is taken\n"
    "  --decode      a JSON array of token ids: the decoded text as a JSON string\n"
    "DIR is a model folder with tokenizer.json (and tokenizer_config.json for --chat).\n";

int fail(const std::string& message) {
  std::fprintf(stderr, "trainer-job tokenize: %s\n", message.c_str());
  return 1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainer-job tokenize: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

std::string dump(const nlohmann::ordered_json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  std::string dir;
  enum class Mode { kEncode, kNoSpecial, kChat, kDecode } mode = Mode::kEncode;
  int modes = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--tokenizer" || arg == "--model") {
      if (i + 1 >= argc) return usage_error(arg + ": needs a folder");
      dir = argv[++i];
    } else if (arg == "--no-special") {
      mode = Mode::kNoSpecial;
      ++modes;
    } else if (arg == "--chat") {
      mode = Mode::kChat;
      ++modes;
    } else if (arg == "--decode") {
      mode = Mode::kDecode;
      ++modes;
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  if (dir.empty()) return usage_error("--tokenizer DIR is required");
  if (modes > 1) return usage_error("--no-special, --chat and --decode exclude each other");

  auto tok = engine::TextCodec::load(dir);
  if (!tok.is_ok()) return fail(tok.status().message());
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());

  switch (mode) {
    case Mode::kEncode:
    case Mode::kNoSpecial: {
      auto ids = tok->encode(input, mode == Mode::kEncode);
      if (!ids.is_ok()) return fail(ids.status().message());
      std::printf("%s\n", dump(*ids).c_str());
      return 0;
    }
    case Mode::kDecode: {
      std::vector<int32_t> ids;
      try {
        ids = nlohmann::json::parse(input).get<std::vector<int32_t>>();
      } catch (const nlohmann::json::exception& e) {
        return fail(std::string("stdin: expected a JSON array of token ids: ") + e.what());
      }
      auto text = tok->decode(ids);
      if (!text.is_ok()) return fail(text.status().message());
      std::printf("%s\n", dump(*text).c_str());
      return 0;
    }
    case Mode::kChat: {
      // A row may span several lines on stdin; parse it as one JSON value, then as a JSONL row.
      std::string row;
      try {
        row = nlohmann::ordered_json::parse(input).dump();
      } catch (const nlohmann::json::parse_error& e) {
        return fail(std::string("stdin: not valid JSON: ") + e.what());
      }
      auto rendered = tok->render_row(row, "stdin");
      if (!rendered.is_ok()) return fail(rendered.status().message());
      nlohmann::ordered_json out;
      out["text"] = rendered->text;
      out["input_ids"] = rendered->input_ids;
      out["trained"] = rendered->trained;
      std::printf("%s\n", dump(out).c_str());
      return 0;
    }
  }
  return 1;
}

}  // namespace trainer::job
