// loadgen stats and bookkeeping: percentiles, rejection reasons, per-second series and window
// totals (held offers and retry-after hint counts included), the sender book's nonce handling
// (rejected txs re-offered first, in nonce order; senders held by retry-after hints) and the
// commit tracker.
#include "tools/loadgen_stats.h"

#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/chain.pb.h"
#include "tools/loadgen_txs.h"

namespace loadgen {
namespace {

TEST(LoadgenStatsTest, PercentileIsNearestRank) {
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 0.5), 0);
  std::vector<double> one = {7};
  EXPECT_EQ(Percentile(one, 0.99), 7);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, unsorted
  EXPECT_EQ(Percentile(v, 0.50), 50);
  EXPECT_EQ(Percentile(v, 0.99), 99);
  EXPECT_EQ(Percentile(v, 1.0), 100);
  EXPECT_EQ(Percentile(v, 0.0), 1);
  std::vector<double> ten = {5, 1, 9, 3, 7, 2, 8, 4, 6, 10};
  EXPECT_EQ(Percentile(ten, 0.99), 10);
  EXPECT_EQ(Percentile(ten, 0.5), 5);
}

TEST(LoadgenStatsTest, ClassifiesRejections) {
  EXPECT_EQ(ClassifyRejection(8, "request rate limit", "rate"), kRate);
  EXPECT_EQ(ClassifyRejection(8, "pool full: 100 of 100 txs", ""), kPool);
  EXPECT_EQ(ClassifyRejection(8, "sender quota", ""), kPool);
  EXPECT_EQ(ClassifyRejection(8, "predicate 'pool_below_high_water' does not hold", "pool_gate"),
            kPool);
  EXPECT_EQ(ClassifyRejection(8, "too many requests in flight", "concurrency"), kInFlight);
  EXPECT_EQ(ClassifyRejection(8, "", ""), kRate);
  EXPECT_EQ(ClassifyRejection(14, "consensus not NORMAL", ""), kUnavailable);
  EXPECT_EQ(ClassifyRejection(3, "malformed transaction", ""), kInvalid);
  EXPECT_EQ(ClassifyRejection(16, "bad signature", ""), kInvalid);
  EXPECT_EQ(ClassifyRejection(9, "nonce gap", ""), kOther);
  EXPECT_EQ(ClassifyRejection(6, "replayed nonce", ""), kOther);
  EXPECT_STREQ(ReasonName(kInFlight), "in_flight");
}

TEST(LoadgenStatsTest, OnlyRejectionsThatCanHealAreReoffered) {
  EXPECT_TRUE(ShouldReoffer(8, "pool full"));
  EXPECT_TRUE(ShouldReoffer(14, "consensus not NORMAL"));
  EXPECT_TRUE(ShouldReoffer(4, "deadline"));
  EXPECT_TRUE(ShouldReoffer(9, "nonce gap: 70 ahead"));
  EXPECT_FALSE(ShouldReoffer(9, "wrong partition"));
  EXPECT_FALSE(ShouldReoffer(6, "replayed nonce"));
  EXPECT_FALSE(ShouldReoffer(3, "malformed transaction"));
  EXPECT_FALSE(ShouldReoffer(16, "bad signature"));
}

TEST(LoadgenStatsTest, SeriesAndWindowTotals) {
  PartitionStats stats;
  stats.AddOffered(0, 10);
  stats.AddAccepted(0, 7);
  stats.AddRejected(0, kRate, 2);
  stats.AddClientDropped(0, 1);
  stats.AddOffered(2, 20);
  stats.AddAccepted(2, 20);
  stats.AddRejected(2, kPool, 0);
  for (int i = 1; i <= 10; ++i) stats.AddCommit(1, i);
  stats.AddCommit(3, 100);
  std::vector<SecondStats> series = stats.Snapshot();
  ASSERT_EQ(series.size(), 4u);
  EXPECT_EQ(series[1].offered, 0u);
  EXPECT_EQ(series[0].rejected_total(), 2u);
  EXPECT_EQ(stats.Second(9).offered, 0u);  // beyond the series: empty

  Totals all = Summarize(series, {0, 4});
  EXPECT_EQ(all.offered, 30u);
  EXPECT_EQ(all.accepted, 27u);
  EXPECT_EQ(all.rejected_total, 2u);
  EXPECT_EQ(all.rejected[kRate], 2u);
  EXPECT_EQ(all.client_dropped, 1u);
  EXPECT_EQ(all.committed, 11u);
  EXPECT_EQ(all.max_ms, 100);
  EXPECT_EQ(all.p50_ms, 6);
  EXPECT_DOUBLE_EQ(all.offered_rate(), 7.5);
  Totals first = Summarize(series, {0, 2});
  EXPECT_EQ(first.committed, 10u);
  EXPECT_EQ(first.p99_ms, 10);
  EXPECT_DOUBLE_EQ(first.committed_rate(), 5);
  Totals beyond = Summarize(series, {10, 20});
  EXPECT_EQ(beyond.offered, 0u);
  EXPECT_EQ(beyond.p99_ms, 0);
}

