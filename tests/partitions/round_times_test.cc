// RoundTimes: phases recorded from stamps, per view, once per round.
#include "partitions/round_times.h"

#include <cstdint>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace partitions {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

constexpr int64_t kMs = 1'000'000;

TEST(RoundTimesTest, ABackupsRoundIsTimedPhaseByPhase) {
  RoundTimes t;
  t.PrePrepareSeen(/*view=*/0, /*seq=*/7, 100 * kMs);
  t.Proposed(0, 7, 103 * kMs);  // prepare sent: accept 3 ms
  t.Prepared(0, 7, 110 * kMs);  // commit sent: prepare 7 ms
  t.Applied(7, 121 * kMs, 123 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.accept.count, 1u);
  EXPECT_EQ(s.accept.sum, 3 * kMs);
  EXPECT_EQ(s.prepare.sum, 7 * kMs);
  EXPECT_EQ(s.commit.sum, 11 * kMs);
  EXPECT_EQ(s.apply.sum, 2 * kMs);
  EXPECT_EQ(s.interval.count, 0u) << "no block before the first";
  EXPECT_EQ(s.cut_wait.count, 0u) << "a backup cuts nothing";
  EXPECT_EQ(t.snapshot().open_rounds, 0u);
}

TEST(RoundTimesTest, APrimarysRoundHasNoAcceptAndBlocksSpaceIntervals) {
  RoundTimes t;
  t.CutWaited(9 * kMs);
  t.Proposed(0, 1, 10 * kMs);  // pre-prepare sent
  t.Prepared(0, 1, 14 * kMs);
  t.Applied(1, 20 * kMs, 21 * kMs);
  t.Proposed(0, 2, 30 * kMs);
  t.Prepared(0, 2, 32 * kMs);
  t.Applied(2, 35 * kMs, 36 * kMs);
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
  t.Applied(1, 100 * kMs, 100 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.prepare.count, 1u);
  EXPECT_EQ(s.prepare.sum, 50 * kMs);
  EXPECT_EQ(s.commit.sum, 40 * kMs);
}

TEST(RoundTimesTest, AViewChangeForgetsOpenRoundsAndANewViewRestartsOne) {
  RoundTimes t;
  t.Proposed(0, 5, 10 * kMs);
  t.Prepared(0, 5, 20 * kMs);  // prepare recorded: 10 ms
  t.ForgetViewsBefore(1);      // a view change to view 1 began
  EXPECT_EQ(t.snapshot().open_rounds, 0u);
  t.Applied(5, 5'000 * kMs, 5'001 * kMs);  // committed in the new view without its stamps
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
  t.Applied(3, 10 * kMs, 11 * kMs);
  EXPECT_EQ(t.snapshot().open_rounds, 2u);  // 4 and 5
  t.PrePrepareSeen(0, 2, 12 * kMs);         // a late retransmission of a round below the commit
  t.Proposed(0, 2, 13 * kMs);
  EXPECT_EQ(t.snapshot().open_rounds, 3u);
  t.Applied(5, 20 * kMs, 21 * kMs);  // forgotten with the next commit
  EXPECT_EQ(t.snapshot().open_rounds, 0u);
  EXPECT_EQ(t.snapshot().accept.count, 1u);
}

TEST(RoundTimesTest, OpenRoundsAreBounded) {
  RoundTimes t;
  for (uint64_t seq = 101; seq < 101 + RoundTimes::kMaxOpenRounds; ++seq) t.Proposed(0, seq, kMs);
  EXPECT_EQ(t.snapshot().open_rounds, RoundTimes::kMaxOpenRounds);
  // Full: a round below every kept one is not timed (nothing is stamped, nothing recorded).
  t.Proposed(0, 5, kMs);
  t.Prepared(0, 5, 3 * kMs);
  EXPECT_EQ(t.snapshot().open_rounds, RoundTimes::kMaxOpenRounds);
  EXPECT_EQ(t.snapshot().prepare.count, 0u);
  // A newer one takes the oldest one's place and completes its round; the oldest is forgotten.
  const uint64_t newest = 101 + RoundTimes::kMaxOpenRounds;
  t.Proposed(0, newest, kMs);
  t.Prepared(0, newest, 3 * kMs);
  EXPECT_EQ(t.snapshot().open_rounds, RoundTimes::kMaxOpenRounds);
  EXPECT_EQ(t.snapshot().prepare.count, 1u);
  t.Prepared(0, 101, 3 * kMs);  // forgotten: below every kept round now
  EXPECT_EQ(t.snapshot().prepare.count, 1u);
}

TEST(RoundTimesTest, AnOlderViewsStampIsIgnoredAndANewerOneStartsTheRoundOver) {
  RoundTimes t;
  t.PrePrepareSeen(2, 9, 10 * kMs);
  t.PrePrepareSeen(1, 9, 11 * kMs);  // an old primary's retransmission
  t.Proposed(1, 9, 12 * kMs);
  t.Proposed(2, 9, 14 * kMs);
  EXPECT_EQ(t.snapshot().accept.count, 1u);
  EXPECT_EQ(t.snapshot().accept.sum, 4 * kMs) << "timed from view 2's pre-prepare";
  t.Prepared(3, 9, 20 * kMs);  // view 3 starts it over: no proposal stamp there
  EXPECT_EQ(t.snapshot().prepare.count, 0u);
  t.Proposed(4, 10, 30 * kMs);
  t.ForgetViewsBefore(4);  // the view-3 round goes, the view-4 one stays
  EXPECT_EQ(t.snapshot().open_rounds, 1u);
  t.Prepared(4, 10, 35 * kMs);
  EXPECT_EQ(t.snapshot().prepare.count, 1u);
}

