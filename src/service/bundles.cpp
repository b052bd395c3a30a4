// Scoring bundles (docs/graders.md, "Registered bundles"): a Python package folder's files,
// stored content-addressed under data_dir/bundles/SHA/, versioned per name (1, 2, ...). A plan's
// bundle:NAME[:VERSION]#MODULE[:FUNCTION] term is resolved at submission to the stored folder.
#include <algorithm>
#include <filesystem>
#include <regex>

#include "common/sha256.h"
#include "plan/plan.h"
#include "service/bundles.h"
#include "storage/storage.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

const std::regex kBundleName("^[a-z][a-z0-9._-]{0,63}$");
// A file of a bundle: relative, segments of letters, digits, '.', '_', '-', none of them "." or "..".
const std::regex kFilePath("^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$");
constexpr size_t kMaxFiles = 1000;
// One file's bytes at most (the CLI checks the same before it reads a file: src/cli/cmd_bundles.cpp).
constexpr size_t kMaxFileBytes = 8u << 20;

Status check_bundle_name(const std::string& name) {
  if (!std::regex_match(name, kBundleName) || name.find("..") != std::string::npos) {
    return invalid_field("name", "'" + name +
                                     "' is not a valid bundle name: use 1-64 of a-z, 0-9, '.', '_' and '-', starting "
                                     "with a letter, without '..'");
  }
  return Status::ok();
}

struct BundleFile {
  std::string path;
  std::string content;
};

Result<std::vector<BundleFile>> read_files(const json& body) {
  if (!body.contains("files") || !body["files"].is_array() || body["files"].empty()) {
    return invalid_field("files", "required: a non-empty list of {path, content}, the package folder's files");
  }
  const json& list = body["files"];
  if (list.size() > kMaxFiles) {
    return invalid_field("files", "holds " + std::to_string(list.size()) + " files; a bundle holds at most " +
                                      std::to_string(kMaxFiles));
  }
  std::vector<BundleFile> out;
  bool python = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "files[" + std::to_string(i) + "]";
    const json& f = list[i];
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("content") ||
        !f["content"].is_string() || f.size() != 2) {
      return invalid_field(at, "must be an object {path, content} of two strings");
    }
    std::string path = f["path"].get<std::string>();
    bool dots = false;
    for (size_t pos = 0; pos <= path.size();) {
      const size_t end = std::min(path.find('/', pos), path.size());
      const std::string segment = path.substr(pos, end - pos);
      if (segment == "." || segment == "..") dots = true;
      pos = end + 1;
    }
    if (!std::regex_match(path, kFilePath) || dots) {
      return invalid_field(at + ".path", "'" + path + "' must be a relative path of letters, digits, '.', '_', '-' and '/' "
                                                       "(no '..', no leading '/')");
    }
    if (f["content"].get_ref<const std::string&>().size() > kMaxFileBytes) {
      return invalid_field(at + ".content", "'" + path + "' holds " +
                                                std::to_string(f["content"].get_ref<const std::string&>().size()) +
                                                " bytes; a bundle's file holds at most " +
                                                std::to_string(kMaxFileBytes) + " bytes (8 MiB)");
    }
    if (path.size() >= 3 && path.compare(path.size() - 3, 3, ".py") == 0) python = true;
    out.push_back({std::move(path), f["content"].get<std::string>()});
  }
  std::sort(out.begin(), out.end(), [](const BundleFile& a, const BundleFile& b) { return a.path < b.path; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].path == out[i - 1].path) return invalid_field("files", "'" + out[i].path + "' is listed twice");
  }
  if (!python) return invalid_field("files", "hold no .py file; a bundle is a Python package folder");
  return out;
}

// The hash of the files: each one's path, size and bytes, in path order.
std::string content_sha(const std::vector<BundleFile>& files) {
  Sha256 h;
  for (const auto& f : files) {
    h.update(f.path);
    h.update(std::string(1, '\0'));
    h.update(std::to_string(f.content.size()));
    h.update(std::string(1, '\0'));
    h.update(f.content);
  }
  return h.hex_digest();
}

// Writes the files into `folder` whole or not at all: into a temporary folder beside it, then one
// rename. A folder already there holds the same content (it is named by its hash).
Status write_folder(const fs::path& folder, const std::vector<BundleFile>& files) {
  std::error_code ec;
  if (fs::is_directory(folder, ec)) return Status::ok();
  const fs::path staging = folder.string() + ".partial-" + random_hex(8);
  for (const auto& f : files) {
    const fs::path target = staging / f.path;
    fs::create_directories(target.parent_path(), ec);
    if (ec) return internal_error("could not create " + target.parent_path().string() + ": " + ec.message());
    TRAINER_RETURN_IF_ERROR(write_file_atomic(target.string(), f.content));
  }
  fs::rename(staging, folder, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    if (fs::is_directory(folder, ignored)) return Status::ok();  // stored by a concurrent registration
    return internal_error("could not store the bundle in " + folder.string() + ": " + ec.message());
  }
  return Status::ok();
}

std::string version_list(const std::vector<json>& versions) {
  std::string out;
  for (const auto& v : versions) out += (out.empty() ? "" : ", ") + std::to_string(v.value("version", 0));
  return out;
}

}  // namespace

