// The command tree of `trainer` (one builder per noun) and helpers the handlers share.
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/context.h"

namespace trainer::cli {

// The whole tree, rooted at `trainer`.
Command build_command_tree();

Command info_command();
Command status_command();
Command base_models_command();
Command datasets_command();
Command workloads_command();
Command workloads_scores_command();  // a child of workloads (cmd_workloads_scores.cpp)
Command runs_command();
Command capacity_command();
Command snapshots_command();
Command evaluations_command();
Command trained_models_command();
Command comparisons_command();
Command pipelines_command();  // cmd_pipelines.cpp
Command bundles_command();  // cmd_bundles.cpp
Command sessions_command();  // cmd_sessions.cpp
Command curations_command();  // cmd_curations.cpp
Command distillations_command();  // cmd_distillations.cpp
Command endpoints_command();  // cmd_endpoints.cpp
Command endpoints_proxy_command();
Command tokens_command();  // cmd_tokens.cpp
Command audit_command();   // cmd_audit.cpp
Command login_command();   // cmd_tokens.cpp  // `endpoints proxy ENDPOINT` (cmd_endpoints_proxy.cpp)
Command logout_command();  // cmd_tokens.cpp
// `snapshots register SNAPSHOT` and `snapshots candidate SNAPSHOT` (children of snapshots_command()).
Command snapshots_register_command();
Command snapshots_candidate_command();
// `runs snapshots RUN` (a child of runs_command()).
Command runs_snapshots_command();
// `runs pause RUN` and `runs resume RUN` (children of runs_command()).
Command runs_pause_command();
Command runs_resume_command();
// `runs metrics RUN` and `runs hparams RUN` (children of runs_command()).
Command runs_metrics_command();
Command runs_hparams_command();
// `runs engine-config RUN` and `runs engine-runtime RUN` (children of runs_command()).
Command runs_engine_config_command();
Command runs_engine_runtime_command();
// `runs compare RUN --baseline RUN2` (a child of runs_command()).
Command runs_compare_command();
// `runs rollouts RUN` (a child of runs_command()).
Command runs_rollouts_command();
// `runs tensorboard RUN` (a child of runs_command()).
Command runs_tensorboard_command();
// `runs branch PARENT` and `runs continue RUN` (children of runs_command()).
Command runs_branch_command();
Command runs_continue_command();
// `runs sweep PARENT --snapshot S --grid F` (a child of runs_command()).
Command runs_sweep_command();
// `runs branches PARENT`, `runs tree ROOT`, `runs ancestry RUN` (children of runs_command()).
Command runs_branches_command();
Command runs_tree_command();
Command runs_ancestry_command();
// `snapshots pin|unpin|release SNAPSHOT` (children of snapshots_command()).
std::vector<Command> snapshot_hold_commands();

// Reads FILE, or stdin for "-". On failure returns nullopt and sets `error` to a line naming
// the file and the reason.
std::optional<std::string> read_input(const std::string& path, std::string* error);

enum class Confirmation { kYes, kNo, kNoTerminal };

// Asks `question` [y/N] on the terminal, unless --force was given (kYes). With no terminal on
// stdin (or when stdin carried the input) and no --force, answers kNoTerminal.
Confirmation confirm(Context& ctx, const std::string& question, bool stdin_consumed);

// The line printed when a confirmation cannot be asked.
std::string no_terminal_message(const std::string& command_line);

// "/v1/runs?phase=open&limit=5": appends `key=value` for each present flag.
void append_query(std::string* path, const std::string& key, const std::string& value);

// Parses a non-negative integer flag; on error prints it and returns nullopt (exit 2).
std::optional<long long> int_flag(Context& ctx, const std::string& flag, int* exit_code);

// Reads --timeout as a Go duration; `fallback` when absent. nullopt (after printing) when bad.
std::optional<double> timeout_flag(Context& ctx, double fallback, int* exit_code);

// Runs the live watch of `runs wait` (also `runs start --wait`) on the run `ref`.
int wait_for_run(Context& ctx, const std::string& ref);

// Follows the comparison `id` until it ends (a line on stderr each time its progress changes;
// --timeout bounds it); its final record, or nullopt after a failure was printed (`*code` its
// exit code). `comparisons create --wait`, `runs sweep --compare`.
std::optional<nlohmann::json> follow_comparison(Context& ctx, const std::string& id, int* code);
// The text view of a comparison (`comparisons get`).
void print_comparison(const nlohmann::json& comparison);

}  // namespace trainer::cli
