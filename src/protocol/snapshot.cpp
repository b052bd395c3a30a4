#include "protocol/snapshot.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "common/json_parse.h"
#include "common/sha256.h"
#include "protocol/fields.h"

namespace trainer::protocol {
namespace {

bool is_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status hex64(const std::string& key, const std::string& value) {
  return is_hex64(value) ? Status::ok() : invalid_field(key, "must be 64 lowercase hex characters");
}

Status non_negative(const std::string& key, const int64_t& value) {
  return value >= 0 ? Status::ok() : invalid_field(key, "must not be negative");
}

Status at_least_one(const std::string& key, const int64_t& value) {
  return value >= 1 ? Status::ok() : invalid_field(key, "must be at least 1");
}

Status known_format(const std::string& key, const int& value) {
  if (value == kManifestFormat) return Status::ok();
  return invalid_field(key, "unknown manifest format " + std::to_string(value));
}

Status artifact_kind(const std::string& key, const std::string& value) { return check_artifact_kind(value, key); }

Status inside_the_artifact(const std::string& key, const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find("..") != std::string::npos || p == kManifestFile) {
    return invalid_field(key, "'" + p + "' must be a relative path inside the artifact");
  }
  return Status::ok();
}

Status known_kinds(const std::string& key, const std::map<std::string, Reservation::Kind>& kinds) {
  if (kinds.empty()) return invalid_field(key, "required: an object with weights and/or trainingState");
  for (const auto& [kind, k] : kinds) TRAINER_RETURN_IF_ERROR(check_artifact_kind(kind, key + "." + kind));
  return Status::ok();
}


}  // namespace

// Each struct's fields: its JSON name, its member, whether it is required and what it must be (fields.h).
using fields::required;

template <>
struct fields::Description<ManifestFile> {
  static constexpr auto fields =
      std::make_tuple(required("path", &ManifestFile::path).checked(inside_the_artifact),
                      required("bytes", &ManifestFile::bytes).checked(non_negative),
                      required("sha256", &ManifestFile::sha256).checked(hex64));
};

template <>
struct fields::Description<Manifest> {
  static constexpr auto fields = std::make_tuple(
      required("format", &Manifest::format).checked(known_format),
      required("kind", &Manifest::kind).checked(artifact_kind), required("runId", &Manifest::run_id),
      required("engineStep", &Manifest::engine_step).checked(non_negative),
      required("epoch", &Manifest::epoch).checked(non_negative), required("baseModelSha", &Manifest::base_model_sha),
      required("files", &Manifest::files));
};

template <>
struct fields::Description<Reservation::Kind> {
  static constexpr auto fields =
      std::make_tuple(required("manifestDigest", &Reservation::Kind::manifest_digest).checked(hex64),
                      required("bytes", &Reservation::Kind::bytes).checked(non_negative));
};

template <>
struct fields::Description<Reservation> {
  static constexpr auto fields = std::make_tuple(
      required("snapshotId", &Reservation::snapshot_id).checked(hex64),
      required("attempt", &Reservation::attempt).checked(at_least_one),
      required("step", &Reservation::step).checked(non_negative),
      required("epoch", &Reservation::epoch).checked(non_negative),
      required("kinds", &Reservation::kinds).checked(known_kinds));
};

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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
  json out;
  fields::write(out, m);
  return out;
}

std::string manifest_text(const Manifest& m) { return manifest_to_json(m).dump(); }

Result<Manifest> parse_manifest(const std::string& text) {
  auto doc = parse_json(text, "manifest", 8);
  if (!doc.is_ok()) return invalid_field("manifest", doc.status().message());
  if (!doc->is_object()) return invalid_field("manifest", "must be a JSON object");
  Manifest m;
  TRAINER_RETURN_IF_ERROR(fields::read(*doc, &m));
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

std::string tensorboard_key_prefix(const std::string& run_id) { return "runs/" + run_id + "/tensorboard"; }

bool is_event_file_name(const std::string& name) {
  static constexpr std::string_view kPrefix = "events.out.tfevents.";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  for (char c : name) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    if (!plain) return false;
  }
  return name.find("..") == std::string::npos;
}

json reservation_to_json(const Reservation& r) {
  json out;
  fields::write(out, r);
  return out;
}

Result<Reservation> parse_reservation(const json& body) {
  Reservation r;
  TRAINER_RETURN_IF_ERROR(fields::read(body, &r));
  return r;
}

}  // namespace trainer::protocol
