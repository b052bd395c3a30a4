// read_job_events() (src/service/job_event_source.h) over a real store (SQLite and the session's
// PostgreSQL: store_databases.h) and events file:
// a job's posted events first, its file when it posted none, and the file's tail past what it
// posted once it ended; event N of the file is its line N.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

#include "../common/test_folder.h"
#include "../store/store_databases.h"
#include "service/job_event_source.h"

namespace trainer::service {
namespace {

namespace fs = std::filesystem;

class JobEventSourceTest : public ::testing::TestWithParam<store::Kind> {
 protected:
  void SetUp() override {
    dir_ = trainer::testing::test_folder("job-events-test");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = store::make_database(GetParam());
    ASSERT_TRUE(db_->ready()) << "the test's database could not be made";
    auto s = db_->open();
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    store_ = std::move(*s);
    source_ = {"run1-1", (dir_ / "events.jsonl").string()};
  }
  void TearDown() override {
    store_.reset();  // its connections close before the database is dropped
    fs::remove_all(dir_);
  }

  void append(const std::string& text) {
    std::ofstream out(source_.events_path, std::ios::app | std::ios::binary);
    out << text;
  }
  static std::string step(int n) {
    return R"({"type":"step","step":)" + std::to_string(n) + R"(,"totalSteps":9,"loss":0.5})";
  }
  static std::vector<int64_t> steps_of(const JobEventBatch& batch) {
    std::vector<int64_t> out;
    for (const auto& e : batch.events) out.push_back(std::get<protocol::Step>(e.event).step);
    return out;
  }

  fs::path dir_;
  std::unique_ptr<store::TestDatabase> db_;
  std::unique_ptr<store::Store> store_;
  JobEventSource source_;
};

INSTANTIATE_TEST_SUITE_P(Sqlite, JobEventSourceTest, ::testing::Values(store::Kind::kSqlite), store::kind_name);
INSTANTIATE_TEST_SUITE_P(Postgres, JobEventSourceTest, ::testing::Values(store::Kind::kPostgres), store::kind_name);

TEST_P(JobEventSourceTest, AJobThatPostedNothingIsReadFromItsFileLineByLine) {
  append(step(1) + "\n" + "not json\n" + step(3) + "\n" + R"({"type":"st)");
  auto batch = read_job_events(*store_, source_, {});
  ASSERT_TRUE(batch.is_ok());
  EXPECT_EQ(steps_of(*batch), (std::vector<int64_t>{1, 3}));  // the damaged line is skipped, but counted
  EXPECT_EQ(batch->cursor.seq, 3);
  EXPECT_EQ(batch->cursor.offset, static_cast<int64_t>(2 * (step(1).size() + 1) + 9));  // the partial line waits
  append(R"(ep","step":4,"totalSteps":9,"loss":0.5})" "\n");  // the partial line ends
  auto next = read_job_events(*store_, source_, batch->cursor);
  ASSERT_TRUE(next.is_ok());
  EXPECT_EQ(steps_of(*next), (std::vector<int64_t>{4}));
  EXPECT_EQ(next->cursor.seq, 4);
}

TEST_P(JobEventSourceTest, PostedEventsAreReadFromTheStoreAndTheFileIsLeftUntilTheJobEnds) {
  append(step(1) + "\n" + step(2) + "\n");
  auto first = read_job_events(*store_, source_, {});  // nothing posted yet: the file
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->cursor.seq, 2);
  // The job's posts arrive (1 and 2 again, and 3): the store is its source from now on.
  ASSERT_TRUE(store_->put_job_events("run1-1", {{1, step(1)}, {2, step(2)}, {3, step(3)}}).is_ok());
  auto second = read_job_events(*store_, source_, first->cursor);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(steps_of(*second), (std::vector<int64_t>{3}));
  EXPECT_EQ(second->cursor, (JobEventCursor{3, -1}));
  // Lines the job wrote but did not post are not read while it runs...
  append(step(3) + "\n" + step(4) + "\n" + step(5) + "\n");
  auto running = read_job_events(*store_, source_, second->cursor);
  ASSERT_TRUE(running.is_ok());
  EXPECT_FALSE(running->consumed);
  // ... and are once it ended: those past what it posted.
  auto ended = read_job_events(*store_, source_, second->cursor, /*ended=*/true);
  ASSERT_TRUE(ended.is_ok());
  EXPECT_EQ(steps_of(*ended), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ended->cursor.seq, 5);
}

TEST_P(JobEventSourceTest, ARepeatedPostChangesNothingAndAGapWaits) {
  auto added = store_->put_job_events("run1-1", {{1, step(1)}, {3, step(3)}});
  ASSERT_TRUE(added.is_ok());
  EXPECT_EQ(*added, 2);
  added = store_->put_job_events("run1-1", {{1, step(7)}, {3, step(7)}});
  ASSERT_TRUE(added.is_ok());
  EXPECT_EQ(*added, 0);
  auto batch = read_job_events(*store_, source_, {});
  ASSERT_TRUE(batch.is_ok());
  EXPECT_EQ(steps_of(*batch), (std::vector<int64_t>{1}));  // 3 waits for 2
  ASSERT_TRUE(store_->put_job_events("run1-1", {{2, step(2)}}).is_ok());
  auto rest = read_job_events(*store_, source_, batch->cursor);
  ASSERT_TRUE(rest.is_ok());
  EXPECT_EQ(steps_of(*rest), (std::vector<int64_t>{2, 3}));
}

TEST_P(JobEventSourceTest, LogLinesKeepTheirOrderAndTheTailIsTheLast) {
  ASSERT_TRUE(store_->put_job_log_lines("run1-1", {{2, "b"}, {1, "a"}, {3, "c"}}).is_ok());
  auto tail = store_->job_log_tail("run1-1", 2);
  ASSERT_TRUE(tail.is_ok());
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_EQ((*tail)[0].text, "b");
  EXPECT_EQ((*tail)[1].text, "c");
  auto attempt = store_->register_job_attempt({"run1-1", "run", "run1", "tok"});
  ASSERT_TRUE(attempt.is_ok());
  auto again = store_->register_job_attempt({"run1-1", "run", "run1", "other"});
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->token, "tok");  // registered before: it keeps its token
}

}  // namespace
}  // namespace trainer::service
