#include "flowctl/spill_fifo.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flowctl/spill_segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/flowctl/spill_test_util.h"

namespace flowctl {
namespace {

using ::flowctl::testing::DrainAll;
using ::flowctl::testing::Payload;
using ::flowctl::testing::RunInCrashingChild;
using ::flowctl::testing::SegmentFiles;
using ::flowctl::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint64_t kFrame = spill::kFrameHeaderBytes;

SpillFifoOptions Opts(const std::string& dir, SpillDurability d, uint64_t memory_bytes,
                      uint64_t segment_bytes = 1 << 20) {
  SpillFifoOptions o;
  o.dir = dir;
  o.durability = d;
  o.memory_bytes = memory_bytes;
  o.segment_bytes = segment_bytes;
  o.sync_interval = absl::Milliseconds(2);
  return o;
}

std::unique_ptr<SpillFifo> MustOpen(const SpillFifoOptions& o) {
  absl::StatusOr<std::unique_ptr<SpillFifo>> f = SpillFifo::Open(o);
  CHECK(f.ok()) << f.status();
  return std::move(*f);
}

uint64_t MustAppend(SpillFifo& fifo, const std::string& data) {
  absl::StatusOr<uint64_t> seq = fifo.Append(data);
  CHECK(seq.ok()) << seq.status();
  return *seq;
}

class SpillFifoModeTest : public ::testing::TestWithParam<SpillDurability> {};

INSTANTIATE_TEST_SUITE_P(AllPolicies, SpillFifoModeTest,
                         ::testing::Values(SpillDurability::kNone, SpillDurability::kInterval,
                                           SpillDurability::kEveryRecord));

TEST_P(SpillFifoModeTest, StrictFifoAcrossTiers) {
  TempDir dir;
  // 1000 bytes of memory = 10 records of 100 bytes; the rest spills.
  auto fifo = MustOpen(Opts(dir.path(), GetParam(), 1000, 2000));
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 50; ++i) seqs.push_back(MustAppend(*fifo, Payload(i, 100)));
  SpillFifoStats st = fifo->stats();
  EXPECT_EQ(st.memory_records, 10u);
  EXPECT_EQ(st.memory_bytes, 1000u);
  EXPECT_EQ(st.disk_records, 40u);
  EXPECT_EQ(st.spilled, 40u);
  EXPECT_GT(st.segments, 1u);  // 2000-byte segments rotate

  // Consume a few memory records: the freed room must not be used while disk holds a backlog.
  int next = 0;
  for (; next < 5; ++next) {
    absl::StatusOr<const SpillFifo::Record*> r = fifo->Front();
    ASSERT_TRUE(r.ok() && *r != nullptr);
    EXPECT_EQ((*r)->seq, seqs[next]);
    EXPECT_EQ((*r)->data, Payload(next, 100));
    ASSERT_TRUE(fifo->Pop().ok());
  }
  for (int i = 50; i < 55; ++i) seqs.push_back(MustAppend(*fifo, Payload(i, 100)));
  EXPECT_EQ(fifo->stats().memory_records, 5u);
  EXPECT_EQ(fifo->stats().spilled, 45u);

  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 50u);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].seq, seqs[next + i]);
    EXPECT_EQ(rest[i].data, Payload(next + i, 100));
  }
  EXPECT_TRUE(fifo->empty());

  // Disk backlog drained: new records use memory again.
  MustAppend(*fifo, Payload(99, 100));
  st = fifo->stats();
  EXPECT_EQ(st.memory_records, 1u);
  EXPECT_EQ(st.disk_records, 0u);
  EXPECT_EQ(st.appended, 56u);
  EXPECT_EQ(st.consumed, 55u);
}

TEST_P(SpillFifoModeTest, RotatesAndDeletesConsumedSegments) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), GetParam(), /*memory_bytes=*/0, /*segment_bytes=*/1000));
  for (int i = 0; i < 100; ++i) MustAppend(*fifo, Payload(i, 100));
  // 116-byte frames, 1000-byte segments: 8 frames per segment, 13 segments.
  EXPECT_EQ(SegmentFiles(dir.path()).size(), 13u);
  EXPECT_EQ(fifo->stats().segments, 13u);
  EXPECT_EQ(fifo->stats().disk_bytes, 100 * (100 + kFrame));
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(fifo->Pop().ok());
  }
  // Segments holding only records 1..56 are gone; the one holding record 60 stays.
  EXPECT_EQ(SegmentFiles(dir.path()).size(), 13u - 7u);
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 40u);
  EXPECT_EQ(rest.front().data, Payload(60, 100));
  // Only the active segment may remain.
  EXPECT_LE(SegmentFiles(dir.path()).size(), 1u);
}

