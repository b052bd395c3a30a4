// The command-line parser: flags from one table, help generated from it, clear usage errors.
#include "cli/args.h"

#include <gtest/gtest.h>

#include "cli/commands.h"
#include "cli/context.h"
#include "cli/exit_codes.h"

#include <functional>

namespace trainer::cli {
namespace {

ParseResult parse(std::vector<std::string> argv) {
  static const Command root = build_command_tree();
  return parse_command_line(root, argv);
}

TEST(CliArgs, FindsTheCommandItsFlagsAndArguments) {
  auto r = parse({"runs", "wait", "7d49", "--exit-status", "--timeout", "90s", "-o", "json"});
  ASSERT_TRUE(r.invocation);
  EXPECT_EQ(r.invocation->path, (std::vector<std::string>{"runs", "wait"}));
  EXPECT_EQ(r.invocation->positionals, (std::vector<std::string>{"7d49"}));
  EXPECT_TRUE(r.invocation->has("exit-status"));
  EXPECT_EQ(r.invocation->get_or("timeout", ""), "90s");
  EXPECT_EQ(r.invocation->get_or("output", ""), "json");
}

TEST(CliArgs, ARepeatedFlagKeepsEveryValueInOrder) {
  auto r = parse({"comparisons", "create", "--source", "3c1f", "--branch", "a1", "--candidate", "m1", "--branch=a2",
                  "--dataset", "eval"});
  ASSERT_TRUE(r.invocation) << r.output;
  EXPECT_EQ(r.invocation->repeated.at("branch"), (std::vector<std::string>{"a1", "a2"}));
  EXPECT_EQ(r.invocation->repeated.at("candidate"), (std::vector<std::string>{"m1"}));
  EXPECT_EQ(r.invocation->get_or("branch", ""), "a2");  // a single-valued read keeps the last
  EXPECT_EQ(r.invocation->repeated.count("all-branches"), 0u);
}

TEST(CliArgs, AcceptsTheSingularAliasAndEqualsForm) {
  auto r = parse({"run", "start", "-f", "-", "--trainer-url=http://h:1", "--force"});
  ASSERT_TRUE(r.invocation);
  EXPECT_EQ(r.invocation->path, (std::vector<std::string>{"runs", "start"}));
  EXPECT_EQ(r.invocation->get_or("file", ""), "-");
  EXPECT_EQ(r.invocation->get_or("trainer-url", ""), "http://h:1");
}

TEST(CliArgs, UnknownFlagIsAUsageErrorNamingIt) {
  auto r = parse({"runs", "list", "--phse", "open"});
  EXPECT_FALSE(r.invocation);
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_EQ(r.output,
            "trainer: unknown flag --phse for `trainer runs list` (did you mean --phase?); see `trainer runs list --help`");
  auto far = parse({"runs", "list", "--zzzzzz"});
  EXPECT_EQ(far.output, "trainer: unknown flag --zzzzzz for `trainer runs list`; see `trainer runs list --help`");
}

TEST(CliArgs, AMisspeltCommandSuggestsTheNearestOne) {
  auto r = parse({"runs", "strat", "-f", "x"});
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_EQ(r.output, "trainer: unknown command \"strat\" for `trainer runs` (did you mean `trainer runs start`?); "
                      "see `trainer runs --help`");
  auto noun = parse({"wrokloads", "list"});
  EXPECT_NE(noun.output.find("(did you mean `trainer workloads`?)"), std::string::npos) << noun.output;
  auto far = parse({"runs", "xyzzy"});
  EXPECT_NE(far.output.find("(commands: start, list, get, wait, cancel, annotate, metrics, hparams, engine-config, engine-runtime, rollouts, tensorboard, pause, resume, snapshots, compare, branch, continue, sweep, branches, tree, ancestry)"),
            std::string::npos)
      << far.output;
}

TEST(CliArgs, HelpCommandPrintsWhatDashDashHelpPrints) {
  for (const std::vector<std::string>& path :
       {std::vector<std::string>{}, {"runs"}, {"runs", "start"}, {"workloads", "refs", "set"}, {"base-models", "get"}}) {
    std::vector<std::string> help_argv = {"help"};
    help_argv.insert(help_argv.end(), path.begin(), path.end());
    std::vector<std::string> flag_argv = path;
    flag_argv.push_back("--help");
    auto a = parse(help_argv);
    auto b = parse(flag_argv);
    EXPECT_FALSE(a.is_error) << a.output;
    EXPECT_EQ(a.exit_code, kExitOk);
    EXPECT_EQ(a.output, b.output);
  }
  EXPECT_EQ(parse({"help", "--help"}).output, parse({"help", "help"}).output);
  EXPECT_NE(parse({"help", "help"}).output.find("trainer help runs start"), std::string::npos);
  auto bad = parse({"help", "runs", "strat"});
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_NE(bad.output.find("did you mean `trainer runs start`?"), std::string::npos) << bad.output;
}

TEST(CliArgs, AFlagThatNeedsAnotherSaysSoInHelpAndIsRefusedAlone) {
  auto help = parse({"runs", "start", "--help"});
  EXPECT_NE(help.output.find("print the plan with every default filled in (needs --dry-run)"), std::string::npos);
  EXPECT_NE(help.output.find("(needs --wait)"), std::string::npos);
  auto alone = parse({"runs", "start", "-f", "p.yaml", "--show-resolved"});
  EXPECT_EQ(alone.exit_code, kExitUsage);
  EXPECT_EQ(alone.output, "trainer: --show-resolved needs --dry-run; see `trainer runs start --help`");
  EXPECT_TRUE(parse({"runs", "start", "-f", "p.yaml", "--show-resolved", "--dry-run"}).invocation);
  EXPECT_EQ(parse({"runs", "get", "abc", "--exit-status"}).output,
            "trainer: --exit-status needs --follow; see `trainer runs get --help`");
  // The same flag name on another command needs nothing.
  EXPECT_TRUE(parse({"runs", "wait", "abc", "--exit-status"}).invocation);
}

// Walks every command of the tree.
void for_each_command(const Command& c, std::vector<std::string> path,
                      const std::function<void(const Command&, const std::vector<std::string>&)>& f) {
  f(c, path);
  for (const auto& child : c.children) {
    auto p = path;
    p.push_back(child.name);
    for_each_command(child, p, f);
  }
}

TEST(CliArgs, EveryCommandHasExamplesThatParse) {
  static const Command root = build_command_tree();
  int checked = 0;
  for_each_command(root, {}, [&](const Command& c, const std::vector<std::string>& path) {
    const std::string name = "trainer" + std::string(path.empty() ? "" : " ") + [&] {
      std::string s;
      for (size_t i = 0; i < path.size(); ++i) s += (i ? " " : "") + path[i];
      return s;
    }();
    EXPECT_GE(c.examples.size(), 1u) << name << " has no examples";
    const std::string help = help_text(c, [&] {
      std::vector<std::string> p = {"trainer"};
      p.insert(p.end(), path.begin(), path.end());
      return p;
    }());
    EXPECT_NE(help.find("\nExamples:\n"), std::string::npos) << name;
    for (const auto& ex : c.examples) {
      // The command line after any "cat FILE |": split on spaces, honouring "double quotes".
      std::string line = ex.line.substr(ex.line.find("trainer "));
      std::vector<std::string> words;
      std::string word;
      bool quoted = false, any = false;
      for (char ch : line) {
        if (ch == '"') {
          quoted = !quoted;
          any = true;
        } else if (ch == ' ' && !quoted) {
          if (any || !word.empty()) words.push_back(word);
          word.clear();
          any = false;
        } else {
          word += ch;
        }
      }
      if (any || !word.empty()) words.push_back(word);
      ASSERT_EQ(words.front(), "trainer") << ex.line;
      words.erase(words.begin());
      auto r = parse(words);
      EXPECT_TRUE(r.invocation || (!r.is_error && r.exit_code == kExitOk)) << ex.line << ": " << r.output;
      // An example of a command runs that command (or shows its help).
      if (r.invocation && !path.empty() && path.front() != "help") {
        EXPECT_EQ(std::vector<std::string>(r.invocation->path.begin(),
                                           r.invocation->path.begin() +
                                               std::min(r.invocation->path.size(), path.size())),
                  path)
            << ex.line << " is not an example of " << name;
      }
      ++checked;
    }
  });
  EXPECT_GT(checked, 60);
}

TEST(CliArgs, RunsStartHelpShowsAPlanAndWhereToLearnMore) {
  auto r = parse({"runs", "start", "--help"});
  for (const char* text : {"kind: run", "workload:", "config:", "dataset:", "examples/sentiment/run.yaml",
                           "--dry-run --show-resolved", "docs/plans.md"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text;
  }
}

TEST(CliArgs, MissingArgumentAndMissingValueAreNamed) {
  auto r = parse({"runs", "get"});
  EXPECT_EQ(r.output, "trainer: missing argument RUN; see `trainer runs get --help`");
  r = parse({"runs", "wait", "x", "--timeout"});
  EXPECT_EQ(r.output, "trainer: flag --timeout needs a value (DURATION); see `trainer runs wait --help`");
  r = parse({"runs", "get", "a", "b"});
  EXPECT_EQ(r.output, "trainer: unexpected argument \"b\"; see `trainer runs get --help`");
}

TEST(CliArgs, GroupWithoutCommandListsItsCommands) {
  auto r = parse({"workloads"});
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(r.output.find("needs a command: create, list, get, rename, annotate, set-evaluation, scores, refs"),
            std::string::npos);
}

TEST(CliArgs, HelpOnEveryLevelListsFlagsFromTheTable) {
  auto root = parse({"--help"});
  EXPECT_EQ(root.exit_code, 0);
  EXPECT_NE(root.output.find("runs"), std::string::npos);
  auto start = parse({"runs", "start", "--help"});
  EXPECT_FALSE(start.is_error);
  EXPECT_NE(start.output.find("--show-resolved"), std::string::npos);
  EXPECT_NE(start.output.find("--trainer-url URL"), std::string::npos);
  auto refs = parse({"workloads", "refs", "set", "-h"});
  EXPECT_NE(refs.output.find("trainer workloads refs set WORKLOAD REF TARGET"), std::string::npos);
}

TEST(CliErrors, AFieldTheServiceBlamesIsShownOnceBeforeTheMessage) {
  CallError apart;
  apart.status = Status(StatusCode::kNotFound, "no workload named 'x'");
  apart.field = "workload";
  EXPECT_EQ(describe_failure(apart), "workload: no workload named 'x'");
  CallError prefixed;
  prefixed.status = Status(StatusCode::kNotFound, "workload: no workload named 'x'");
  prefixed.field = "workload";
  EXPECT_EQ(describe_failure(prefixed), "workload: no workload named 'x'");
  CallError none;
  none.status = Status(StatusCode::kInternal, "boom");
  EXPECT_EQ(describe_failure(none), "boom");
}

}  // namespace
}  // namespace trainer::cli
