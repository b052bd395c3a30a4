// Turning a data::Batch (plain vectors) into the tensors of one forward pass. Internal to the
// engine's torch translation units.
#pragma once

#include <ATen/ATen.h>

#include "engine/data/dataset.h"
#include "engine/model/model.h"

namespace trainer::engine::train {

struct BatchTensors {
  model::ForwardInput input;
  at::Tensor labels;  // [B, T] int64, unshifted, -100 where not trained
};

// `packed`: the batch holds packed rows, so attention is masked to each row's own tokens.
// Without packing, rows are right-padded and causal attention alone keeps pads unseen.
inline BatchTensors to_tensors(const data::Batch& b, at::Device device, bool packed) {
  auto from = [&](const std::vector<int64_t>& v) {
    return at::from_blob(const_cast<int64_t*>(v.data()), {b.rows, b.seq_len}, at::kLong).to(device, at::kLong, false, true);
  };
  BatchTensors t;
  t.input.input_ids = from(b.input_ids);
  t.input.position_ids = from(b.position_ids);
  t.labels = from(b.labels);
  if (packed) t.input.attn_mask = model::packed_attention_mask(from(b.sequence_ids));
  return t;
}

}  // namespace trainer::engine::train
