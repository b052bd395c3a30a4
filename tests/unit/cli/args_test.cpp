// The command-line parser: flags from one table, help generated from it, clear usage errors.
#include "cli/args.h"

#include <gtest/gtest.h>

#include "cli/commands.h"
#include "cli/exit_codes.h"

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
  EXPECT_EQ(r.output, "trainer: unknown flag --phse for `trainer runs list`; see `trainer runs list --help`");
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
  EXPECT_NE(r.output.find("needs a command: create, list, get, rename, annotate, set-evaluation, refs"),
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

}  // namespace
}  // namespace trainer::cli