TEST(LoadgenStatsTest, HeldOffersAndHintCountsSumOverWindows) {
  PartitionStats stats;
  stats.AddOffered(0, 10);
  stats.AddAccepted(0, 4);
  stats.AddRejected(0, kPool, 2);
  stats.AddHeld(0, 4);
  stats.AddHints(0, {.hinted_rejections = 2, .hint_ms_sum = 150});
  stats.AddHints(1, {.hinted_rejections = 1,
                     .hint_ms_sum = 30,
                     .reoffers_after_hint = 4,
                     .accepted_after_hint = 3,
                     .reoffers_before_hint = 2,
                     .accepted_before_hint = 1});
  stats.AddHeld(2, 5);
  std::vector<SecondStats> series = stats.Snapshot();
  ASSERT_EQ(series.size(), 3u);
  EXPECT_EQ(series[0].held, 4u);
  EXPECT_EQ(series[0].offered, series[0].accepted + series[0].rejected_total() +
                                   series[0].client_dropped + series[0].held);
  EXPECT_EQ(series[1].hints.reoffers_after_hint, 4u);

  Totals all = Summarize(series, {0, 3});
  EXPECT_EQ(all.held, 9u);
  EXPECT_EQ(all.hints.hinted_rejections, 3u);
  EXPECT_EQ(all.hints.hint_ms_sum, 180u);
  EXPECT_DOUBLE_EQ(all.hints.mean_hint_ms(), 60);
  EXPECT_EQ(all.hints.reoffers_after_hint, 4u);
  EXPECT_EQ(all.hints.accepted_after_hint, 3u);
  EXPECT_EQ(all.hints.reoffers_before_hint, 2u);
  EXPECT_EQ(all.hints.accepted_before_hint, 1u);
  EXPECT_EQ(all.hints.accuracy(), std::optional<double>(0.75));
  EXPECT_FALSE(all.hints.empty());

  Totals first = Summarize(series, {0, 1});
  EXPECT_EQ(first.held, 4u);
  EXPECT_DOUBLE_EQ(first.hints.mean_hint_ms(), 75);
  EXPECT_FALSE(first.hints.accuracy().has_value());  // no re-offer after a hint yet
  Totals none = Summarize(series, {2, 3});
  EXPECT_TRUE(none.hints.empty());
  EXPECT_EQ(none.hints.mean_hint_ms(), 0);
}

