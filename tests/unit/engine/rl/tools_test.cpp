// Tool calls of reinforcement runs (src/engine/rl/tools.*): finding a call in a completion, the
// declared tool names of a row, and running a real tool executable (its answer, its failures).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/rl/tools.h"

namespace trainer::engine::rl {
namespace {

namespace fs = std::filesystem;

// An executable shell script in a fresh temporary folder.
std::string script(const std::string& name, const std::string& body) {
  const fs::path dir = fs::temp_directory_path() / ("tools_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path) << "#!/bin/sh\n" << body;
  // Readable by others: the tool runs confined, as the user nobody when the tests run as root.
  fs::permissions(path, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  return path.string();
}

TEST(ToolCalls, ACompletionEndingWithAToolCallIsParsed) {
  auto p = find_tool_call("Let me look.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"id\": 7}}\n</tool_call>\n");
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(p->call.has_value()) << p->error;
  EXPECT_EQ(p->call->name, "lookup");
  EXPECT_EQ(p->call->arguments, (nlohmann::json{{"id", 7}}));
  EXPECT_FALSE(find_tool_call("{\"label\": \"billing\"}").has_value());  // an answer, no call
  EXPECT_FALSE(find_tool_call("<tool_call>{\"name\": \"x\"}</tool_call> and more").has_value());
}

TEST(ToolCalls, AMalformedCallSaysWhy) {
  auto p = find_tool_call("<tool_call>{\"name\": \"lookup\", </tool_call>");
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->call.has_value());
  EXPECT_NE(p->error.find("not a JSON object"), std::string::npos) << p->error;
  p = find_tool_call("<tool_call>{\"arguments\": {}}</tool_call>");
  ASSERT_TRUE(p.has_value() && !p->call);
  EXPECT_NE(p->error.find("names no tool"), std::string::npos) << p->error;
}

TEST(ToolCalls, DeclaredToolNamesComeFromFunctionSchemas) {
  const nlohmann::json tools = nlohmann::json::parse(
      R"([{"type": "function", "function": {"name": "lookup"}}, {"name": "search"}, 3])");
  EXPECT_EQ(declared_tool_names(tools), (std::vector<std::string>{"lookup", "search"}));
  EXPECT_TRUE(declared_tool_names(nullptr).empty());
}

TEST(ToolCalls, TheToolGetsTheRequestOnStdinAndItsAnswerIsShown) {
  const std::string tool = script("echo_tool", "read line\nprintf '{\"got\": %s}' \"$line\"\n");
  ToolAnswer a = run_tool(tool, {.name = "lookup", .arguments = {{"id", 7}}}, 10);
  ASSERT_FALSE(a.failed) << a.error;
  EXPECT_EQ(nlohmann::json::parse(a.content),
            (nlohmann::json{{"got", {{"name", "lookup"}, {"arguments", {{"id", 7}}}}}}));
  // A JSON string is shown as the text it holds.
  a = run_tool(script("text_tool", "cat >/dev/null\necho '\"billing\"'\n"), {.name = "t"}, 10);
  ASSERT_FALSE(a.failed) << a.error;
  EXPECT_EQ(a.content, "billing");
}

TEST(ToolCalls, FailuresAreNamedAndShownAsAnError) {
  ToolAnswer a = run_tool(script("exit3", "exit 3\n"), {.name = "t"}, 10);
  EXPECT_TRUE(a.failed);
  EXPECT_EQ(a.error, "the tool exited with code 3");
  EXPECT_EQ(nlohmann::json::parse(a.content), (nlohmann::json{{"error", "the tool exited with code 3"}}));
  a = run_tool(script("prose", "echo not json\n"), {.name = "t"}, 10);
  EXPECT_TRUE(a.failed);
  EXPECT_NE(a.error.find("not JSON"), std::string::npos) << a.error;
  a = run_tool(script("slow", "sleep 30\n"), {.name = "t"}, 0.3);
  EXPECT_TRUE(a.failed);
  EXPECT_NE(a.error.find("timeout"), std::string::npos) << a.error;
  a = run_tool("/nonexistent/tool", {.name = "t"}, 10);
  EXPECT_TRUE(a.failed);
  EXPECT_NE(a.error.find("/nonexistent/tool"), std::string::npos) << a.error;
}

}  // namespace
}  // namespace trainer::engine::rl