TEST_P(SpillFifoModeTest, TheDiskBudgetRefusesPastItAndTheHintSaysWhatToDrain) {
  TempDir dir;
  SpillFifoOptions o = Opts(dir.path(), GetParam(), /*memory_bytes=*/0, /*segment_bytes=*/1000);
  o.max_record_bytes = 200;
  EXPECT_EQ(SpillFifo::MinDiskBudget(o), 2000u);  // two segments
  o.disk_budget_bytes = 1999;
  EXPECT_EQ(SpillFifo::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.disk_budget_bytes = 2000;
  auto fifo = MustOpen(o);
  // 116-byte frames, 8 per 1000-byte segment: 17 fit in 2000 bytes (1972), the 18th would not.
  uint64_t accepted = 0;
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    absl::StatusOr<uint64_t> seq = fifo->Append(Payload(i, 100));
    if (seq.ok()) {
      ++accepted;
      EXPECT_LE(fifo->stats().disk_bytes, 2000u);
    } else {
      refused = seq.status();
    }
  }
  EXPECT_EQ(accepted, 17u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("disk budget"));
  EXPECT_EQ(fifo->stats().refused, 1u);
  EXPECT_EQ(fifo->stats().disk_budget_bytes, 2000u);
  // Room comes from deleting the first segment: its 8 records, 800 payload bytes, must drain.
  EXPECT_EQ(fifo->BytesToDrainForRoom(100), 800u);

  // Consumed but not yet safe (a persist limit, e.g. commits behind): no room yet.
  fifo->SetPersistLimit(0);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(fifo->Pop().ok());
  EXPECT_EQ(fifo->Append(Payload(17, 100)).status().code(), absl::StatusCode::kResourceExhausted);
  // The limit moves (the commits land), and the idle consumer reclaims without another Pop.
  fifo->SetPersistLimit(8);
  ASSERT_TRUE(fifo->PersistIfReclaimable().ok());
  EXPECT_EQ(fifo->BytesToDrainForRoom(100), 0u);
  // The refusals took no seq: the next record is 18.
  EXPECT_EQ(MustAppend(*fifo, Payload(17, 100)), 18u);
  EXPECT_LE(fifo->stats().disk_bytes, 2000u);

  // Live: not below the minimum; 0 lifts the budget.
  EXPECT_EQ(fifo->SetDiskBudget(1000).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(fifo->SetDiskBudget(0).ok());
  for (int i = 18; i < 40; ++i) MustAppend(*fifo, Payload(i, 100));
  EXPECT_GT(fifo->stats().disk_bytes, 2000u);
  // Everything acknowledged is there, in order.
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 40u - 8u);
  EXPECT_EQ(rest.front().data, Payload(8, 100));
  EXPECT_EQ(rest.back().data, Payload(39, 100));
}

TEST_P(SpillFifoModeTest, ASegmentSealedAfterItsRecordsWerePersistedIsStillReclaimed) {
  TempDir dir;
  SpillFifoOptions o = Opts(dir.path(), GetParam(), /*memory_bytes=*/0, /*segment_bytes=*/1000);
  o.max_record_bytes = 200;
  o.disk_budget_bytes = 2000;
  auto fifo = MustOpen(o);
  // The first segment's 8 records are consumed and persisted while it is still the active one:
  // nothing can be deleted then.
  for (int i = 0; i < 8; ++i) MustAppend(*fifo, Payload(i, 100));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(fifo->Pop().ok());
  ASSERT_TRUE(fifo->PersistReadPosition().ok());
  EXPECT_EQ(fifo->stats().persisted_seq, 8u);
  // Later appends seal it and fill the budget.
  for (int i = 8; i < 17; ++i) MustAppend(*fifo, Payload(i, 100));
  EXPECT_EQ(fifo->Append(Payload(17, 100)).status().code(), absl::StatusCode::kResourceExhausted);
  // It is still reclaimable: an idle consumer frees it, and the next append fits.
  ASSERT_TRUE(fifo->PersistIfReclaimable().ok());
  absl::StatusOr<uint64_t> seq = fifo->Append(Payload(17, 100));
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 18u);
}

