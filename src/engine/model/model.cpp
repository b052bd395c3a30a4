#include "engine/model/model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <vector>

#include "engine/engine_error.h"
#include "engine/model/safetensors.h"

namespace trainer::engine::model {
namespace {

std::string shape_string(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Weights of one folder by name, each with the file that holds it.
class WeightSource {
 public:
  WeightSource(const std::string& dir, at::ScalarType dtype, at::Device device)
      : dir_(dir), dtype_(dtype), device_(device) {
    for (const auto& path : value_or_throw(model_weight_files(dir))) {
      auto file = value_or_throw(SafetensorsFile::open(path));
      for (const auto& [name, view] : file->tensors()) index_[name] = {file, &view};
      files_.push_back(std::move(file));
    }
  }

  bool has(const std::string& name) const { return index_.count(name) != 0; }

  // The tensor `name` with `shape`, converted to the run's dtype and device.
  at::Tensor get(const std::string& name, std::vector<int64_t> shape) const {
    auto it = index_.find(name);
    if (it == index_.end()) {
      throw EngineError(StatusCode::kInvalidArgument,
                        where() + ": tensor '" + name + "' is missing (does config.json match these weights?)");
    }
    const auto& [file, view] = it->second;
    if (view->shape != shape) {
      throw EngineError(StatusCode::kInvalidArgument, file->path() + ": tensor '" + name + "' has shape " +
                                                          shape_string(view->shape) + " but config.json implies " +
                                                          shape_string(shape));
    }
    at::ScalarType st = scalar_type_of(view->dtype);
    if (st == at::ScalarType::Undefined || !at::isFloatingType(st)) {
      throw EngineError(StatusCode::kInvalidArgument,
                        file->path() + ": tensor '" + name + "': field 'dtype' " + view->dtype + " is not a float type");
    }
    std::shared_ptr<SafetensorsFile> keep = file;
    at::Tensor mapped = at::from_blob(const_cast<void*>(view->data), view->shape, [keep](void*) {},
                                      at::TensorOptions().dtype(st));
    if (st == dtype_ && device_.is_cpu()) return mapped;  // used in place from the read-only mapping
    return mapped.to(device_, dtype_);
  }

 private:
  std::string where() const {
    return files_.size() == 1 ? files_[0]->path() : (std::filesystem::path(dir_) / "model.safetensors.index.json").string();
  }
  std::string dir_;
  at::ScalarType dtype_;
  at::Device device_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<std::shared_ptr<SafetensorsFile>, const TensorView*>> index_;
};

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.slice(-1, half).neg(), x.slice(-1, 0, half)}, -1);
}

}  // namespace

at::ScalarType scalar_type_of(const std::string& d) {
  if (d == "F32") return at::kFloat;
  if (d == "BF16") return at::kBFloat16;
  if (d == "F16") return at::kHalf;
  if (d == "F64") return at::kDouble;
  if (d == "I64") return at::kLong;
  if (d == "I32") return at::kInt;
  if (d == "I8") return at::kChar;
  if (d == "U8") return at::kByte;
  if (d == "BOOL") return at::kBool;
  return at::ScalarType::Undefined;
}

std::string safetensors_dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kDouble: return "F64";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: throw EngineError(StatusCode::kInternal, std::string("no safetensors dtype for ") + at::toString(t));
  }
}

Linear* DecoderLayer::projection(const std::string& name) {
  if (name == "q_proj") return &q_proj;
  if (name == "k_proj") return &k_proj;
  if (name == "v_proj") return &v_proj;
  if (name == "o_proj") return &o_proj;
  if (name == "gate_proj") return &gate_proj;
  if (name == "up_proj") return &up_proj;
  if (name == "down_proj") return &down_proj;
  return nullptr;
}

