#include "partitions/tx_pool.h"

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

using chaintest::Key;

// Committed nonces as the executor would report them.
class Nonces {
 public:
  NextNonceFn Fn() {
    return [this](absl::string_view s) {
      absl::MutexLock lock(&mu_);
      auto it = next_.find(s);
      return it == next_.end() ? uint64_t{1} : it->second;
    };
  }
  void Set(const std::string& sender, uint64_t next) {
    absl::MutexLock lock(&mu_);
    next_[sender] = next;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> next_ ABSL_GUARDED_BY(mu_);
};

class TxPoolTest : public ::testing::Test {
 protected:
  TxPoolTest() : to_(Key(99).public_key().bytes()) {}

  std::unique_ptr<TxPool> MakePool(TxPoolLimits limits) {
    EXPECT_TRUE(ValidateTxPoolLimits(limits).ok());
    return std::make_unique<TxPool>(limits, &clock_, nonces_.Fn());
  }
  TxPtr Tx(int sender, uint64_t nonce, uint64_t amount = 1) {
    return chaintest::Transfer(Key(sender), nonce, to_, amount);
  }
  static void ExpectRefused(const absl::Status& s, absl::StatusCode code,
                            absl::string_view prefix) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), prefix)) << s;
  }

  tests::FakeClock clock_;
  Nonces nonces_;
  const std::string to_;
};

TEST_F(TxPoolTest, CountLimit) {
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(20, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  ExpectRefused(pool->Add(Tx(20, 1), TxOrigin::kForwarded), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_EQ(pool->stats().txs, 10u);
  EXPECT_EQ(pool->stats().rejected_full, 2u);
}

// on_added runs once for a tx the pool took, never for one it refused.
TEST_F(TxPoolTest, OnAddedRunsOnceForATxThePoolTookAndNeverForARefusal) {
  auto pool = MakePool({.max_txs = 2, .forward_reserve = 0});
  int calls = 0;
  const auto count = [&calls] { ++calls; };
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient, count).ok());
  EXPECT_EQ(calls, 1);
  ExpectRefused(pool->Add(Tx(1, 1), TxOrigin::kClient, count), absl::StatusCode::kAlreadyExists,
                "duplicate transaction");
  ASSERT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kClient, count).ok());
  ExpectRefused(pool->Add(Tx(3, 1), TxOrigin::kClient, count), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(pool->stats().txs, 2u);
}

TEST_F(TxPoolTest, BytesLimit) {
  const size_t size = Tx(1, 1)->size();
  auto pool = MakePool({.max_bytes = 3 * size + size / 2, .forward_reserve = 0});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(5, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_EQ(pool->stats().bytes, 3 * size);
}

TEST_F(TxPoolTest, PerSenderQuotaAppliesToClientTxs) {
  auto pool = MakePool({.max_per_sender = 3});
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(pool->Add(Tx(1, n), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(1, 4), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "sender quota");
  EXPECT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kClient).ok()) << "other senders unaffected";
  // A forwarded tx is bounded by the nonce window only.
  EXPECT_TRUE(pool->Add(Tx(1, 4), TxOrigin::kForwarded).ok());
  EXPECT_EQ(pool->stats().rejected_quota, 1u);
}

TEST_F(TxPoolTest, ReserveIsForForwardedTxs) {
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0.2});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(9, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_TRUE(pool->Add(Tx(9, 1), TxOrigin::kForwarded).ok());
  EXPECT_TRUE(pool->Add(Tx(10, 1), TxOrigin::kForwarded).ok());
  ExpectRefused(pool->Add(Tx(11, 1), TxOrigin::kForwarded), absl::StatusCode::kResourceExhausted,
                "pool full");
}