TEST_P(SpillFifoModeTest, TheHintCountsOnlyWhatIsLeftOfAPartlyDrainedSegment) {
  TempDir dir;
  SpillFifoOptions o = Opts(dir.path(), GetParam(), /*memory_bytes=*/0, /*segment_bytes=*/1000);
  o.max_record_bytes = 200;
  o.disk_budget_bytes = 2000;
  auto fifo = MustOpen(o);
  for (int i = 0; i < 17; ++i) MustAppend(*fifo, Payload(i, 100));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fifo->Pop().ok());
  EXPECT_EQ(fifo->BytesToDrainForRoom(100), 500u);  // 5 of the first segment's 8 records
  // Consumed but not yet safe (commits pending under a persist limit) still counts.
  fifo->SetPersistLimit(1);
  EXPECT_EQ(fifo->BytesToDrainForRoom(100), 700u);
  fifo->SetPersistLimit(UINT64_MAX);
  // A larger budget (live) leaves room now.
  ASSERT_TRUE(fifo->SetDiskBudget(2100).ok());
  EXPECT_EQ(fifo->BytesToDrainForRoom(100), 0u);
}

TEST_P(SpillFifoModeTest, ReopenResumesFromReadPosition) {
  TempDir dir;
  const SpillFifoOptions o = Opts(dir.path(), GetParam(), 500, 1000);
  {
    auto fifo = MustOpen(o);
    for (int i = 0; i < 40; ++i) MustAppend(*fifo, Payload(i, 100));
    for (int i = 0; i < 15; ++i) ASSERT_TRUE(fifo->Pop().ok());
  }  // clean close persists the read position
  auto fifo = MustOpen(o);
  EXPECT_TRUE(fifo->recovery_status().ok());
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  // Seqs 1..5 were in memory, 6..40 spilled, 1..15 consumed: 16..40 remain in every mode (under
  // kNone memory-tier records are not logged, but those were consumed).
  ASSERT_EQ(rest.size(), 25u);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].seq, 16 + i);
    EXPECT_EQ(rest[i].data, Payload(15 + i, 100));
  }
  // New seqs never reuse old ones.
  EXPECT_GT(MustAppend(*fifo, "x"), 40u);
}

TEST_P(SpillFifoModeTest, CrashReplayIsBoundedAndKeepsSeqs) {
  TempDir dir;
  SpillFifoOptions o = Opts(dir.path(), GetParam(), 0, 4000);
  o.persist_every_records = 10;
  const int status = RunInCrashingChild([&] {
    auto fifo = MustOpen(o);
    for (int i = 0; i < 100; ++i) MustAppend(*fifo, Payload(i, 50));
    for (int i = 0; i < 25; ++i) CHECK(fifo->Pop().ok());
    // No destructor: consumption of 21..25 is never persisted.
    flowctl::testing::CrashNow();
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto fifo = MustOpen(o);
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  // Replays 21..25 (at most persist_every_records - 1 records), with their original seqs.
  ASSERT_EQ(rest.size(), 80u);
  EXPECT_EQ(rest.front().seq, 21u);
  EXPECT_EQ(rest.front().data, Payload(20, 50));
  EXPECT_EQ(rest.back().seq, 100u);
  EXPECT_EQ(fifo->stats().recovered_records, 80u);
}

TEST(SpillFifoTest, NoneLosesMemoryTierOnCrashButNeverReusesSeqs) {
  TempDir dir;
  const SpillFifoOptions o = Opts(dir.path(), SpillDurability::kNone, 1000);
  RunInCrashingChild([&] {
    auto fifo = MustOpen(o);
    for (int i = 0; i < 20; ++i) MustAppend(*fifo, Payload(i, 100));  // 10 memory, 10 spilled
    flowctl::testing::CrashNow();
  });
  auto fifo = MustOpen(o);
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 10u);  // the spilled half, documented to survive a process crash
  EXPECT_EQ(rest.front().seq, 11u);
  // Seqs 1..10 were handed out and lost; they must not be handed out again.
  EXPECT_GT(MustAppend(*fifo, "y"), 20u);
}

// The memory tier's budget live (the arbiter's memory share): lowered, later appends go to disk
// while what is in memory stays; raised again, appends stay in memory once the disk backlog is
// drained. Order and content are kept throughout.
TEST(SpillFifoTest, MemoryBudgetChangesLive) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kNone, 1000));
  for (int i = 0; i < 5; ++i) MustAppend(*fifo, Payload(i, 100));  // 500 bytes, in memory
  EXPECT_EQ(fifo->stats().spilled, 0u);
  fifo->SetMemoryBudget(200);
  EXPECT_EQ(fifo->stats().memory_budget_bytes, 200u);
  for (int i = 5; i < 10; ++i) MustAppend(*fifo, Payload(i, 100));
  SpillFifoStats s = fifo->stats();
  EXPECT_EQ(s.spilled, 5u);         // over the new budget: to disk
  EXPECT_EQ(s.memory_records, 5u);  // nothing moved out of memory
  std::vector<SpillFifo::Record> all = DrainAll(*fifo);
  ASSERT_EQ(all.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(all[i].data, Payload(i, 100)) << i;
  fifo->SetMemoryBudget(1000);
  for (int i = 0; i < 5; ++i) MustAppend(*fifo, Payload(i, 100));
  EXPECT_EQ(fifo->stats().spilled, 5u);  // all five fit in memory again
}

