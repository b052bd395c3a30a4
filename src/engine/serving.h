// The native engine's serving core, torch-free face (implementation in src/engine/serve/): one
// resident base model plus named LoRA adapters, attached and detached at run time, answering
// completion requests with continuous batching over a paged key/value cache (docs/serving.md).
//
//   auto engine = ServingEngine::start({.model_dir = "/models/qwen3"});
//   (*engine)->attach_adapter("support", "/runs/r1/adapter");
//   auto stream = (*engine)->submit({.model = "support", .prompt = ids, .max_tokens = 64});
//   CompletionUpdate u;
//   while ((*stream)->next(&u)) { ... u.tokens ... }
//
// Thread safety: every member of ServingEngine and CompletionStream may be called from any
// thread. One scheduler thread of the engine runs every forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "plan/plan.h"

namespace trainer::engine {

struct ServeOptions {
  std::string model_dir;          // Hugging Face model folder (config, weights, tokenizer)
  std::string base_name;          // the base model's name in requests; "" = the folder's name
  int max_adapters = 4;           // adapters attached at once
  int64_t max_rank = 64;          // the largest LoRA rank an adapter may have
  int64_t kv_blocks = 1024;       // key/value cache blocks in the pool, allocated at start
  int64_t block_size = 16;        // positions per block
  int64_t context_limit = 0;      // prompt plus completion tokens of one request; 0 = the model's
                                  // max_position_embeddings, at most what the pool holds
  int64_t prefill_chunk = 128;    // prompt tokens prefilled per scheduler step (between decodes)
  int64_t max_batch = 64;         // requests decoding at once; more wait for a place
  bool prefix_cache = true;       // a prompt starting with blocks another prompt computed (same
                                  // model or adapter) reuses their keys and values
  plan::Precision precision = plan::Precision::kFp32;
  int gpus = 0;                   // > 0: on CUDA when available
  bool screened_greedy_head = true;  // greedy picks through the bf16-screened head where the CPU
                                     // has native bf16 and the model is fp32 (model/greedy_head.h)
};

struct CompletionRequest {
  std::string model;              // the base model's name or an attached adapter's
  std::vector<int32_t> prompt;    // token ids, not empty
  std::optional<int64_t> max_tokens;  // completion tokens at most; unset = up to the context limit
  bool greedy = false;            // argmax (temperature 0); temperature and top_p ignored
  double temperature = 1.0;       // > 0
  double top_p = 1.0;             // in (0, 1]
  std::optional<uint64_t> seed;   // unset = drawn at random
  std::vector<std::string> stop;  // stop strings: the completion ends once its text holds one
  bool ignore_eos = false;        // do not stop at the model's end-of-sequence ids
};

// One step of a request's answer.
struct CompletionUpdate {
  std::vector<int32_t> tokens;    // tokens produced since the last update
  bool finished = false;          // the last update of the request
  std::string finish_reason;      // when finished: "stop" (a stop id or string) or "length"
  int64_t cached_prompt_tokens = 0;  // the prompt's tokens taken from the prefix cache
};

class CompletionStream {
 public:
  virtual ~CompletionStream() = default;
  // Waits for tokens or the end. Returns false once the finished update has been returned.
  virtual bool next(CompletionUpdate* update) = 0;
  // Abandons the request: its cache blocks are freed at the next token boundary. Idempotent;
  // harmless after the end.
  virtual void cancel() = 0;
};

struct ServeStats {
  int64_t blocks_total = 0;       // blocks in the pool
  int64_t blocks_used = 0;        // blocks held by requests now
  int64_t blocks_cached = 0;      // blocks held by none, kept for the prompt prefix they hold
  int64_t running = 0;            // requests being prefilled or decoded
  int64_t waiting = 0;            // requests waiting for blocks or a place in the batch
  int64_t prompt_tokens = 0;      // prefilled since start
  int64_t prompt_tokens_cached = 0;  // prompt tokens taken from the prefix cache since start
  int64_t completion_tokens = 0;  // generated since start
  int64_t requests_finished = 0;  // ended by a stop or their length
  int64_t requests_cancelled = 0; // abandoned by their caller
  bool greedy_head_screened = false;  // greedy picks through the bf16-screened head (else fp32 logits)
  int64_t greedy_rows_screened = 0;   // greedy picks the screened head made since start
  int64_t greedy_rows_fp32 = 0;       // of those, rows that took the fp32 product (flat or non-finite)
  int64_t greedy_candidates = 0;      // tokens whose logits the screened head computed exactly
};

struct AdapterInfo {
  std::string name;
  std::string dir;                // the PEFT adapter folder it was loaded from
  int64_t rank = 0;
};

class ServingEngine {
 public:
  // Loads the model and tokenizer, allocates the block pool and starts the scheduler thread.
  // Errors name the folder, file or option at fault.
  static Result<std::unique_ptr<ServingEngine>> start(const ServeOptions& options);
  virtual ~ServingEngine() = default;  // stops the scheduler; open streams end with "stop"

  const std::string& base_name() const { return base_name_; }
  int64_t context_limit() const { return context_limit_; }

  // Loads a PEFT LoRA adapter folder under `name`. kAlreadyExists for a name in use (the base
  // model's included), kFailedPrecondition when max_adapters are attached, kInvalidArgument for
  // a rank over max_rank or a folder that does not fit the model.
  virtual Status attach_adapter(const std::string& name, const std::string& dir) = 0;
  // Requests already running on it finish with it. kNotFound for an unknown name.
  virtual Status detach_adapter(const std::string& name) = 0;
  virtual std::vector<AdapterInfo> adapters() const = 0;

  // Queues a request; it joins the batch at the next token boundary once its blocks are free.
  // kNotFound for an unknown model; kInvalidArgument for an empty prompt, a prompt plus
  // max_tokens over the context limit (the message names the limit) or bad sampling values.
  virtual Result<std::shared_ptr<CompletionStream>> submit(CompletionRequest request) = 0;
  virtual ServeStats stats() const = 0;

  // The model's tokenizer: `text` as ids (no special tokens added), ids as text (special tokens
  // skipped when `skip_special`), and a chat rendered by the model's chat template with the
  // assistant's generation prompt, as evaluations and training render it.
  virtual Result<std::vector<int32_t>> encode(const std::string& text) const = 0;
  virtual Result<std::string> decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;
  virtual Result<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json& messages,
                                                   const nlohmann::ordered_json& tools) const = 0;

 protected:
  std::string base_name_;         // constant after start
  int64_t context_limit_ = 0;     // constant after start
};

}  // namespace trainer::engine
