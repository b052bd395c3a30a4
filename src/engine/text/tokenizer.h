// Tokenizer and chat template of a Hugging Face model folder (tokenizer.json,
// tokenizer_config.json), exact to transformers. Implemented over rust/text (the Hugging Face
// `tokenizers` crate and `minijinja`) behind a small C ABI (rust/text/trainer_text.h).
//
//   auto tok = Tokenizer::load("/models/qwen3");            // Result<Tokenizer>
//   auto ids = tok->encode("hello", /*add_special_tokens=*/false);
//   auto text = tok->chat_template().render(messages, tools, {.add_generation_prompt = true});
//
// Thread safety: every const member function may be called from several threads at once.
// Errors are Status values that name the file and the field ("tokenizer_config.json:
// chat_template: ..."), kInvalidArgument for bad model folders.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer::engine::text {

// Token ids with the byte range [begin, end) of the input text each token came from.
// Added tokens and byte-level pieces keep the range of the text they cover.
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::pair<int64_t, int64_t>> offsets;  // byte offsets into the encoded text
};

// The special tokens of tokenizer_config.json (transformers' special_tokens_map), as text.
struct SpecialTokens {
  std::optional<std::string> bos;   // bos_token
  std::optional<std::string> eos;   // eos_token
  std::optional<std::string> pad;   // pad_token
  std::optional<std::string> unk;   // unk_token
  std::vector<std::string> additional;  // additional_special_tokens
};

// Messages, tools and template variables keep the key order they were written in (Python
// dicts do, and `tojson` writes keys in that order), hence ordered_json.
using Json = nlohmann::ordered_json;

struct RenderOptions {
  bool add_generation_prompt = false;  // append the assistant header, as transformers' flag
  // Further template variables (e.g. {"enable_thinking": false}); an object or null.
  Json extra = nullptr;
};

// A rendered conversation and, when the template has {% generation %} markers, the byte
// ranges of the text inside them (what transformers' return_assistant_tokens_mask marks).
struct Rendered {
  std::string text;
  std::vector<std::pair<int64_t, int64_t>> generation_spans;
};

class TextHandle;  // the Rust objects, owned

// The chat_template of tokenizer_config.json, rendered as transformers'
// apply_chat_template(tokenize=False) does: trim_blocks and lstrip_blocks on, Python string
// methods, tojson with json.dumps' separators, raise_exception, strftime_now, namespace;
// special tokens (bos_token, eos_token, ...) as variables.
class ChatTemplate {
 public:
  // messages: a JSON array of {role, content, tool_calls?, ...}; tools: array or null.
  Result<std::string> render(const Json& messages, const Json& tools,
                             const RenderOptions& options = {}) const;
  // The same, also returning the {% generation %} spans (empty when the template has none).
  Result<Rendered> render_with_spans(const Json& messages, const Json& tools,
                                     const RenderOptions& options = {}) const;
  bool has_generation_markers() const { return has_generation_markers_; }
  const std::string& source() const { return source_; }  // the template text

 private:
  friend class Tokenizer;
  ChatTemplate() = default;  // made by Tokenizer::load only
  std::shared_ptr<TextHandle> handle_;
  std::string source_;
  Json special_vars_ = Json::object();  // bos_token, eos_token, ... as text
  bool has_generation_markers_ = false;
};

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and DIR/tokenizer_config.json (the latter optional unless a chat
  // template is needed). Errors name the file and field.
  static Result<Tokenizer> load(const std::string& dir);

  // encode(text, add_special_tokens) as tokenizers' Tokenizer.encode: added tokens in the text
  // are matched, the post-processor adds BOS/EOS when add_special_tokens is true.
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  Result<Encoding> encode_with_offsets(std::string_view text, bool add_special_tokens) const;
  Result<std::string> decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // len(tokenizer) in transformers: the model vocabulary plus added tokens.
  int64_t vocab_size() const { return vocab_size_; }
  // Whether `id` is an added token marked special (skipped by decode(skip_special_tokens)).
  bool is_special(int32_t id) const;

  const SpecialTokens& special_tokens() const { return special_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // pad_token's id; falls back to eos when the config names no pad token (TRL does the same).
  std::optional<int32_t> pad_id() const { return pad_id_; }

  // apply_chat_template(messages, tools=tools, tokenize=True, ...) of transformers: the rendered
  // conversation encoded without added special tokens (the template writes them).
  Result<std::vector<int32_t>> encode_chat(const Json& messages, const Json& tools,
                                           const RenderOptions& options = {}) const;

  bool has_chat_template() const { return chat_template_.has_value(); }
  // Requires has_chat_template().
  const ChatTemplate& chat_template() const { return *chat_template_; }

  const std::string& dir() const { return dir_; }

 private:
  Tokenizer() = default;  // made by load() only
  std::shared_ptr<TextHandle> handle_;
  std::string dir_;
  SpecialTokens special_;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::vector<int32_t> special_ids_;  // sorted
  int64_t vocab_size_ = 0;
  std::optional<ChatTemplate> chat_template_;
};

}  // namespace trainer::engine::text