TEST(SpillFifoTest, DurabilityEveryRecordIsDurableOnReturn) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kEveryRecord, 1 << 20));
  for (int i = 0; i < 10; ++i) {
    const uint64_t seq = MustAppend(*fifo, Payload(i, 10));
    EXPECT_EQ(fifo->durable_seq(), seq);
    EXPECT_TRUE(fifo->WaitDurable(seq).ok());
  }
}

TEST(SpillFifoTest, DurabilityIntervalGroupCommits) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kInterval, 1 << 20));
  uint64_t last = 0;
  for (int i = 0; i < 100; ++i) last = MustAppend(*fifo, Payload(i, 10));
  // The group-commit thread (2 ms interval here) makes it durable; WaitDurable blocks until then.
  ASSERT_TRUE(fifo->WaitDurable(last).ok());
  EXPECT_GE(fifo->durable_seq(), last);
  const uint64_t more = MustAppend(*fifo, "z");
  ASSERT_TRUE(fifo->Sync().ok());
  EXPECT_GE(fifo->durable_seq(), more);
  EXPECT_TRUE(absl::IsInvalidArgument(fifo->WaitDurable(more + 1)));
}

TEST(SpillFifoTest, DurabilityNoneHasNoDurableRecords) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kNone, 0));
  const uint64_t seq = MustAppend(*fifo, "a");
  EXPECT_EQ(fifo->durable_seq(), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(fifo->WaitDurable(seq)));
  EXPECT_TRUE(fifo->Sync().ok());
}

// While alive, this process may not grow a file past `bytes` (RLIMIT_FSIZE): a write beyond it
// fails with EFBIG, as a full disk fails it with ENOSPC (SIGXFSZ is ignored meanwhile).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &saved_), 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = saved_;
    r.rlim_cur = bytes;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &r), 0);
  }
  ~FileSizeLimit() {
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &saved_), 0);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_;
  void (*old_handler_)(int);
};

TEST(SpillFifoTest, AWriteRefusedForSpaceFailsThatAppendOnlyAndLosesNothingAcknowledged) {
  TempDir dir;
  const SpillFifoOptions o = Opts(dir.path(), SpillDurability::kEveryRecord, 0);
  std::vector<std::string> acked;
  {
    auto fifo = MustOpen(o);
    for (int i = 0; i < 10; ++i) {
      acked.push_back(Payload(i, 100));
      MustAppend(*fifo, acked.back());
    }
    absl::Status refused;
    {
      // Room for 7 more frames of 116 bytes after the 1160 written: the 8th is cut short.
      FileSizeLimit limit(1160 + 7 * 116 + 50);
      for (int i = 10; i < 30 && refused.ok(); ++i) {
        absl::StatusOr<uint64_t> seq = fifo->Append(Payload(i, 100));
        if (seq.ok()) {
          acked.push_back(Payload(i, 100));
        } else {
          refused = seq.status();
        }
      }
      ASSERT_EQ(acked.size(), 17u);
      // The client is told to come back (RESOURCE_EXHAUSTED), the operator which file and why.
      EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
      EXPECT_THAT(refused.message(), HasSubstr("File too large"));
      EXPECT_THAT(refused.message(), HasSubstr(SegmentFiles(dir.path())[0]));
      // Still no room: refused again, nothing half-written left behind.
      EXPECT_TRUE(absl::IsResourceExhausted(fifo->Append(Payload(98, 100)).status()));
    }
    // Room again: appends go on, straight after the acknowledged records.
    acked.push_back(Payload(99, 100));
    MustAppend(*fifo, acked.back());
  }
  // Reopened, every acknowledged record is there once, in order, and nothing else.
  auto fifo = MustOpen(o);
  EXPECT_TRUE(fifo->recovery_status().ok()) << fifo->recovery_status();
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), acked.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].data, acked[i]) << i;
    if (i > 0) {
      EXPECT_GT(rest[i].seq, rest[i - 1].seq);
    }
  }
}

