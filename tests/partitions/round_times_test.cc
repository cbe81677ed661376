// RoundTimes: phases recorded from stamps, per view, once per round.
#include "partitions/round_times.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace partitions {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(RoundTimesTest, ABackupsRoundIsTimedPhaseByPhase) {
  RoundTimes t;
  t.PrePrepareSeen(/*view=*/0, /*seq=*/7, 100 * kMs);
  t.Proposed(0, 7, 103 * kMs);  // prepare sent: accept 3 ms
  t.Prepared(0, 7, 110 * kMs);  // commit sent: prepare 7 ms
  t.Committed(7, 121 * kMs);    // commit 11 ms
  t.Applied(2 * kMs, 123 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.accept.count, 1u);
  EXPECT_EQ(s.accept.sum, 3 * kMs);
  EXPECT_EQ(s.prepare.sum, 7 * kMs);
  EXPECT_EQ(s.commit.sum, 11 * kMs);
  EXPECT_EQ(s.apply.sum, 2 * kMs);
  EXPECT_EQ(s.interval.count, 0u) << "no block before the first";
  EXPECT_EQ(s.cut_wait.count, 0u) << "a backup cuts nothing";
  EXPECT_EQ(t.open_rounds(), 0u);
}

TEST(RoundTimesTest, APrimarysRoundHasNoAcceptAndBlocksSpaceIntervals) {
  RoundTimes t;
  t.CutWaited(9 * kMs);
  t.Proposed(0, 1, 10 * kMs);  // pre-prepare sent
  t.Prepared(0, 1, 14 * kMs);
  t.Committed(1, 20 * kMs);
  t.Applied(1 * kMs, 21 * kMs);
  t.Proposed(0, 2, 30 * kMs);
  t.Prepared(0, 2, 32 * kMs);
  t.Committed(2, 35 * kMs);
  t.Applied(1 * kMs, 36 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.cut_wait.sum, 9 * kMs);
  EXPECT_EQ(s.accept.count, 0u);
  EXPECT_EQ(s.prepare.count, 2u);
  EXPECT_EQ(s.prepare.sum, 6 * kMs);
  EXPECT_EQ(s.commit.sum, 9 * kMs);
  EXPECT_EQ(s.interval.count, 1u);
  EXPECT_EQ(s.interval.sum, 15 * kMs);
}

TEST(RoundTimesTest, RetransmissionsKeepTheFirstStamp) {
  RoundTimes t;
  t.Proposed(0, 1, 10 * kMs);
  t.Proposed(0, 1, 50 * kMs);  // the prepare sent again
  t.Prepared(0, 1, 60 * kMs);
  t.Prepared(0, 1, 90 * kMs);
  t.Committed(1, 100 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.prepare.count, 1u);
  EXPECT_EQ(s.prepare.sum, 50 * kMs);
  EXPECT_EQ(s.commit.sum, 40 * kMs);
}

TEST(RoundTimesTest, AViewChangeForgetsOpenRoundsAndANewViewRestartsOne) {
  RoundTimes t;
  t.Proposed(0, 5, 10 * kMs);
  t.Prepared(0, 5, 20 * kMs);  // prepare recorded: 10 ms
  t.ViewChanged();
  EXPECT_EQ(t.open_rounds(), 0u);
  t.Committed(5, 5'000 * kMs);  // committed in the new view without its stamps: no commit phase
  EXPECT_EQ(t.snapshot().commit.count, 0u);

  // Stamps of one seq in two views: the later view starts the round over.
  t.Proposed(1, 6, 6'000 * kMs);
  t.Proposed(2, 6, 9'000 * kMs);
  t.Prepared(2, 6, 9'004 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.prepare.count, 2u);
  EXPECT_EQ(s.prepare.sum, 10 * kMs + 4 * kMs);
}

TEST(RoundTimesTest, ACommitForgetsEveryRoundAtOrBelowIt) {
  RoundTimes t;
  for (uint64_t seq = 1; seq <= 5; ++seq) t.Proposed(0, seq, static_cast<int64_t>(seq) * kMs);
  t.PrePrepareSeen(0, 2, kMs);  // a late retransmission of a round below the commit
  t.Committed(3, 10 * kMs);
  EXPECT_EQ(t.open_rounds(), 2u);  // 4 and 5
}

TEST(RoundTimesTest, OpenRoundsAreBounded) {
  RoundTimes t;
  for (uint64_t seq = 1; seq <= RoundTimes::kMaxOpenRounds + 10; ++seq) t.Proposed(0, seq, kMs);
  EXPECT_EQ(t.open_rounds(), RoundTimes::kMaxOpenRounds);
  // The oldest went first: the newest still completes its round.
  t.Prepared(0, RoundTimes::kMaxOpenRounds + 10, 3 * kMs);
  EXPECT_EQ(t.snapshot().prepare.count, 1u);
  t.Prepared(0, 1, 3 * kMs);  // forgotten: starts a round with no proposal stamp
  EXPECT_EQ(t.snapshot().prepare.count, 1u);
}

}  // namespace
}  // namespace partitions
