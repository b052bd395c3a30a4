// Training rows: a JSONL dataset rendered with the model's chat template into token ids and
// the mask of tokens the loss is taken on. No torch here.
#pragma once

namespace trainer::engine::data {}
