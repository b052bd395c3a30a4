// LoRA SFT as a method of the shared training loop (engine/train/loop.h); engine::train_sft in
// engine.h runs it. Internal to the engine.
#pragma once

#include <memory>

#include "engine/train/loop.h"

namespace trainer::engine::sft {

// The SFT method on `setup`'s model: loads and splits the data (emitting preparing, data_fit,
// data_split and resolved), and plans the epochs. `total_steps` receives the number of optimizer
// steps the plan asks for.
std::unique_ptr<train::Method> make_method(const plan::Plan& plan, train::Setup& setup, const EventSink& emit,
                                           int64_t* total_steps);

}  // namespace trainer::engine::sft
