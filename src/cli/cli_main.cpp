#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "common/version.h"

namespace trainer::cli {

Command build_command_tree() {
  Command root;
  root.name = "trainer";
  root.summary = "trainer: fine-tune LLMs with LoRA through the trainerd service";
  root.description =
      "Talks to trainerd at --trainer-url (default: $TRAINER_URL, else http://localhost:9001).\n"
      "Nouns are plural (`run` works for `runs`); ids accept any unambiguous prefix;\n"
      "-o json prints what the service answered. --force is the only way past a confirmation.\n"
      "\n"
      "Exit codes: 0 ok; 1 the request failed or the service refused it; 2 bad command line;\n"
      "3 the run ended FAILED and 4 CANCELLED (with --exit-status); 5 --timeout passed;\n"
      "6 the service did not answer; 130 Ctrl-C stopped a wait (the run or evaluation carries on).\n"
      "\n"
      "Scripting: --jq EXPR filters the JSON answer (strings print raw), --json FIELDS keeps fields,\n"
      "-q silences a wait's progress, --timeout bounds each call.\n"
      "\n"
      "Start here: trainer status; trainer runs start -f plan.yaml --wait; trainer runs list.\n"
      "Run plans: `trainer help runs start` shows one; docs/plans.md lists every field.";
  root.flags = {{"version", 0, "", "print the version and exit", ""}};
  Command help;
  help.name = "help";
  help.summary = "Show the help of a command (as COMMAND --help does)";
  help.args = "[COMMAND [SUBCOMMAND]]";
  help.examples = {{"how to start a run, with a short plan", "trainer help runs start"},
                   {"the commands of a noun", "trainer help datasets"}};
  // The parser answers `trainer help ...` itself; this entry lists it and carries its help.
  root.children = {info_command(),      status_command(),      base_models_command(), datasets_command(),
                   sessions_command(),  curations_command(),   distillations_command(),   workloads_command(),
                   runs_command(),      pipelines_command(),   snapshots_command(),   evaluations_command(), trained_models_command(),
                   comparisons_command(), bundles_command(), endpoints_command(), capacity_command(),
                   tokens_command(), login_command(), logout_command(), audit_command(), help};
  root.examples = {{"which service am I talking to, and is it up?", "trainer status"},
                   {"is the service ready, and how is it configured?", "trainer info"},
                   {"check the demo's plan and see every default",
                    "trainer runs start -f examples/sentiment/run.yaml --dry-run --show-resolved"},
                   {"start it and follow it live", "trainer runs start -f examples/sentiment/run.yaml --wait"}};
  return root;
}

int cli_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::printf("trainer %s\n", version_string());
    return kExitOk;
  }
  const Command root = build_command_tree();
  ParseResult parsed = parse_command_line(root, args);
  if (!parsed.invocation) {
    std::fputs(parsed.output.c_str(), parsed.is_error ? stderr : stdout);
    if (parsed.is_error) std::fputc('\n', stderr);
    return parsed.exit_code;
  }
  Invocation& inv = *parsed.invocation;
  if (inv.has("version")) {
    std::printf("trainer %s\n", version_string());
    return kExitOk;
  }
  Context ctx(inv);
  if (!ctx.usage_error.empty()) return ctx.fail(ctx.usage_error, kExitUsage);
  return ctx.exit_code(inv.command->run(ctx));
}

}  // namespace trainer::cli
