// `trainer bundles register|list|get`: scoring bundles, Python package folders that reward terms
// name as bundle:NAME[:VERSION]#MODULE[:FUNCTION] (docs/graders.md, "Registered bundles").
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/list_command.h"
#include "cli/format.h"
#include "cli/run_view.h"

namespace trainer::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Not part of a bundle: Python's caches and hidden files or folders.
bool skipped(const fs::path& relative) {
  for (const auto& part : relative) {
    const std::string s = part.string();
    if (s == "__pycache__" || (!s.empty() && s.front() == '.')) return true;
  }
  const std::string ext = relative.extension().string();
  return ext == ".pyc" || ext == ".pyo";
}

// The server's limit on one file of a bundle (kMaxFileBytes in src/service/bundles.cpp): checked
// here too, so a huge file is refused before it is read.
constexpr uintmax_t kMaxFileBytes = 8u << 20;

// Why `entry` (at `relative` in the folder whose canonical path is `root`) cannot be part of a
// bundle, or "" when it can: a link leading outside the folder (a bundle is copied as it is, and
// the service would otherwise carry a host file such as /etc/passwd away), a link to a folder
// (not followed), anything but a regular file, or a file over the server's limit.
std::string refused_entry(const fs::directory_entry& entry, const std::string& relative, const fs::path& root) {
  std::error_code ec;
  if (entry.is_symlink(ec)) {
    const fs::path target = fs::weakly_canonical(entry.path(), ec);
    const auto [end, unused] = std::mismatch(root.begin(), root.end(), target.begin(), target.end());
    if (ec || end != root.end()) {
      return relative + ": a link leading outside the bundle's folder (to " + (ec ? "?" : target.string()) +
             "); bundles register copies the folder's own files only";
    }
    if (fs::is_directory(target, ec)) {
      return relative + ": a link to a folder, which bundles register does not follow; copy the folder in";
    }
  }
  if (entry.is_directory(ec)) return "";
  if (!entry.is_regular_file(ec)) return relative + ": not a regular file (a device, socket or pipe)";
  const uintmax_t size = entry.file_size(ec);
  if (ec) return relative + ": " + ec.message();
  if (size > kMaxFileBytes) {
    return relative + ": " + std::to_string(size) + " bytes; a bundle's file holds at most " +
           std::to_string(kMaxFileBytes) + " bytes (8 MiB)";
  }
  return "";
}

// The folder's files as [{path, content}], in path order; nullopt with `error` set on a failure.
std::optional<json> folder_files(const std::string& folder, std::string* error) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    *error = folder + ": no such folder (bundles register takes a Python package folder)";
    return std::nullopt;
  }
  const fs::path root = fs::canonical(folder, ec);
  std::vector<std::pair<std::string, fs::path>> found;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path relative = it->path().lexically_relative(folder);  // not through links
    if (skipped(relative)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    const std::string refused = refused_entry(*it, (fs::path(folder) / relative).string(), root);
    if (!refused.empty()) {
      *error = refused;
      return std::nullopt;
    }
    if (it->is_regular_file()) found.emplace_back(relative.generic_string(), it->path());
  }
  if (ec) {
    *error = folder + ": " + ec.message();
    return std::nullopt;
  }
  std::sort(found.begin(), found.end());
  json files = json::array();
  for (const auto& [relative, path] : found) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!in) {
      *error = path.string() + ": could not be read";
      return std::nullopt;
    }
    json content = bytes.str();
    try {
      (void)content.dump();  // a bundle holds text: JSON carries UTF-8 only
    } catch (const json::type_error&) {
      *error = path.string() + ": not UTF-8 text; a bundle holds the package's source files";
      return std::nullopt;
    }
    files.push_back({{"path", relative}, {"content", std::move(content)}});
  }
  return files;
}