Result<std::pair<json, bool>> Bundles::register_version(const json& body, const StorageOwner* owner) {
  if (!body.is_object()) return invalid_field("body", "must be a JSON object {name, files}");
  for (const auto& [k, v] : body.items()) {
    if (k != "name" && k != "files" && k != "workload") {
      return invalid_field(k, "unknown field; a registration takes name, files and workload");
    }
  }
  if (!body.contains("name") || !body["name"].is_string()) return invalid_field("name", "required: the bundle's name");
  const std::string name = body["name"].get<std::string>();
  TRAINER_RETURN_IF_ERROR(check_bundle_name(name));
  TRAINER_ASSIGN_OR_RETURN(std::vector<BundleFile> files, read_files(body));
  const std::string sha = content_sha(files);
  const fs::path folder = fs::path(core_.options.data_dir) / "bundles" / sha;
  int64_t bytes = 0;
  for (const auto& f : files) bytes += static_cast<int64_t>(f.content.size());

  std::lock_guard<std::mutex> lock(core_.mu);
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_bundle_versions());
  int64_t latest = 0;
  for (const auto& v : all) {
    if (v.value("name", std::string()) != name) continue;
    if (v.value("sha", std::string()) == sha) return std::make_pair(v, false);  // the same content: that version
    latest = std::max<int64_t>(latest, v.value("version", int64_t{0}));
  }
  // A new version: within its owner's storage quota, else nothing is stored.
  if (owner) TRAINER_RETURN_IF_ERROR(check_storage_quota(*core_.store, *owner, bytes, "this bundle version", "files"));
  // The files first: a committed version always has its folder.
  TRAINER_RETURN_IF_ERROR(write_folder(folder, files));
  json doc = {{"name", name},
              {"version", latest + 1},
              {"sha", sha},
              {"path", folder.string()},
              {"files", static_cast<int64_t>(files.size())},
              {"bytes", bytes},
              {"createdAt", core_.now_rfc3339()}};
  if (owner) doc["owner"] = owner_json(*owner);
  TRAINER_RETURN_IF_ERROR(core_.store->insert_bundle_version(doc));
  return std::make_pair(doc, true);
}

Result<json> Bundles::list() {
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_bundle_versions());
  return json{{"bundles", all}};
}

Result<json> Bundles::get(const std::string& ref) { return resolve(ref, "bundle"); }

Result<json> Bundles::resolve(const std::string& ref, const std::string& field) {
  if (ref.empty()) return invalid_field(field, "must not be empty");
  TRAINER_ASSIGN_OR_RETURN(std::vector<json> all, core_.store->list_bundle_versions());
  // NAME or NAME:VERSION.
  std::string name = ref;
  std::optional<int64_t> version;
  const size_t colon = ref.rfind(':');
  if (colon != std::string::npos) {
    const std::string v = ref.substr(colon + 1);
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_field(field, "'" + ref + "': a bundle's version is a number (NAME:VERSION)");
    }
    name = ref.substr(0, colon);
    version = std::stoll(v);
  }
  std::vector<json> named;
  for (const auto& v : all) {
    if (v.value("name", std::string()) == name) named.push_back(v);
  }
  if (!named.empty()) {
    if (!version) return named.back();  // listed in version order: the latest
    for (const auto& v : named) {
      if (v.value("version", int64_t{0}) == *version) return v;
    }
    return field_status(StatusCode::kNotFound, field,
                        "bundle '" + name + "' has no version " + std::to_string(*version) + "; it has " + version_list(named));
  }
  // A content hash or a unique prefix of one (several names may hold the same content: the first).
  if (!version && is_hex(ref) && ref.size() >= 4) {
    std::vector<std::string> shas;
    const json* first = nullptr;
    for (const auto& v : all) {
      const std::string sha = v.value("sha", std::string());
      if (sha.rfind(ref, 0) != 0) continue;
      if (std::find(shas.begin(), shas.end(), sha) == shas.end()) shas.push_back(sha);
      if (first == nullptr) first = &v;
    }
    if (shas.size() == 1) return *first;
    if (shas.size() > 1) {
      std::string c;
      for (const auto& s : shas) c += (c.empty() ? "" : ", ") + s.substr(0, 16);
      return invalid_field(field, "'" + ref + "' is an ambiguous hash prefix (candidates: " + c + ")");
    }
  }
  std::string names;
  std::string previous;
  for (const auto& v : all) {  // in name order
    const std::string n = v.value("name", std::string());
    if (n != previous) names += (names.empty() ? "" : ", ") + n;
    previous = n;
  }
  return field_status(StatusCode::kNotFound, field,
                      "no bundle named or hashed '" + name + "' (registered: " + (names.empty() ? "none" : names) +
                          "); register it first (trainer bundles register FOLDER --name NAME)");
}

Result<std::string> Bundles::resolve_kind(const std::string& kind, const std::string& field) {
  if (plan::term_kind(kind) != plan::TermKind::kBundle) return kind;
  const plan::ScoringFunction f = *plan::scoring_function(kind);
  if (f.path.empty() || f.path.front() == '/') return kind;  // a path on trainerd's host (check_reward_terms)
  if (f.module.empty()) {
    return invalid_field(field, "'" + kind + "': a registered bundle is named with its module, "
                                             "bundle:NAME[:VERSION]#MODULE[:FUNCTION]");
  }
  TRAINER_ASSIGN_OR_RETURN(json version, resolve(f.path, field));
  // The label is the same in both forms (bundle:MODULE[:FUNCTION]).
  return "bundle:" + version.value("path", std::string()) + "#" + f.module +
         (f.function == plan::kDefaultScoringFunction ? "" : ":" + f.function);
}

Status Bundles::resolve_terms(plan::Plan& p) {
  for (size_t i = 0; i < p.config.rewardTerms.size(); ++i) {
    plan::RewardTermSpec& t = p.config.rewardTerms[i];
    TRAINER_ASSIGN_OR_RETURN(t.kind, resolve_kind(t.kind, "config.reward.terms[" + std::to_string(i) + "].kind"));
  }
  return Status::ok();
}

}  // namespace trainer::service
