// The serving engine: request checks, adapters, and the scheduler loop of continuous batching
// (docs/serving.md). Every forward pass runs on the scheduler thread; callers only queue
// requests and read their streams.
#include "engine/serve/serving_engine.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "engine/engine_internal.h"
#include "engine/lora/lora.h"

namespace trainer::engine {
namespace serve {

bool Stream::next(CompletionUpdate* update) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_.empty() || finished_; });
  if (delivered_) return false;
  update->tokens = std::move(pending_);
  pending_.clear();
  update->finished = finished_;
  update->finish_reason = finished_ ? reason_ : "";
  update->cached_prompt_tokens = cached_;
  delivered_ = finished_;
  return true;
}

void Stream::cancel() {
  if (cancelled_.exchange(true)) return;
  wake_();
}

void Stream::push(int32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(token);
  cv_.notify_all();
}

void Stream::set_cached(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  cached_ = tokens;
}

void Stream::finish(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  reason_ = reason;
  cv_.notify_all();
}

Engine::Engine(const ServeOptions& options, std::unique_ptr<model::CausalLM> model, text::Tokenizer tokenizer)
    : options_(options),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      stop_ids_(stop_ids_of(options.model_dir, tokenizer_)),
      pool_(*model_, options.kv_blocks, options.block_size) {
  base_name_ = options.base_name.empty() ? std::filesystem::path(options.model_dir).lexically_normal().filename().string()
                                         : options.base_name;
  if (base_name_.empty()) base_name_ = std::filesystem::path(options.model_dir).parent_path().filename().string();
  const int64_t model_limit = model_->config().max_position_embeddings > 0 ? model_->config().max_position_embeddings
                                                                           : INT64_MAX;
  const int64_t pool_limit = options.kv_blocks * options.block_size;
  context_limit_ = std::min(model_limit, pool_limit);
  if (options.context_limit > 0) context_limit_ = std::min(context_limit_, options.context_limit);
  if (options.screened_greedy_head) greedy_head_ = model::GreedyHead::for_model(*model_);
  threads_ = at::get_num_threads();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& s : queue_) s->stream->finish("stop");
  for (auto& s : waiting_) s->stream->finish("stop");
  for (auto& s : active_) s->stream->finish("stop");
}

Status Engine::attach_adapter(const std::string& name, const std::string& dir) {
  if (name.empty()) return invalid_field("name", "an adapter needs a name");
  if (name == base_name_) return already_exists("'" + name + "' is the base model's name");
  {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    if (adapters_.count(name) != 0) return already_exists("adapter '" + name + "' is already attached");
    if (static_cast<int>(adapters_.size()) >= options_.max_adapters) {
      return failed_precondition(std::to_string(options_.max_adapters) +
                                 " adapters are attached, the most this process holds (--max-adapters); detach one first");
    }
  }
  auto adapter = std::make_shared<Adapter>();
  Status st = guard(
      [&] {
        lora::PeftAdapter peft = lora::read_peft(*model_, dir);
        if (peft.rank > options_.max_rank) {
          throw EngineError(StatusCode::kInvalidArgument, dir + ": rank " + std::to_string(peft.rank) +
                                                              " is over this process's limit of " +
                                                              std::to_string(options_.max_rank) + " (--max-rank)");
        }
        for (auto& layer : peft.weights) {
          for (auto& w : layer) {
            if (!w.A.defined()) continue;
            w.A = w.A.to(model_->dtype());
            w.B = w.B.to(model_->dtype());
          }
        }
        adapter->weights = std::move(peft.weights);
        adapter->info = {name, dir, peft.rank};
        adapter->generation = next_generation_++;
      },
      "adapter '" + name + "'");
  if (!st.is_ok()) return st;
  std::lock_guard<std::mutex> lock(adapters_mu_);
  if (adapters_.count(name) != 0) return already_exists("adapter '" + name + "' is already attached");
  if (static_cast<int>(adapters_.size()) >= options_.max_adapters) {
    return failed_precondition(std::to_string(options_.max_adapters) + " adapters are attached (--max-adapters)");
  }
  adapters_[name] = std::move(adapter);
  return Status::ok();
}

Status Engine::detach_adapter(const std::string& name) {
  std::lock_guard<std::mutex> lock(adapters_mu_);
  if (adapters_.erase(name) == 0) return not_found("no adapter '" + name + "' is attached");
  return Status::ok();
}

std::vector<AdapterInfo> Engine::adapters() const {
  std::lock_guard<std::mutex> lock(adapters_mu_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, a] : adapters_) out.push_back(a->info);
  return out;
}

