// Test helpers of the engine's unit tests: a temporary folder removed at the end of the test, and
// a file written whole.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace trainer::engine::test_support {

class TempDir {
 public:
  // A new folder under the system's temporary folder, named `prefix`-PID-N.
  explicit TempDir(const std::string& prefix) {
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

}  // namespace trainer::engine::test_support