// A client tx admitted on a retry ticket may use half the forwarding reserve, no more; it counts
// as a client tx (quota, the added_client() share).
TEST_F(TxPoolTest, AReservedClientTxMayUseHalfTheForwardingReserve) {
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0.4});
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  const absl::Status plain = pool->Add(Tx(7, 1), TxOrigin::kClient);
  ExpectRefused(plain, absl::StatusCode::kResourceExhausted, "pool full");
  EXPECT_TRUE(absl::StrContains(plain.message(), "client limit is 6 txs")) << plain;
  EXPECT_TRUE(pool->Add(Tx(7, 1), TxOrigin::kClientReserved).ok());
  EXPECT_TRUE(pool->Add(Tx(8, 1), TxOrigin::kClientReserved).ok());
  const absl::Status reserved = pool->Add(Tx(9, 1), TxOrigin::kClientReserved);
  ExpectRefused(reserved, absl::StatusCode::kResourceExhausted, "pool full");
  EXPECT_TRUE(absl::StrContains(reserved.message(), "client limit is 8 txs")) << reserved;
  EXPECT_TRUE(pool->Add(Tx(9, 1), TxOrigin::kForwarded).ok());
  EXPECT_TRUE(pool->Add(Tx(10, 1), TxOrigin::kForwarded).ok());
  EXPECT_EQ(pool->added_client(), 8u);
  EXPECT_EQ(pool->added_forwarded(), 2u);
}

TEST_F(TxPoolTest, ReserveAppliesToBytesToo) {
  const size_t size = Tx(1, 1)->size();
  auto pool = MakePool({.max_bytes = 10 * size, .forward_reserve = 0.5});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(6, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_TRUE(pool->Add(Tx(6, 1), TxOrigin::kForwarded).ok());
}

TEST_F(TxPoolTest, DuplicateAndReplayedNonce) {
  auto pool = MakePool({});
  TxPtr tx = Tx(1, 1);
  ASSERT_TRUE(pool->Add(tx, TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(tx, TxOrigin::kForwarded), absl::StatusCode::kAlreadyExists,
                "duplicate transaction");
  // Same sender and nonce, different tx (amount): a conflicting replay.
  ExpectRefused(pool->Add(Tx(1, 1, 2), TxOrigin::kClient), absl::StatusCode::kAlreadyExists,
                "replayed nonce");
  nonces_.Set(Key(2).public_key().bytes(), 5);
  ExpectRefused(pool->Add(Tx(2, 4), TxOrigin::kClient), absl::StatusCode::kAlreadyExists,
                "replayed nonce");
  EXPECT_EQ(pool->stats().senders, 1u) << "refused senders leave no record";
}

TEST_F(TxPoolTest, NonceGapLimit) {
  auto pool = MakePool({.max_nonce_gap = 4});
  EXPECT_TRUE(pool->Add(Tx(1, 5), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(1, 6), TxOrigin::kClient), absl::StatusCode::kFailedPrecondition,
                "nonce gap");
}

TEST_F(TxPoolTest, NonceOrderingHoldsGappedTxs) {
  auto pool = MakePool({});
  ASSERT_TRUE(pool->Add(Tx(1, 3), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(1, 2), TxOrigin::kClient).ok());
  EXPECT_TRUE(pool->SelectBatch(100, 1 << 20).empty()) << "nonce 1 missing: nothing ready";
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient).ok());
  std::vector<TxPtr> batch = pool->SelectBatch(100, 1 << 20);
  ASSERT_EQ(batch.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(batch[i]->nonce(), i + 1);
  EXPECT_TRUE(pool->SelectBatch(100, 1 << 20).empty()) << "proposed txs are not picked again";
}

TEST_F(TxPoolTest, BatchSelectionByCountBytesAndFairAcrossSenders) {
  auto pool = MakePool({});
  for (int s = 1; s <= 3; ++s) {
    for (uint64_t n = 1; n <= 5; ++n) ASSERT_TRUE(pool->Add(Tx(s, n), TxOrigin::kClient).ok());
  }
  std::vector<TxPtr> batch = pool->SelectBatch(6, 1 << 20);
  ASSERT_EQ(batch.size(), 6u);
  absl::flat_hash_map<std::string, uint64_t> last;
  for (const TxPtr& tx : batch) {
    EXPECT_EQ(tx->nonce(), last[tx->sender()] + 1) << "per-sender nonce order";
    last[tx->sender()] = tx->nonce();
  }
  EXPECT_EQ(last.size(), 3u);
  for (const auto& [sender, n] : last) EXPECT_EQ(n, 2u) << "two per sender";

  const size_t size = batch[0]->size();
  std::vector<TxPtr> by_bytes = pool->SelectBatch(100, 4 * size + size / 2);
  EXPECT_EQ(by_bytes.size(), 4u);
  EXPECT_EQ(pool->stats().proposed, 10u);
  EXPECT_EQ(pool->SelectBatch(100, 1 << 20).size(), 5u);
  EXPECT_TRUE(pool->SelectBatch(100, 1 << 20).empty());
}

TEST_F(TxPoolTest, ReleaseProposedMakesTxsSelectableAgain) {
  auto pool = MakePool({});
  for (uint64_t n = 1; n <= 4; ++n) ASSERT_TRUE(pool->Add(Tx(1, n), TxOrigin::kClient).ok());
  std::vector<TxPtr> batch = pool->SelectBatch(100, 1 << 20);
  ASSERT_EQ(batch.size(), 4u);
  pool->ReleaseProposed({batch[2]->hash});  // releases nonces 3 and 4
  std::vector<TxPtr> again = pool->SelectBatch(100, 1 << 20);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0]->nonce(), 3u);
  pool->ReleaseAllProposed();
  EXPECT_EQ(pool->stats().proposed, 0u);
  EXPECT_EQ(pool->SelectBatch(100, 1 << 20).size(), 4u);
}

