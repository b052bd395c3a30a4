// The list helper's pieces that shape what users read: the paging flags and the "More:" line.
#include "cli/list_command.h"

#include <gtest/gtest.h>

namespace trainer::cli {
namespace {

TEST(CliList, PagingFlagsFollowTheCommandsOwn) {
  auto flags = with_paging({{"source", 0, "SNAPSHOT", "only this source snapshot's", ""}}, "at most N", "skip N");
  ASSERT_EQ(flags.size(), 3u);
  EXPECT_EQ(flags[0].name, "source");
  EXPECT_EQ(flags[1].name, "limit");
  EXPECT_EQ(flags[1].value_name, "N");
  EXPECT_EQ(flags[1].help, "at most N");
  EXPECT_EQ(flags[2].name, "offset");
  EXPECT_EQ(flags[2].help, "skip N");
  auto limit_only = with_paging({}, "at most N (default 50)", "");
  ASSERT_EQ(limit_only.size(), 1u);
  EXPECT_EQ(limit_only[0].name, "limit");
}

TEST(CliList, MoreLineOnlyWithANextOffset) {
  EXPECT_EQ(more_line(nlohmann::json{{"items", nlohmann::json::array()}}, "trainer comparisons list"), "");
  EXPECT_EQ(more_line(nlohmann::json{{"nextOffset", 50}}, "trainer runs branches 7d496e82"),
            "More: trainer runs branches 7d496e82 --offset 50\n");
  EXPECT_EQ(more_line(nlohmann::json{{"nextOffset", 100}}, "trainer comparisons list", " --source 3c1f"),
            "More: trainer comparisons list --offset 100 --source 3c1f\n");
}

}  // namespace
}  // namespace trainer::cli