// Writes 20 records of 100 bytes to one segment and closes the FIFO; returns the segment path.
std::string MakeSegmentWith20Records(const std::string& dir) {
  auto fifo = MustOpen(Opts(dir, SpillDurability::kEveryRecord, 0));
  for (int i = 0; i < 20; ++i) MustAppend(*fifo, Payload(i, 100));
  std::vector<std::string> files = SegmentFiles(dir);
  CHECK_EQ(files.size(), 1u);
  return files[0];
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST(SpillFifoTest, CorruptRecordIsReportedAndPrefixKept) {
  TempDir dir;
  const std::string seg = MakeSegmentWith20Records(dir.path());
  const uint64_t bad_offset = 9 * (100 + kFrame);  // record 10
  FlipByte(seg, bad_offset + kFrame + 42);         // inside its payload

  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kEveryRecord, 0));
  const absl::Status rs = fifo->recovery_status();
  EXPECT_TRUE(absl::IsDataLoss(rs)) << rs;
  EXPECT_THAT(std::string(rs.message()), HasSubstr(seg));
  EXPECT_THAT(std::string(rs.message()), HasSubstr(absl::StrCat("offset ", bad_offset)));
  EXPECT_THAT(std::string(rs.message()), HasSubstr("checksum"));
  EXPECT_EQ(fifo->stats().corruptions, 1u);
  EXPECT_EQ(fifo->stats().quarantined_bytes, 11 * (100 + kFrame));
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir.path(), "/quarantine/",
                                                   std::filesystem::path(seg).filename().string(),
                                                   ".", bad_offset)));
  // Appends go on after the kept prefix.
  const uint64_t seq = MustAppend(*fifo, "after");
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 10u);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(rest[i].data, Payload(i, 100));
  EXPECT_EQ(rest[9].seq, seq);
  EXPECT_EQ(rest[9].data, "after");
}

TEST(SpillFifoTest, TruncatedRecordIsReportedAndPrefixKept) {
  TempDir dir;
  const std::string seg = MakeSegmentWith20Records(dir.path());
  const uint64_t bad_offset = 14 * (100 + kFrame);  // record 15, cut mid-payload
  ASSERT_EQ(truncate(seg.c_str(), static_cast<off_t>(bad_offset + kFrame + 30)), 0);

  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kInterval, 0));
  const absl::Status rs = fifo->recovery_status();
  EXPECT_TRUE(absl::IsDataLoss(rs)) << rs;
  EXPECT_THAT(std::string(rs.message()), HasSubstr(seg));
  EXPECT_THAT(std::string(rs.message()), HasSubstr(absl::StrCat("offset ", bad_offset)));
  EXPECT_THAT(std::string(rs.message()), HasSubstr("truncated"));
  std::vector<SpillFifo::Record> rest = DrainAll(*fifo);
  ASSERT_EQ(rest.size(), 14u);
  EXPECT_EQ(rest.back().data, Payload(13, 100));
}

TEST(SpillFifoTest, CorruptLengthFieldIsCaught) {
  TempDir dir;
  const std::string seg = MakeSegmentWith20Records(dir.path());
  FlipByte(seg, 3 * (100 + kFrame) + 3);  // top byte of record 4's length: huge length
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kInterval, 0));
  EXPECT_TRUE(absl::IsDataLoss(fifo->recovery_status()));
  EXPECT_EQ(DrainAll(*fifo).size(), 3u);
}