TEST_F(TxPoolTest, RemoveCommittedAdvancesNoncesAndDropsStale) {
  auto pool = MakePool({});
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(1, 2), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(1, 3), TxOrigin::kClient).ok());
  std::vector<TxPtr> batch = pool->SelectBatch(1, 1 << 20);
  ASSERT_EQ(batch.size(), 1u);
  // Another replica's block committed a different tx with nonce 2 together with ours.
  TxPtr other_nonce2 = Tx(1, 2, 77);
  nonces_.Set(Key(1).public_key().bytes(), 3);
  pool->RemoveCommitted({batch[0], other_nonce2});
  TxPoolStats st = pool->stats();
  EXPECT_EQ(st.txs, 1u);
  EXPECT_EQ(st.committed, 1u);
  EXPECT_EQ(st.stale, 1u);
  EXPECT_EQ(st.proposed, 0u);
  std::vector<TxPtr> next = pool->SelectBatch(10, 1 << 20);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0]->nonce(), 3u);
}

TEST_F(TxPoolTest, ExpiryAfterTtlSparesProposedTxs) {
  auto pool = MakePool({.ttl = absl::Seconds(10)});
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kClient).ok());
  ASSERT_EQ(pool->SelectBatch(1, 1 << 20).size(), 1u);
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(pool->Add(Tx(3, 1), TxOrigin::kClient).ok());
  EXPECT_EQ(pool->Expire(clock_.NowNanos()), 0u);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(pool->Expire(clock_.NowNanos()), 1u) << "the unproposed one of the first two";
  EXPECT_EQ(pool->stats().txs, 2u);
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(pool->Expire(clock_.NowNanos()), 1u);
  EXPECT_EQ(pool->stats().txs, 1u);
  EXPECT_EQ(pool->stats().proposed, 1u);
  EXPECT_EQ(pool->stats().expired, 2u);
}

TEST_F(TxPoolTest, DroppedTxsAreReportedOnlyWhileTracked) {
  auto pool = MakePool({.ttl = absl::Seconds(10)});
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient).ok());
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(pool->Expire(clock_.NowNanos()), 1u);
  EXPECT_TRUE(pool->TakeDropped().empty()) << "not tracked";
  pool->TrackDropped(true);
  TxPtr expiring = Tx(2, 1);
  ASSERT_TRUE(pool->Add(expiring, TxOrigin::kClient).ok());
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(pool->Expire(clock_.NowNanos()), 1u);
  EXPECT_THAT(pool->TakeDropped(), ::testing::ElementsAre(expiring->hash));
  EXPECT_TRUE(pool->TakeDropped().empty()) << "taken once";
}

