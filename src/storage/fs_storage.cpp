// The folder implementation of Storage, built on the atomic file helpers of common/files.h.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "storage/storage.h"

namespace trainer::storage {
namespace {

namespace fs = std::filesystem;

Status errno_status(const std::string& what, const std::string& path) {
  return trainer::errno_status(what, path, errno);
}

// Whether `name` is a temporary of write_file_atomic or a publish: "NAME.tmp.PID.N".
bool is_temporary_name(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return false;
  const std::string rest = name.substr(at + 5);
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return dot != std::string::npos && digits(rest.substr(0, dot)) && digits(rest.substr(dot + 1));
}

// The newest modification time of `path` or of anything inside it (a folder being filled
// changes below its top level too).
fs::file_time_type newest_change(const fs::path& path) {
  std::error_code ec;
  fs::file_time_type newest = fs::last_write_time(path, ec);
  if (ec) return fs::file_time_type::clock::now();  // unreadable: never taken for old
  if (!fs::is_directory(path, ec)) return newest;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code t;
    const auto changed = fs::last_write_time(it->path(), t);
    if (!t) newest = std::max(newest, changed);
  }
  return newest;
}

// Copies the regular file `from` to `to` and fsyncs it.
Status copy_file_synced(const fs::path& from, const fs::path& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno_status("cannot read", from.string());
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    Status st = errno_status("cannot create", to.string());
    ::close(in);
    return st;
  }
  std::vector<char> buf(1 << 20);
  Status st;
  while (st.is_ok()) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = errno_status("cannot read", from.string());
      break;
    }
    if (n == 0) break;
    ssize_t done = 0;
    while (done < n) {
      ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        st = errno_status("cannot write", to.string());
        break;
      }
      done += w;
    }
  }
  if (st.is_ok() && ::fsync(out) != 0) st = errno_status("cannot fsync", to.string());
  ::close(in);
  ::close(out);
  return st;
}

// Copies the file or folder `from` to the new path `to`, every file fsynced. Only regular files
// and folders are published: anything else (a socket, a device, a link) is refused by name.
Status copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  auto status = fs::symlink_status(from, ec);
  if (ec) return error_code_status("cannot read", from.string(), ec);
  if (fs::is_regular_file(status)) return copy_file_synced(from, to);
  if (!fs::is_directory(status)) {
    return failed_precondition("cannot publish " + from.string() + ": not a regular file or folder");
  }
  fs::create_directory(to, ec);
  if (ec) return error_code_status("cannot create", to.string(), ec);
  std::vector<fs::path> entries;
  for (auto it = fs::directory_iterator(from, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    entries.push_back(it->path());
  }
  if (ec) return internal_error("cannot read " + from.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) TRAINER_RETURN_IF_ERROR(copy_tree(e, to / e.filename()));
  return sync_folder(to);
}

class FolderStorage final : public Storage {
 public:
  explicit FolderStorage(fs::path root) : root_(std::move(root)) {}

  std::string describe() const override { return "folder " + root_.string(); }

