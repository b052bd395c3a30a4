// The serving engine behind engine/serving.h: requests, adapters and the scheduler thread.
// Internal to the engine (includes torch).
#pragma once

#include <ATen/core/Generator.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate/generate.h"
#include "engine/model/greedy_head.h"
#include "engine/model/model.h"
#include "engine/serve/kv_pool.h"
#include "engine/serving.h"
#include "engine/text/tokenizer.h"

namespace trainer::engine::serve {

// An attached adapter; requests hold it while they run, so detaching never pulls it from under one.
struct Adapter {
  AdapterInfo info;
  model::AdapterWeights weights;  // in the model's dtype and device
  uint64_t generation = 0;        // unique per attach: names its cached prefix blocks
};

// A request's side of its stream: the scheduler pushes tokens, the caller takes them.
class Stream : public CompletionStream {
 public:
  explicit Stream(std::function<void()> wake) : wake_(std::move(wake)) {}
  bool next(CompletionUpdate* update) override;
  void cancel() override;

  bool cancelled() const { return cancelled_.load(); }
  void push(int32_t token);
  void finish(const std::string& reason);
  void set_cached(int64_t tokens);

 private:
  std::function<void()> wake_;  // wakes the scheduler (after cancel)
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> pending_;  // guarded by mu_
  bool finished_ = false;         // guarded by mu_
  bool delivered_ = false;        // guarded by mu_: the finished update was returned
  std::string reason_;            // guarded by mu_
  int64_t cached_ = 0;            // guarded by mu_
};

// One request in flight. Owned by the scheduler thread once queued.
struct Sequence {
  CompletionRequest request;
  std::shared_ptr<const Adapter> adapter;  // null: the base model
  std::shared_ptr<Stream> stream;
  std::vector<int64_t> tokens;     // prompt, then the completion so far
  int64_t prompt_len = 0;
  int64_t max_tokens = 0;          // completion tokens at most
  int64_t cached = 0;              // positions whose keys and values are in the cache
  std::vector<int64_t> blocks;     // its blocks, reserved for prompt_len + max_tokens positions
  std::vector<PrefixBlock> prefix; // its prompt's full blocks before the last prompt token
  size_t published = 0;            // of `prefix`, those published to the pool
  generate::SamplingOptions sampling;
  at::Generator generator;
  bool decoding() const { return cached >= prompt_len; }
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

class Engine final : public ServingEngine {
 public:
  Engine(const ServeOptions& options, std::unique_ptr<model::CausalLM> model, text::Tokenizer tokenizer);
  ~Engine() override;

  Status attach_adapter(const std::string& name, const std::string& dir) override;
  Status detach_adapter(const std::string& name) override;
  std::vector<AdapterInfo> adapters() const override;
  Result<std::shared_ptr<CompletionStream>> submit(CompletionRequest request) override;
  ServeStats stats() const override;
  Result<std::vector<int32_t>> encode(const std::string& text) const override;
  Result<std::string> decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  Result<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools) const override;

 private:
  void loop();                     // the scheduler thread
  void drop_cancelled();
  void admit();
  // The rows whose next token a pass picks: the sequences, and their hidden states' last rows
  // (blocks of [rows, H], in the order of `rows`).
  struct HeadRows {
    std::vector<Sequence*> rows;
    std::vector<at::Tensor> hidden;
  };
  void decode_step(HeadRows* heads);   // every decoding sequence's next position through the body
  void prefill_step(HeadRows* heads);  // prompt chunks within the pass's prefill budget
  void emit_heads(const HeadRows& heads);  // the head once for all their rows; each row's token emitted
  // Emits `token` as the next of `seq` and ends the sequence when it stops; returns whether it ended.
  bool emit_next(Sequence& seq, int64_t token);
  void finish(Sequence& seq, const std::string& reason);
  // While alive, a small body pass of `rows` positions runs on one thread (the scheduler's), then
  // the engine's threads are back. Small: rows * hidden * intermediate under kSmallPass.
  class BodyThreads {
   public:
    static constexpr int64_t kSmallPass = int64_t{1} << 24;
    BodyThreads(const Engine& engine, int64_t rows);
    ~BodyThreads();
    BodyThreads(const BodyThreads&) = delete;
    BodyThreads& operator=(const BodyThreads&) = delete;

   private:
    int all_;
    bool narrowed_ = false;
  };
  std::vector<model::AdapterRows> adapter_rows(const std::vector<Sequence*>& rows) const;
  // `in`'s adapters for `rows`: one group per adapter, or, with several adapters among the rows,
  // all of them stacked (model::StackedAdapters, kept while the batch's adapters stay the same).
  void set_adapters(model::ForwardInput& in, const std::vector<Sequence*>& rows);
  Status check_request(const CompletionRequest& r, int64_t* max_tokens) const;

  // Constant after construction.
  const ServeOptions options_;
  std::unique_ptr<model::CausalLM> model_;  // used by the scheduler thread (and read_peft's shapes)
  // The greedy rows' picks, where the model's head is screened in bf16 (null: the fp32 logits' argmax).
  std::unique_ptr<model::GreedyHead> greedy_head_;
  int threads_ = 1;  // intra-op threads the head's products use (at::get_num_threads at start)
  const text::Tokenizer tokenizer_;
  std::vector<int64_t> stop_ids_;
  BlockPool pool_;
  // The scheduler thread's: the adapters last stacked (their generations, in order) and the stack.
  std::vector<uint64_t> stacked_generations_;
  model::StackedAdapters stacked_;

  mutable std::mutex adapters_mu_;
  std::map<std::string, std::shared_ptr<const Adapter>> adapters_;  // guarded by adapters_mu_

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;  // guarded by mu_: submitted, not yet seen
  bool stop_ = false;                             // guarded by mu_
  std::atomic<int64_t> queued_{0};                // queue_ plus waiting_, for stats

  // The scheduler thread's own.
  std::deque<std::unique_ptr<Sequence>> waiting_;  // for blocks or a place, in order
  std::vector<std::unique_ptr<Sequence>> active_;  // prefilling or decoding

  std::atomic<int64_t> running_{0}, prompt_tokens_{0}, completion_tokens_{0}, finished_{0}, cancelled_{0};
  std::atomic<int64_t> cached_tokens_{0};
  std::atomic<uint64_t> next_generation_{1};  // 0 is the base model's
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace trainer::engine::serve