TEST_F(TxPoolTest, LiveLimitChangeAndHighWater) {
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0, .high_water = 0.5});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  EXPECT_FALSE(pool->AboveHighWater());
  ASSERT_TRUE(pool->Add(Tx(5, 1), TxOrigin::kClient).ok());
  EXPECT_TRUE(pool->AboveHighWater());

  TxPoolLimits smaller = pool->limits();
  smaller.max_txs = 3;
  ASSERT_TRUE(pool->SetLimits(smaller).ok());
  EXPECT_EQ(pool->stats().txs, 5u) << "nothing evicted";
  ExpectRefused(pool->Add(Tx(6, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  TxPoolLimits bigger = smaller;
  bigger.max_txs = 100;
  ASSERT_TRUE(pool->SetLimits(bigger).ok());
  EXPECT_FALSE(pool->AboveHighWater());
  EXPECT_TRUE(pool->Add(Tx(6, 1), TxOrigin::kClient).ok());

  TxPoolLimits bad = bigger;
  bad.forward_reserve = 1.5;
  absl::Status s = pool->SetLimits(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "forward_reserve")) << s;
  EXPECT_EQ(pool->limits().max_txs, 100u) << "invalid limits change nothing";
}

TEST_F(TxPoolTest, HighWaterExcessIsWhatMustLeaveBeforeTheGateOpens) {
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0, .high_water = 0.5});
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  EXPECT_EQ(pool->HighWaterExcess().txs, 0u);
  for (int i = 4; i < 7; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  // 7 pooled, mark 5: the gate opens once 3 have left (7 - 3 = 4 < 5).
  EXPECT_TRUE(pool->AboveHighWater());
  EXPECT_EQ(pool->HighWaterExcess().txs, 3u);
  EXPECT_EQ(pool->HighWaterExcess().bytes, 0u);
  EXPECT_EQ(pool->size_now(), 7u);
  EXPECT_EQ(pool->bytes_now(), pool->stats().bytes);
  std::vector<TxPtr> batch = pool->SelectBatch(3, 1 << 20);
  ASSERT_EQ(batch.size(), 3u);
  for (const TxPtr& tx : batch) nonces_.Set(std::string(tx->sender()), 2);
  pool->RemoveCommitted(batch);
  EXPECT_FALSE(pool->AboveHighWater());
  EXPECT_EQ(pool->HighWaterExcess().txs, 0u);
  EXPECT_EQ(pool->size_now(), 4u);
}

TEST_F(TxPoolTest, ExcessCountsAgainstTheClientCapWhenItIsBelowTheMark) {
  // Clients may fill half the pool (the rest is the forwarding reserve); the mark is the whole.
  auto pool = MakePool({.max_txs = 10, .forward_reserve = 0.5, .high_water = 1.0});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool->Add(Tx(i + 1, 1), TxOrigin::kClient).ok());
  ExpectRefused(pool->Add(Tx(6, 1), TxOrigin::kClient), absl::StatusCode::kResourceExhausted,
                "pool full");
  EXPECT_FALSE(pool->AboveHighWater());
  EXPECT_EQ(pool->HighWaterExcess().txs, 1u);  // one must commit before a client tx fits
}

