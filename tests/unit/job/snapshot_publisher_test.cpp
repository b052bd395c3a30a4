// The job's snapshot staging and publication: order, idempotent uploads, conflicts, retries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <mutex>

#include "common/sha256.h"
#include "job/snapshot_publisher.h"
#include "job/snapshot_restore.h"
#include "telemetry/telemetry.h"

namespace trainer::job {
namespace {

namespace fs = std::filesystem;

// Records every call; fails the first `reserve_failures` reservations as unreachable and every
// commit with `commit_status`.
class RecordingCatalog final : public Catalog {
 public:
  Status reserve(const protocol::Reservation& r) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("reserve " + std::to_string(r.step));
    if (reserve_failures > 0) {
      --reserve_failures;
      return unavailable("catalog unreachable");
    }
    reservations[r.snapshot_id] = r;
    return Status::ok();
  }
  Status commit(const std::string& id, const std::string& kind) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back("commit " + kind);
    committed.push_back(id);
    return commit_status;
  }
  // The entry of a reserved snapshot, its committed kinds marked committed.
  Result<nlohmann::json> describe(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    auto it = reservations.find(id);
    if (it == reservations.end()) return not_found("no snapshot " + id);
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [kind, k] : it->second.kinds) {
      const bool done = std::find(committed.begin(), committed.end(), id) != committed.end();
      kinds[kind] = {{"manifestDigest", k.manifest_digest}, {"state", done ? "committed" : "reserved"}};
    }
    return nlohmann::json{{"snapshotId", id}, {"runId", "abc123"}, {"attempt", it->second.attempt},
                          {"savedStep", it->second.step}, {"epoch", it->second.epoch}, {"kinds", kinds}};
  }
  std::map<std::string, protocol::Reservation> reservations;
  std::mutex mu;
  std::vector<std::string> calls;
  std::vector<std::string> committed;
  int reserve_failures = 0;
  Status commit_status;
};

class SnapshotPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("publisher-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    storage_ = std::move(*storage::make_folder_storage((dir_ / "store").string()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An adapter folder whose content depends on `seed`.
  std::string adapter(const std::string& name, const std::string& seed) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    std::ofstream(d / "adapter_model.safetensors") << "weights-" << seed;
    std::ofstream(d / "adapter_config.json") << "{\"r\": 4}";
    return d.string();
  }

  PublisherOptions options() {
    PublisherOptions o;
    o.staging_dir = (dir_ / "staging").string();
    o.run_id = "abc123";
    o.attempt = 1;
    o.backoff = std::chrono::milliseconds(1);
    return o;
  }

  std::string metrics() { return telemetry::prometheus_text(provider_.collect()); }

  fs::path dir_;
  std::unique_ptr<storage::Storage> storage_;
  telemetry::MeterProvider provider_{telemetry::Resource{}};
};

TEST_F(SnapshotPublisherTest, PublishesStagedSnapshotsInOrderReservingBeforeUploadAndCommittingAfter) {
  RecordingCatalog catalog;
  SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
  auto first = publisher.stage(2, 0, {{"weights", adapter("a2", "2")}});
  auto second = publisher.stage(4, 1, {{"weights", adapter("a4", "4")}});
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  ASSERT_TRUE(second.is_ok());
  ASSERT_TRUE(publisher.drain().is_ok());
  EXPECT_EQ(catalog.calls, (std::vector<std::string>{"reserve 2", "commit weights", "reserve 4", "commit weights"}));
  EXPECT_EQ(catalog.committed, (std::vector<std::string>{*first, *second}));
  // The stored manifest is what the id derives from.
  auto manifest = storage_->get("snapshots/" + *first + "/weights/manifest.json");
  ASSERT_TRUE(manifest.is_ok());
  EXPECT_EQ(*first, protocol::snapshot_id("abc123", 2, {{"weights", sha256_hex(*manifest)}}));
  auto parsed = protocol::parse_manifest(*manifest);
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(parsed->files.size(), 2u);
  EXPECT_EQ(*storage_->get("snapshots/" + *first + "/weights/adapter_model.safetensors"), "weights-2");
  // Published snapshots leave nothing staged; the gauge is back to zero.
  EXPECT_TRUE(fs::is_empty(dir_ / "staging"));
  EXPECT_NE(metrics().find("akka_optimize_training_checkpoint_publication_pending 0"), std::string::npos);
}

