#include "partitions/ledger.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "rocksdb/env.h"
#include "tests/mocks/faulty_file_system.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

constexpr uint32_t kPartition = 2;

class LedgerTest : public ::testing::Test {
 protected:
  LedgerTest() {
    std::string tmpl = "/tmp/chain_ledger_test_XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
    keys_ = chaintest::Keys(4);
    genesis_ = chaintest::Genesis(keys_, 1000);
  }
  ~LedgerTest() override { std::filesystem::remove_all(dir_); }

  Chain Open() {
    absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", kPartition, genesis_);
    CHECK(chain.ok()) << chain.status();
    return *std::move(chain);
  }
  std::string Addr(int i) const { return keys_[i].public_key().bytes(); }

  std::string dir_;
  std::vector<base::PrivateKey> keys_;
  node::chain::GenesisConfig genesis_;
};

TEST_F(LedgerTest, GenesisOnFirstOpen) {
  Chain chain = Open();
  EXPECT_EQ(chain.ledger->last_height(), 0u);
  absl::StatusOr<node::chain::Block> g = chain.ledger->GetBlock(0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->header().state_root(), chain.executor->state_root());
  absl::StatusOr<node::chain::Account> a = chain.ledger->GetAccount(Addr(0));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->balance(), 1000u);
  EXPECT_EQ(chain.ledger->GetBlock(1).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LedgerTest, CommitQueryAndReopen) {
  std::vector<TxPtr> all;
  std::string root_after;
  {
    Chain chain = Open();
    for (uint64_t h = 1; h <= 5; ++h) {
      std::vector<TxPtr> txs = chaintest::SeededBlockTxs(42, h, *chain.executor, keys_);
      ASSERT_TRUE(chaintest::CommitTxs(chain, txs).ok());
      all.insert(all.end(), txs.begin(), txs.end());
    }
    root_after = chain.executor->state_root();
    EXPECT_EQ(chain.ledger->last_header().state_root(), root_after);
  }
  Chain chain = Open();
  ASSERT_EQ(chain.ledger->last_height(), 5u);
  EXPECT_EQ(chain.executor->state_root(), root_after) << "state reloaded";
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<node::chain::Account> a = chain.ledger->GetAccount(Addr(i));
    ASSERT_TRUE(a.ok());
    node::chain::Account b = chain.executor->GetAccount(Addr(i));
    EXPECT_EQ(a->balance(), b.balance());
    EXPECT_EQ(a->nonce(), b.nonce());
  }
  for (const TxPtr& tx : all) {
    absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(tx->hash);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tx_hash(), tx->hash);
    absl::StatusOr<node::chain::Block> b = chain.ledger->GetBlock(r->block_height());
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->tx_hashes(static_cast<int>(r->tx_index())), tx->hash);
    absl::StatusOr<std::string> body = chain.ledger->GetTx(tx->hash);
    ASSERT_TRUE(body.ok());
    EXPECT_EQ(*body, tx->signed_bytes);
  }
  for (uint64_t h = 1; h <= 5; ++h) {
    auto b = chain.ledger->GetBlock(h);
    auto parent = chain.ledger->GetBlock(h - 1);
    ASSERT_TRUE(b.ok() && parent.ok());
    EXPECT_EQ(b->header().parent_hash(), BlockHash(parent->header()));
  }
  EXPECT_EQ(chain.ledger->GetReceipt(std::string(32, 'n')).status().code(),
            absl::StatusCode::kNotFound);
  // Resumes after the last block.
  ASSERT_TRUE(
      chaintest::CommitTxs(chain, {chaintest::Put(keys_[0], chain.executor->NextNonce(Addr(0)),
                                                  "hello", "world", kPartition)})
          .ok());
  EXPECT_EQ(chain.ledger->last_height(), 6u);
  absl::StatusOr<std::optional<std::string>> v = chain.ledger->GetValue("hello");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or(""), "world");
}

TEST_F(LedgerTest, AFullDiskFailsTheCommitAndAReopenWithSpaceResumesAtTheSameHeight) {
  auto fs = std::make_shared<tests::FaultyFileSystem>();
  std::unique_ptr<rocksdb::Env> env = tests::FaultyFileSystem::NewEnv(fs);
  LedgerOptions options;
  options.env = env.get();
  std::string root_at_2;
  std::string hash_at_2;
  {
    absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", kPartition, genesis_, options);
    ASSERT_TRUE(chain.ok()) << chain.status();
    for (uint64_t h = 1; h <= 2; ++h) {
      ASSERT_TRUE(
          chaintest::CommitTxs(*chain, chaintest::SeededBlockTxs(7, h, *chain->executor, keys_))
              .ok());
    }
    root_at_2 = chain->ledger->last_header().state_root();
    hash_at_2 = BlockHash(chain->ledger->last_header());
    fs->FailWrites(true);
    absl::Status s =
        chaintest::CommitTxs(*chain, chaintest::SeededBlockTxs(7, 3, *chain->executor, keys_));
    // The disk's own words reach the caller, as RESOURCE_EXHAUSTED (the operator frees space).
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "No space left on device")) << s;
    EXPECT_GT(fs->refused(), 0);
    // Nothing of block 3 landed; what is committed stays readable.
    EXPECT_EQ(chain->ledger->last_height(), 2u);
    absl::StatusOr<node::chain::Block> b2 = chain->ledger->GetBlock(2);
    ASSERT_TRUE(b2.ok()) << b2.status();
    EXPECT_EQ(BlockHash(b2->header()), hash_at_2);
    EXPECT_EQ(chain->ledger->GetBlock(3).status().code(), absl::StatusCode::kNotFound);
  }
  // Space again: reopened, the ledger is at block 2 with its state, and block 3 commits.
  fs->FailWrites(false);
  absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", kPartition, genesis_, options);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->ledger->last_height(), 2u);
  EXPECT_EQ(chain->executor->state_root(), root_at_2);
  ASSERT_TRUE(
      chaintest::CommitTxs(*chain, chaintest::SeededBlockTxs(7, 3, *chain->executor, keys_)).ok());
  EXPECT_EQ(chain->ledger->last_height(), 3u);
  EXPECT_EQ(chain->ledger->last_header().parent_hash(), hash_at_2);
}