  Status put(const std::string& key, const std::string& bytes) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    const fs::path target = root_ / key;
    TRAINER_RETURN_IF_ERROR(named(make_parent(target)));
    return named(write_file_atomic(target.string(), bytes));
  }

  Result<std::string> get(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    return read_file((root_ / key).string());
  }

  Result<std::vector<std::string>> list(const std::string& prefix) override {
    if (!prefix.empty()) TRAINER_RETURN_IF_ERROR(check_key(prefix));
    const fs::path base = prefix.empty() ? root_ : root_ / prefix;
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(base, ec)) return out;
    for (auto it = fs::recursive_directory_iterator(base, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      const std::string rel = fs::relative(it->path(), root_).generic_string();
      if (rel.find(".tmp.") != std::string::npos) continue;  // a publish in progress
      out.push_back(rel);
    }
    if (ec) return internal_error("cannot list " + base.string() + ": " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
  }

  Status remove(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    const fs::path target = root_ / key;
    std::error_code ec;
    // Renamed aside first, so that readers never see half a deleted folder.
    const fs::path aside = temporary_beside(target);
    fs::rename(target, aside, ec);
    if (ec == std::errc::no_such_file_or_directory) return Status::ok();
    if (ec) return internal_error("cannot delete " + target.string() + ": " + ec.message());
    fs::remove_all(aside, ec);
    if (ec) return internal_error("cannot delete " + aside.string() + ": " + ec.message());
    return sync_folder(target.parent_path());
  }

  Result<bool> exists(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    std::error_code ec;
    return fs::exists(root_ / key, ec);
  }

  Result<int64_t> size(const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    const fs::path target = root_ / key;
    std::error_code ec;
    if (fs::is_regular_file(target, ec)) return static_cast<int64_t>(fs::file_size(target, ec));
    if (!fs::is_directory(target, ec)) return not_found("no artifact under " + key);
    int64_t total = 0;
    for (auto it = fs::recursive_directory_iterator(target, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_regular_file()) total += static_cast<int64_t>(it->file_size());
    }
    if (ec) return internal_error("cannot read " + target.string() + ": " + ec.message());
    return total;
  }

  Status publish(const std::string& source, const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    const fs::path target = root_ / key;
    TRAINER_RETURN_IF_ERROR(named(make_parent(target)));
    const fs::path tmp = temporary_beside(target);
    std::error_code ec;
    Status st = copy_tree(source, tmp);
    if (!st.is_ok()) {
      fs::remove_all(tmp, ec);
      return named(st);
    }
    // A folder cannot be renamed onto a non-empty one: the old one moves aside first.
    const fs::path old = temporary_beside(target);
    fs::rename(target, old, ec);
    const bool had_old = !ec;
    fs::rename(tmp, target, ec);
    if (ec) {
      Status failed = internal_error("cannot publish " + target.string() + ": " + ec.message());
      if (had_old) fs::rename(old, target, ec);
      fs::remove_all(tmp, ec);
      return failed;
    }
    if (had_old) fs::remove_all(old, ec);
    return sync_folder(target.parent_path());
  }

  Status publish_new(const std::string& source, const std::string& key) override {
    TRAINER_RETURN_IF_ERROR(check_key(key));
    const fs::path target = root_ / key;
    TRAINER_RETURN_IF_ERROR(named(make_parent(target)));
    std::error_code ec;
    if (fs::exists(target, ec)) return already_exists("an artifact already exists under " + key);
    const fs::path tmp = temporary_beside(target);
    Status st = copy_tree(source, tmp);
    if (!st.is_ok()) {
      fs::remove_all(tmp, ec);  // nothing half written stays behind, nor is listed
      return named(st);
    }
    // RENAME_NOREPLACE: the kernel refuses when the destination appeared meanwhile.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
      const int err = errno;
      fs::remove_all(tmp, ec);
      if (err == EEXIST || err == ENOTEMPTY) return already_exists("an artifact already exists under " + key);
      return named(trainer::errno_status("cannot publish", target.string(), err));
    }
    return sync_folder(target.parent_path());
  }

  std::string local_path(const std::string& key) const override { return (root_ / key).string(); }

  Result<int64_t> remove_abandoned_temporaries(std::chrono::seconds older_than) override {
    const auto cutoff = fs::file_time_type::clock::now() - older_than;
    int64_t removed = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!is_temporary_name(it->path().filename().string())) continue;
      const fs::path found = it->path();
      it.disable_recursion_pending();  // its insides are judged (and removed) with it
      if (newest_change(found) >= cutoff) continue;  // a publish may still be writing it
      std::error_code gone;
      fs::remove_all(found, gone);
      if (gone) return internal_error("cannot remove the abandoned temporary " + found.string() + ": " + gone.message());
      ++removed;
    }
    if (ec) return internal_error("cannot look for abandoned temporaries under " + root_.string() + ": " + ec.message());
    return removed;
  }

 private:
  Status make_parent(const fs::path& target) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) return error_code_status("cannot create", target.parent_path().string(), ec);
    return Status::ok();
  }

  // A write that met a full disk names the folder whose disk it is.
  Status named(Status st) const {
    if (st.code() != StatusCode::kResourceExhausted) return st;
    return resource_exhausted("no space left on the disk of the storage folder " + root_.string() + ": " +
                              st.message());
  }

  const fs::path root_;
};

}  // namespace

Status check_key(const std::string& key) {
  if (key.empty()) return invalid_field("key", "must not be empty");
  if (key.front() == '/' || key.back() == '/') {
    return invalid_field("key", "'" + key + "' must be a relative path without a leading or trailing '/'");
  }
  std::stringstream parts(key);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return invalid_field("key", "'" + key + "' must not hold empty, '.' or '..' parts");
    }
  }
  if (key.find('\0') != std::string::npos) return invalid_field("key", "must not hold a NUL byte");
  return Status::ok();
}

Result<std::unique_ptr<Storage>> make_folder_storage(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return unavailable("cannot create the storage folder " + root + ": " + ec.message());
  // Normal form ("/data", not "/data/."): the root is named in messages (a full disk's).
  fs::path normal = fs::absolute(root, ec).lexically_normal();
  if (!normal.has_filename() && normal.has_parent_path()) normal = normal.parent_path();
  return std::unique_ptr<Storage>(new FolderStorage(normal));
}

}  // namespace trainer::storage