Status Engine::check_request(const CompletionRequest& r, int64_t* max_tokens) const {
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  if (P == 0) return invalid_field("prompt", "the prompt is empty");
  const int64_t vocab = model_->config().vocab_size;
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= vocab) {
      return invalid_field("prompt", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                         std::to_string(vocab) + ")");
    }
  }
  if (P >= context_limit_) {
    return invalid_field("prompt", "this model's maximum context length is " + std::to_string(context_limit_) +
                                       " tokens; the prompt has " + std::to_string(P) +
                                       " (at least one must be left for the completion). Shorten the prompt.");
  }
  if (r.max_tokens && *r.max_tokens < 1) return invalid_field("max_tokens", "must be at least 1");
  *max_tokens = r.max_tokens.value_or(context_limit_ - P);
  if (P + *max_tokens > context_limit_) {
    const std::string what = r.max_tokens ? " + " + std::to_string(*max_tokens) + " completion tokens" : "";
    return invalid_field("max_tokens", "this model's maximum context length is " + std::to_string(context_limit_) +
                                           " tokens; the request has " + std::to_string(P) + " prompt tokens" + what +
                                           ". Shorten the prompt or lower max_tokens.");
  }
  if (!r.greedy && !(r.temperature > 0)) return invalid_field("temperature", "must be > 0 (0 means greedy)");
  if (!(r.top_p > 0 && r.top_p <= 1)) return invalid_field("top_p", "must be in (0, 1]");
  return Status::ok();
}

Result<std::shared_ptr<CompletionStream>> Engine::submit(CompletionRequest request) {
  auto seq = std::make_unique<Sequence>();
  if (request.model != base_name_) {
    std::lock_guard<std::mutex> lock(adapters_mu_);
    auto it = adapters_.find(request.model);
    if (it == adapters_.end()) return not_found("the model '" + request.model + "' does not exist");
    seq->adapter = it->second;
  }
  TRAINER_RETURN_IF_ERROR(check_request(request, &seq->max_tokens));
  seq->prompt_len = static_cast<int64_t>(request.prompt.size());
  seq->tokens.assign(request.prompt.begin(), request.prompt.end());
  generate::SamplingOptions& so = seq->sampling;
  so.greedy = request.greedy;
  so.temperature = request.temperature;
  so.top_p = request.top_p;
  if (!request.ignore_eos) so.stop_ids = stop_ids_;
  so.stop_strings = request.stop;
  if (!so.stop_strings.empty()) {
    so.decode = [this](const std::vector<int64_t>& ids) {
      return value_or_throw(tokenizer_.decode(std::vector<int32_t>(ids.begin(), ids.end()), false));
    };
  }
  const uint64_t seed = request.seed ? *request.seed : std::random_device{}();
  seq->generator = at::detail::createCPUGenerator(seed);
  seq->request = std::move(request);
  auto stream = std::make_shared<Stream>([this] {
    std::lock_guard<std::mutex> lock(mu_);  // so the scheduler cannot miss it between its check and its wait
    cv_.notify_all();
  });
  seq->stream = stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(seq));
    ++queued_;
  }
  cv_.notify_all();
  return std::shared_ptr<CompletionStream>(stream);
}

ServeStats Engine::stats() const {
  ServeStats s;
  s.blocks_total = pool_.total();
  s.blocks_used = pool_.used();
  s.blocks_cached = pool_.cached();
  s.prompt_tokens_cached = cached_tokens_.load();
  s.running = running_.load();
  s.waiting = queued_.load();
  s.prompt_tokens = prompt_tokens_.load();
  s.completion_tokens = completion_tokens_.load();
  s.requests_finished = finished_.load();
  s.requests_cancelled = cancelled_.load();
  s.greedy_head_screened = greedy_head_ != nullptr;
  if (greedy_head_) {
    const model::GreedyHead::Counts c = greedy_head_->counts();
    s.greedy_rows_screened = c.rows;
    s.greedy_rows_fp32 = c.fp32_rows;
    s.greedy_candidates = c.candidates;
  }
  return s;
}

Result<std::vector<int32_t>> Engine::encode(const std::string& text) const { return tokenizer_.encode(text, false); }

Result<std::string> Engine::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return tokenizer_.decode(ids, skip_special);
}

Result<std::vector<int32_t>> Engine::encode_chat(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools) const {
  if (!tokenizer_.has_chat_template()) {
    return failed_precondition(options_.model_dir + "/tokenizer_config.json has no chat_template: use /v1/completions");
  }
  text::RenderOptions ro;
  ro.add_generation_prompt = true;
  return tokenizer_.encode_chat(messages, tools, ro);
}

// --- the scheduler ---------------------------------------------------------------------------

