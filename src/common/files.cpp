// Atomic file writes (declared in common/files.h).
#include "common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace trainer {
namespace {

namespace fs = std::filesystem;

}  // namespace

bool is_disk_full(int err) { return err == ENOSPC || err == EDQUOT; }

Status errno_status(const std::string& what, const std::string& path, int err) {
  if (is_disk_full(err)) {
    return resource_exhausted(what + " " + path + ": no space left on its disk (" + std::strerror(err) + ")");
  }
  return internal_error(what + " " + path + ": " + std::strerror(err));
}

Status error_code_status(const std::string& what, const std::string& path, const std::error_code& ec) {
  if (ec.category() == std::generic_category() || ec.category() == std::system_category()) {
    return errno_status(what, path, ec.value());
  }
  return internal_error(what + " " + path + ": " + ec.message());
}

Status sync_folder(const fs::path& dir) {
  const std::string path = dir.empty() ? "." : dir.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path, errno);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_status("cannot fsync", path, errno);
  return Status::ok();
}

fs::path temporary_beside(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  return target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

Status write_file_atomic(const std::string& path, const std::string& bytes) {
  fs::path target(path);
  const std::string tmp = temporary_beside(target).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp, errno);
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = errno_status("cannot write", tmp, errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = errno_status("cannot fsync", tmp, errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = errno_status("cannot rename onto", path, errno);
    ::unlink(tmp.c_str());
    return st;
  }
  return sync_folder(target.parent_path());
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path + ": no such file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trainer
