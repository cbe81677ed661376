// CommitStreamHub and CommitWatcher (runtime/commit_stream.h) over a real ledger, without gRPC:
// the test plays the commit path (ledger write, the header hook, the feed's OnCommit) and the
// stream (Next until it waits, counting wakes), so every interleaving below is chosen, not timed.
#include "runtime/commit_stream.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "partitions/ledger.h"
#include "proto/client.pb.h"
#include "tests/partitions/chain_test_util.h"

namespace runtime {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kPartition = 7;

// A stream as the test drives it: Next() until kWait or kEnd; wakes are only counted.
struct TestStream {
  std::shared_ptr<CommitWatcher> watcher;
  std::shared_ptr<std::atomic<int>> wakes = std::make_shared<std::atomic<int>>(0);
  std::vector<node::client::WatchCommitsResponse> got;
  std::vector<std::string> raw;  // the encodings, as written
  std::optional<absl::Status> end;

  // Takes up to `max` steps; returns the kind of the last one.
  CommitWatcher::Step::Kind Drain(int max = 1 << 20) {
    for (int i = 0; i < max; ++i) {
      CommitWatcher::Step step = watcher->Next();
      if (step.kind == CommitWatcher::Step::kEnd) {
        end = step.end;
        return step.kind;
      }
      if (step.kind == CommitWatcher::Step::kWait) return step.kind;
      node::client::WatchCommitsResponse m;
      EXPECT_TRUE(m.ParseFromString(*step.message));
      EXPECT_EQ(m.height(), step.height);
      got.push_back(m);
      raw.push_back(*step.message);
    }
    return CommitWatcher::Step::kWrite;
  }
  std::vector<uint64_t> Heights() const {
    std::vector<uint64_t> h;
    for (const auto& m : got) h.push_back(m.height());
    return h;
  }
};

class CommitStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { Open({}); }
  void TearDown() override {
    if (hub_) hub_->Close(absl::UnavailableError("test over"));
  }

  void Open(CommitStreamLimits limits, const partitions::LedgerOptions& ledger = {}) {
    if (hub_) hub_->Close(absl::UnavailableError("reopened"));
    hub_.reset();
    chain_ = partitions::Chain();
    keys_ = chaintest::Keys(2);
    absl::StatusOr<partitions::Chain> chain =
        partitions::OpenChain(chaintest::FreshDir("commit_stream_test"), kPartition,
                              chaintest::Genesis(keys_, 1'000'000), ledger);
    ASSERT_TRUE(chain.ok()) << chain.status();
    chain_ = *std::move(chain);
    hub_ = std::make_shared<CommitStreamHub>("p7", chain_.ledger.get(), limits);
  }

  // Writes a block of `n` puts (values of `value_bytes`) to the ledger as the commit pipeline
  // does, runs the consensus-lock hook (unless `note_header` is false) and returns the event the
  // feed would deliver; Deliver hands it to the hub.
  partitions::CommitEvent CommitToLedger(int n, size_t value_bytes = 8, bool note_header = true) {
    const uint64_t height = chain_.ledger->last_height() + 1;
    std::vector<partitions::TxPtr> txs;
    for (int i = 0; i < n; ++i) {
      const base::PrivateKey& key = keys_[static_cast<size_t>(i) % keys_.size()];
      const uint64_t nonce = *chain_.executor->NextNonce(key.public_key().bytes()) +
                             static_cast<uint64_t>(i) / keys_.size();
      txs.push_back(chaintest::Put(key, nonce, absl::StrCat("k", height, "_", i),
                                   std::string(value_bytes, 'v'), kPartition));
    }
    partitions::BlockExecution r = *chain_.executor->Execute(height, txs);
    node::chain::Block block = chaintest::MakeBlock(
        kPartition, height, chain_.ledger->last_block_hash(), txs, r.state_root);
    absl::Status s = chain_.ledger->CommitBlock(block, r.receipts, r.delta);
    EXPECT_TRUE(s.ok()) << s;
    chain_.executor->Apply(r);
    if (note_header && hub_->has_live_watchers()) {
      hub_->NoteCommittedHeader(chain_.ledger->last_header());
    }
    partitions::CommitEvent e;
    e.height = height;
    e.block_hash = partitions::BlockHash(block.header());
    e.txs = txs;
    e.receipts.assign(r.receipts.begin(), r.receipts.end());
    return e;
  }
  void Deliver(const partitions::CommitEvent& e) { hub_->OnCommit(e); }
  void Commit(int n = 2) { Deliver(CommitToLedger(n)); }

