// Whether a base model's folder holds an architecture the engine trains (common/model_architectures.h),
// as the service refuses one: at `base-models select` (field name) and when a plan names a model
// whose folder changed since it was selected (field baseModel).
#pragma once

#include <string>

#include "common/status.h"

namespace trainer::service {

// ok, or kFailedPrecondition blaming `field`: "base model 'NAME' is a GPT2LMHeadModel
// (FOLDER/config.json), which the engine cannot train; supported architectures: ...; choose ...".
Status check_trainable_model(const std::string& name, const std::string& folder, const std::string& field);

}  // namespace trainer::service
