// Replies of external graders (declared in grading/verdict.h).
#include "grading/verdict.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/json_parse.h"

namespace trainer::grading {
namespace {

using json = nlohmann::json;

// The end (exclusive) of the balanced bracket group starting at `start`, skipping strings;
// npos when unbalanced.
size_t balanced_end(std::string_view s, size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<json> first_balanced(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '{' && text[i] != '[') continue;
    const size_t end = balanced_end(text, i);
    if (end == std::string_view::npos) continue;
    auto parsed = parse_json(text.substr(i, end - i), "completion");
    if (parsed.is_ok() && (parsed->is_object() || parsed->is_array())) return *parsed;
  }
  return std::nullopt;
}

std::optional<double> in_unit_range(double x) {
  if (!std::isfinite(x) || x < 0.0 || x > 1.0) return std::nullopt;
  return x;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// A decimal number at s[i...]; its value and the index after it.
std::optional<std::pair<double, size_t>> number_at(std::string_view s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
  const size_t digits = j;
  while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
  if (j == digits || (j == digits + 1 && s[digits] == '.')) return std::nullopt;
  const std::string text(s.substr(i, j - i));
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  return std::make_pair(x, i + static_cast<size_t>(end - text.c_str()));
}

bool starts_with_word(std::string_view s, size_t i, std::string_view word) {
  if (s.size() - std::min(i, s.size()) < word.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(s[i + k])) != word[k]) return false;
  }
  return true;
}

// A number at s[i...] with an optional "/ N" or "out of N"; the value and the index after it.
std::optional<std::pair<double, size_t>> score_at(std::string_view s, size_t i) {
  auto n = number_at(s, i);
  if (!n) return std::nullopt;
  size_t j = skip_space(s, n->second);
  size_t after_denominator_word = std::string_view::npos;
  if (j < s.size() && s[j] == '/') after_denominator_word = j + 1;
  else if (starts_with_word(s, j, "out of")) after_denominator_word = j + 6;
  if (after_denominator_word != std::string_view::npos) {
    auto d = number_at(s, skip_space(s, after_denominator_word));
    if (d && d->first > 0) return std::make_pair(n->first / d->first, d->second);
  }
  return n;
}

std::optional<double> from_json_object(const json& obj) {
  if (!obj.is_object()) return std::nullopt;
  if (auto s = obj.find("score"); s != obj.end()) {
    if (s->is_number()) return in_unit_range(s->get<double>());
    if (s->is_string()) {
      const std::string text = s->get<std::string>();
      auto v = score_at(text, skip_space(text, 0));
      if (v && skip_space(text, v->second) == text.size()) return in_unit_range(v->first);
    }
    return std::nullopt;
  }
  for (const char* key : {"passed", "pass", "ok"}) {
    if (auto b = obj.find(key); b != obj.end() && b->is_boolean()) return b->get<bool>() ? 1.0 : 0.0;
  }
  return std::nullopt;
}

}  // namespace

std::optional<json> extract_json(std::string_view text) {
  // A fenced block: ```json ... ``` or ``` ... ```.
  for (size_t at = text.find("```"); at != std::string_view::npos; at = text.find("```", at + 3)) {
    size_t body = text.find('\n', at + 3);
    if (body == std::string_view::npos) break;
    const size_t close = text.find("```", body);
    if (close == std::string_view::npos) break;
    if (auto j = first_balanced(text.substr(body, close - body))) return j;
    at = close;
  }
  return first_balanced(text);
}

std::optional<double> evaluator_score(const json& reply) {
  if (!reply.is_object()) return std::nullopt;
  if (auto s = reply.find("score"); s != reply.end()) {
    return s->is_number() ? in_unit_range(s->get<double>()) : std::nullopt;
  }
  for (const char* key : {"ok", "passed"}) {
    if (auto b = reply.find(key); b != reply.end() && b->is_boolean()) return b->get<bool>() ? 1.0 : 0.0;
  }
  return std::nullopt;
}

std::optional<ChatReply> read_chat_completion(const json& reply) {
  if (!reply.is_object()) return std::nullopt;
  auto choices = reply.find("choices");
  if (choices == reply.end() || !choices->is_array() || choices->empty()) return std::nullopt;
  const json& first = (*choices)[0];
  if (!first.is_object() || !first.contains("message") || !first["message"].is_object()) return std::nullopt;
  const json& message = first["message"];
  if (!message.contains("content") || !message["content"].is_string()) return std::nullopt;
  ChatReply out;
  out.content = message["content"].get<std::string>();
  if (auto usage = reply.find("usage"); usage != reply.end() && usage->is_object()) {
    if (auto p = usage->find("prompt_tokens"); p != usage->end() && p->is_number_integer()) {
      out.input_tokens = p->get<int64_t>();
    }
    if (auto c = usage->find("completion_tokens"); c != usage->end() && c->is_number_integer()) {
      out.output_tokens = c->get<int64_t>();
    }
  }
  return out;
}

std::optional<double> judge_verdict(std::string_view text) {
  if (auto j = extract_json(text)) {
    if (auto v = from_json_object(*j)) return v;
  }
  for (size_t at = 0; at < text.size(); ++at) {
    if (!starts_with_word(text, at, "score")) continue;
    size_t i = skip_space(text, at + 5);
    if (i < text.size() && text[i] == '"') i = skip_space(text, i + 1);  // "score": in broken JSON
    if (i < text.size() && (text[i] == ':' || text[i] == '=')) i = skip_space(text, i + 1);
    else if (starts_with_word(text, i, "is")) i = skip_space(text, i + 2);
    else continue;
    if (auto v = score_at(text, i)) return in_unit_range(v->first);
  }
  const size_t start = skip_space(text, 0);
  if (auto v = score_at(text, start); v && skip_space(text, v->second) == text.size()) return in_unit_range(v->first);
  return std::nullopt;
}

}  // namespace trainer::grading