TEST_F(SnapshotPublisherTest, ItsObserverHearsEachOperationOfAPublicationInOrder) {
  RecordingCatalog catalog;
  PublisherOptions o = options();
  std::vector<std::string> heard;  // publication thread only until drain() returns
  o.observer = [&](const PublicationOperation& op) {
    EXPECT_LE(op.start, op.end);
    EXPECT_EQ(op.step, 2);
    EXPECT_TRUE(op.status.is_ok()) << op.status.to_string();
    heard.push_back(std::string(telemetry::to_string(op.operation)) + (op.kind.empty() ? "" : " " + op.kind) + " " +
                    op.snapshot_id.substr(0, 4));
  };
  SnapshotPublisher publisher(o, *storage_, catalog, provider_);
  auto id = publisher.stage(2, 0, {{"weights", adapter("a2", "2")}});
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(publisher.drain().is_ok());
  const std::string s = id->substr(0, 4);
  EXPECT_EQ(heard, (std::vector<std::string>{"reserve " + s, "upload weights " + s, "acknowledge weights " + s,
                                             "publish " + s}));
}

TEST_F(SnapshotPublisherTest, TheSameBytesAtTheDestinationAreASuccessDifferentOnesAConflict) {
  RecordingCatalog catalog;
  const std::string a = adapter("a", "same");
  std::string id;
  {
    SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
    id = *publisher.stage(2, 0, {{"weights", a}});
    ASSERT_TRUE(publisher.drain().is_ok());
  }
  {
    // A later attempt saving the same step with the same bytes: the same id, a success.
    SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
    EXPECT_EQ(*publisher.stage(2, 0, {{"weights", a}}), id);
    EXPECT_TRUE(publisher.drain().is_ok());
  }
  // Different bytes already at the destination of a new save: refused, never overwritten.
  const std::string b = adapter("b", "other");
  protocol::Manifest identity{.kind = "weights", .run_id = "abc123", .engine_step = 4, .epoch = 0};
  auto m = protocol::manifest_of_folder(b, identity);
  const std::string next = protocol::snapshot_id("abc123", 4, {{"weights", sha256_hex(protocol::manifest_text(*m))}});
  ASSERT_TRUE(storage_->put("snapshots/" + next + "/weights/manifest.json", "{\"tampered\": true}").is_ok());
  SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
  EXPECT_EQ(*publisher.stage(4, 0, {{"weights", b}}), next);
  Status st = publisher.drain();
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.to_string();
  EXPECT_EQ(*storage_->get("snapshots/" + next + "/weights/manifest.json"), "{\"tampered\": true}");
  const std::string text = metrics();
  EXPECT_NE(text.find("checkpoint_failure_reason=\"conflict\""), std::string::npos) << text;
}

TEST_F(SnapshotPublisherTest, AnUnreachableCatalogIsRetriedARefusedCommitIsNot) {
  RecordingCatalog catalog;
  catalog.reserve_failures = 2;
  {
    SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
    ASSERT_TRUE(publisher.stage(2, 0, {{"weights", adapter("a", "1")}}).is_ok());
    ASSERT_TRUE(publisher.drain().is_ok());
  }
  EXPECT_EQ(catalog.calls, (std::vector<std::string>{"reserve 2", "reserve 2", "reserve 2", "commit weights"}));
  const std::string text = metrics();
  EXPECT_NE(text.find("checkpoint_failure_reason=\"catalog\""), std::string::npos) << text;

  catalog.calls.clear();
  catalog.commit_status = invalid_argument("the uploaded manifest does not match the reserved digest");
  SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
  ASSERT_TRUE(publisher.stage(4, 0, {{"weights", adapter("b", "2")}}).is_ok());
  EXPECT_EQ(publisher.drain().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog.calls, (std::vector<std::string>{"reserve 4", "commit weights"}));
  EXPECT_NE(metrics().find("checkpoint_failure_reason=\"validation\""), std::string::npos);
}

