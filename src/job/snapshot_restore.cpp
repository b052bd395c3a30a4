#include "job/snapshot_restore.h"

#include <chrono>
#include <filesystem>

#include "common/files.h"
#include "common/sha256.h"

namespace trainer::job {
namespace {

namespace fs = std::filesystem;
namespace tel = trainer::telemetry;
using json = nlohmann::json;

struct Failure {
  Status status;
  tel::CheckpointFailureReason reason;
};

}  // namespace

Result<RestoredSnapshot> restore_snapshot(Catalog& catalog, storage::Storage& storage, const std::string& snapshot_id,
                                          const std::vector<std::string>& kinds, const std::string& dest,
                                          tel::CheckpointRestoreMode mode, tel::MeterProvider& provider) {
  tel::metrics::CheckpointDuration duration(provider);
  tel::metrics::CheckpointTransferSize transfer(provider);
  auto record = [&](tel::CheckpointOperation op, double seconds, const Failure* failure,
                    std::optional<std::string> kind = std::nullopt) {
    tel::metrics::CheckpointDuration::Attributes a{
        .checkpoint_operation = op,
        .checkpoint_outcome = failure ? tel::CheckpointOutcome::kFailure : tel::CheckpointOutcome::kSuccess,
        .checkpoint_failure_reason = failure ? std::optional(failure->reason) : std::nullopt,
        .checkpoint_storage_mode = storage_mode_of(storage),
        .checkpoint_restore_mode = mode};
    if (kind) {
      a.checkpoint_artifact_kind = *kind == protocol::kTrainingStateKind ? tel::CheckpointArtifactKind::kTrainingState
                                                                        : tel::CheckpointArtifactKind::kWeights;
    }
    duration.record(seconds, a);
  };
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // ---- validate: the descriptor and every manifest, before any payload
  auto t0 = Clock::now();
  auto fail_validate = [&](Status st, tel::CheckpointFailureReason reason) -> Result<RestoredSnapshot> {
    Failure f{st, reason};
    record(tel::CheckpointOperation::kValidate, since(t0), &f);
    return st;
  };
  auto entry = catalog.describe(snapshot_id);
  if (!entry.is_ok()) return fail_validate(entry.status(), tel::CheckpointFailureReason::kCatalog);
  RestoredSnapshot out;
  out.snapshot_id = snapshot_id;
  out.run_id = entry->value("runId", std::string());
  out.attempt = entry->value("attempt", int64_t{0});
  out.step = entry->value("savedStep", int64_t{-1});
  out.epoch = entry->value("epoch", int64_t{0});
  std::map<std::string, std::string> digests;
  const json entry_kinds = entry->value("kinds", json::object());
  for (const auto& [kind, k] : entry_kinds.items()) {
    digests[kind] = k.value("manifestDigest", std::string());
  }
  if (protocol::snapshot_id(out.run_id, out.step, digests) != snapshot_id) {
    return fail_validate(invalid_argument("snapshot " + snapshot_id + ": the catalog's descriptor does not derive "
                                          "its id (run, step and manifest digests disagree)"),
                         tel::CheckpointFailureReason::kValidation);
  }
  std::map<std::string, protocol::Manifest> manifests;
  for (const auto& kind : kinds) {
    const json k = entry->value("kinds", json::object()).value(kind, json::object());
    if (k.value("state", std::string()) != "committed") {
      return fail_validate(failed_precondition("snapshot " + snapshot_id + " has no committed " + kind),
                           tel::CheckpointFailureReason::kValidation);
    }
    const std::string key = protocol::snapshot_key(snapshot_id, kind);
    auto text = storage.get(key + "/" + protocol::kManifestFile);
    if (!text.is_ok()) return fail_validate(text.status(), tel::CheckpointFailureReason::kStorage);
    if (sha256_hex(*text) != digests[kind]) {
      return fail_validate(invalid_argument("snapshot " + snapshot_id + ": the stored " + kind +
                                            " manifest does not have the committed digest"),
                           tel::CheckpointFailureReason::kValidation);
    }
    auto m = protocol::parse_manifest(*text);
    if (!m.is_ok()) return fail_validate(m.status(), tel::CheckpointFailureReason::kValidation);
    if (m->kind != kind || m->run_id != out.run_id || m->engine_step != out.step) {
      return fail_validate(invalid_argument("snapshot " + snapshot_id + ": the " + kind +
                                            " manifest declares another kind, run or step"),
                           tel::CheckpointFailureReason::kValidation);
    }
    manifests[kind] = std::move(*m);
  }
  record(tel::CheckpointOperation::kValidate, since(t0), nullptr);

  // ---- materialize: each kind into a temporary beside dest/<kind>, checked, then renamed
  for (const auto& [kind, m] : manifests) {
    t0 = Clock::now();
    const fs::path target = fs::path(dest) / kind;
    const fs::path tmp = fs::path(dest) / (kind + ".partial");
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::remove_all(target, ec);
    fs::create_directories(tmp, ec);
    const std::string key = protocol::snapshot_key(snapshot_id, kind);
    int64_t bytes = 0;
    auto fail = [&](Status st, tel::CheckpointFailureReason reason) -> Result<RestoredSnapshot> {
      fs::remove_all(tmp, ec);
      Failure f{st, reason};
      record(tel::CheckpointOperation::kMaterialize, since(t0), &f, kind);
      return st;
    };
    for (const auto& f : m.files) {
      auto payload = storage.get(key + "/" + f.path);
      if (!payload.is_ok()) return fail(payload.status(), tel::CheckpointFailureReason::kStorage);
      if (static_cast<int64_t>(payload->size()) != f.bytes || sha256_hex(*payload) != f.sha256) {
        return fail(invalid_argument("snapshot " + snapshot_id + ": " + kind + "/" + f.path +
                                     " is corrupted or truncated (its size or digest differs from the manifest)"),
                    tel::CheckpointFailureReason::kValidation);
      }
      const fs::path local = tmp / f.path;
      fs::create_directories(local.parent_path(), ec);
      if (Status st = write_file_atomic(local.string(), *payload); !st.is_ok()) {
        return fail(st, tel::CheckpointFailureReason::kInternal);
      }
      bytes += f.bytes;
    }
    fs::rename(tmp, target, ec);
    if (ec) return fail(internal_error("cannot materialize " + target.string() + ": " + ec.message()),
                        tel::CheckpointFailureReason::kInternal);
    record(tel::CheckpointOperation::kMaterialize, since(t0), nullptr, kind);
    transfer.record(bytes, {.checkpoint_operation = tel::CheckpointOperation::kMaterialize,
                            .checkpoint_outcome = tel::CheckpointOutcome::kSuccess,
                            .checkpoint_artifact_kind = kind == protocol::kTrainingStateKind
                                                            ? tel::CheckpointArtifactKind::kTrainingState
                                                            : tel::CheckpointArtifactKind::kWeights,
                            .checkpoint_storage_mode = storage_mode_of(storage)});
    out.dirs[kind] = target.string();
  }
  return out;
}

}  // namespace trainer::job
