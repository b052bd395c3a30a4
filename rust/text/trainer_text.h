/* C interface of rust/text: Hugging Face tokenizers and chat templates (minijinja).
 *
 * Strings are UTF-8 with explicit lengths. Fallible functions return 0 on success and 1 on
 * failure, with the message in *err (free it with tt_string_free). Buffers returned to the
 * caller are freed with their *_free function; handles with tt_tokenizer_free /
 * tt_template_free. Handles are immutable and may be used from several threads at once. */
#ifndef TRAINER_TEXT_H_
#define TRAINER_TEXT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TtTokenizer TtTokenizer;
typedef struct TtTemplate TtTemplate;

typedef struct {
  uint8_t* ptr;
  size_t len;
} TtString;

typedef struct {
  int32_t* ids;
  int64_t* offsets; /* 2 * len byte offsets [begin, end), or NULL */
  size_t len;
} TtIds;

typedef struct {
  int64_t* data; /* 2 * len byte offsets [begin, end) */
  size_t len;
} TtSpans;

void tt_string_free(TtString s);
void tt_ids_free(TtIds ids);
void tt_spans_free(TtSpans spans);

int tt_tokenizer_from_json(const uint8_t* json, size_t len, TtTokenizer** out, TtString* err);
void tt_tokenizer_free(TtTokenizer* tok);
int tt_tokenizer_encode(const TtTokenizer* tok, const uint8_t* text, size_t len, int add_special_tokens,
                        int with_offsets, TtIds* out, TtString* err);
int tt_tokenizer_decode(const TtTokenizer* tok, const int32_t* ids, size_t n, int skip_special_tokens,
                        TtString* out, TtString* err);
int64_t tt_tokenizer_token_to_id(const TtTokenizer* tok, const uint8_t* token, size_t len); /* -1: none */
int tt_tokenizer_id_to_token(const TtTokenizer* tok, int32_t id, TtString* out);            /* 1: found */
int64_t tt_tokenizer_vocab_size(const TtTokenizer* tok);
void tt_tokenizer_added_tokens(const TtTokenizer* tok, TtString* out); /* JSON [{id, content, special}] */

int tt_template_new(const uint8_t* source, size_t len, TtTemplate** out, TtString* err);
void tt_template_free(TtTemplate* tpl);
int tt_template_has_generation(const TtTemplate* tpl);
int tt_template_render(const TtTemplate* tpl, const uint8_t* context_json, size_t len, TtString* out,
                       TtSpans* spans, TtString* err);

#ifdef __cplusplus
}
#endif

#endif /* TRAINER_TEXT_H_ */
