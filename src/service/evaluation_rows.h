// What the other parts read of a completed evaluation: its graded rows, and its rule file's hash.
// The rows: Evaluations::rows() pages
// them, a comparison and a workload's score table pair them for the paired bootstrap
// (paired_bootstrap.h). Internal to src/service; safe from any thread (it reads files and the
// artifact store only).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "service/service_core.h"

namespace trainer::service {

// The rows.jsonl of completed evaluation `id`: its job's output folder under the data folder,
// else (a cluster job's folder is on its node) the copy the job stored.
Result<std::string> evaluation_rows_text(ServiceCore& core, const std::string& id);

// The SHA-256 of a rule: grader's file as it is now ("" for other graders, or a file that cannot
// be read): an evaluation records it, so that a later one reuses it only while the file is the same.
std::string grader_file_sha256(const json& grader);

// Its scored rows: the score by dataset line (rows the grader left unscored are not in it).
Result<std::map<int64_t, double>> evaluation_row_scores(ServiceCore& core, const std::string& id);

}  // namespace trainer::service
