// Host paths a request may name (declared in common/path_policy.h).
#include "common/path_policy.h"

#include <filesystem>

namespace trainer {
namespace {

namespace fs = std::filesystem;

// Whether `path` is `folder` or lies below it (both resolved).
bool under(const fs::path& path, const fs::path& folder) {
  auto p = path.begin();
  for (auto f = folder.begin(); f != folder.end(); ++f, ++p) {
    if (f->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *f) return false;
  }
  return true;
}

bool under_any(const fs::path& path, const std::vector<std::string>& folders) {
  for (const auto& f : folders) {
    const std::string resolved = resolve_path(f);
    if (!resolved.empty() && under(path, resolved)) return true;
  }
  return false;
}

}  // namespace

Result<std::vector<std::string>> parse_allowed_folders(const nlohmann::json& folders, const std::string& field) {
  if (!folders.is_array()) return invalid_field(field, "must be a list of absolute folder paths, got " + folders.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < folders.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!folders[i].is_string()) return invalid_field(at, "must be an absolute folder path, got " + folders[i].dump());
    const std::string f = folders[i].get<std::string>();
    if (f.empty() || f.front() != '/') return invalid_field(at, "'" + f + "' must be an absolute folder path");
    out.push_back(f);
  }
  return out;
}

std::string resolve_path(const std::string& path) {
  if (path.empty() || path.front() != '/') return "";
  std::error_code ec;
  // The existing part with its links followed, the rest with its "." and ".." folded.
  const fs::path resolved = fs::weakly_canonical(fs::path(path), ec);
  if (ec) return fs::path(path).lexically_normal().string();
  return resolved.lexically_normal().string();
}

Status check_confined_path(const PathPolicy& policy, const std::string& path, const std::string& field, PathKind kind) {
  if (path.empty() || path.front() != '/') {
    return invalid_field(field, "'" + path + "' must be an absolute path on trainerd's host (jobs run elsewhere than your shell)");
  }
  const fs::path resolved = resolve_path(path);
  const bool inside = under_any(resolved, policy.allow) &&
                      (!under_any(resolved, policy.deny) || under_any(resolved, policy.except));
  if (!inside) {
    std::string folders;
    for (const auto& f : policy.allow) folders += (folders.empty() ? "" : ", ") + f;
    return invalid_field(field, "'" + path + "' is outside the folders this trainerd lets requests name (paths.allow: " +
                                    (folders.empty() ? std::string("none") : folders) +
                                    "; trainerd's data folder never); put it under one of them, or ask the operator "
                                    "to add its folder to paths.allow");
  }
  std::error_code ec;
  const bool found = kind == PathKind::kFolder ? fs::is_directory(resolved, ec) : fs::is_regular_file(resolved, ec);
  if (!found) {
    return invalid_field(field, "'" + path + "': no such " + (kind == PathKind::kFolder ? "folder" : "file") +
                                    " on trainerd's host");
  }
  return Status::ok();
}

}  // namespace trainer
