#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "storage/storage.h"

namespace trainer::storage {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  return internal_error(what + " " + path + ": " + std::strerror(errno));
}

Status fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return errno_status("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_status("cannot fsync", path);
  return Status::ok();
}

}  // namespace

Status write_file_atomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp);
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errno_status("cannot write", tmp);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return errno_status("cannot fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return errno_status("cannot rename onto", path);
  }
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  return fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path + ": no such file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trainer::storage
