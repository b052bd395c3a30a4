// Which host paths a user's plan or request may name (docs/security.md, "Paths"): trainerd's
// `paths.allow`, a list of folders. A `rule:` or `bundle:/ABS` scoring module, an http term's
// `caFile` and an adapter import's `servingModel.ref` must resolve (symlinks followed, `..`
// folded) to a place under one of them, and never under trainerd's own data folder (its store,
// other runs' folders), save its registered bundles.
//
// A path outside is refused with one message whatever lies there: a missing file and an existing
// one answer the same, so the refusal says nothing about the host's files. Inside the allowed
// folders a missing file may be named missing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace trainer {

struct PathPolicy {
  // Folders a plan may name files in (absolute; resolved when checked).
  std::vector<std::string> allow;
  // Folders never allowed, even under an allowed one: trainerd's data folder.
  std::vector<std::string> deny;
  // Folders of `deny` allowed after all: the registered bundles' folder (shared, read-only content).
  std::vector<std::string> except;
  bool operator==(const PathPolicy&) const = default;
};

// `["/DIR", ...]` as the allowed folders; a relative or empty entry is invalid_field(`field` + "[i]").
Result<std::vector<std::string>> parse_allowed_folders(const nlohmann::json& folders, const std::string& field);

// What a path names: a file, or a folder (a package's, an adapter's).
enum class PathKind { kFile, kFolder };

// `path` resolved (realpath of its longest existing part, the rest folded lexically); "" when it
// is not absolute.
std::string resolve_path(const std::string& path);

// Ok when `path` is absolute, resolves under an allowed folder and not under a denied one, and
// is there as `kind`. Otherwise invalid_field(`field`): "must be an absolute path", "is outside
// the folders this trainerd lets requests name" (the same for any path outside, existing or not),
// or "no such file/folder" (inside only).
Status check_confined_path(const PathPolicy& policy, const std::string& path, const std::string& field, PathKind kind);

}  // namespace trainer