TEST(PoolRetryAfterTest, TheExcessAtTheMeasuredCommitRateAndAtLeastHalfABlock) {
  const flowctl::RetryAfterBounds b{
      .min = absl::Milliseconds(10), .max = absl::Seconds(10), .unknown = absl::Milliseconds(100)};
  // 300 txs over the mark at 1000 tx/s, blocks at 20/s (25 ms floor): 300 ms.
  EXPECT_EQ(PoolRetryAfter(300, 0, 3000, 600'000, 1000, 20, b), absl::Milliseconds(300));
  // Bytes over the mark count in txs of the mean size (200 B): 100 KB = 500 txs.
  EXPECT_EQ(PoolRetryAfter(300, 100'000, 3000, 600'000, 1000, 20, b), absl::Milliseconds(500));
  // A small excess still waits for the next block: half of 1/4 s.
  EXPECT_EQ(PoolRetryAfter(1, 0, 3000, 600'000, 1000, 4, b), absl::Milliseconds(125));
  // Nothing measured: the fallback; nothing committing while backlogged: the most.
  EXPECT_EQ(PoolRetryAfter(300, 0, 3000, 600'000, -1, -1, b), absl::Milliseconds(100));
  EXPECT_EQ(PoolRetryAfter(300, 0, 3000, 600'000, 0, -1, b), absl::Seconds(10));
}

TEST_F(TxPoolTest, GetAndMissing) {
  auto pool = MakePool({});
  TxPtr a = Tx(1, 1);
  TxPtr b = Tx(2, 1);
  ASSERT_TRUE(pool->Add(a, TxOrigin::kForwarded).ok());
  EXPECT_EQ(pool->Get(a->hash), a);
  EXPECT_EQ(pool->Get(b->hash), nullptr);
  std::vector<std::string> missing = pool->Missing({a->hash, b->hash});
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0], b->hash);
}

TEST_F(TxPoolTest, GappedNamesTxsWaitingBehindAMissingNonce) {
  auto pool = MakePool({});
  TxPtr n1 = Tx(1, 1), n3 = Tx(1, 3), n4 = Tx(1, 4), other = Tx(2, 1);
  for (const TxPtr& t : {n3, n4, other}) ASSERT_TRUE(pool->Add(t, TxOrigin::kClient).ok());
  const std::string unknown = Tx(3, 1)->hash;
  EXPECT_THAT(pool->Gapped({n3->hash, other->hash, n4->hash, unknown}),
              ::testing::ElementsAre(n3->hash, n4->hash));
  ASSERT_TRUE(pool->Add(n1, TxOrigin::kClient).ok());
  EXPECT_THAT(pool->Gapped({n1->hash, n3->hash, n4->hash}),
              ::testing::ElementsAre(n3->hash, n4->hash))
      << "nonce 2 is still missing";
  // Nonces 1 and 2 commit (2 in another replica's block): 3 and 4 are ready now.
  nonces_.Set(Key(1).public_key().bytes(), 3);
  pool->RemoveCommitted({n1, Tx(1, 2)});
  EXPECT_TRUE(pool->Gapped({n3->hash, n4->hash}).empty());
}

TEST_F(TxPoolTest, ConcurrentAddSelectCommit) {
  auto pool = MakePool({.max_txs = 100000});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::vector<TxPtr>> txs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int n = 1; n <= kPerThread; ++n) txs[t].push_back(Tx(t + 1, n));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const TxPtr& tx : txs[t]) ASSERT_TRUE(pool->Add(tx, TxOrigin::kClient).ok());
    });
  }
  size_t committed = 0;
  for (int round = 0; round < 10000 && committed < kThreads * kPerThread; ++round) {
    std::vector<TxPtr> batch = pool->SelectBatch(17, 1 << 20);
    for (const TxPtr& tx : batch) nonces_.Set(tx->sender(), tx->nonce() + 1);
    pool->RemoveCommitted(batch);
    committed += batch.size();
    if (batch.empty()) std::this_thread::yield();
  }
  for (auto& th : threads) th.join();
  for (std::vector<TxPtr> batch = pool->SelectBatch(1000, 1 << 30); !batch.empty();
       batch = pool->SelectBatch(1000, 1 << 30)) {
    pool->RemoveCommitted(batch);
    committed += batch.size();
  }
  EXPECT_EQ(committed, size_t{kThreads * kPerThread});
  EXPECT_EQ(pool->stats().txs, 0u);
}

}  // namespace
}  // namespace partitions

