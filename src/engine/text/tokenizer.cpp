#include "engine/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainer_text.h"

namespace trainer::engine::text {

// Owns the Rust objects; freed when the last Tokenizer / ChatTemplate copy goes.
class TextHandle {
 public:
  TextHandle() = default;
  TextHandle(const TextHandle&) = delete;
  TextHandle& operator=(const TextHandle&) = delete;
  ~TextHandle() {
    if (tokenizer) tt_tokenizer_free(tokenizer);
    if (chat_template) tt_template_free(chat_template);
  }
  TtTokenizer* tokenizer = nullptr;
  TtTemplate* chat_template = nullptr;
};

namespace {

const uint8_t* bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// Takes ownership of a Rust string.
std::string take(TtString s) {
  std::string out = s.ptr ? std::string(reinterpret_cast<const char*>(s.ptr), s.len) : std::string();
  tt_string_free(s);
  return out;
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument(path.string() + ": cannot read the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token field of tokenizer_config.json: a string, an AddedToken object
// ({"content": ...}) or null.
Result<std::optional<std::string>> token_field(const nlohmann::json& config, const std::string& field,
                                               const std::string& file) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return std::optional<std::string>((*it)["content"].get<std::string>());
  return invalid_argument(file + ": " + field + ": expected a string or an object with \"content\", got " +
                          it->dump());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ChatTemplate

Result<Rendered> ChatTemplate::render_with_spans(const Json& messages, const Json& tools,
                                                 const RenderOptions& options) const {
  if (!messages.is_array()) return invalid_argument("messages: must be an array of messages");
  if (!tools.is_null() && !tools.is_array()) return invalid_argument("tools: must be an array or null");
  Json context = Json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  for (const auto& [key, value] : special_vars_.items()) context[key] = value;
  if (options.extra.is_object()) {
    for (const auto& [key, value] : options.extra.items()) context[key] = value;
  } else if (!options.extra.is_null()) {
    return invalid_argument("template variables: must be an object");
  }
  const std::string text = context.dump(-1, ' ', false, Json::error_handler_t::replace);
  TtString out{}, err{};
  TtSpans spans{};
  if (tt_template_render(handle_->chat_template, bytes(text), text.size(), &out, &spans, &err) != 0)
    return invalid_argument(take(err));
  Rendered rendered;
  rendered.text = take(out);
  for (size_t i = 0; i < spans.len; ++i) rendered.generation_spans.emplace_back(spans.data[2 * i], spans.data[2 * i + 1]);
  tt_spans_free(spans);
  return rendered;
}

Result<std::string> ChatTemplate::render(const Json& messages, const Json& tools,
                                         const RenderOptions& options) const {
  auto rendered = render_with_spans(messages, tools, options);
  if (!rendered.is_ok()) return rendered.status();
  return std::move(rendered->text);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Result<Tokenizer> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path folder(dir);
  const fs::path json_path = folder / "tokenizer.json";
  if (!fs::exists(json_path))
    return invalid_argument(json_path.string() +
                            ": not found; a model folder needs the tokenizer.json of a Hugging Face fast tokenizer");
  auto json_text = read_file(json_path);
  if (!json_text.is_ok()) return json_text.status();

  Tokenizer tok;
  tok.dir_ = dir;
  tok.handle_ = std::make_shared<TextHandle>();
  TtString err{};
  if (tt_tokenizer_from_json(bytes(*json_text), json_text->size(), &tok.handle_->tokenizer, &err) != 0)
    return invalid_argument(json_path.string() + ": " + take(err));
  tok.vocab_size_ = tt_tokenizer_vocab_size(tok.handle_->tokenizer);

  TtString added{};
  tt_tokenizer_added_tokens(tok.handle_->tokenizer, &added);
  for (const auto& token : nlohmann::json::parse(take(added))) {
    if (token["special"].get<bool>()) tok.special_ids_.push_back(token["id"].get<int32_t>());
  }
  std::sort(tok.special_ids_.begin(), tok.special_ids_.end());

  // tokenizer_config.json: special tokens and the chat template. Optional.
  const fs::path config_path = folder / "tokenizer_config.json";
  const std::string config_file = config_path.string();
  nlohmann::json config = nlohmann::json::object();
  if (fs::exists(config_path)) {
    auto text = read_file(config_path);
    if (!text.is_ok()) return text.status();
    try {
      config = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::parse_error& e) {
      return invalid_argument(config_file + ": not valid JSON: " + e.what());
    }
    if (!config.is_object()) return invalid_argument(config_file + ": must be a JSON object");
  }

  struct Named {
    const char* field;
    std::optional<std::string>* text;
    std::optional<int32_t>* id;
  };
  std::optional<std::string> sep, cls, mask;
  std::optional<int32_t> unused_unk, unused_sep, unused_cls, unused_mask;
  const Named named[] = {
      {"bos_token", &tok.special_.bos, &tok.bos_id_},   {"eos_token", &tok.special_.eos, &tok.eos_id_},
      {"unk_token", &tok.special_.unk, &unused_unk},    {"sep_token", &sep, &unused_sep},
      {"pad_token", &tok.special_.pad, &tok.pad_id_},   {"cls_token", &cls, &unused_cls},
      {"mask_token", &mask, &unused_mask},
  };
  Json special_vars = Json::object();
  for (const auto& n : named) {
    auto value = token_field(config, n.field, config_file);
    if (!value.is_ok()) return value.status();
    *n.text = *value;
    if (!value->has_value()) continue;
    special_vars[n.field] = **value;
    auto id = tok.token_to_id(**value);
    if (!id)
      return invalid_argument(config_file + ": " + n.field + ": \"" + **value + "\" is not a token of " +
                              json_path.string() + "; the tokenizer files do not belong together");
    *n.id = *id;
  }
  for (const char* field : {"additional_special_tokens", "extra_special_tokens"}) {
    auto it = config.find(field);
    if (it == config.end() || !it->is_array()) continue;
    for (const auto& t : *it) {
      if (t.is_string()) tok.special_.additional.push_back(t.get<std::string>());
      else if (t.is_object() && t.contains("content")) tok.special_.additional.push_back(t["content"].get<std::string>());
    }
  }
  if (!tok.pad_id_) tok.pad_id_ = tok.eos_id_;

  // The chat template: chat_template.jinja beside the config wins, as in transformers.
  std::optional<std::string> source;
  std::string source_name = config_file + ": chat_template";
  const fs::path jinja_path = folder / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    auto text = read_file(jinja_path);
    if (!text.is_ok()) return text.status();
    source = *text;
    source_name = jinja_path.string();
  } else if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      for (const auto& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template"))
          source = entry["template"].get<std::string>();
      }
      if (!source) return invalid_argument(source_name + ": a list of templates without one named \"default\"");
    } else {
      return invalid_argument(source_name + ": expected a string, got " + it->dump());
    }
  }
  if (source) {
    ChatTemplate chat;
    chat.handle_ = std::make_shared<TextHandle>();
    TtString terr{};
    if (tt_template_new(bytes(*source), source->size(), &chat.handle_->chat_template, &terr) != 0)
      return invalid_argument(source_name + ": " + take(terr));
    chat.source_ = *source;
    chat.has_generation_markers_ = tt_template_has_generation(chat.handle_->chat_template) != 0;
    chat.special_vars_ = std::move(special_vars);
    tok.chat_template_ = std::move(chat);
  }
  return tok;
}

Result<Encoding> Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  TtIds ids{};
  TtString err{};
  if (tt_tokenizer_encode(handle_->tokenizer, bytes(text), text.size(), add_special_tokens ? 1 : 0, 1, &ids, &err) != 0)
    return invalid_argument(take(err));
  Encoding out;
  out.ids.assign(ids.ids, ids.ids + ids.len);
  out.offsets.reserve(ids.len);
  for (size_t i = 0; i < ids.len; ++i) out.offsets.emplace_back(ids.offsets[2 * i], ids.offsets[2 * i + 1]);
  tt_ids_free(ids);
  return out;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  TtIds ids{};
  TtString err{};
  if (tt_tokenizer_encode(handle_->tokenizer, bytes(text), text.size(), add_special_tokens ? 1 : 0, 0, &ids, &err) != 0)
    return invalid_argument(take(err));
  std::vector<int32_t> out(ids.ids, ids.ids + ids.len);
  tt_ids_free(ids);
  return out;
}

Result<std::string> Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  TtString out{}, err{};
  if (tt_tokenizer_decode(handle_->tokenizer, ids.data(), ids.size(), skip_special_tokens ? 1 : 0, &out, &err) != 0)
    return invalid_argument(take(err));
  return take(out);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const int64_t id = tt_tokenizer_token_to_id(handle_->tokenizer, bytes(token), token.size());
  if (id < 0) return std::nullopt;
  return static_cast<int32_t>(id);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  TtString out{};
  const int found = tt_tokenizer_id_to_token(handle_->tokenizer, id, &out);
  std::string text = take(out);
  if (!found) return std::nullopt;
  return text;
}

Result<std::vector<int32_t>> Tokenizer::encode_chat(const Json& messages, const Json& tools,
                                                    const RenderOptions& options) const {
  if (!chat_template_)
    return invalid_argument(dir_ + "/tokenizer_config.json: chat_template: missing; the model folder has no chat template");
  auto text = chat_template_->render(messages, tools, options);
  if (!text.is_ok()) return text.status();
  return encode(*text, /*add_special_tokens=*/false);
}

bool Tokenizer::is_special(int32_t id) const {
  return std::binary_search(special_ids_.begin(), special_ids_.end(), id);
}

}  // namespace trainer::engine::text