TEST(SpillFifoTest, CorruptManifestReplaysEverythingOnDisk) {
  TempDir dir;
  const SpillFifoOptions o = Opts(dir.path(), SpillDurability::kEveryRecord, 0);
  {
    auto fifo = MustOpen(o);
    for (int i = 0; i < 10; ++i) MustAppend(*fifo, Payload(i, 10));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(fifo->Pop().ok());
  }
  FlipByte(dir.Sub("MANIFEST"), 10);
  auto fifo = MustOpen(o);
  EXPECT_TRUE(absl::IsDataLoss(fifo->recovery_status()));
  EXPECT_EQ(DrainAll(*fifo).size(), 10u);  // duplicates, never losses
}

TEST(SpillFifoTest, RejectsOversizedRecordsAndSecondOpen) {
  TempDir dir;
  SpillFifoOptions o = Opts(dir.path(), SpillDurability::kNone, 0);
  o.max_record_bytes = 64;
  auto fifo = MustOpen(o);
  EXPECT_TRUE(absl::IsInvalidArgument(fifo->Append(std::string(65, 'x')).status()));
  EXPECT_TRUE(fifo->Append(std::string(64, 'x')).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(SpillFifo::Open(o).status()));
  o.dir = "";
  EXPECT_TRUE(absl::IsInvalidArgument(SpillFifo::Open(o).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(MustOpen(Opts(dir.Sub("x"), SpillDurability::kNone, 0))->Pop()));
}

TEST(SpillFifoTest, ManyProducersOneConsumerKeepOrder) {
  TempDir dir;
  auto fifo = MustOpen(Opts(dir.path(), SpillDurability::kInterval, 4000, 20000));
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 2000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        CHECK(fifo->Append(absl::StrCat(p, ":", i, ":", std::string(i % 97, 'p'))).ok());
      }
    });
  }
  std::vector<int> next(kProducers, 0);
  uint64_t last_seq = 0;
  int got = 0;
  for (int spins = 0; got < kProducers * kPerProducer && spins < 50'000'000; ++spins) {
    absl::StatusOr<const SpillFifo::Record*> r = fifo->Front();
    ASSERT_TRUE(r.ok()) << r.status();
    if (*r == nullptr) {
      fifo->WaitForRecords(absl::Milliseconds(10));
      continue;
    }
    int p, i;
    ASSERT_EQ(sscanf((*r)->data.c_str(), "%d:%d:", &p, &i), 2);
    ASSERT_EQ(i, next[p]) << "producer " << p;  // per-producer order
    ++next[p];
    ASSERT_GT((*r)->seq, last_seq);  // global seq order
    last_seq = (*r)->seq;
    ASSERT_TRUE(fifo->Pop().ok());
    ++got;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(got, kProducers * kPerProducer);
  EXPECT_TRUE(fifo->empty());
  EXPECT_GT(fifo->stats().spilled, 0u);
}

}  // namespace
}  // namespace flowctl

namespace flowctl {
namespace {

using ::flowctl::testing::DrainAll;
using ::flowctl::testing::Payload;
using ::flowctl::testing::TempDir;

TEST(SpillFifoPersistLimitTest, ReopenReplaysEverythingAboveTheLimit) {
  TempDir dir;
  SpillFifoOptions o;
  o.dir = dir.path();
  o.memory_bytes = 1000;
  o.segment_bytes = 4096;
  {
    absl::StatusOr<std::unique_ptr<SpillFifo>> fifo = SpillFifo::Open(o);
    ASSERT_TRUE(fifo.ok()) << fifo.status();
    for (int i = 0; i < 50; ++i) ASSERT_TRUE((*fifo)->Append(Payload(i, 100)).ok());
    (*fifo)->SetPersistLimit(10);  // e.g. only the first 10 records' txs have committed
    EXPECT_EQ(DrainAll(**fifo).size(), 50u);
    ASSERT_TRUE((*fifo)->PersistReadPosition().ok());
    EXPECT_EQ((*fifo)->stats().persisted_seq, 10u);
  }  // the destructor persists too, still capped
  absl::StatusOr<std::unique_ptr<SpillFifo>> fifo = SpillFifo::Open(o);
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  std::vector<SpillFifo::Record> rest = DrainAll(**fifo);
  ASSERT_EQ(rest.size(), 40u);
  EXPECT_EQ(rest.front().seq, 11u);
  EXPECT_EQ(rest.front().data, Payload(10, 100));
}

}  // namespace
}  // namespace flowctl