namespace partitions {
namespace {

class TxPoolReadyTest : public TxPoolTest {};

TEST_F(TxPoolReadyTest, CountReadyMatchesWhatSelectBatchWouldTake) {
  auto pool = MakePool(TxPoolLimits{});
  // Sender 1: nonces 1, 2, 3 ready; sender 2: nonce 2 only (gap at 1): not ready.
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_TRUE(pool->Add(Tx(1, n), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(2, 2), TxOrigin::kClient).ok());
  TxPool::ReadyCount all = pool->CountReady(100);
  EXPECT_EQ(all.txs, 3u);
  EXPECT_GT(all.bytes, 0u);
  EXPECT_EQ(pool->CountReady(2).txs, 2u);  // the limit stops the count

  std::vector<TxPtr> batch = pool->SelectBatch(2, 1 << 20);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(pool->CountReady(100).txs, 1u);  // proposed txs are not counted
  ASSERT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kClient).ok());
  EXPECT_EQ(pool->CountReady(100).txs, 3u);  // the gap filled: sender 2's nonces 1 and 2
}

// The ready count is kept incrementally; after every operation of a seeded random mix it must
// equal what SelectBatch takes (taken, then released again, which restores the pool).
TEST_F(TxPoolReadyTest, TheKeptReadyCountMatchesSelectBatchThroughRandomOperations) {
  auto pool = MakePool({.max_txs = 400, .max_per_sender = 64, .forward_reserve = 0});
  std::mt19937_64 rng(20261201);
  constexpr int kSenders = 6;
  std::vector<uint64_t> committed(kSenders + 1, 1);  // next expected nonce per sender
  std::vector<std::vector<TxPtr>> proposals;
  auto check = [&](int step) {
    const TxPool::ReadyCount count = pool->CountReady(1'000'000);
    const TxPool::ReadyCount capped = pool->CountReady(2);
    std::vector<TxPtr> all = pool->SelectBatch(1'000'000, size_t{1} << 40);
    size_t bytes = 0;
    std::vector<std::string> hashes;
    for (const TxPtr& tx : all) {
      bytes += tx->size();
      hashes.push_back(tx->hash);
    }
    ASSERT_EQ(count.txs, all.size()) << "step " << step;
    ASSERT_EQ(count.bytes, bytes) << "step " << step;
    ASSERT_EQ(capped.txs, std::min<size_t>(2, all.size())) << "step " << step;
    ASSERT_EQ(capped.bytes, bytes) << "step " << step;  // the bytes of all ready txs
    ASSERT_EQ(pool->CountReady(1'000'000).txs, 0u) << "step " << step;  // all proposed now
    pool->ReleaseProposed(hashes);
    ASSERT_EQ(pool->CountReady(1'000'000).txs, count.txs) << "step " << step;
  };
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 55) {  // a tx near the sender's next nonce: in order, ahead (a gap) or replayed
      const int sender = 1 + static_cast<int>(rng() % kSenders);
      const uint64_t nonce = committed[sender] + rng() % 12;
      (void)pool->Add(Tx(sender, nonce), rng() % 2 ? TxOrigin::kClient : TxOrigin::kForwarded);
    } else if (op < 70) {  // propose a batch
      std::vector<TxPtr> batch = pool->SelectBatch(1 + rng() % 8, size_t{1} << 20);
      if (!batch.empty()) proposals.push_back(std::move(batch));
    } else if (op < 80 && !proposals.empty()) {  // abandon a proposal (view change)
      const size_t i = rng() % proposals.size();
      std::vector<std::string> hashes;
      for (const TxPtr& tx : proposals[i]) hashes.push_back(tx->hash);
      pool->ReleaseProposed(hashes);
      proposals.erase(proposals.begin() + static_cast<ptrdiff_t>(i));
    } else if (op < 92 && !proposals.empty()) {  // commit the oldest proposal
      // Execution applies each sender's txs in nonce order; a tx whose earlier nonce is missing
      // would fail, so the committed state moves only over a contiguous run.
      for (const TxPtr& tx : proposals.front()) {
        const int sender = [&] {
          for (int k = 1; k <= kSenders; ++k) {
            if (Key(k).public_key().bytes() == tx->sender()) return k;
          }
          return 0;
        }();
        if (sender != 0 && tx->nonce() == committed[sender]) ++committed[sender];
        nonces_.Set(tx->sender(), committed[sender]);
      }
      pool->RemoveCommitted(proposals.front());
      proposals.erase(proposals.begin());
    } else if (op < 96) {  // a backup commits txs it never proposed: the first pooled ones
      const int sender = 1 + static_cast<int>(rng() % kSenders);
      TxPtr tx = Tx(sender, committed[sender]);
      if (pool->Get(tx->hash) != nullptr) {
        nonces_.Set(tx->sender(), ++committed[sender]);
        pool->RemoveCommitted({tx});
      }
    } else if (op < 98) {
      clock_.Advance(absl::Seconds(40));
      pool->Expire(clock_.NowNanos());
    } else {
      pool->ReleaseAllProposed();
      proposals.clear();
    }
    check(step);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(pool->stats().committed, 100u);  // the mix reached every path
  EXPECT_GT(pool->stats().expired, 0u);
}

