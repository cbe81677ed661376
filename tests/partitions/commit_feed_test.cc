// CommitFeed and its subscribers: in-order delivery, commit waiters, the lossless cursor.
#include "partitions/commit_feed.h"

#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flowctl/spill_fifo.h"
#include "gtest/gtest.h"
#include "partitions/commit_waiters.h"
#include "partitions/spill_cursor.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

class Recorder final : public CommitSubscriber {
 public:
  void OnCommit(const CommitEvent& e) override { heights.push_back(e.height); }
  std::vector<uint64_t> heights;
};

CommitEvent Event(uint64_t height, std::vector<TxPtr> txs = {}) {
  CommitEvent e;
  e.height = height;
  for (size_t i = 0; i < txs.size(); ++i) {
    node::chain::Receipt r;
    r.set_error(absl::StrCat("h", height));  // marks which block answered
    e.receipts.push_back(r);
    e.tracked.push_back({});
  }
  e.txs = std::move(txs);
  return e;
}

TEST(CommitFeedTest, DeliversEveryBlockOnceInHeightOrderWhateverThePublishOrder) {
  CommitFeed feed(/*last_height=*/4);
  Recorder a, b;
  feed.Subscribe(&a);
  feed.Subscribe(&b);
  feed.Publish(Event(3));  // committed before this process: ignored
  feed.Publish(Event(6));  // waits for 5
  EXPECT_TRUE(a.heights.empty());
  feed.Publish(Event(5));
  feed.Publish(Event(7));
  EXPECT_EQ(a.heights, (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(b.heights, a.heights);
  EXPECT_EQ(feed.delivered_height(), 7u);
}

TEST(CommitWaitersTest, ABlockAnswersItsTxsWaitersWithTheirReceipts) {
  std::vector<base::PrivateKey> keys = chaintest::Keys(1);
  TxPtr t1 = chaintest::Put(keys[0], 1, "k", "v");
  TxPtr t2 = chaintest::Put(keys[0], 2, "k", "w");
  std::vector<int64_t> wakes;  // what the owner is asked for: a tick by each deadline
  CommitWaiters waiters([&](int64_t deadline) { wakes.push_back(deadline); });
  std::vector<std::string> answers;
  auto record = [&](absl::StatusOr<node::chain::Receipt> r) {
    answers.push_back(r.ok() ? r->error() : r.status().ToString());
  };
  waiters.Add(t1->hash, /*deadline_nanos=*/100, record);
  waiters.Add(t1->hash, 100, record);
  waiters.Add(t2->hash, 50, record);
  EXPECT_EQ(wakes, (std::vector<int64_t>{100, 100, 50}));
  EXPECT_EQ(waiters.size(), 3u);
  waiters.OnCommit(Event(9, {t1}));
  EXPECT_EQ(answers, (std::vector<std::string>{"h9", "h9"}));
  EXPECT_EQ(waiters.Expire(49), 50) << "the earliest deadline still recorded";
  EXPECT_EQ(answers.size(), 2u);
  // t1's records stay until their deadline (answered already: nothing happens then).
  EXPECT_EQ(waiters.Expire(50), 100);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(answers[2], "DEADLINE_EXCEEDED")) << answers[2];
  EXPECT_EQ(waiters.size(), 0u);
  // Answered waiters are not answered again, by a late block or the deadline.
  waiters.OnCommit(Event(10, {t2}));
  EXPECT_EQ(waiters.Expire(1000), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(answers.size(), 3u);
}

// A faulty primary's block can carry a tx twice: refused ahead of its nonce, then committed. The
// waiter gets the commit, as GetReceipt does; a tx only refused gets its first refusal.
TEST(CommitWaitersTest, ATxInABlockTwiceAnswersWithTheInclusionThatConsumedItsNonce) {
  std::vector<base::PrivateKey> keys = chaintest::Keys(1);
  TxPtr t = chaintest::Put(keys[0], 2, "k", "v");
  TxPtr other = chaintest::Put(keys[0], 1, "k", "w");
  TxPtr refused = chaintest::Put(keys[0], 9, "k", "x");
  CommitWaiters waiters;
  std::map<std::string, std::string> answers;
  auto record = [&](const std::string& name) {
    return [&answers, name](absl::StatusOr<node::chain::Receipt> r) {
      answers[name] = r.ok() ? r->error() : r.status().ToString();
    };
  };
  waiters.Add(t->hash, 100, record("t"));
  waiters.Add(refused->hash, 100, record("refused"));
  CommitEvent e = Event(3, {refused, t, other, refused, t});
  using node::chain::Receipt;
  const Receipt::Status status[] = {Receipt::REJECTED, Receipt::REJECTED, Receipt::SUCCESS,
                                    Receipt::REJECTED, Receipt::SUCCESS};
  for (int i = 0; i < 5; ++i) {
    e.receipts[i].set_status(status[i]);
    e.receipts[i].set_error(absl::StrCat("position ", i));
  }
  waiters.OnCommit(e);
  EXPECT_EQ(answers["t"], "position 4");
  EXPECT_EQ(answers["refused"], "position 0");
  EXPECT_EQ(waiters.size(), 0u);
}

// A waiter for a tx pooled again at height 5 after a refusal: the old refusal (Resolve from the
// ledger, or a block at or below 5 that the feed publishes late) does not answer it; a refusal
// above 5 or an inclusion that consumed the nonce does. A waiter without a mark takes any.
TEST(CommitWaitersTest, ARefusalAtOrBelowTheWaitersMarkDoesNotAnswerIt) {
  std::vector<base::PrivateKey> keys = chaintest::Keys(1);
  TxPtr t = chaintest::Put(keys[0], 2, "k", "v");
  CommitWaiters waiters;
  std::vector<std::string> answers;
  auto record = [&](const std::string& name) {
    return [&answers, name](absl::StatusOr<node::chain::Receipt> r) {
      answers.push_back(absl::StrCat(name, ":", r.ok() ? r->error() : r.status().ToString()));
    };
  };
  using node::chain::Receipt;
  auto refusal_at = [&](uint64_t height) {
    CommitEvent e = Event(height, {t});
    e.receipts[0].set_status(Receipt::REJECTED);
    e.receipts[0].set_block_height(height);
    return e;
  };
  waiters.Add(t->hash, 100, record("marked"), /*refusals_above=*/5);
  waiters.Resolve(t->hash, refusal_at(4).receipts[0]);
  waiters.OnCommit(refusal_at(5));
  EXPECT_TRUE(answers.empty());
  EXPECT_EQ(waiters.size(), 1u);
  waiters.Add(t->hash, 100, record("any"));
  waiters.OnCommit(refusal_at(5));
  EXPECT_EQ(answers, std::vector<std::string>{"any:h5"});
  waiters.OnCommit(refusal_at(6));
  EXPECT_EQ(answers, (std::vector<std::string>{"any:h5", "marked:h6"}));
  // An inclusion that consumed the nonce answers whatever its height.
  waiters.Add(t->hash, 100, record("settled"), /*refusals_above=*/9);
  CommitEvent committed = Event(7, {t});
  committed.receipts[0].set_status(Receipt::SUCCESS);
  committed.receipts[0].set_block_height(7);
  waiters.OnCommit(committed);
  EXPECT_EQ(answers.back(), "settled:h7");
  EXPECT_EQ(waiters.size(), 0u);
}

TEST(CommitWaitersTest, ResolveAndCancelAllAnswerEachWaiterOnce) {
  CommitWaiters waiters;
  int ok = 0, cancelled = 0;
  auto record = [&](absl::StatusOr<node::chain::Receipt> r) { (r.ok() ? ok : cancelled)++; };
  waiters.Add("a", 100, record);
  waiters.Add("b", 100, record);
  node::chain::Receipt receipt;
  waiters.Resolve("a", receipt);
  waiters.Resolve("a", receipt);
  waiters.CancelAll(absl::UnavailableError("stopping"));
  waiters.Expire(1000);
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(cancelled, 1);
}

TEST(SpillCursorTest, ThePersistedPositionStopsBelowTheLowestUncommittedRecord) {
  const std::string dir = chaintest::FreshDir("spill_cursor");
  flowctl::SpillFifoOptions o;
  o.dir = dir;
  absl::StatusOr<std::unique_ptr<flowctl::SpillFifo>> fifo = flowctl::SpillFifo::Open(o);
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*fifo)->Append(absl::StrCat("r", i)).ok());
  // The drain consumed 1..4; record 5 is at the front, being offered to the pool.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*fifo)->Front().ok());
    ASSERT_TRUE((*fifo)->Pop().ok());
  }
  SpillCursor cursor(fifo->get(), (*fifo)->stats().persisted_seq);
  auto tx = [](const std::string& hash) {
    auto t = std::make_shared<base::DecodedTx>();
    t->hash = hash;
    return TxPtr(t);
  };
  // Records 1..5 drained (txs a..e); record 2's tx was invalid; d and a commit; c and e are
  // still pooled.
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    cursor.Drained(seq, std::string(1, static_cast<char>('a' + seq - 1)));
  }
  cursor.Done(2, "b");
  cursor.OnCommit(Event(1, {tx("d"), tx("a")}));
  ASSERT_TRUE((*fifo)->PersistReadPosition().ok());
  EXPECT_EQ((*fifo)->stats().persisted_seq, 2u);  // 3 not committed: a restart replays 3..5
  EXPECT_EQ(cursor.pending(), 3u);                // 3, 4 (done, behind 3) and 5
  cursor.Undrained(5, "e");                       // the pool was full: 5 stays at the FIFO's front
  // A client's retry of c was appended again as record 6 and drained while c is pooled: the pool
  // refuses the duplicate, and c's commit still frees record 3.
  cursor.Drained(6, "c");
  cursor.Done(6, "c");
  cursor.OnCommit(Event(2, {tx("c")}));
  ASSERT_TRUE((*fifo)->PersistReadPosition().ok());
  EXPECT_EQ((*fifo)->stats().persisted_seq, 4u);  // everything consumed, all of it committed
  EXPECT_EQ(cursor.pending(), 0u);
  fifo->reset();
  std::filesystem::remove_all(dir);
}