TEST(RoundTimesTest, APrePrepareAfterTheProposalDoesNotStartTheRound) {
  RoundTimes t({.slow_round_nanos = 300 * kMs});
  t.Proposed(1, 4, 10 * kMs);         // a backup's prepare for a NewView's pre-prepare
  t.PrePrepareSeen(1, 4, 500 * kMs);  // the new primary retransmits it
  t.Prepared(1, 4, 600 * kMs);
  std::optional<std::string> line = t.Applied(4, 650 * kMs, 660 * kMs);
  EXPECT_EQ(t.snapshot().accept.count, 0u);
  EXPECT_THAT(line, Optional(HasSubstr("took 650 ms from its proposal")));
}

TEST(RoundTimesTest, AProposalStampedAfterPreparedIsARetransmission) {
  RoundTimes t({.slow_round_nanos = 10 * kMs});
  t.Prepared(0, 3, 10 * kMs);  // a restart resumes a prepared slot: its commit goes first
  t.Proposed(0, 3, 30 * kMs);  // then its prepare again
  EXPECT_EQ(t.snapshot().prepare.count, 0u);
  std::optional<std::string> line = t.Applied(3, 40 * kMs, 50 * kMs);
  EXPECT_EQ(line, std::nullopt) << "no first stamp (pre-prepare or proposal): not timed";
}

TEST(RoundTimesTest, AnIntervalIsOnlyBetweenConsecutiveBlocks) {
  RoundTimes t;
  t.Applied(1, 10 * kMs, 11 * kMs);
  t.Applied(2, 20 * kMs, 21 * kMs);
  t.Applied(900, 5'000 * kMs, 5'001 * kMs);  // after a snapshot install
  t.Applied(901, 5'010 * kMs, 5'011 * kMs);
  const RoundTimes::Snapshot s = t.snapshot();
  EXPECT_EQ(s.interval.count, 2u);
  EXPECT_EQ(s.interval.sum, 20 * kMs);
  EXPECT_EQ(s.apply.count, 4u);
}

TEST(RoundTimesTest, ASlowRoundIsCountedAndLoggedWithItsPhases) {
  RoundTimes t({.slow_round_nanos = 1'000 * kMs});
  t.PrePrepareSeen(0, 4, 100 * kMs);
  t.Proposed(0, 4, 1'000 * kMs);  // accept 900 ms: the bodies were late
  t.Prepared(0, 4, 1'050 * kMs);  // prepare 50 ms
  std::optional<std::string> line = t.Applied(4, 1'080 * kMs, 1'110 * kMs);  // commit, apply 30
  ASSERT_TRUE(line.has_value()) << "1,010 ms from the pre-prepare is over 1,000";
  EXPECT_EQ(*line,
            "slow round: seq 4 of view 0 took 1010 ms from its pre-prepare to applied (accept "
            "900 ms, prepare 50 ms, commit 30 ms, apply 30 ms)");
  EXPECT_EQ(t.snapshot().slow_rounds, 1u);

  // Exactly at the threshold is not slow; a block from block sync (no stamps) never is.
  t.Proposed(0, 5, 2'000 * kMs);
  EXPECT_EQ(t.Applied(5, 2'990 * kMs, 3'000 * kMs), std::nullopt);
  EXPECT_EQ(t.Applied(6, 0, 9'000 * kMs), std::nullopt);
  EXPECT_EQ(t.snapshot().slow_rounds, 1u);
}

TEST(RoundTimesTest, SlowRoundsAreLoggedAtMostOnceASecondWithTheCountInBetween) {
  RoundTimes t({.slow_round_nanos = 100 * kMs});
  int64_t now = 10'000 * kMs;
  auto slow_round = [&](uint64_t seq) {
    t.Proposed(0, seq, now);  // a primary's round: no pre-prepare received
    now += 200 * kMs;
    return t.Applied(seq, now - kMs, now);
  };
  EXPECT_THAT(slow_round(1), Optional(HasSubstr("took 200 ms from its proposal")));
  EXPECT_EQ(slow_round(2), std::nullopt);  // 200 ms after the line: held back
  EXPECT_EQ(slow_round(3), std::nullopt);
  EXPECT_EQ(slow_round(4), std::nullopt);
  EXPECT_EQ(slow_round(5), std::nullopt);           // 800 ms after
  std::optional<std::string> line = slow_round(6);  // 1,000 ms after: a line, with the four
  ASSERT_TRUE(line.has_value());
  EXPECT_THAT(*line, HasSubstr("seq 6"));
  EXPECT_THAT(*line, HasSubstr("(to committed 199 ms, apply 1 ms)"));
  EXPECT_THAT(*line, HasSubstr("; 4 more slow rounds since the last such line"));
  EXPECT_EQ(t.snapshot().slow_rounds, 6u);
  EXPECT_EQ(slow_round(7), std::nullopt);
  now += 1'000 * kMs;
  EXPECT_THAT(slow_round(8), Optional(HasSubstr("; 1 more slow round since the last")));
}

TEST(RoundTimesTest, NoRoundIsSlowWhenTheThresholdIsOff) {
  RoundTimes t;
  t.Proposed(0, 1, kMs);
  EXPECT_EQ(t.Applied(1, 59'000 * kMs, 60'000 * kMs), std::nullopt);
  EXPECT_EQ(t.snapshot().slow_rounds, 0u);
}

}  // namespace
}  // namespace partitions