int bundles_register(Context& ctx) {
  auto name = ctx.inv.get("name");
  if (!name) return ctx.fail("bundles register needs --name NAME (plans name the bundle by it)", kExitUsage);
  std::string error;
  auto files = folder_files(ctx.inv.positionals[0], &error);
  if (!files) return ctx.fail(error, kExitError);
  Response r;
  CallError e;
  json body = {{"name", *name}, {"files", *files}};
  if (auto workload = ctx.inv.get("workload")) body["workload"] = *workload;
  if (!ctx.client.post("/v1/bundles", body, &r, &e)) {
    return ctx.fail(describe_failure(e), e.transport ? kExitUnreachable : kExitError);
  }
  if (!ctx.text()) {
    ctx.print_json(r.body);
    return kExitOk;
  }
  const std::string which = str(r.body, "name") + " version " + str(r.body, "version");
  if (r.http_status == 200) {
    out("Unchanged: bundle " + which + " already holds these files (" + short_id(str(r.body, "sha")) + ").\n");
  } else {
    out("Registered bundle " + which + " (" + short_id(str(r.body, "sha")) + ", " + str(r.body, "files") + " files).\n");
  }
  out("Score with it: kind: bundle:" + str(r.body, "name") + ":" + str(r.body, "version") + "#MODULE[:FUNCTION]\n");
  return kExitOk;
}

int bundles_list(Context& ctx) {
  ListView view;
  view.path = "/v1/bundles";
  view.items = "bundles";
  view.header = {"NAME", "VERSION", "SHA", "FILES", "BYTES", "CREATED"};
  view.row = [](const json& b, double now) -> std::vector<std::string> {
    return {str(b, "name"), str(b, "version"), short_id(str(b, "sha")), str(b, "files"), str(b, "bytes"),
            age_text(str(b, "createdAt"), now)};
  };
  view.empty = [](const json&) -> std::string {
    return "No bundles registered; add one with `trainer bundles register FOLDER --name NAME`.\n";
  };
  return run_list(ctx, view);
}

int bundles_get(Context& ctx) { return show_document(ctx, "/v1/bundles/" + seg(ctx.inv.positionals[0])); }

}  // namespace

Command bundles_command() {
  Command g;
  g.name = "bundles";
  g.aliases = {"bundle"};
  g.summary = "Scoring bundles: Python package folders that reward terms call (bundle:NAME#MODULE)";
  g.examples = {{"register a package folder", "trainer bundles register ./rewards --name support-rewards"},
                {"every version of every bundle", "trainer bundles list"}};
  Command reg{"register", {}, "Store a package folder's files as the next version of a bundle", "FOLDER",
              "The files are stored in trainerd's data folder under the hash of their content; the same\n"
              "files under the same name again are the version that holds them. __pycache__, *.pyc and\n"
              "hidden files are left out. A reward term names it as bundle:NAME[:VERSION]#MODULE[:FUNCTION]\n"
              "(the latest version unless VERSION is given; FUNCTION defaults to compute_score). A new\n"
              "version counts against the storage quota of --workload (without it: the shared catalog's).",
              {{"name", 0, "NAME", "the bundle's name (required)", ""},
               {"workload", 0, "WORKLOAD", "the workload whose storage quota it counts against", ""}},
              {}, bundles_register, 1, 1, {}};
  reg.examples = {{"register (or add a version of) a bundle", "trainer bundles register ./rewards --name support-rewards"},
                  {"the version as JSON", "trainer bundles register ./rewards --name support-rewards -o json"}};
  Command list{"list", {}, "List bundle versions, by name then version", "", "", {}, {}, bundles_list, 0, 0, {}};
  list.examples = {{"names, versions and hashes", "trainer bundles list"}, {"as JSON", "trainer bundles list -o json"}};
  Command get{"get", {}, "Show one bundle version", "BUNDLE",
              "BUNDLE is NAME (its latest version), NAME:VERSION, or a content hash or hash prefix.", {}, {},
              bundles_get, 1, 1, {}};
  get.examples = {{"the latest version", "trainer bundles get support-rewards"},
                  {"version 1", "trainer bundles get support-rewards:1"}};
  g.children = {reg, list, get};
  return g;
}

}  // namespace trainer::cli