  TestStream Watch(CommitWatcher::Options options) {
    TestStream s;
    absl::StatusOr<std::shared_ptr<CommitWatcher>> w =
        hub_->Watch(options, [wakes = s.wakes] { ++*wakes; });
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) s.watcher = *std::move(w);
    return s;
  }

  std::vector<base::PrivateKey> keys_;
  partitions::Chain chain_;
  std::shared_ptr<CommitStreamHub> hub_;
};

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t h = from; h <= to; ++h) out.push_back(h);
  return out;
}

TEST_F(CommitStreamTest, HistoryThenLiveGivesEveryHeightOnce) {
  for (int i = 0; i < 5; ++i) Commit();
  TestStream s = Watch({.from_height = 2});
  // Part of the history, then blocks commit while the watcher still reads from the ledger.
  ASSERT_EQ(s.Drain(2), CommitWatcher::Step::kWrite);
  Commit();
  Commit();
  EXPECT_EQ(*s.wakes, 0);  // not live yet: nothing buffered for it
  EXPECT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(s.Heights(), Range(2, 7));
  // Live from here: each block wakes the waiting stream once.
  Commit();
  EXPECT_EQ(*s.wakes, 1);
  Commit();
  EXPECT_EQ(*s.wakes, 1);  // the stream has not asked again: no second wake
  EXPECT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(s.Heights(), Range(2, 9));
  EXPECT_EQ(s.watcher->resume_height(), 10u);
  for (const auto& m : s.got) {
    absl::StatusOr<node::chain::Block> stored = chain_.ledger->GetBlock(m.height());
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(m.block_hash(), partitions::BlockHash(stored->header()));
    EXPECT_EQ(m.block().header().SerializeAsString(), stored->header().SerializeAsString());
    EXPECT_EQ(m.block().tx_hashes_size(), 2);
    EXPECT_EQ(m.block().txs_size(), 0);  // not asked
    EXPECT_EQ(m.receipts_size(), 0);     // not asked
  }
}

// A live block and the same block read from the ledger are the same message, byte for byte: the
// header the hook noted, the event's bodies and receipts equal what the ledger stores.
TEST_F(CommitStreamTest, LiveAndHistoryEncodeTheSameMessage) {
  const CommitWatcher::Options all = {
      .from_height = 0, .include_txs = true, .include_receipts = true};
  TestStream live = Watch(all);
  ASSERT_EQ(live.Drain(), CommitWatcher::Step::kWait);
  Commit(3);
  Deliver(CommitToLedger(2, 8, /*note_header=*/false));  // the hub reads this header itself
  ASSERT_EQ(live.Drain(), CommitWatcher::Step::kWait);
  ASSERT_EQ(live.Heights(), Range(1, 2));

  CommitWatcher::Options from_one = all;
  from_one.from_height = 1;
  TestStream history = Watch(from_one);
  ASSERT_EQ(history.Drain(), CommitWatcher::Step::kWait);
  ASSERT_EQ(history.Heights(), Range(1, 2));
  EXPECT_EQ(live.raw, history.raw);
  const node::client::WatchCommitsResponse& m = live.got[0];
  ASSERT_EQ(m.receipts_size(), 3);
  ASSERT_EQ(m.block().txs_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(m.receipts(i).status(), node::chain::Receipt::SUCCESS);
    EXPECT_EQ(m.receipts(i).tx_hash(), m.block().tx_hashes(i));
    EXPECT_EQ(m.receipts(i).block_height(), 1u);
  }
}

TEST_F(CommitStreamTest, FromZeroStartsAtTheNextBlock) {
  Commit();
  Commit();
  TestStream s = Watch({.from_height = 0});
  EXPECT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  EXPECT_TRUE(s.got.empty());
  Commit();
  EXPECT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(s.Heights(), Range(3, 3));
}