TEST_F(TxPoolReadyTest, TakeForReforwardTakesOldUnproposedTxsOncePerRound) {
  auto pool = MakePool(TxPoolLimits{});
  const int64_t t0 = clock_.NowNanos();
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kClient).ok());
  ASSERT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kForwarded).ok());
  ASSERT_TRUE(pool->Add(Tx(3, 1), TxOrigin::kClient).ok());
  ASSERT_EQ(pool->SelectBatch(1, 1 << 20).size(), 1u);  // proposes one of the three
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(pool->Add(Tx(4, 1), TxOrigin::kClient).ok());  // too young below

  std::vector<TxPtr> first = pool->TakeForReforward(t0, /*round=*/0, 10, 1 << 20);
  ASSERT_EQ(first.size(), 2u);  // the proposed one and the young one are not taken
  for (const TxPtr& tx : first) EXPECT_NE(tx->hash, Tx(4, 1)->hash);
  EXPECT_TRUE(pool->TakeForReforward(t0, 0, 10, 1 << 20).empty());  // once per round
  // A new round (a new view, a new primary) takes them again; bounded by count and by bytes.
  EXPECT_EQ(pool->TakeForReforward(t0, 1, 1, 1 << 20).size(), 1u);
  EXPECT_EQ(pool->TakeForReforward(t0, 1, 10, 1 << 20).size(), 1u);
  EXPECT_TRUE(pool->TakeForReforward(clock_.NowNanos(), 2, 10, Tx(1, 1)->size() - 1).empty());
  EXPECT_EQ(pool->TakeForReforward(clock_.NowNanos(), 2, 10, 1 << 20).size(), 3u);
  // Taking marks nothing proposed: they stay ready and selectable.
  EXPECT_EQ(pool->CountReady(100).txs, 3u);
}

TEST_F(TxPoolReadyTest, FetchedTxsAreAdmittedPastTheLimits) {
  TxPoolLimits limits;
  limits.max_txs = 2;
  auto pool = MakePool(limits);
  ASSERT_TRUE(pool->Add(Tx(1, 1), TxOrigin::kForwarded).ok());
  ASSERT_TRUE(pool->Add(Tx(2, 1), TxOrigin::kForwarded).ok());
  ExpectRefused(pool->Add(Tx(3, 1), TxOrigin::kForwarded), absl::StatusCode::kResourceExhausted,
                "pool full");
  // A tx a proposal needs is never refused for space: consensus would stall without it.
  EXPECT_TRUE(pool->Add(Tx(3, 1), TxOrigin::kFetched).ok());
  EXPECT_EQ(pool->stats().txs, 3u);
  // Replays are still refused.
  ExpectRefused(pool->Add(Tx(3, 1), TxOrigin::kFetched), absl::StatusCode::kAlreadyExists,
                "duplicate");
}

}  // namespace
}  // namespace partitions