TEST_F(LedgerTest, RefusesBlocksThatDoNotExtendTheTip) {
  Chain chain = Open();
  TxPtr tx = chaintest::Transfer(keys_[0], 1, Addr(1), 5, kPartition);
  BlockExecution r = chain.executor->Execute(1, {tx});
  const std::string parent = chain.ledger->last_block_hash();

  node::chain::Block skip = chaintest::MakeBlock(kPartition, 2, parent, {tx}, r.state_root);
  absl::Status s = chain.ledger->CommitBlock(skip, r.receipts, r.writes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  node::chain::Block fork =
      chaintest::MakeBlock(kPartition, 1, std::string(32, 'x'), {tx}, r.state_root);
  s = chain.ledger->CommitBlock(fork, r.receipts, r.writes);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "parent_hash")) << s;

  node::chain::Block ok = chaintest::MakeBlock(kPartition, 1, parent, {tx}, r.state_root);
  node::chain::Block bad_count = ok;
  bad_count.mutable_header()->set_tx_count(2);
  EXPECT_EQ(chain.ledger->CommitBlock(bad_count, r.receipts, r.writes).code(),
            absl::StatusCode::kInvalidArgument);
  node::chain::Block bad_root = ok;
  bad_root.mutable_header()->set_tx_root(std::string(32, 'r'));
  EXPECT_EQ(chain.ledger->CommitBlock(bad_root, r.receipts, r.writes).code(),
            absl::StatusCode::kInvalidArgument);
  node::chain::Block other_partition = ok;
  other_partition.mutable_header()->set_partition(kPartition + 1);
  EXPECT_EQ(chain.ledger->CommitBlock(other_partition, r.receipts, r.writes).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chain.ledger->last_height(), 0u) << "refused commits write nothing";
  ASSERT_TRUE(chain.ledger->CommitBlock(ok, r.receipts, r.writes).ok());
  EXPECT_EQ(chain.ledger->last_height(), 1u);
}

TEST_F(LedgerTest, ReplayedTxKeepsItsFirstReceipt) {
  Chain chain = Open();
  TxPtr tx = chaintest::Transfer(keys_[0], 1, Addr(1), 5, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain, {tx}).ok());
  ASSERT_TRUE(chaintest::CommitTxs(chain, {tx}).ok());  // a faulty proposer re-included it
  absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(tx->hash);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(r->block_height(), 1u);
  EXPECT_EQ(chain.executor->GetAccount(Addr(1)).balance(), 1005u);
}

TEST_F(LedgerTest, ConsensusMetaAloneAndWithABlock) {
  {
    Chain chain = Open();
    EXPECT_EQ(chain.ledger->GetConsensusMeta("view").status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(chain.ledger->PutConsensusMeta("view", "7").ok());
    ASSERT_TRUE(chaintest::CommitTxs(chain, {}, {{"checkpoint", "cp-1"}, {"view", "8"}}).ok());
  }
  Chain chain = Open();
  EXPECT_EQ(chain.ledger->GetConsensusMeta("view").value_or(""), "8");
  EXPECT_EQ(chain.ledger->GetConsensusMeta("checkpoint").value_or(""), "cp-1");
  EXPECT_EQ(chain.ledger->last_height(), 1u);
}

TEST_F(LedgerTest, OpenErrorsCarryRocksDbMessage) {
  { Chain chain = Open(); }
  absl::StatusOr<std::unique_ptr<Ledger>> other = Ledger::Open(dir_ + "/ledger", kPartition + 1);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << other.status();
  // A file where the DB directory should be.
  const std::string file = dir_ + "/not_a_dir";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  absl::StatusOr<std::unique_ptr<Ledger>> bad = Ledger::Open(file + "/ledger", kPartition);
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "rocksdb")) << bad.status();
}

TEST_F(LedgerTest, LedgerHeldOpenTwiceIsAnError) {
  Chain chain = Open();
  absl::StatusOr<std::unique_ptr<Ledger>> again = Ledger::Open(dir_ + "/ledger", kPartition);
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(absl::StrContains(again.status().message(), "lock")) << again.status();
}

}  // namespace
}  // namespace partitions