// The ledger may hold a block the feed has not delivered yet: a watcher asking for it (the tip
// + 1 of the hub) gets it through the feed, and one asking for the block after it skips it.
TEST_F(CommitStreamTest, LedgerAheadOfTheFeed) {
  Commit();
  const partitions::CommitEvent pending = CommitToLedger(1);  // height 2, not delivered
  TestStream two = Watch({.from_height = 2});
  TestStream three = Watch({.from_height = 3});
  EXPECT_EQ(hub_->Watch({.from_height = 4}, [] {}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(two.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(three.Drain(), CommitWatcher::Step::kWait);
  Deliver(pending);
  Commit();
  EXPECT_EQ(two.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(three.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(two.Heights(), Range(2, 3));
  EXPECT_EQ(three.Heights(), Range(3, 3));
}

TEST_F(CommitStreamTest, FromBeyondTheTipIsOutOfRange) {
  Commit();
  absl::StatusOr<std::shared_ptr<CommitWatcher>> w = hub_->Watch({.from_height = 3}, [] {});
  ASSERT_EQ(w.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(w.status().message(), HasSubstr("from_height 3 is beyond the tip of partition p7"));
  EXPECT_TRUE(hub_->Watch({.from_height = 2}, [] {}).ok());  // tip + 1
}

TEST_F(CommitStreamTest, BelowThePrunedHeightIsOutOfRange) {
  Open({}, {.retain_blocks = 4, .prune_step = 1});
  for (int i = 0; i < 10; ++i) Commit();
  ASSERT_EQ(chain_.ledger->earliest_height(), 7u);  // keeps 7..10
  absl::StatusOr<std::shared_ptr<CommitWatcher>> w = hub_->Watch({.from_height = 6}, [] {});
  ASSERT_EQ(w.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(w.status().message(), HasSubstr("below the earliest block partition p7 keeps (7"));
  TestStream kept = Watch({.from_height = 7});
  EXPECT_EQ(kept.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(kept.Heights(), Range(7, 10));

  // A catch-up that pruning overtakes ends OUT_OF_RANGE, saying where to resume.
  TestStream slow = Watch({.from_height = 8});
  for (int i = 0; i < 4; ++i) Commit();  // keeps 11..14
  EXPECT_EQ(slow.Drain(), CommitWatcher::Step::kEnd);
  ASSERT_TRUE(slow.end.has_value());
  EXPECT_EQ(slow.end->code(), absl::StatusCode::kOutOfRange) << *slow.end;
  EXPECT_THAT(std::string(slow.end->message()), HasSubstr("pruned"));
}

TEST_F(CommitStreamTest, SlowWatcherIsCutWithTheHeightToResumeFrom) {
  Open({.max_watchers = 8, .max_buffered_blocks = 3, .max_buffered_bytes = 1 << 20});
  TestStream slow = Watch({.from_height = 0});
  TestStream fast = Watch({.from_height = 0});
  ASSERT_EQ(slow.Drain(), CommitWatcher::Step::kWait);
  ASSERT_EQ(fast.Drain(), CommitWatcher::Step::kWait);
  // `fast` reads each block as it comes.
  auto commit = [&] {
    Commit();
    EXPECT_EQ(fast.Drain(), CommitWatcher::Step::kWait);
  };
  commit();
  ASSERT_EQ(slow.Drain(1), CommitWatcher::Step::kWrite);  // height 1 "in flight", never done
  for (int i = 0; i < 3; ++i) commit();                   // heights 2..4 fill its buffer
  EXPECT_EQ(hub_->stats().cut_slow, 0u);
  commit();  // height 5: one too many
  EXPECT_EQ(hub_->stats().cut_slow, 1u);
  EXPECT_EQ(slow.Drain(), CommitWatcher::Step::kEnd);
  EXPECT_EQ(slow.end->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(slow.end->message(), HasSubstr("too slowly"));
  EXPECT_THAT(slow.end->message(), HasSubstr("watch.max_buffered_blocks 3"));
  EXPECT_THAT(slow.end->message(), HasSubstr("resume from height 2"));
  EXPECT_EQ(slow.watcher->resume_height(), 2u);
  EXPECT_EQ(slow.Heights(), Range(1, 1));
  // The other watcher and the commits go on; the cut one resumes from the ledger.
  commit();
  EXPECT_EQ(fast.Heights(), Range(1, 6));
  slow.watcher->Close();
  TestStream resumed = Watch({.from_height = 2});
  EXPECT_EQ(resumed.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(resumed.Heights(), Range(2, 6));
}

TEST_F(CommitStreamTest, BufferedBytesCountWhatTheBlocksPinInMemory) {
  Open({.max_watchers = 8, .max_buffered_blocks = 1000, .max_buffered_bytes = 64 << 10});
  {
    // Nobody wants bodies: blocks are held without them, and hashes only stay far below 64 KiB.
    TestStream headers = Watch({.from_height = 0});
    ASSERT_EQ(headers.Drain(), CommitWatcher::Step::kWait);
    for (int i = 0; i < 4; ++i) Deliver(CommitToLedger(2, 10 << 10));
    EXPECT_EQ(headers.Drain(), CommitWatcher::Step::kWait);
    EXPECT_EQ(headers.Heights(), Range(1, 4));
    headers.watcher->Close();
  }
  // One watcher wants bodies, so the blocks hold them (~20 KiB each, and an encoding): a slow
  // headers-only watcher pins them too, and is cut like the other rather than holding them past
  // its limit.
  TestStream bodies = Watch({.from_height = 0, .include_txs = true});
  TestStream headers = Watch({.from_height = 0});
  ASSERT_EQ(bodies.Drain(), CommitWatcher::Step::kWait);
  ASSERT_EQ(headers.Drain(), CommitWatcher::Step::kWait);
  for (int i = 0; i < 4; ++i) Deliver(CommitToLedger(2, 10 << 10));
  for (TestStream* s : {&bodies, &headers}) {
    EXPECT_EQ(s->Drain(), CommitWatcher::Step::kEnd);
    EXPECT_EQ(s->end->code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(s->end->message(), HasSubstr("resume from height 5"));
  }
}

TEST_F(CommitStreamTest, OneBlockLargerThanTheByteLimitStillGoesAlone) {
  Open({.max_watchers = 8, .max_buffered_blocks = 1000, .max_buffered_bytes = 64 << 10});
  TestStream s = Watch({.from_height = 0, .include_txs = true});
  ASSERT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  Deliver(CommitToLedger(4, 30 << 10));  // ~120 KiB
  EXPECT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  EXPECT_EQ(s.Heights(), Range(1, 1));
  EXPECT_EQ(hub_->stats().cut_slow, 0u);
}

TEST_F(CommitStreamTest, WatcherLimitCountsOpenStreamsUntilClosed) {
  Open({.max_watchers = 2, .max_buffered_blocks = 8, .max_buffered_bytes = 1 << 20});
  TestStream a = Watch({});
  TestStream b = Watch({});
  absl::StatusOr<std::shared_ptr<CommitWatcher>> third = hub_->Watch({}, [] {});
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("watch.max_watchers"));
  EXPECT_EQ(hub_->stats().watchers, 2u);
  // An ended stream keeps its slot until its stream is done with it (Close).
  a.watcher->End(absl::CancelledError("gone"));
  EXPECT_FALSE(hub_->Watch({}, [] {}).ok());
  a.watcher->Close();
  EXPECT_EQ(hub_->stats().watchers, 1u);
  EXPECT_TRUE(hub_->Watch({}, [] {}).ok());  // and the returned watcher, dropped, frees it
  EXPECT_EQ(hub_->stats().watchers, 1u);
}

TEST_F(CommitStreamTest, EndWakesAWaitingStreamOnceAndCloseStopsWakes) {
  Commit();
  TestStream s = Watch({});
  ASSERT_EQ(s.Drain(), CommitWatcher::Step::kWait);
  s.watcher->End(absl::UnavailableError("server shutting down"));
  EXPECT_EQ(*s.wakes, 1);
  s.watcher->End(absl::CancelledError("again"));  // the first end stays
  EXPECT_EQ(*s.wakes, 1);
  ASSERT_EQ(s.Drain(), CommitWatcher::Step::kEnd);
  EXPECT_EQ(s.end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.end->message(), "server shutting down; resume from height 2");

  TestStream t = Watch({});
  ASSERT_EQ(t.Drain(), CommitWatcher::Step::kWait);
  t.watcher->Close();
  Commit();
  t.watcher->End(absl::CancelledError("late"));
  EXPECT_EQ(*t.wakes, 0);
}

TEST_F(CommitStreamTest, CloseEndsEveryWatcherAndRefusesNewOnes) {
  for (int i = 0; i < 3; ++i) Commit();
  TestStream live = Watch({});
  TestStream catching_up = Watch({.from_height = 1});
  ASSERT_EQ(live.Drain(), CommitWatcher::Step::kWait);
  ASSERT_EQ(catching_up.Drain(1), CommitWatcher::Step::kWrite);
  hub_->Close(absl::UnavailableError("partition p7 is shutting down"));
  EXPECT_EQ(*live.wakes, 1);
  EXPECT_EQ(live.Drain(), CommitWatcher::Step::kEnd);
  EXPECT_EQ(catching_up.Drain(), CommitWatcher::Step::kEnd);
  EXPECT_EQ(catching_up.end->message(), "partition p7 is shutting down; resume from height 2");
  EXPECT_EQ(hub_->Watch({}, [] {}).status().code(), absl::StatusCode::kUnavailable);
  // The hub no longer reads the ledger, nor hands out blocks.
  Commit();
  EXPECT_EQ(live.Heights(), std::vector<uint64_t>{});
}

}  // namespace
}  // namespace runtime