TEST_F(SnapshotPublisherTest, AnEarlierPublicationPastItsDeadlineDoesNotFailTheNewest) {
  // The catalog is unreachable for the first snapshot's only try (the deadline leaves no retry):
  // it fails; the next one publishes, and drain() reports the newest, as a run's end or a pause does.
  RecordingCatalog catalog;
  catalog.reserve_failures = 1;
  PublisherOptions o = options();
  o.deadline = std::chrono::milliseconds(1);
  o.backoff = std::chrono::milliseconds(50);
  SnapshotPublisher publisher(o, *storage_, catalog, provider_);
  ASSERT_TRUE(publisher.stage(2, 0, {{"weights", adapter("a", "1")}}).is_ok());
  ASSERT_TRUE(publisher.stage(4, 0, {{"weights", adapter("b", "2")}}).is_ok());
  EXPECT_TRUE(publisher.drain().is_ok());
  const auto results = publisher.results();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(results[1].status.is_ok());

  // The newest failing is what drain() says.
  catalog.reserve_failures = 1;
  ASSERT_TRUE(publisher.stage(6, 0, {{"weights", adapter("c", "3")}}).is_ok());
  const Status last = publisher.drain();
  EXPECT_EQ(last.code(), StatusCode::kUnavailable);
  EXPECT_NE(last.message().find("step 6"), std::string::npos) << last.message();
}

TEST_F(SnapshotPublisherTest, ARestoreValidatesBeforeThePayloadAndRefusesCorruptedOrTamperedBytes) {
  RecordingCatalog catalog;
  std::string id;
  {
    SnapshotPublisher publisher(options(), *storage_, catalog, provider_);
    id = *publisher.stage(3, 1, {{"weights", adapter("a", "x")}});
    ASSERT_TRUE(publisher.drain().is_ok());
  }
  const auto mode = telemetry::CheckpointRestoreMode::kResume;
  auto restored = restore_snapshot(catalog, *storage_, id, {"weights"}, (dir_ / "restore").string(), mode, provider_);
  ASSERT_TRUE(restored.is_ok()) << restored.status().to_string();
  EXPECT_EQ(restored->step, 3);
  EXPECT_EQ(restored->epoch, 1);
  std::ifstream in(fs::path(restored->dirs.at("weights")) / "adapter_model.safetensors");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "weights-x");

  // A payload byte flipped (same size): refused, nothing materialized.
  const std::string key = "snapshots/" + id + "/weights";
  ASSERT_TRUE(storage_->put(key + "/adapter_model.safetensors", "weights-y").is_ok());
  auto corrupted = restore_snapshot(catalog, *storage_, id, {"weights"}, (dir_ / "r2").string(), mode, provider_);
  EXPECT_EQ(corrupted.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(corrupted.status().message().find("corrupted or truncated"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "r2" / "weights"));
  // A tampered manifest: refused at validation, before any payload is read.
  auto manifest = *storage_->get(key + "/manifest.json");
  ASSERT_TRUE(storage_->put(key + "/manifest.json", manifest + " ").is_ok());
  auto tampered = restore_snapshot(catalog, *storage_, id, {"weights"}, (dir_ / "r3").string(), mode, provider_);
  EXPECT_NE(tampered.status().message().find("does not have the committed digest"), std::string::npos);
  // A kind the snapshot never committed.
  auto absent = restore_snapshot(catalog, *storage_, id, {"trainingState"}, (dir_ / "r4").string(), mode, provider_);
  EXPECT_FALSE(absent.is_ok());
  const std::string m = metrics();
  EXPECT_NE(m.find("checkpoint_operation=\"validate\""), std::string::npos);
  EXPECT_NE(m.find("checkpoint_restore_mode=\"resume\""), std::string::npos);
}

}  // namespace
}  // namespace trainer::job