void Engine::loop() {
  at::NoGradGuard no_grad;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        if (stop_ || !queue_.empty()) return true;
        // Idle unless something runs, or a cancel arrived for a waiting request.
        if (!active_.empty()) return true;
        return std::any_of(waiting_.begin(), waiting_.end(), [](const auto& s) { return s->stream->cancelled(); });
      });
      if (stop_) return;
      while (!queue_.empty()) {
        waiting_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    Status st = guard(
        [&] {
          drop_cancelled();
          admit();
          HeadRows heads;
          decode_step(&heads);
          prefill_step(&heads);
          emit_heads(heads);
        },
        "serving");
    if (!st.is_ok()) {
      // A failed pass cannot be retried safely: its requests end; the engine carries on.
      std::fprintf(stderr, "trainer-job serve: %s; ending the requests in the batch\n", st.message().c_str());
      for (auto& s : active_) finish(*s, "stop");
      active_.clear();
    }
  }
}

void Engine::finish(Sequence& seq, const std::string& reason) {
  pool_.give_back(&seq.blocks);
  seq.stream->finish(reason);
  --running_;
  if (reason == "abort") {
    ++cancelled_;
  } else {
    ++finished_;
  }
}

void Engine::drop_cancelled() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->stream->cancelled()) {
      (*it)->stream->finish("abort");
      ++cancelled_;
      --queued_;
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(active_, [&](const std::unique_ptr<Sequence>& s) {
    if (!s->stream->cancelled()) return false;
    finish(*s, "abort");
    return true;
  });
}

void Engine::admit() {
  // In arrival order: the first request that does not fit waits, and those behind it too, so a
  // long request is not starved by short ones. A request first holds the cached blocks of its
  // prompt's prefix (never the block of its last prompt token: that one's logits are needed).
  const int64_t bs = pool_.block_size();
  while (!waiting_.empty() && static_cast<int64_t>(active_.size()) < options_.max_batch) {
    Sequence& s = *waiting_.front();
    const int64_t positions = s.prompt_len + s.max_tokens;
    const int64_t need = (positions + bs - 1) / bs;
    if (options_.prefix_cache && s.prefix.empty()) {
      s.prefix = prefix_blocks(std::span<const int64_t>(s.tokens.data(), static_cast<size_t>(s.prompt_len)), bs,
                               (s.prompt_len - 1) / bs, s.adapter ? s.adapter->generation : 0);
    }
    // Cannot fit even if its whole prefix were cached: wait without touching the cache's order.
    if (pool_.available() < need - static_cast<int64_t>(s.prefix.size())) break;
    const int64_t hits = s.prefix.empty() ? 0 : pool_.reuse(s.prefix, &s.blocks);
    if (!pool_.take(need - hits, &s.blocks)) {
      pool_.give_back(&s.blocks);
      break;
    }
    s.cached = hits * bs;
    s.published = static_cast<size_t>(hits);
    s.stream->set_cached(s.cached);
    cached_tokens_ += s.cached;
    active_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    --queued_;
    ++running_;
  }
}

std::vector<model::AdapterRows> Engine::adapter_rows(const std::vector<Sequence*>& rows) const {
  std::map<const Adapter*, std::vector<int64_t>> groups;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i]->adapter) groups[rows[i]->adapter.get()].push_back(static_cast<int64_t>(i));
  }
  std::vector<model::AdapterRows> out;
  for (auto& [adapter, idx] : groups) {
    out.push_back({at::tensor(idx, at::kLong).to(model_->device()), &adapter->weights});
  }
  return out;
}

void Engine::set_adapters(model::ForwardInput& in, const std::vector<Sequence*>& rows) {
  // The distinct adapters of the batch, by attach order.
  std::map<uint64_t, const Adapter*> distinct;
  for (const Sequence* s : rows) {
    if (s->adapter) distinct.emplace(s->adapter->generation, s->adapter.get());
  }
  if (distinct.size() < 2) {
    in.adapter_rows = adapter_rows(rows);
    return;
  }
  std::vector<uint64_t> generations;
  std::vector<const model::AdapterWeights*> weights;
  for (const auto& [generation, adapter] : distinct) {
    generations.push_back(generation);
    weights.push_back(&adapter->weights);
  }
  if (generations != stacked_generations_) {
    stacked_ = model::stack_adapters(weights);
    stacked_generations_ = generations;
  }
  std::vector<int64_t> adapter_of_row;
  for (const Sequence* s : rows) {
    adapter_of_row.push_back(
        s->adapter ? std::distance(distinct.begin(), distinct.find(s->adapter->generation)) : int64_t{-1});
  }
  in.stacked = &stacked_;
  in.stacked_mask = model::stacked_mask(stacked_, adapter_of_row,
                                        at::TensorOptions().dtype(model_->dtype()).device(model_->device()));
}

