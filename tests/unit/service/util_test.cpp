// The service's small helpers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "service/util.h"

namespace trainer::service {
namespace {

std::string write_log(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / ("service_util_test_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

TEST(LastLines, AnEmptyLogSaysSoInsteadOfFailing) {
  // A job SIGKILLed before it wrote a line leaves an empty log; its run must still fail by name.
  EXPECT_EQ(last_lines(write_log("empty", ""), 10), "(the log is empty)");
  EXPECT_EQ(last_lines(write_log("blank", "\n\n"), 10), "(the log is empty)");
}

TEST(LastLines, KeepsTheLastNLines) {
  EXPECT_EQ(last_lines(write_log("three", "a\nb\nc\n"), 2), "b\nc");
  EXPECT_EQ(last_lines(write_log("one", "only"), 5), "only");
}

}  // namespace
}  // namespace trainer::service
