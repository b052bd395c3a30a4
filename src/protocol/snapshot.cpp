#include "protocol/snapshot.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/json_parse.h"
#include "common/sha256.h"

namespace trainer::protocol {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Result<std::string> str_field(const json& in, const std::string& key) {
  auto it = in.find(key);
  if (it == in.end()) return invalid_field(key, "required");
  if (!it->is_string()) return invalid_field(key, "must be a string");
  return it->get<std::string>();
}

Result<int64_t> int_field(const json& in, const std::string& key) {
  auto it = in.find(key);
  if (it == in.end()) return invalid_field(key, "required");
  if (!it->is_number_integer()) return invalid_field(key, "must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < 0) return invalid_field(key, "must not be negative");
  return v;
}

Result<std::string> file_sha256(const fs::path& path, int64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return internal_error("cannot read " + path.string());
  Sha256 h;
  std::string buffer(1 << 16, '\0');
  *bytes = 0;
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    h.update(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
    *bytes += in.gcount();
  }
  return h.hex_digest();
}

}  // namespace

Status check_artifact_kind(const std::string& kind, const std::string& field) {
  if (kind == kWeightsKind || kind == kTrainingStateKind) return Status::ok();
  return invalid_field(field, "'" + kind + "' is not an artifact kind; use weights or trainingState");
}

int64_t Manifest::total_bytes() const {
  int64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  return total;
}

json manifest_to_json(const Manifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  return {{"format", m.format},         {"kind", m.kind},   {"runId", m.run_id},
          {"engineStep", m.engine_step}, {"epoch", m.epoch}, {"baseModelSha", m.base_model_sha},
          {"files", files}};
}

std::string manifest_text(const Manifest& m) { return manifest_to_json(m).dump(); }

Result<Manifest> parse_manifest(const std::string& text) {
  auto doc = parse_json(text, "manifest", 8);
  if (!doc.is_ok()) return invalid_field("manifest", doc.status().message());
  if (!doc->is_object()) return invalid_field("manifest", "must be a JSON object");
  Manifest m;
  TRAINER_ASSIGN_OR_RETURN(const int64_t format, int_field(*doc, "format"));
  if (format != kManifestFormat) return invalid_field("format", "unknown manifest format " + std::to_string(format));
  TRAINER_ASSIGN_OR_RETURN(m.kind, str_field(*doc, "kind"));
  TRAINER_RETURN_IF_ERROR(check_artifact_kind(m.kind, "kind"));
  TRAINER_ASSIGN_OR_RETURN(m.run_id, str_field(*doc, "runId"));
  TRAINER_ASSIGN_OR_RETURN(m.engine_step, int_field(*doc, "engineStep"));
  TRAINER_ASSIGN_OR_RETURN(m.epoch, int_field(*doc, "epoch"));
  TRAINER_ASSIGN_OR_RETURN(m.base_model_sha, str_field(*doc, "baseModelSha"));
  auto files = doc->find("files");
  if (files == doc->end() || !files->is_array()) return invalid_field("files", "required: an array");
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    const std::string at = "files[" + std::to_string(i) + "]";
    if (!f.is_object()) return invalid_field(at, "must be an object");
    ManifestFile mf;
    auto path = str_field(f, "path");
    if (!path.is_ok()) return path.status().with_field(at);
    auto bytes = int_field(f, "bytes");
    if (!bytes.is_ok()) return bytes.status().with_field(at);
    auto sha = str_field(f, "sha256");
    if (!sha.is_ok()) return sha.status().with_field(at);
    if (!is_hex64(*sha)) return invalid_field(at + ".sha256", "must be 64 lowercase hex characters");
    const std::string& p = *path;
    if (p.empty() || p.front() == '/' || p.find("..") != std::string::npos || p == kManifestFile) {
      return invalid_field(at + ".path", "'" + p + "' must be a relative path inside the artifact");
    }
    mf.path = p;
    mf.bytes = *bytes;
    mf.sha256 = *sha;
    m.files.push_back(std::move(mf));
  }
  return m;
}

Result<Manifest> manifest_of_folder(const std::string& dir, Manifest identity) {
  identity.files.clear();
  std::error_code ec;
  const fs::path root(dir);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string rel = fs::relative(it->path(), root).generic_string();
    if (rel == kManifestFile) continue;
    ManifestFile f;
    f.path = rel;
    TRAINER_ASSIGN_OR_RETURN(f.sha256, file_sha256(it->path(), &f.bytes));
    identity.files.push_back(std::move(f));
  }
  if (ec) return internal_error("cannot list " + dir + ": " + ec.message());
  std::sort(identity.files.begin(), identity.files.end(),
            [](const ManifestFile& a, const ManifestFile& b) { return a.path < b.path; });
  return identity;
}

std::string snapshot_id(const std::string& run_id, int64_t step, const std::map<std::string, std::string>& digests) {
  std::string text = "trainer-snapshot-v1\n" + run_id + "\n" + std::to_string(step) + "\n";
  for (const auto& [kind, digest] : digests) text += kind + "=" + digest + "\n";
  return sha256_hex(text);
}

std::string snapshot_key(const std::string& snapshot_id, const std::string& kind) {
  return "snapshots/" + snapshot_id + "/" + kind;
}

json reservation_to_json(const Reservation& r) {
  json kinds = json::object();
  for (const auto& [kind, k] : r.kinds) kinds[kind] = {{"manifestDigest", k.manifest_digest}, {"bytes", k.bytes}};
  return {{"snapshotId", r.snapshot_id}, {"attempt", r.attempt}, {"step", r.step}, {"epoch", r.epoch}, {"kinds", kinds}};
}

Result<Reservation> parse_reservation(const json& body) {
  Reservation r;
  TRAINER_ASSIGN_OR_RETURN(r.snapshot_id, str_field(body, "snapshotId"));
  if (!is_hex64(r.snapshot_id)) return invalid_field("snapshotId", "must be 64 lowercase hex characters");
  TRAINER_ASSIGN_OR_RETURN(r.attempt, int_field(body, "attempt"));
  if (r.attempt < 1) return invalid_field("attempt", "must be at least 1");
  TRAINER_ASSIGN_OR_RETURN(r.step, int_field(body, "step"));
  TRAINER_ASSIGN_OR_RETURN(r.epoch, int_field(body, "epoch"));
  auto kinds = body.find("kinds");
  if (kinds == body.end() || !kinds->is_object() || kinds->empty()) {
    return invalid_field("kinds", "required: an object with weights and/or trainingState");
  }
  for (const auto& [kind, k] : kinds->items()) {
    const std::string at = "kinds." + kind;
    TRAINER_RETURN_IF_ERROR(check_artifact_kind(kind, at));
    if (!k.is_object()) return invalid_field(at, "must be an object");
    Reservation::Kind out;
    auto digest = str_field(k, "manifestDigest");
    if (!digest.is_ok()) return digest.status().with_field(at);
    if (!is_hex64(*digest)) return invalid_field(at + ".manifestDigest", "must be 64 lowercase hex characters");
    auto bytes = int_field(k, "bytes");
    if (!bytes.is_ok()) return bytes.status().with_field(at);
    out.manifest_digest = *digest;
    out.bytes = *bytes;
    r.kinds[kind] = out;
  }
  return r;
}

}  // namespace trainer::protocol
