#include "flowctl/quota_drain.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flowctl/spill_fifo.h"
#include "gtest/gtest.h"
#include "tests/flowctl/spill_test_util.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::flowctl::testing::Payload;
using ::flowctl::testing::TempDir;

std::unique_ptr<SpillFifo> OpenFifo(const TempDir& dir, uint64_t memory_bytes = 1 << 20) {
  SpillFifoOptions o;
  o.dir = dir.path();
  o.memory_bytes = memory_bytes;
  o.durability = SpillDurability::kNone;
  auto f = SpillFifo::Open(o);
  CHECK(f.ok()) << f.status();
  return std::move(*f);
}

QuotaDrainOptions DrainOpts(double rate, const Clock* clock) {
  QuotaDrainOptions o;
  o.rate_bytes_per_sec = rate;
  o.tick = absl::Milliseconds(1);
  o.clock = clock;
  return o;
}

TEST(QuotaDrainTest, NeverExceedsTheRate) {
  TempDir dir;
  tests::FakeClock clock;
  auto fifo = OpenFifo(dir, /*memory_bytes=*/100'000);  // half the records spill
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(fifo->Append(Payload(i, 1000)).ok());
  uint64_t bytes = 0;
  QuotaDrain drain(
      fifo.get(),
      [&](const SpillFifo::Record& r) {
        bytes += r.data.size();
        return absl::OkStatus();
      },
      DrainOpts(100'000, &clock));  // 100 kB/s; burst 200 B < one record
  const int64_t start = clock.NowNanos();
  for (int tick = 1; tick <= 1500; ++tick) {
    clock.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(drain.PumpOnce(clock.NowNanos()).ok());
    const double t = static_cast<double>(clock.NowNanos() - start) / 1e9;
    // Starts full (200 B); a record larger than the burst leaves the bucket in debt.
    ASSERT_LE(static_cast<double>(bytes), 100'000 * t + 1000 + 200) << "t=" << t;
    ASSERT_GE(static_cast<double>(bytes), 100'000 * t - 2000) << "t=" << t;
  }
  EXPECT_EQ(drain.stats().bytes, bytes);
  EXPECT_EQ(drain.stats().records, bytes / 1000);
}

TEST(QuotaDrainTest, SinkErrorKeepsTheRecordAtTheFront) {
  TempDir dir;
  tests::FakeClock clock;
  auto fifo = OpenFifo(dir, 0);  // all on disk
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(fifo->Append(Payload(i, 100)).ok());
  std::vector<uint64_t> got;
  int failures_left = 2;
  QuotaDrain drain(
      fifo.get(),
      [&](const SpillFifo::Record& r) {
        if (r.seq == 5 && failures_left > 0) {
          --failures_left;
          return absl::UnavailableError("peer down");
        }
        got.push_back(r.seq);
        return absl::OkStatus();
      },
      DrainOpts(TokenBucket::kUnlimited, &clock));
  absl::StatusOr<QuotaDrain::PumpResult> r = drain.PumpOnce();
  EXPECT_TRUE(absl::IsUnavailable(r.status()));
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_FALSE(drain.PumpOnce().ok());
  r = drain.PumpOnce();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 6u);
  EXPECT_EQ(r->waiting_bytes, 0u);
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(drain.stats().sink_errors, 2u);
  EXPECT_TRUE(absl::IsUnavailable(drain.stats().last_error));
}

TEST(QuotaDrainTest, SetRateIsLive) {
  TempDir dir;
  tests::FakeClock clock;
  auto fifo = OpenFifo(dir);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(fifo->Append(Payload(i, 100)).ok());
  uint64_t count = 0;
  QuotaDrain drain(
      fifo.get(),
      [&](const SpillFifo::Record&) {
        ++count;
        return absl::OkStatus();
      },
      DrainOpts(0, &clock));  // paused
  for (int i = 0; i < 100; ++i) {
    clock.Advance(absl::Milliseconds(1));
    auto r = drain.PumpOnce();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->waiting_bytes, 100u);
  }
  EXPECT_EQ(count, 0u);
  ASSERT_TRUE(drain.SetRate(10'000).ok());  // 100 records/s
  for (int i = 0; i < 100; ++i) {
    clock.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(drain.PumpOnce().ok());
  }
  EXPECT_GE(count, 9u);
  EXPECT_LE(count, 11u);
  ASSERT_TRUE(drain.SetRate(TokenBucket::kUnlimited).ok());
  ASSERT_TRUE(drain.PumpOnce().ok());
  EXPECT_EQ(count, 100u);
  EXPECT_TRUE(absl::IsInvalidArgument(drain.SetRate(-1)));
}

TEST(QuotaDrainTest, BackgroundThreadDrainsAsRecordsArrive) {
  TempDir dir;
  auto fifo = OpenFifo(dir, 20'000);
  absl::Mutex mu;
  std::vector<uint64_t> got;
  QuotaDrainOptions o = DrainOpts(2e6, Clock::Real());  // 2 MB/s: 200 kB take ~0.1 s
  o.idle_wait = absl::Seconds(30);  // waking must come from appends, not from the timeout
  QuotaDrain drain(
      fifo.get(),
      [&](const SpillFifo::Record& r) {
        absl::MutexLock l(&mu);
        got.push_back(r.seq);
        return absl::OkStatus();
      },
      o);
  ASSERT_TRUE(drain.Start().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(drain.Start()));
  const absl::Time start = absl::Now();
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(fifo->Append(Payload(i, 1000)).ok());
  {
    absl::MutexLock l(&mu);
    auto all = [&] { return got.size() == 200; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20)));
  }
  const absl::Duration took = absl::Now() - start;
  // 200 kB at 2 MB/s (4 kB burst) cannot finish in much under 0.1 s.
  EXPECT_GE(took, absl::Milliseconds(90));
  // Idle now: a new record is picked up promptly, well before idle_wait.
  ASSERT_TRUE(fifo->Append("late").ok());
  {
    absl::MutexLock l(&mu);
    auto all = [&] { return got.size() == 201; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(10)));
  }
  const absl::Time stop_start = absl::Now();
  drain.Stop();
  EXPECT_LT(absl::Now() - stop_start, absl::Seconds(5));  // Stop wakes the idle wait
  drain.Stop();                                           // idempotent
  absl::MutexLock l(&mu);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_GT(got[i], got[i - 1]);
}

TEST(QuotaDrainTest, RejectsBadOptions) {
  QuotaDrainOptions o;
  o.rate_bytes_per_sec = -5;
  EXPECT_TRUE(absl::IsInvalidArgument(QuotaDrain::ValidateOptions(o)));
  o.rate_bytes_per_sec = 1;
  o.tick = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(QuotaDrain::ValidateOptions(o)));
  o.tick = absl::Milliseconds(1);
  EXPECT_TRUE(QuotaDrain::ValidateOptions(o).ok());
  o.rate_bytes_per_sec = TokenBucket::kUnlimited;
  EXPECT_TRUE(QuotaDrain::ValidateOptions(o).ok());
}

}  // namespace
}  // namespace flowctl
