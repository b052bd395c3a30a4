// The graders' reply readers live in grading/verdict.h (trainerd's curations read judges with them
// too); the engine's graders name them here.
#pragma once

#include "grading/verdict.h"

namespace trainer::engine::rl {

using grading::ChatReply;
using grading::evaluator_score;
using grading::judge_verdict;
using grading::read_chat_completion;

}  // namespace trainer::engine::rl