// A small pass's products are a few microseconds of work each: split over threads they wait on
// each other more than they gain, most of all when the machine's cores also serve the connections.
// Measured with 81M parameters (hidden 256, intermediate 768) on 2 cores at concurrency 32: the
// decoding pass took 11-12 ms on one thread against 14-18 ms on two, a 72-token prefill 3-4 ms
// against 9 (docs/serving.md). The head, a large product, keeps every thread.
Engine::BodyThreads::BodyThreads(const Engine& engine, int64_t rows) : all_(engine.threads_) {
  const auto& c = engine.model_->config();
  if (engine.model_->device().is_cpu() && all_ > 1 && rows * c.hidden_size * c.intermediate_size < kSmallPass) {
    at::set_num_threads(1);
    narrowed_ = true;
  }
}

Engine::BodyThreads::~BodyThreads() {
  if (narrowed_) at::set_num_threads(all_);
}

bool Engine::emit_next(Sequence& seq, int64_t token) {
  seq.tokens.push_back(token);
  ++completion_tokens_;
  seq.stream->push(static_cast<int32_t>(token));
  const auto& so = seq.sampling;
  bool stop = std::find(so.stop_ids.begin(), so.stop_ids.end(), token) != so.stop_ids.end();
  if (!stop && !so.stop_strings.empty()) {
    std::vector<int64_t> completion(seq.tokens.begin() + seq.prompt_len, seq.tokens.end());
    stop = generate::ends_in_stop_string(completion, so.stop_strings, so.decode);
  }
  if (stop) {
    finish(seq, "stop");
    return true;
  }
  if (seq.generated() >= seq.max_tokens) {
    finish(seq, "length");
    return true;
  }
  return false;
}

void Engine::decode_step(HeadRows* heads) {
  std::vector<Sequence*> rows;
  for (auto& s : active_) {
    if (s->decoding()) rows.push_back(s.get());
  }
  if (rows.empty()) return;
  const int64_t B = static_cast<int64_t>(rows.size());
  const at::Device dev = model_->device();
  std::vector<int64_t> last, past;
  std::vector<const std::vector<int64_t>*> tables;
  for (Sequence* s : rows) {
    last.push_back(s->tokens.back());
    past.push_back(s->cached);
    tables.push_back(&s->blocks);
  }
  at::Tensor ids = at::tensor(last, at::kLong).view({B, 1}), pos = at::tensor(past, at::kLong).view({B, 1});
  serve::PagedPass pass(pool_, tables, past, 1, dev);
  model::ForwardInput in;
  in.input_ids = ids.to(dev);
  in.position_ids = pos.to(dev);
  in.attn_mask = pass.attention_mask();
  set_adapters(in, rows);
  const BodyThreads threads(*this, B);
  at::Tensor hidden = model_->hidden_states(in, false, &pass);
  for (Sequence* s : rows) s->cached += 1;
  heads->rows.insert(heads->rows.end(), rows.begin(), rows.end());
  heads->hidden.push_back(hidden.select(1, 0));  // [B, H]
}

// Prefills prompts in arrival order until this step's budget of prefill_chunk tokens is spent:
// several short prompts in one step, a long one in chunks across steps. Each prompt's pass is its
// own (the same computation as alone); a prompt whose prefill ends has its first token picked with
// the pass's other rows (emit_heads).
void Engine::prefill_step(HeadRows* heads) {
  int64_t budget = options_.prefill_chunk;
  const at::Device dev = model_->device();
  for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
    Sequence& s = *active_[i];
    if (s.decoding()) continue;
    const int64_t T = std::min(budget, s.prompt_len - s.cached);
    at::Tensor ids = at::tensor(std::vector<int64_t>(s.tokens.begin() + s.cached, s.tokens.begin() + s.cached + T), at::kLong);
    serve::PagedPass pass(pool_, {&s.blocks}, {s.cached}, T, dev);
    model::ForwardInput in;
    in.input_ids = ids.view({1, T}).to(dev);
    in.position_ids = at::arange(s.cached, s.cached + T, at::kLong).view({1, T}).to(dev);
    in.attn_mask = pass.attention_mask();
    in.adapter_rows = adapter_rows({&s});
    const BodyThreads threads(*this, T);
    at::Tensor hidden = model_->hidden_states(in, false, &pass);
    s.cached += T;
    prompt_tokens_ += T;
    // The prompt's full blocks now computed are published for later prompts with this prefix.
    for (; s.published < s.prefix.size() && static_cast<int64_t>(s.published + 1) * pool_.block_size() <= s.cached;
         ++s.published) {
      pool_.publish(s.prefix[s.published], s.blocks[s.published]);
    }
    budget -= T;
    if (!s.decoding()) break;  // the budget is spent mid-prompt: the rest next step
    heads->rows.push_back(&s);
    heads->hidden.push_back(hidden.select(1, T - 1));  // [1, H]
  }
}