TEST(LoadgenStatsTest, ConcurrentRecordingLosesNothing) {
  PartitionStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats, t] {
      for (int i = 0; i < 1000; ++i) {
        stats.AddAccepted(i % 5, 1);
        stats.AddCommit(t, 1.0);
        stats.AddHeld(i % 3, 1);
        stats.AddHints(i % 7, {.hinted_rejections = 1, .hint_ms_sum = 2});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Totals all = Summarize(stats.Snapshot(), {0, 10});
  EXPECT_EQ(all.accepted, 4000u);
  EXPECT_EQ(all.committed, 4000u);
  EXPECT_EQ(all.held, 4000u);
  EXPECT_EQ(all.hints.hinted_rejections, 4000u);
  EXPECT_EQ(all.hints.hint_ms_sum, 8000u);
}

OfferTx Tx(uint32_t sender, uint64_t nonce) {
  OfferTx tx;
  tx.sender = sender;
  tx.nonce = nonce;
  tx.hash = absl::StrCat(sender, "/", nonce);
  return tx;
}

TEST(LoadgenSenderBookTest, ReservesNoncesFromAccountState) {
  SenderBook book({1, 8});
  EXPECT_EQ(book.ReserveNonces(0, 3), 1u);
  EXPECT_EQ(book.ReserveNonces(0, 2), 4u);
  EXPECT_EQ(book.ReserveNonces(1, 1), 8u);
  EXPECT_EQ(book.senders(), 2);
}

TEST(LoadgenSenderBookTest, RoundRobinOverSendersInNonceOrder) {
  SenderBook book({1, 1});
  book.AddSigned(0, {Tx(0, 1), Tx(0, 2)});
  book.AddSigned(1, {Tx(1, 1)});
  EXPECT_EQ(book.buffered(), 3u);
  std::vector<std::string> order;
  while (std::optional<OfferTx> tx = book.Take()) order.push_back(tx->hash);
  EXPECT_THAT(order, ::testing::ElementsAre("0/1", "1/1", "0/2"));
  EXPECT_EQ(book.buffered(), 0u);
  EXPECT_FALSE(book.Take().has_value());
}

TEST(LoadgenSenderBookTest, AGroupTakesOnlyItsSenders) {
  // --route sender: target g of 2 offers senders g, g + 2, ... only, round-robin among them.
  SenderBook book({1, 1, 1, 1, 1});
  for (uint32_t s = 0; s < 5; ++s) book.AddSigned(s, {Tx(s, 1), Tx(s, 2)});
  std::vector<std::string> odd, even;
  while (std::optional<OfferTx> tx = book.Take(1, 2)) odd.push_back(tx->hash);
  EXPECT_THAT(odd, ::testing::ElementsAre("1/1", "3/1", "1/2", "3/2"));
  for (int i = 0; i < 3; ++i) even.push_back(book.Take(0, 2)->hash);
  EXPECT_THAT(even, ::testing::ElementsAre("0/1", "2/1", "4/1"));
  EXPECT_EQ(book.buffered(), 3u);
  EXPECT_FALSE(book.Take(2, 2).has_value());  // no such group
  EXPECT_FALSE(book.Take(5, 6).has_value());  // a group past the senders
}

TEST(LoadgenSenderBookTest, RejectedTxIsReofferedBeforeFreshOnes) {
  SenderBook book({1});
  book.AddSigned(0, {Tx(0, 1), Tx(0, 2), Tx(0, 3), Tx(0, 4), Tx(0, 5)});
  OfferTx n1 = *book.Take(), n2 = *book.Take(), n3 = *book.Take();
  EXPECT_EQ(n3.nonce, 3u);
  // 2 and 1 come back rejected (out of order), 3 was admitted: 1 then 2 go again, then 4.
  book.ReturnRejected(n2, /*reoffer=*/true);
  book.ReturnRejected(n1, /*reoffer=*/true);
  EXPECT_EQ(book.pending_reoffers(), 2u);
  EXPECT_THAT(book.PendingNoncesForTest(0), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(book.Take()->nonce, 1u);
  EXPECT_EQ(book.Take()->nonce, 2u);
  EXPECT_EQ(book.Take()->nonce, 4u);
  // A rejection that can never succeed is not re-offered.
  book.ReturnRejected(Tx(0, 4), /*reoffer=*/false);
  EXPECT_EQ(book.pending_reoffers(), 0u);
  EXPECT_EQ(book.Take()->nonce, 5u);
  // The same tx returned twice is offered once.
  book.ReturnRejected(Tx(0, 5), true);
  book.ReturnRejected(Tx(0, 5), true);
  EXPECT_EQ(book.pending_reoffers(), 1u);
}

TEST(LoadgenSenderBookTest, AHeldSenderIsSkippedUntilItsNotBefore) {
  SenderBook book({1, 1});
  book.AddSigned(0, {Tx(0, 1), Tx(0, 2), Tx(0, 3)});
  book.AddSigned(1, {Tx(1, 1), Tx(1, 2)});
  OfferTx n1 = *book.Take(0, 1, /*now_nanos=*/100);
  EXPECT_EQ(n1.hash, "0/1");
  EXPECT_EQ(book.Take(0, 1, 100)->hash, "1/1");
  OfferTx n2 = *book.Take(0, 1, 100);
  EXPECT_EQ(n2.hash, "0/2");
  // 0/1 comes back with a retry-after hint: sender 0 offers nothing before 500 (not even its
  // fresh 0/3); sender 1 goes on.
  book.ReturnRejected(n1, /*reoffer=*/true, /*not_before_nanos=*/500);
  bool held = false;
  std::optional<OfferTx> tx = book.Take(0, 1, 200, &held);
  ASSERT_TRUE(tx.has_value());
  EXPECT_EQ(tx->hash, "1/2");
  EXPECT_FALSE(held);
  // Sender 1 is empty, sender 0 held: nothing, and it is a hold (not an empty buffer).
  EXPECT_FALSE(book.Take(0, 1, 200, &held).has_value());
  EXPECT_TRUE(held);
  // 0/2 comes back too (no hint of its own): it waits for the hold as well.
  book.ReturnRejected(n2, /*reoffer=*/true);
  EXPECT_FALSE(book.Take(0, 1, 499, &held).has_value());
  EXPECT_TRUE(held);
  EXPECT_EQ(book.pending_reoffers(), 2u);
  // From not_before on: the lowest rejected nonce first, then the next, then the fresh one.
  std::vector<std::string> order;
  while (std::optional<OfferTx> t = book.Take(0, 1, 500, &held)) order.push_back(t->hash);
  EXPECT_THAT(order, ::testing::ElementsAre("0/1", "0/2", "0/3"));
  EXPECT_FALSE(held);  // now the buffers are simply empty
}

TEST(LoadgenSenderBookTest, EachRejectedTxGoesAtItsOwnHintInNonceOrder) {
  SenderBook book({1});
  book.AddSigned(0, {Tx(0, 1), Tx(0, 2), Tx(0, 3)});
  OfferTx n1 = *book.Take(0, 1, 0), n2 = *book.Take(0, 1, 0);
  book.ReturnRejected(n2, true, /*not_before_nanos=*/300);
  book.ReturnRejected(n1, true, /*not_before_nanos=*/200);
  bool held = false;
  EXPECT_FALSE(book.Take(0, 1, 199, &held).has_value());
  EXPECT_TRUE(held);
  // Nonce 1 at its own hint, not at the sender's latest.
  EXPECT_EQ(book.Take(0, 1, 200)->nonce, 1u);
  EXPECT_FALSE(book.Take(0, 1, 299, &held).has_value());
  EXPECT_TRUE(held) << "the fresh nonce 3 went ahead of the held nonce 2";
  EXPECT_EQ(book.Take(0, 1, 300)->nonce, 2u);
  EXPECT_EQ(book.Take(0, 1, 300)->nonce, 3u);
  // A later nonce with a shorter hint still waits for the earlier one.
  book.AddSigned(0, {Tx(0, 4), Tx(0, 5)});
  OfferTx n4 = *book.Take(0, 1, 300), n5 = *book.Take(0, 1, 300);
  book.ReturnRejected(n4, true, /*not_before_nanos=*/900);
  book.ReturnRejected(n5, true, /*not_before_nanos=*/400);
  EXPECT_FALSE(book.Take(0, 1, 899, &held).has_value());
  EXPECT_TRUE(held);
  EXPECT_EQ(book.Take(0, 1, 900)->nonce, 4u);
  EXPECT_EQ(book.Take(0, 1, 900)->nonce, 5u);
}

TEST(LoadgenSenderBookTest, NoHoldWithoutNotBeforeOrReoffer) {
  SenderBook book({1, 1, 1, 1});
  for (uint32_t s = 0; s < 4; ++s) book.AddSigned(s, {Tx(s, 1), Tx(s, 2)});
  OfferTx a = *book.Take(), b = *book.Take();
  EXPECT_EQ(a.hash, "0/1");
  EXPECT_EQ(b.hash, "1/1");
  // As without --honour-retry-after: re-offered at once, whatever the clock says.
  book.ReturnRejected(a, /*reoffer=*/true);
  // A rejection that is never re-offered holds nothing either.
  book.ReturnRejected(b, /*reoffer=*/false, /*not_before_nanos=*/1'000'000);
  bool held = true;
  std::vector<std::string> order;
  while (std::optional<OfferTx> t = book.Take(0, 1, 0, &held)) order.push_back(t->hash);
  EXPECT_THAT(order, ::testing::ElementsAre("2/1", "3/1", "0/1", "1/2", "2/2", "3/2", "0/2"));
  EXPECT_FALSE(held);
}

TEST(LoadgenSenderBookTest, AHoldOnlyAffectsItsSendersGroup) {
  // --route sender with 2 targets: group 0 = senders 0, 2; group 1 = senders 1, 3.
  SenderBook book({1, 1, 1, 1});
  for (uint32_t s = 0; s < 4; ++s) book.AddSigned(s, {Tx(s, 1), Tx(s, 2)});
  OfferTx t0 = *book.Take(0, 2, 0), t2 = *book.Take(0, 2, 0);
  book.ReturnRejected(t0, true, 1000);
  book.ReturnRejected(t2, true, 2000);
  bool held = false;
  EXPECT_FALSE(book.Take(0, 2, 10, &held).has_value());
  EXPECT_TRUE(held);
  EXPECT_EQ(book.Take(1, 2, 10, &held)->hash, "1/1");
  EXPECT_FALSE(held);
  EXPECT_EQ(book.Take(0, 2, 1000)->hash, "0/1");  // sender 2 is still held
  EXPECT_EQ(book.Take(0, 2, 1000)->hash, "0/2");
  EXPECT_FALSE(book.Take(0, 2, 1000, &held).has_value());
  EXPECT_TRUE(held);
  EXPECT_EQ(book.Take(0, 2, 2000)->hash, "2/1");
}

TEST(LoadgenCommitTrackerTest, MatchesSentHashesOnce) {
  CommitTracker t;
  t.Sent("a", 100);
  t.Sent("b", 200);
  t.Sent("b", 300);  // re-sent after a rejection: the latest send counts
  EXPECT_EQ(t.outstanding(), 2u);
  t.Forget("a");
  EXPECT_FALSE(t.Committed("a").has_value());
  EXPECT_EQ(t.Committed("b"), std::optional<int64_t>(300));
  EXPECT_FALSE(t.Committed("b").has_value());
  EXPECT_EQ(t.outstanding(), 0u);
}

TEST(LoadgenTxFactoryTest, SignsPutsOfTheRequestedSize) {
  absl::StatusOr<std::vector<base::PrivateKey>> keys = MakeSenderKeys(1, 2);
  ASSERT_TRUE(keys.ok());
  absl::StatusOr<std::vector<base::PrivateKey>> again = MakeSenderKeys(1, 2);
  EXPECT_EQ((*keys)[1].public_key().bytes(), (*again)[1].public_key().bytes());  // seeded
  EXPECT_NE((*keys)[0].public_key().bytes(), (*keys)[1].public_key().bytes());
  for (uint64_t size : {160u, 200u, 1000u, 4096u}) {
    TxFactory f("hot", 3, size);
    OfferTx tx = f.Make(1, (*keys)[1], 42);
    EXPECT_EQ(tx.bytes.size(), size);
    EXPECT_EQ(tx.hash, base::Sha256Bytes(tx.bytes));
    EXPECT_EQ(tx.nonce, 42u);
    node::chain::SignedTransaction st;
    ASSERT_TRUE(st.ParseFromString(tx.bytes));
    node::chain::Transaction body;
    ASSERT_TRUE(body.ParseFromString(st.tx()));
    EXPECT_EQ(body.partition(), 3u);
    EXPECT_EQ(body.nonce(), 42u);
    EXPECT_EQ(body.put().key(), "lg/hot/1/42");
    EXPECT_TRUE((*keys)[1].public_key().Verify(st.tx(), st.signature()));
  }
  // keys=per_sender: every tx of a sender overwrites one key, still at the requested size.
  TxFactory fixed("hot", 3, 4096, /*key_per_sender=*/true);
  for (uint64_t nonce : {1u, 2u}) {
    OfferTx tx = fixed.Make(1, (*keys)[1], nonce);
    EXPECT_EQ(tx.bytes.size(), 4096u);
    node::chain::SignedTransaction st;
    ASSERT_TRUE(st.ParseFromString(tx.bytes));
    node::chain::Transaction body;
    ASSERT_TRUE(body.ParseFromString(st.tx()));
    EXPECT_EQ(body.put().key(), "lg/hot/1");
  }
}

}  // namespace
}  // namespace loadgen
