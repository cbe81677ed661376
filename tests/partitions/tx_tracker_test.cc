// TxTracker: one map for what a partition knows of a tx, bounded by count and age.
#include "partitions/tx_tracker.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace partitions {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TEST(TxTrackerTest, KeepsWhatIsKnownUntilTheTxCommits) {
  TxTracker t({.max_entries = 10, .max_age = absl::Seconds(60)});
  t.NoteAdmitted("a", 5);
  t.NoteSpilled("a", 17, 6);
  EXPECT_TRUE(t.NoteWanted("b", 7, 3));
  EXPECT_FALSE(t.NoteWanted("b", 8, 3));  // asked before: a repeat
  EXPECT_EQ(t.Get("a").admitted_nanos, 5);
  EXPECT_EQ(t.Get("a").spill_seq, 17u);
  std::vector<TrackedTx> got = t.TakeCommitted({"x", "a"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].admitted_nanos, 0);  // unknown
  EXPECT_EQ(got[1].admitted_nanos, 5);
  EXPECT_EQ(got[1].spill_seq, 17u);
  EXPECT_EQ(t.Get("a").spill_seq, 0u);  // gone
  EXPECT_EQ(t.stats().entries, 1u);
}

TEST(TxTrackerTest, AFetchedTxIsTakenOnceAndLeavesNothingBehind) {
  TxTracker t({});
  t.NoteWanted("f", 1, 1);
  EXPECT_TRUE(t.TakeWanted("f"));
  EXPECT_FALSE(t.TakeWanted("f"));
  EXPECT_EQ(t.stats().entries, 0u);
  // A tx this node's client admitted keeps its admission time after its fetch answer.
  t.NoteAdmitted("g", 3);
  t.NoteWanted("g", 4, 2);
  EXPECT_TRUE(t.TakeWanted("g"));
  EXPECT_EQ(t.Get("g").admitted_nanos, 3);
}

TEST(TxTrackerTest, AFetchKeepsTheSeqOfItsLatestAskUntilTaken) {
  TxTracker t({});
  t.NoteAdmitted("client", 1);  // known, never asked for
  t.NoteWanted("w", 2, 7);
  t.NoteWanted("w", 3, 9);  // asked again for a batch at another seq (a new view's)
  const std::vector<absl::string_view> hashes = {"w", "client", "unknown"};
  EXPECT_EQ(t.WantedSeqs(hashes), (std::vector<uint64_t>{9, 0, 0}));
  EXPECT_TRUE(t.TakeWanted("w"));
  EXPECT_EQ(t.WantedSeqs(hashes), (std::vector<uint64_t>{0, 0, 0}));
}

// GetTx answers PENDING from the FIFO mark only while the record is in the FIFO.
TEST(TxTrackerTest, TheFifoMarkGoesWhenItsRecordIsDrained) {
  TxTracker t({});
  t.NoteSpilled("bad", 4, 1);
  t.NoteDrained("bad", 4, 2);  // dropped as invalid: nothing else was known
  EXPECT_EQ(t.Get("bad").spill_seq, 0u);
  EXPECT_EQ(t.stats().entries, 0u);

  t.NoteSpilled("ok", 5, 1);
  t.NoteSpilled("ok", 9, 2);  // the client sent it again: a second record
  t.NoteAdmitted("ok", 3);    // the drain pools the first
  t.NoteDrained("ok", 5, 4);  // ...which leaves the later record's mark alone
  EXPECT_EQ(t.Get("ok").spill_seq, 9u);
  t.NoteDrained("ok", 9, 5);
  EXPECT_EQ(t.Get("ok").spill_seq, 0u);
  EXPECT_EQ(t.Get("ok").admitted_nanos, 3);  // still tracked for its commit latency

  // The drain took record 12 before the submit path marked it: the late mark is ignored.
  t.NoteAdmitted("fast", 1);
  t.NoteDrained("fast", 12, 2);
  t.NoteSpilled("fast", 12, 3);
  EXPECT_EQ(t.Get("fast").spill_seq, 0u);
  // ...also when nothing else was known of it (an invalid record, dropped at once).
  t.NoteDrained("quick", 13, 4);
  t.NoteSpilled("quick", 13, 5);
  EXPECT_EQ(t.Get("quick").spill_seq, 0u);
}

TEST(TxTrackerTest, EvictsTheOldestBeyondTheCountAndAnyOlderThanTheAge) {
  TxTracker t({.max_entries = 3, .max_age = absl::Seconds(10)});
  for (int i = 0; i < 5; ++i) t.NoteAdmitted(absl::StrCat("tx", i), (i + 1) * kSecond);
  EXPECT_EQ(t.Evict(6 * kSecond), 2u);
  EXPECT_EQ(t.Get("tx0").admitted_nanos, 0);
  EXPECT_EQ(t.Get("tx1").admitted_nanos, 0);
  EXPECT_EQ(t.Get("tx2").admitted_nanos, 3 * kSecond);
  // tx2 was created at 3 s: older than 10 s at 13.5 s; tx3 (4 s) and tx4 (5 s) are not.
  EXPECT_EQ(t.Evict(13 * kSecond + kSecond / 2), 1u);
  EXPECT_EQ(t.stats().entries, 2u);
  EXPECT_EQ(t.stats().evicted_by_count, 2u);
  EXPECT_EQ(t.stats().evicted_by_age, 1u);
}

TEST(TxTrackerTest, CommittedEntriesDoNotCountAgainstTheBoundAndTheOrderStaysSmall) {
  TxTracker t({.max_entries = 2, .max_age = absl::Hours(1)});
  // Many txs come and commit; only the two still open remain, none is evicted.
  for (int i = 0; i < 20'000; ++i) {
    const std::string h = absl::StrCat("tx", i);
    t.NoteAdmitted(h, i);
    if (i < 19'998) t.TakeCommitted({h});
  }
  EXPECT_EQ(t.Evict(20'000), 0u);
  EXPECT_EQ(t.stats().entries, 2u);
  EXPECT_EQ(t.Get("tx19999").admitted_nanos, 19'999);
}

TEST(TxTrackerTest, ANewPolicyAppliesAtTheNextEvict) {
  TxTracker t({.max_entries = 100, .max_age = absl::Hours(1)});
  for (int i = 0; i < 10; ++i) t.NoteAdmitted(absl::StrCat("tx", i), i + 1);
  t.SetPolicy({.max_entries = 4, .max_age = absl::Hours(1)});
  EXPECT_EQ(t.Evict(100), 6u);
  EXPECT_EQ(t.Get("tx6").admitted_nanos, 7);
}

}  // namespace
}  // namespace partitions