std::unique_ptr<CausalLM> CausalLM::load(const std::string& dir, at::ScalarType dtype, at::Device device) {
  std::unique_ptr<CausalLM> m(new CausalLM());
  m->dir_ = dir;
  m->config_ = value_or_throw(read_model_config(dir));
  m->dtype_ = dtype;
  m->device_ = device;
  const ModelConfig& c = m->config_;
  WeightSource w(dir, dtype, device);
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t q_out = c.num_attention_heads * hd, kv_out = c.num_key_value_heads * hd;
  m->embed_tokens = w.get("model.embed_tokens.weight", {c.vocab_size, H});
  m->final_norm = w.get("model.norm.weight", {H});
  if (c.tie_word_embeddings) {
    m->lm_head = m->embed_tokens;
  } else {
    m->lm_head = w.get("lm_head.weight", {c.vocab_size, H});
  }
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, bool bias) {
    Linear l;
    l.weight = w.get(prefix + ".weight", {out, in});
    if (bias) l.bias = w.get(prefix + ".bias", {out});
    return l;
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    DecoderLayer L;
    L.input_norm = w.get(p + ".input_layernorm.weight", {H});
    L.post_attention_norm = w.get(p + ".post_attention_layernorm.weight", {H});
    if (c.qk_norm) {
      L.q_norm = w.get(p + ".self_attn.q_norm.weight", {hd});
      L.k_norm = w.get(p + ".self_attn.k_norm.weight", {hd});
    }
    L.q_proj = linear(p + ".self_attn.q_proj", q_out, H, c.attention_bias);
    L.k_proj = linear(p + ".self_attn.k_proj", kv_out, H, c.attention_bias);
    L.v_proj = linear(p + ".self_attn.v_proj", kv_out, H, c.attention_bias);
    L.o_proj = linear(p + ".self_attn.o_proj", H, q_out, c.o_proj_bias);
    L.gate_proj = linear(p + ".mlp.gate_proj", I, H, c.mlp_bias);
    L.up_proj = linear(p + ".mlp.up_proj", I, H, c.mlp_bias);
    L.down_proj = linear(p + ".mlp.down_proj", H, I, c.mlp_bias);
    m->layers_.push_back(std::move(L));
  }
  // Inverse frequencies exactly as transformers computes them (fp32).
  at::Tensor exponents = at::arange(0, hd, 2, at::kLong).to(at::kFloat) / static_cast<double>(hd);
  at::Tensor inv_freq = at::pow(c.rope.theta, exponents).reciprocal();
  if (c.rope.type == "llama3") {
    const double factor = c.rope.factor, low = c.rope.low_freq_factor, high = c.rope.high_freq_factor;
    const double old_len = static_cast<double>(c.rope.original_max_position_embeddings);
    const double low_wavelen = old_len / low, high_wavelen = old_len / high;
    at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / factor, inv_freq);
    at::Tensor smooth = (old_len / wavelen - low) / (high - low);
    at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
    at::Tensor medium = at::logical_not(wavelen < high_wavelen) * at::logical_not(wavelen > low_wavelen);
    inv_freq = at::where(medium, smoothed, scaled);
  }
  m->inv_freq_ = inv_freq;
  m->ensure_rope_cache(std::max<int64_t>(c.max_position_embeddings > 0 ? std::min<int64_t>(c.max_position_embeddings, 4096) : 4096, 1));
  return m;
}

void CausalLM::ensure_rope_cache(int64_t positions) {
  if (rope_cos_.defined() && rope_cos_.size(0) >= positions) return;
  at::Tensor pos = at::arange(positions, at::kLong).to(at::kFloat);
  at::Tensor freqs = at::outer(pos, inv_freq_);  // one fp32 product per entry, as transformers' matmul with K=1
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  rope_cos_ = emb.cos().to(device_);
  rope_sin_ = emb.sin().to(device_);
}

void CausalLM::for_each_weight(const std::function<void(const at::Tensor&)>& visit) const {
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) visit(t);
  };
  add(embed_tokens);
  add(final_norm);
  if (!config_.tie_word_embeddings) add(lm_head);
  for (const auto& L : layers_) {
    for (const Linear* l : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) {
      add(l->weight);
      add(l->bias);
    }
    for (const at::Tensor* t : {&L.input_norm, &L.post_attention_norm, &L.q_norm, &L.k_norm}) add(*t);
  }
}

int64_t CausalLM::weight_bytes(const std::function<bool(const at::Tensor&)>& include) const {
  int64_t total = 0;
  for_each_weight([&](const at::Tensor& t) {
    if (!include || include(t)) total += static_cast<int64_t>(t.nbytes());
  });
  return total;
}

int64_t CausalLM::parameter_count() const {
  int64_t total = 0;
  for_each_weight([&](const at::Tensor& t) { total += t.numel(); });
  return total;
}

at::Tensor CausalLM::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  // transformers: upcast, x * rsqrt(mean(x^2) + eps), back to the input dtype, times the weight.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, true);
  xf = xf * at::rsqrt(var + config_.rms_norm_eps);
  return weight * xf.to(x.scalar_type());
}

