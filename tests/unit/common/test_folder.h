// A temporary folder for the running gtest: TMP/PREFIX-PID-NAME, where NAME is the test's name
// with a parametrised test's '/' ("Name/sqlite") made '-', so the folder is one folder and
// remove_all() of it leaves nothing behind.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

namespace trainer::testing {

inline std::filesystem::path test_folder(const std::string& prefix) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '-');
  return std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()) + "-" + name);
}

}  // namespace trainer::testing