// The head of every row of the pass in one product (the head's weights, most of a small model's,
// read once per pass, not once per prefilled prompt and once for the decoding rows), then each
// row's token emitted in order: the decoding rows, then the prompts whose prefill ended. With a
// screened head the greedy rows take their picks from it and only the sampling rows' fp32 logits
// are computed; without, every row's logits, the greedy rows' argmax in one pass.
void Engine::emit_heads(const HeadRows& heads) {
  if (heads.rows.empty()) return;
  const at::Tensor hidden = heads.hidden.size() == 1 ? heads.hidden[0] : at::cat(heads.hidden, 0);
  const auto rows_of = [&](const std::vector<int64_t>& which) {
    if (which.size() == heads.rows.size()) return hidden;
    return hidden.index_select(0, at::tensor(which, at::kLong).to(hidden.device()));
  };
  std::vector<int64_t> screened, with_logits;  // rows picked by the screened head; rows given fp32 logits
  for (size_t b = 0; b < heads.rows.size(); ++b) {
    (greedy_head_ && heads.rows[b]->sampling.greedy ? screened : with_logits).push_back(static_cast<int64_t>(b));
  }
  std::vector<int64_t> token(heads.rows.size(), -1);
  if (!screened.empty()) {
    const at::Tensor picks = greedy_head_->pick(rows_of(screened));
    for (size_t i = 0; i < screened.size(); ++i) token[screened[i]] = picks.data_ptr<int64_t>()[i];
  }
  if (!with_logits.empty()) {
    const at::Tensor logits = model_->step_logits(rows_of(with_logits));  // [rows, V]
    // The greedy rows' picks in one pass and one copy to the host, not one per row.
    const bool any_greedy = std::any_of(with_logits.begin(), with_logits.end(),
                                        [&](int64_t b) { return heads.rows[b]->sampling.greedy; });
    const at::Tensor picks = any_greedy ? model::row_argmax(logits).cpu() : at::Tensor();
    for (size_t i = 0; i < with_logits.size(); ++i) {
      Sequence& s = *heads.rows[with_logits[i]];
      const at::Tensor row = logits.narrow(0, static_cast<int64_t>(i), 1);
      token[with_logits[i]] = s.sampling.greedy ? picks.data_ptr<int64_t>()[i]
                                                : generate::sample(row, s.sampling, s.generator, nullptr).data_ptr<int64_t>()[0];
    }
  }
  std::vector<Sequence*> ended;
  for (size_t b = 0; b < heads.rows.size(); ++b) {
    if (emit_next(*heads.rows[b], token[b])) ended.push_back(heads.rows[b]);
  }
  std::erase_if(active_, [&](const std::unique_ptr<Sequence>& s) {
    return std::find(ended.begin(), ended.end(), s.get()) != ended.end();
  });
}

}  // namespace serve

Result<std::unique_ptr<ServingEngine>> ServingEngine::start(const ServeOptions& options) {
  if (options.max_adapters < 0) return invalid_field("max_adapters", "must be at least 0");
  if (options.max_rank < 1) return invalid_field("max_rank", "must be at least 1");
  if (options.kv_blocks < 1) return invalid_field("kv_blocks", "must be at least 1");
  if (options.block_size < 1) return invalid_field("block_size", "must be at least 1");
  if (options.prefill_chunk < 1) return invalid_field("prefill_chunk", "must be at least 1");
  if (options.max_batch < 1) return invalid_field("max_batch", "must be at least 1");
  if (options.context_limit < 0) return invalid_field("context_limit", "must be at least 0 (0 = the model's)");
  std::unique_ptr<ServingEngine> engine;
  Status st = guard(
      [&] {
        at::NoGradGuard no_grad;
        auto model = model::CausalLM::load(options.model_dir, dtype_of(options.precision), pick_device(options.gpus));
        text::Tokenizer tok = load_tokenizer_for(options.model_dir, model->config());
        engine = std::make_unique<serve::Engine>(options, std::move(model), std::move(tok));
      },
      options.model_dir);
  if (!st.is_ok()) return st;
  return Result<std::unique_ptr<ServingEngine>>(std::move(engine));
}

}  // namespace trainer::engine
