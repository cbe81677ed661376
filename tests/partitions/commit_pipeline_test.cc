// CommitPipeline as the replica's tx source under pruning: a replayed tx counts as present for a
// batch only while its block will still be kept when that batch executes.
#include "partitions/commit_pipeline.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "partitions/tx_tracker.h"
#include "tests/mocks/fake_clock.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

constexpr uint32_t kPartition = 3;

class CommitPipelineTest : public ::testing::Test {
 protected:
  void Open(uint64_t retain_blocks) {
    keys_ = chaintest::Keys(2);
    LedgerOptions options;
    options.retain_blocks = retain_blocks;
    options.prune_step = 1;
    absl::StatusOr<Chain> chain =
        OpenChain(chaintest::FreshDir(absl::StrCat("commit_pipeline_", retain_blocks)), kPartition,
                  chaintest::Genesis(keys_, 1000), options);
    ASSERT_TRUE(chain.ok()) << chain.status();
    chain_ = *std::move(chain);
    pool_ = chaintest::PoolOver(chain_, &clock_);
    pipeline_ = std::make_unique<CommitPipeline>(CommitPipeline::Deps{.partition = kPartition,
                                                                      .chain = &chain_,
                                                                      .pool = pool_.get(),
                                                                      .tracker = &tracker_,
                                                                      .tx_limits = {},
                                                                      .clock = &clock_});
  }
  // Commits one block of one transfer by key 0; returns its tx.
  TxPtr CommitOne() {
    TxPtr tx =
        chaintest::Transfer(keys_[0], *chain_.executor->NextNonce(keys_[0].public_key().bytes()),
                            keys_[1].public_key().bytes(), 1, kPartition);
    EXPECT_TRUE(chaintest::CommitTxs(chain_, {tx}).ok());
    return tx;
  }

  tests::FakeClock clock_{1'000'000'000};
  TxTracker tracker_{TxTrackerPolicy{}};
  std::vector<base::PrivateKey> keys_;
  Chain chain_;
  std::unique_ptr<TxPool> pool_;
  std::unique_ptr<CommitPipeline> pipeline_;
};

TEST_F(CommitPipelineTest, AReplayCountsOnlyWhileItsBlockOutlivesTheBatch) {
  Open(/*retain_blocks=*/10);
  const TxPtr old = CommitOne();            // block 1
  for (int i = 0; i < 3; ++i) CommitOne();  // blocks 2..4
  // Committing seq s - 1 prunes below s - 10: block 1 is kept while seqs up to 11 execute.
  EXPECT_TRUE(pipeline_->HasTx(old->hash, 11));
  EXPECT_FALSE(pipeline_->HasTx(old->hash, 12));
  EXPECT_TRUE(pipeline_->KnowsTx(old->hash)) << "still indexed: no second signature check";
  // And that is exactly when pruning takes it: after committing seq 11, GetTx fails.
  for (int i = 0; i < 6; ++i) CommitOne();  // blocks 5..10
  EXPECT_TRUE(chain_.ledger->GetTx(old->hash).ok());
  CommitOne();  // block 11: keeps 2..11
  EXPECT_EQ(chain_.ledger->GetTx(old->hash).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(pipeline_->HasTx(old->hash, 12));

  // A pooled tx is present whatever the batch; an unknown one never.
  TxPtr pooled = chaintest::Transfer(keys_[1], 1, keys_[0].public_key().bytes(), 1, kPartition);
  ASSERT_TRUE(pool_->Add(pooled, TxOrigin::kClient).ok());
  EXPECT_TRUE(pipeline_->HasTx(pooled->hash, 1'000'000));
  EXPECT_FALSE(pipeline_->HasTx(std::string(32, 'z'), 1));
}

// A tx refused for a nonce gap (a view change can put it in a block before its predecessor) is not
// settled: forwarded again once its nonce is next, it must be verified and pooled, or no replica
// but the one its client reached would ever propose it. Once its nonce is consumed it is known.
TEST_F(CommitPipelineTest, ATxOnlyRefusedSoFarIsNotKnownAndCanBePooledAgain) {
  Open(/*retain_blocks=*/0);
  TxPtr second = chaintest::Transfer(keys_[0], 2, keys_[1].public_key().bytes(), 1, kPartition);
  TxPtr first = chaintest::Transfer(keys_[0], 1, keys_[1].public_key().bytes(), 1, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain_, {second}).ok());
  absl::StatusOr<node::chain::Receipt> r = chain_.ledger->GetReceipt(second->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->status(), node::chain::Receipt::REJECTED);
  EXPECT_FALSE(pipeline_->KnowsTx(second->hash));
  EXPECT_TRUE(pipeline_->HasTx(second->hash, 2)) << "its body is still in the ledger";

  ASSERT_TRUE(chaintest::CommitTxs(chain_, {first}).ok());
  EXPECT_TRUE(pipeline_->KnowsTx(first->hash));
  ASSERT_TRUE(pool_->Add(second, TxOrigin::kForwarded).ok());
  EXPECT_TRUE(pipeline_->KnowsTx(second->hash));
  ASSERT_TRUE(chaintest::CommitTxs(chain_, {second}).ok());
  pool_->RemoveCommitted({second});
  r = chain_.ledger->GetReceipt(second->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(pool_->Get(second->hash), nullptr);
  EXPECT_TRUE(pipeline_->KnowsTx(second->hash));
}

TEST_F(CommitPipelineTest, WithoutPruningAReplayIsAlwaysPresent) {
  Open(/*retain_blocks=*/0);
  const TxPtr old = CommitOne();
  EXPECT_TRUE(pipeline_->HasTx(old->hash, 1'000'000));
}

}  // namespace
}  // namespace partitions
