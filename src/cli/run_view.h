// How a run looks in the terminal: the live progress line of `runs wait` / `runs get`, the
// detail block of `runs get`, and the rows of `runs list`. Pure functions of the Run record
// (docs/api.md), so the unit tests pin the text.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::cli {

struct ViewStyle {
  bool unicode = false;  // block-character bar (terminals) instead of ASCII
  bool color = false;    // ANSI colours
  int bar_width = 24;    // cells of the progress bar
  size_t max_width = 0;  // display cells the line may take (0: no limit); cost, tok/s and
                         // validation loss are dropped, in that order, before the line is cut
};

bool is_terminal_phase(const std::string& phase);

// Seconds the run has spent in TRAINING as of its last update, from its phase history.
std::optional<double> training_elapsed_seconds(const nlohmann::json& run);

// Estimated seconds to the end of training; nullopt before the first step or when done.
std::optional<double> run_eta_seconds(const nlohmann::json& run);

// One line: phase, bar, "step 40/100", loss, tokens/s, ETA, cost so far. No newline.
std::string run_progress_line(const nlohmann::json& run, const ViewStyle& style);

// The detail block of `runs get`: "Key:  value" lines in sections.
std::string run_detail(const nlohmann::json& run, const ViewStyle& style);

// One "GRADER (AT): SOURCE" line per judge of a run's judgeInstructions (runs get, a dry run's
// --show-resolved); "" when it has none.
std::string judge_instructions_text(const nlohmann::json& judges);

// The final summary printed when a wait ends: phase, steps, final loss, adapter, cost.
std::string run_summary(const nlohmann::json& run);

// A run's attempts (runs get's `attempts`, `attempt`, plan.execution.maxAttempts) as a person reads
// them, when it had more than one or lost one: "attempt 2 of 3, resumed from step 6 (attempt 1:
// killed, code 137)"; `brief`: "attempt 2 of 3"; "" otherwise.
std::string attempts_text(const nlohmann::json& run, bool brief);

// `runs list` columns.
std::vector<std::string> run_list_header();
std::vector<std::string> run_list_row(const nlohmann::json& run, double now_epoch_seconds);

// The escape sequence that clears a progress line of `drawn_width` cells drawn on a terminal
// now `columns` wide, leaving the cursor at the start of its first row: after narrowing, the
// line has wrapped onto ceil(width / columns) rows and each row above the cursor is cleared.
std::string erase_drawn_line(size_t drawn_width, size_t columns);

// "12s ago", "3m ago", "2h ago", "4d ago" (empty when `time` does not parse).
std::string age_text(const std::string& time, double now_epoch_seconds);

// First 12 characters of an id (what tables show; any unambiguous prefix resolves).
std::string short_id(const std::string& id);

}  // namespace trainer::cli