TEST(SpillCursorTest, ATxThePoolDroppedNoLongerHoldsThePosition) {
  const std::string dir = chaintest::FreshDir("spill_cursor_dropped");
  flowctl::SpillFifoOptions o;
  o.dir = dir;
  absl::StatusOr<std::unique_ptr<flowctl::SpillFifo>> fifo = flowctl::SpillFifo::Open(o);
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*fifo)->Append(absl::StrCat("r", i)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*fifo)->Pop().ok());
  SpillCursor cursor(fifo->get(), (*fifo)->stats().persisted_seq);
  cursor.Drained(1, "a");
  cursor.Drained(2, "b");  // parked behind a nonce gap: it expires from the pool
  cursor.Drained(3, "c");
  cursor.OnCommit(Event(1, {}));
  auto tx = std::make_shared<base::DecodedTx>();
  tx->hash = "a";
  cursor.OnCommit(Event(2, {TxPtr(tx)}));
  ASSERT_TRUE((*fifo)->PersistReadPosition().ok());
  EXPECT_EQ((*fifo)->stats().persisted_seq, 1u);  // b holds it
  cursor.Dropped({"b", "unknown"});
  ASSERT_TRUE((*fifo)->PersistReadPosition().ok());
  EXPECT_EQ((*fifo)->stats().persisted_seq, 2u);  // c is still pooled
  EXPECT_EQ(cursor.pending(), 1u);
  fifo->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace partitions
