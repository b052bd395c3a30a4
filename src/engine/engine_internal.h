// Helpers shared by the engine's torch translation units: device choice, model + tokenizer
// loading with their consistency checks, and the exception-to-Status boundary.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine_error.h"
#include "engine/model/model.h"
#include "engine/text/tokenizer.h"
#include "plan/plan.h"

namespace trainer::engine {

// CUDA device 0 when `gpus` > 0 and CUDA is usable, else the CPU.
at::Device pick_device(int gpus);

at::ScalarType dtype_of(plan::Precision p);

// Loads the tokenizer of `model_dir` and checks it against the model's vocabulary: every id
// the tokenizer can produce must have an embedding row.
text::Tokenizer load_tokenizer_for(const std::string& model_dir, const model::ModelConfig& config);

// The ids that end an answer: the tokenizer's end-of-sequence token and those the model folder
// names (generation_config.json's eos_token_id, else config.json's), as transformers' generate
// stops at them.
std::vector<int64_t> stop_ids_of(const std::string& model_dir, const text::Tokenizer& tok);

// Runs `body`, turning EngineError, c10::Error and std::exception into a Status.
Status guard(const std::function<void()>& body, const std::string& context);

}  // namespace trainer::engine