at::Tensor CausalLM::project(const Linear& lin, const at::Tensor& x, bool training) const {
  at::Tensor y = at::linear(x, lin.weight, lin.bias);
  if (!lin.lora_A.defined() || !adapters_enabled_) return y;
  at::Tensor xa = (training && lin.lora_dropout > 0) ? at::dropout(x, lin.lora_dropout, true) : x;
  at::Tensor A = lin.lora_A, B = lin.lora_B;
  if (A.scalar_type() != x.scalar_type()) {
    A = A.to(x.scalar_type());
    B = B.to(x.scalar_type());
  }
  return y + at::linear(at::linear(xa, A), B) * lin.lora_scale;
}

at::Tensor CausalLM::project_rows(const Linear& lin, const at::Tensor& x, bool training,
                                  const std::vector<AdapterRows>& groups, size_t layer, size_t target) const {
  at::Tensor y = project(lin, x, training);
  for (const AdapterRows& g : groups) {
    const LoraWeights& w = (*g.weights)[layer][target];
    if (!w.A.defined()) continue;
    if (g.rows.size(0) == x.size(0)) {  // every row (groups list rows in order): no gather
      y.add_(at::linear(at::linear(x, w.A), w.B) * w.scale);
      continue;
    }
    at::Tensor xs = x.index_select(0, g.rows);
    y.index_add_(0, g.rows, at::linear(at::linear(xs, w.A), w.B) * w.scale);
  }
  return y;
}

at::Tensor CausalLM::project_stacked(const Linear& lin, const at::Tensor& x, bool training, const ForwardInput& in,
                                     size_t layer, size_t target) const {
  at::Tensor y = project(lin, x, training);
  const at::Tensor& A = in.stacked->A[layer][target];
  if (!A.defined()) return y;
  at::Tensor xa = at::linear(x, A);  // [B, T, R]
  xa.mul_(in.stacked_mask.unsqueeze(1));
  return y.add_(at::linear(xa, in.stacked->B[layer][target]));
}

StackedAdapters stack_adapters(const std::vector<const AdapterWeights*>& adapters) {
  StackedAdapters out;
  // Each adapter's columns: its highest rank over every projection.
  out.offsets.push_back(0);
  for (const AdapterWeights* w : adapters) {
    int64_t rank = 0;
    for (const auto& layer : *w) {
      for (const LoraWeights& lw : layer) {
        if (lw.A.defined()) rank = std::max(rank, lw.A.size(0));
      }
    }
    out.offsets.push_back(out.offsets.back() + rank);
  }
  const size_t layers = adapters.front()->size();
  out.A.resize(layers);
  out.B.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    const size_t targets = (*adapters.front())[l].size();
    out.A[l].resize(targets);
    out.B[l].resize(targets);
    for (size_t t = 0; t < targets; ++t) {
      // The projection's shape and options from an adapter that adapts it; none: left undefined.
      const LoraWeights* some = nullptr;
      for (const AdapterWeights* w : adapters) {
        if ((*w)[l][t].A.defined()) some = &(*w)[l][t];
      }
      if (some == nullptr) continue;
      const int64_t R = out.offsets.back(), in = some->A.size(1), o = some->B.size(0);
      at::Tensor A = at::zeros({R, in}, some->A.options()), B = at::zeros({o, R}, some->B.options());
      for (size_t i = 0; i < adapters.size(); ++i) {
        const LoraWeights& lw = (*adapters[i])[l][t];
        if (!lw.A.defined()) continue;
        const int64_t r = lw.A.size(0), at_col = out.offsets[i];
        A.narrow(0, at_col, r).copy_(lw.A);
        B.narrow(1, at_col, r).copy_(lw.B * lw.scale);
      }
      out.A[l][t] = A;
      out.B[l][t] = B;
    }
  }
  return out;
}

at::Tensor stacked_mask(const StackedAdapters& stacked, const std::vector<int64_t>& adapter_of_row,
                        const at::TensorOptions& options) {
  const int64_t B = static_cast<int64_t>(adapter_of_row.size()), R = stacked.offsets.back();
  at::Tensor mask = at::zeros({B, R}, at::kFloat);
  auto m = mask.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = adapter_of_row[static_cast<size_t>(b)];
    if (i < 0) continue;
    for (int64_t c = stacked.offsets[static_cast<size_t>(i)]; c < stacked.offsets[static_cast<size_t>(i) + 1]; ++c) {
      m[b][c] = 1.0F;
    }
  }
  return mask.to(options);
}

