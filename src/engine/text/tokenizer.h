// Tokenizer and chat template of a Hugging Face model folder (tokenizer.json,
// tokenizer_config.json), exact to transformers. Implemented over rust/text.
#pragma once

namespace trainer::engine::text {}
