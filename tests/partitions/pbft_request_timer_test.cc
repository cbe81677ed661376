// Unit tests for RequestTimer (set and cancel only on change, restart on progress, doubling per
// view left without progress) and TxFetcher (missing txs asked for once per seq per period).
#include "partitions/pbft_request_timer.h"

#include "gtest/gtest.h"
#include "partitions/pbft_tx_fetcher.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using testing::ActionsOf;
using testing::TestPool;
using testing::Tx;

class TimerAndFetcherTest : public ::testing::Test {
 protected:
  PbftConfig config_{.n = 4, .self = 0, .request_timeout_ms = 70};
  ::tests::FakePbftCrypto crypto_{0};
  ::tests::FakeConsensusStore store_;
  PbftOutbox out_{config_, &crypto_, &store_};
};

TEST_F(TimerAndFetcherTest, RequestTimerSetsAndCancelsOnChangeOnly) {
  RequestTimer timer(config_);
  timer.set_pending(3);
  EXPECT_EQ(timer.pending(), 3u);
  timer.Update(true, out_);
  timer.Update(true, out_);
  EXPECT_TRUE(timer.armed());
  timer.Restart(out_);
  timer.Update(false, out_);
  timer.Update(false, out_);
  timer.Cancel(out_);
  timer.Restart(out_);  // not running: nothing
  const std::vector<PbftAction> actions = out_.Take();
  ASSERT_EQ(actions.size(), 3u);
  EXPECT_EQ(std::get<PbftSetTimer>(actions[0]).timer, PbftTimer::kRequest);
  EXPECT_EQ(std::get<PbftSetTimer>(actions[0]).delay_ms, 70);
  EXPECT_EQ(std::get<PbftSetTimer>(actions[1]).delay_ms, 70);
  EXPECT_EQ(std::get<PbftCancelTimer>(actions[2]).timer, PbftTimer::kRequest);
  EXPECT_FALSE(timer.armed());
}

TEST_F(TimerAndFetcherTest, FiredTimerIsNotRunning) {
  RequestTimer timer(config_);
  timer.Update(true, out_);
  timer.Fired();
  EXPECT_FALSE(timer.armed());
  timer.Cancel(out_);
  EXPECT_EQ(ActionsOf<PbftCancelTimer>(out_.Take()).size(), 0u);
}

TEST_F(TimerAndFetcherTest, RequestTimerDoublesPerBackoffUpToTheCapAndResets) {
  config_.max_backoff_shift = 3;
  RequestTimer timer(config_);
  timer.Backoff();
  timer.Update(true, out_);
  for (int i = 0; i < 5; ++i) timer.Backoff();
  timer.Restart(out_);
  timer.ResetBackoff();
  timer.Restart(out_);
  const std::vector<PbftSetTimer> sets = ActionsOf<PbftSetTimer>(out_.Take());
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[0].delay_ms, 140);
  EXPECT_EQ(sets[1].delay_ms, 70 << 3);  // capped
  EXPECT_EQ(sets[2].delay_ms, 70);
}

TEST_F(TimerAndFetcherTest, FetcherAsksOncePerSeqPerPeriod) {
  TestPool pool;
  pool.have.insert(Tx(1));
  TxFetcher fetcher(&pool);
  EXPECT_TRUE(fetcher.HaveAll(1, std::vector<std::string>{Tx(1)}, out_));
  EXPECT_FALSE(fetcher.HaveAll(2, std::vector<std::string>{Tx(1), Tx(2), Tx(3)}, out_));
  EXPECT_FALSE(fetcher.HaveAll(2, std::vector<std::string>{Tx(2)}, out_));  // asked already
  EXPECT_FALSE(fetcher.HaveAll(3, std::vector<std::string>{Tx(2)}, out_));
  auto fetches = ActionsOf<PbftFetchTxs>(out_.Take());
  ASSERT_EQ(fetches.size(), 2u);
  EXPECT_EQ(fetches[0].tx_hashes, (std::vector<std::string>{Tx(2), Tx(3)}));

  fetcher.DropThrough(2);
  EXPECT_FALSE(fetcher.HaveAll(2, std::vector<std::string>{Tx(2)}, out_));  // forgotten
  EXPECT_FALSE(fetcher.HaveAll(3, std::vector<std::string>{Tx(2)}, out_));  // still asked
  EXPECT_EQ(ActionsOf<PbftFetchTxs>(out_.Take()).size(), 1u);
  fetcher.NewPeriod();
  EXPECT_FALSE(fetcher.HaveAll(3, std::vector<std::string>{Tx(2)}, out_));
  EXPECT_EQ(ActionsOf<PbftFetchTxs>(out_.Take()).size(), 1u);
}

}  // namespace
}  // namespace partitions