std::pair<at::Tensor, at::Tensor> KVCache::append(size_t layer, const at::Tensor& new_k, const at::Tensor& new_v) {
  const int64_t T = new_k.size(2);
  k[layer].narrow(2, length, T).copy_(new_k);
  v[layer].narrow(2, length, T).copy_(new_v);
  return {k[layer].narrow(2, 0, length + T), v[layer].narrow(2, 0, length + T)};
}

KVCache KVCache::allocate(const CausalLM& model, int64_t batch, int64_t capacity) {
  const ModelConfig& c = model.config();
  KVCache cache;
  const auto opts = at::TensorOptions().dtype(model.dtype()).device(model.device());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    cache.k.push_back(at::zeros({batch, c.num_key_value_heads, capacity, c.head_dim}, opts));
    cache.v.push_back(at::zeros({batch, c.num_key_value_heads, capacity, c.head_dim}, opts));
  }
  return cache;
}

void KVCache::repeat_interleave(int64_t times) {
  if (times == 1) return;
  for (auto& t : k) t = t.repeat_interleave(times, 0);
  for (auto& t : v) t = t.repeat_interleave(times, 0);
}

at::Tensor CausalLM::hidden_states(const ForwardInput& in, bool training, KVStore* cache) {
  const ModelConfig& c = config_;
  const int64_t B = in.input_ids.size(0), T = in.input_ids.size(1);
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
  const int64_t max_pos = in.position_ids.numel() ? in.position_ids.max().item<int64_t>() + 1 : 1;
  ensure_rope_cache(max_pos);
  at::Tensor flat_pos = in.position_ids.reshape({-1});
  at::Tensor cos = rope_cos_.index_select(0, flat_pos).view({B, 1, T, hd}).to(dtype_);
  at::Tensor sin = rope_sin_.index_select(0, flat_pos).view({B, 1, T, hd}).to(dtype_);
  const bool causal_only = !in.attn_mask.defined();
  if (cache != nullptr && causal_only) {
    throw EngineError(StatusCode::kInternal, "hidden_states: a cached pass needs an attention mask");
  }
  size_t layer = 0;
  // Projection indices in lora::supported_targets() order (AdapterWeights' layout).
  enum : size_t { kQ, kK, kV, kO, kGate, kUp, kDown };
  auto proj = [&](const Linear& lin, const at::Tensor& x, size_t target) {
    if (in.stacked != nullptr) return project_stacked(lin, x, training, in, layer, target);
    return in.adapter_rows.empty() ? project(lin, x, training)
                                   : project_rows(lin, x, training, in.adapter_rows, layer, target);
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  at::Tensor h = at::embedding(embed_tokens, in.input_ids);
  for (auto& L : layers_) {
    at::Tensor r = rms_norm(h, L.input_norm);
    at::Tensor q = proj(L.q_proj, r, kQ).view({B, T, nh, hd});
    at::Tensor k = proj(L.k_proj, r, kK).view({B, T, nkv, hd});
    at::Tensor v = proj(L.v_proj, r, kV).view({B, T, nkv, hd}).transpose(1, 2);
    if (c.qk_norm) {
      q = rms_norm(q, L.q_norm);
      k = rms_norm(k, L.k_norm);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    if (cache != nullptr) std::tie(k, v) = cache->append(layer, k, v);
    at::Tensor attn = at::scaled_dot_product_attention(q, k, v, causal_only ? std::optional<at::Tensor>() : in.attn_mask,
                                                       0.0, causal_only, scale, /*enable_gqa=*/nkv != nh);
    attn = attn.transpose(1, 2).reshape({B, T, nh * hd});
    h = h + proj(L.o_proj, attn, kO);
    r = rms_norm(h, L.post_attention_norm);
    at::Tensor mlp = at::silu(proj(L.gate_proj, r, kGate)) * proj(L.up_proj, r, kUp);
    h = h + proj(L.down_proj, mlp, kDown);
    ++layer;
  }
  if (cache != nullptr) cache->advance(T);
  return rms_norm(h, final_norm);
}

at::Tensor packed_attention_mask(const at::Tensor& sequence_ids) {
  const int64_t T = sequence_ids.size(1);
  at::Tensor same = sequence_ids.unsqueeze(2) == sequence_ids.unsqueeze(1);  // [B, T, T]
  at::Tensor causal = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(sequence_ids.device())).tril();
  return (same & causal).unsqueeze(1);
}

}  // namespace trainer::engine::model
