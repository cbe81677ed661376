#include "partitions/ledger.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "partitions/commit_pipeline.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "tests/mocks/faulty_file_system.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

using ::testing::HasSubstr;

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

  Chain Open(const LedgerOptions& options = {}) {
    absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", kPartition, genesis_, options);
    CHECK(chain.ok()) << chain.status();
    return *std::move(chain);
  }
  std::string Addr(int i) const { return keys_[i].public_key().bytes(); }

  std::string dir_;
  std::vector<base::PrivateKey> keys_;
  node::chain::GenesisConfig genesis_;
};

// Writes `key` = `value` straight into the ledger's RocksDB, behind the ledger's back (a disk that
// changed a record, an operator's mistake). The ledger must be closed.
void TamperWithLedger(const std::string& path, const std::string& key,
                      const std::optional<std::string>& value) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  if (value.has_value()) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, *value).ok());
  } else {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
  }
}

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
    node::chain::Account b = *chain.executor->GetAccount(Addr(i));
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
      chaintest::CommitTxs(chain, {chaintest::Put(keys_[0], *chain.executor->NextNonce(Addr(0)),
                                                  "hello", "world", kPartition)})
          .ok());
  EXPECT_EQ(chain.ledger->last_height(), 6u);
  absl::StatusOr<std::optional<std::string>> v = chain.ledger->GetValue("hello");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or(""), "world");
}

// GetTxs answers what GetTx answers, for many txs of many blocks in one call (each block read
// once, its txs found in its encoding), and GetTxHeight what GetReceipt's block_height says.
TEST_F(LedgerTest, GetTxsAndGetTxHeightAgreeWithGetTxAndTheReceipts) {
  std::vector<TxPtr> all;
  Chain chain = Open();
  for (uint64_t h = 1; h <= 6; ++h) {
    std::vector<TxPtr> txs = chaintest::SeededBlockTxs(7, h, *chain.executor, keys_);
    ASSERT_TRUE(chaintest::CommitTxs(chain, txs).ok());
    all.insert(all.end(), txs.begin(), txs.end());
  }
  ASSERT_GT(all.size(), 6u) << "blocks of several txs each";
  // Every other tx, backwards (blocks out of order), with unknown hashes in between.
  std::vector<std::string> asked;
  std::vector<std::optional<std::string>> expected;
  for (size_t i = all.size(); i-- > 0;) {
    if (i % 2 == 1) continue;
    asked.push_back(all[i]->hash);
    expected.push_back(all[i]->signed_bytes);
    asked.push_back(std::string(32, static_cast<char>('a' + i % 26)));
    expected.push_back(std::nullopt);
  }
  absl::StatusOr<std::vector<std::optional<std::string>>> got = chain.ledger->GetTxs(asked);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, expected);
  EXPECT_TRUE(chain.ledger->GetTxs({}).value().empty());
  for (const TxPtr& tx : all) {
    absl::StatusOr<std::optional<uint64_t>> height = chain.ledger->GetTxHeight(tx->hash);
    ASSERT_TRUE(height.ok()) << height.status();
    ASSERT_TRUE(height->has_value());
    EXPECT_EQ(**height, chain.ledger->GetReceipt(tx->hash)->block_height());
  }
  absl::StatusOr<std::optional<uint64_t>> none = chain.ledger->GetTxHeight(std::string(32, 'n'));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// A block whose encoding is cut short is DATA_LOSS for GetTx and GetTxs, never a wrong tx.
TEST_F(LedgerTest, GetTxOfAMalformedBlockIsDataLoss) {
  TxPtr tx;
  std::string block_bytes;
  {
    Chain chain = Open();
    std::vector<TxPtr> txs = chaintest::SeededBlockTxs(9, 1, *chain.executor, keys_);
    ASSERT_TRUE(chaintest::CommitTxs(chain, txs).ok());
    tx = txs.back();
    block_bytes = chain.ledger->GetBlock(1)->SerializeAsString();
    // Block 1 is not the last (the last one is checked when the ledger opens).
    ASSERT_TRUE(
        chaintest::CommitTxs(chain, chaintest::SeededBlockTxs(9, 2, *chain.executor, keys_)).ok());
  }
  std::string key(1, 'b');
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((1ull >> (8 * i)) & 0xff));
  TamperWithLedger(dir_ + "/ledger", key, block_bytes.substr(0, block_bytes.size() - 3));
  Chain chain = Open();
  EXPECT_EQ(chain.ledger->GetTx(tx->hash).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(chain.ledger->GetTxs({tx->hash}).status().code(), absl::StatusCode::kDataLoss);
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
  BlockExecution r = *chain.executor->Execute(1, {tx});
  const std::string parent = chain.ledger->last_block_hash();

  node::chain::Block skip = chaintest::MakeBlock(kPartition, 2, parent, {tx}, r.state_root);
  absl::Status s = chain.ledger->CommitBlock(skip, r.receipts, r.delta);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  node::chain::Block fork =
      chaintest::MakeBlock(kPartition, 1, std::string(32, 'x'), {tx}, r.state_root);
  s = chain.ledger->CommitBlock(fork, r.receipts, r.delta);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "parent_hash")) << s;

  node::chain::Block ok = chaintest::MakeBlock(kPartition, 1, parent, {tx}, r.state_root);
  node::chain::Block bad_count = ok;
  bad_count.mutable_header()->set_tx_count(2);
  EXPECT_EQ(chain.ledger->CommitBlock(bad_count, r.receipts, r.delta).code(),
            absl::StatusCode::kInvalidArgument);
  node::chain::Block bad_root = ok;
  bad_root.mutable_header()->set_tx_root(std::string(32, 'r'));
  EXPECT_EQ(chain.ledger->CommitBlock(bad_root, r.receipts, r.delta).code(),
            absl::StatusCode::kInvalidArgument);
  node::chain::Block other_partition = ok;
  other_partition.mutable_header()->set_partition(kPartition + 1);
  EXPECT_EQ(chain.ledger->CommitBlock(other_partition, r.receipts, r.delta).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chain.ledger->last_height(), 0u) << "refused commits write nothing";
  ASSERT_TRUE(chain.ledger->CommitBlock(ok, r.receipts, r.delta).ok());
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
  EXPECT_EQ(chain.executor->GetAccount(Addr(1))->balance(), 1005u);
  // By position, each inclusion has its own receipt.
  absl::StatusOr<std::vector<node::chain::Receipt>> first = chain.ledger->GetBlockReceipts(1);
  absl::StatusOr<std::vector<node::chain::Receipt>> second = chain.ledger->GetBlockReceipts(2);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->size(), 1u);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*first)[0].status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ((*second)[0].status(), node::chain::Receipt::REJECTED);
  EXPECT_EQ((*second)[0].block_height(), 2u);
  EXPECT_EQ(chain.ledger->GetBlockReceipts(0)->size(), 0u);
  EXPECT_EQ(chain.ledger->GetBlockReceipts(3).status().code(), absl::StatusCode::kNotFound);
}

// A tx refused once (a faulty proposer included it ahead of its nonce) and committed later: its
// receipt is the inclusion that consumed its nonce, not the refusal.
TEST_F(LedgerTest, TxIndexPointsAtTheInclusionThatConsumedTheNonce) {
  Chain chain = Open();
  TxPtr second = chaintest::Transfer(keys_[0], 2, Addr(1), 5, kPartition);
  TxPtr first = chaintest::Transfer(keys_[0], 1, Addr(1), 5, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain, {second}).ok());  // nonce gap: REJECTED
  absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(second->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::REJECTED);
  // Refused again in the same block before its nonce comes, then committed.
  ASSERT_TRUE(chaintest::CommitTxs(chain, {second, first, second}).ok());
  r = chain.ledger->GetReceipt(second->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(r->block_height(), 2u);
  EXPECT_EQ(r->tx_index(), 2u);
  // A replay after that is refused and keeps the committed receipt.
  ASSERT_TRUE(chaintest::CommitTxs(chain, {second}).ok());
  r = chain.ledger->GetReceipt(second->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(r->block_height(), 2u);
  EXPECT_EQ(chain.executor->GetAccount(Addr(1))->balance(), 1010u);
  // In one block with nothing indexed before: refused, committed, refused. The index key is put
  // twice in one batch and the commit's put must win.
  TxPtr fourth = chaintest::Transfer(keys_[1], 2, Addr(2), 5, kPartition);
  TxPtr third = chaintest::Transfer(keys_[1], 1, Addr(2), 5, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain, {fourth, third, fourth, fourth}).ok());
  r = chain.ledger->GetReceipt(fourth->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(r->block_height(), 4u);
  EXPECT_EQ(r->tx_index(), 2u);
  // Committed first, then replayed in the same block: the commit stays.
  TxPtr fifth = chaintest::Transfer(keys_[1], 3, Addr(2), 5, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain, {fifth, fifth}).ok());
  r = chain.ledger->GetReceipt(fifth->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(r->tx_index(), 0u);
}

// A tx refused twice (a nonce gap each time) answers with its latest refusal: that is the one a
// client that submitted it again waits for. An inclusion that consumed the nonce still wins.
TEST_F(LedgerTest, TxIndexPointsAtTheLatestRefusalUntilTheNonceIsConsumed) {
  TxPtr third = chaintest::Transfer(keys_[0], 3, Addr(1), 5, kPartition);
  TxPtr first = chaintest::Transfer(keys_[0], 1, Addr(1), 5, kPartition);
  TxPtr second = chaintest::Transfer(keys_[0], 2, Addr(1), 5, kPartition);
  TxPtr far = chaintest::Transfer(keys_[1], 9, Addr(1), 5, kPartition);  // never next here
  {
    Chain chain = Open();
    ASSERT_TRUE(chaintest::CommitTxs(chain, {third, far}).ok());    // 1: gaps, REJECTED
    ASSERT_TRUE(chaintest::CommitTxs(chain, {first, third}).ok());  // 2: still a gap
    absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(third->hash);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status(), node::chain::Receipt::REJECTED);
    EXPECT_EQ(r->block_height(), 2u);
    EXPECT_EQ(r->tx_index(), 1u);
    ASSERT_TRUE(chaintest::CommitTxs(chain, {second, third}).ok());  // 3: committed
    ASSERT_TRUE(chaintest::CommitTxs(chain, {third}).ok());          // 4: a replay, REJECTED
    r = chain.ledger->GetReceipt(third->hash);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
    EXPECT_EQ(r->block_height(), 3u);
    EXPECT_EQ(r->tx_index(), 1u);
    ASSERT_TRUE(chaintest::CommitTxs(chain, {far}).ok());  // 5: refused again
  }
  // And after a reopen (the index is on disk, not in memory).
  Chain chain = Open();
  absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(third->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->block_height(), 3u);
  r = chain.ledger->GetReceipt(far->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::REJECTED);
  EXPECT_EQ(r->block_height(), 5u);
}

// A refusal indexed in a block that pruning dropped gives way to a refusal in a kept block: the
// index does not stay pointed at a receipt that is gone.
TEST_F(LedgerTest, ARefusalInAKeptBlockReplacesTheIndexEntryOfAPrunedOne) {
  LedgerOptions options;
  options.retain_blocks = 4;
  options.prune_step = 1;
  Chain chain = Open(options);
  TxPtr far = chaintest::Transfer(keys_[1], 9, Addr(1), 5, kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain, {far}).ok());  // 1: REJECTED
  for (int i = 0; i < 6; ++i) {
    TxPtr put = chaintest::Put(keys_[0], *chain.executor->NextNonce(Addr(0)), "k", "v", kPartition);
    ASSERT_TRUE(chaintest::CommitTxs(chain, {put}).ok());  // 2..7
  }
  ASSERT_GT(chain.ledger->pruned_below(), 1u);
  EXPECT_FALSE(chain.ledger->GetReceipt(far->hash).ok());  // pruned (or already forgotten)
  ASSERT_TRUE(chaintest::CommitTxs(chain, {far}).ok());    // 8: refused again
  absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(far->hash);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status(), node::chain::Receipt::REJECTED);
  EXPECT_EQ(r->block_height(), 8u);
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

// A commit puts its records in key order (SortedPuts), not in the order they are produced:
// every record must still land, and a consensus meta key given twice keeps its last value.
TEST_F(LedgerTest, RecordsWrittenInKeyOrderReadBack) {
  std::vector<TxPtr> txs;
  // Keys of different lengths, produced in descending order; one key written twice.
  for (int i = 0; i < 12; ++i) {
    txs.push_back(chaintest::Put(keys_[i % 4], static_cast<uint64_t>(i / 4 + 1),
                                 std::string(static_cast<size_t>(12 - i), 'k'),
                                 absl::StrCat("v", i), kPartition));
  }
  txs.push_back(chaintest::Put(keys_[0], 4, "kk", "last", kPartition));
  {
    Chain chain = Open();
    ASSERT_TRUE(chaintest::CommitTxs(chain, txs, {{"view", "1"}, {"a", "x"}, {"view", "2"}}).ok());
  }
  Chain chain = Open();  // read from disk, not the executor's cache
  for (int i = 0; i < 12; ++i) {
    const std::string key(static_cast<size_t>(12 - i), 'k');
    absl::StatusOr<std::optional<std::string>> now = chain.ledger->GetValue(key);
    ASSERT_TRUE(now.ok() && now->has_value()) << key;
    EXPECT_EQ(**now, key == "kk" ? "last" : absl::StrCat("v", i)) << key;
    absl::StatusOr<std::optional<std::string>> before = chain.ledger->GetValueAt(key, 0);
    ASSERT_TRUE(before.ok()) << before.status();
    EXPECT_FALSE(before->has_value()) << key;
  }
  for (size_t i = 0; i < txs.size(); ++i) {
    absl::StatusOr<node::chain::Receipt> r = chain.ledger->GetReceipt(txs[i]->hash);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tx_index(), i);
    EXPECT_EQ(r->status(), node::chain::Receipt::SUCCESS);
  }
  EXPECT_EQ(chain.ledger->GetBlockReceipts(1)->size(), txs.size());
  EXPECT_EQ(chain.ledger->GetConsensusMeta("view").value_or(""), "2");
  EXPECT_EQ(chain.ledger->GetConsensusMeta("a").value_or(""), "x");
}

// ---- Write buffers (LedgerOptions::write_buffer_bytes, resources.ledger_write_buffer_bytes) ----

TEST(LedgerWriteBufferBytesTest, DividesTheBudgetBetweenOneAndSixteenMiB) {
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(LedgerWriteBufferBytes(256 * kMiB, 16), 8 * kMiB);  // two buffers each
  EXPECT_EQ(LedgerWriteBufferBytes(256 * kMiB, 4), 16 * kMiB);  // 32 would be larger than 16
  EXPECT_EQ(LedgerWriteBufferBytes(256 * kMiB, 1), 16 * kMiB);
  EXPECT_EQ(LedgerWriteBufferBytes(256 * kMiB, 0), 16 * kMiB);  // counted as one
  EXPECT_EQ(LedgerWriteBufferBytes(256 * kMiB, 64), 2 * kMiB);
  EXPECT_EQ(LedgerWriteBufferBytes(4 * kMiB, 64), 1 * kMiB);  // the floor: past the budget
  EXPECT_EQ(LedgerWriteBufferBytes(12 * kMiB, 2), 3 * kMiB);
  EXPECT_EQ(LedgerWriteBufferBytes(0, 16), 0u);  // RocksDB's default
}

TEST(LedgerWriteBufferScaleTest, FollowsThePressureInEighthsWithoutFlapping) {
  EXPECT_EQ(LedgerWriteBufferScale(1, 1), 1);
  EXPECT_EQ(LedgerWriteBufferScale(1, 0.9), 1);       // less than a step away: unchanged
  EXPECT_EQ(LedgerWriteBufferScale(1, 0.86), 0.875);  // a step away: rounded up to the step
  EXPECT_EQ(LedgerWriteBufferScale(0.875, 0.8), 0.875);
  EXPECT_EQ(LedgerWriteBufferScale(0.875, 0.7), 0.75);
  EXPECT_EQ(LedgerWriteBufferScale(0.75, 0.25), 0.25);  // min_pool_scale's default
  EXPECT_EQ(LedgerWriteBufferScale(0.25, 0.3), 0.25);   // back up by less than a step: kept
  EXPECT_EQ(LedgerWriteBufferScale(0.25, 0.5), 0.5);
  EXPECT_EQ(LedgerWriteBufferScale(0.5, 0.99), 1);         // rounded up to 1
  EXPECT_EQ(LedgerWriteBufferScale(0.875, 1), 1);          // no pressure: the whole budget at once
  EXPECT_EQ(LedgerWriteBufferScale(0.25, 0.01), 0.125);    // never below one step
  EXPECT_EQ(LedgerWriteBufferScale(1, 0.6250004), 0.625);  // a rounding error above a step
}

// Blocks of four 16 KiB Puts (with their undo records about 130 KiB of memtable each) until
// `total` bytes of values went in; returns the most the ledger's memtables held after a block.
uint64_t CommitPutsAndWatchMemtables(Chain& chain, const std::vector<base::PrivateKey>& keys,
                                     uint64_t* nonce, uint64_t total) {
  uint64_t most = 0;
  for (uint64_t written = 0; written < total;) {
    ++*nonce;
    std::vector<TxPtr> txs;
    for (int k = 0; k < 4; ++k) {
      txs.push_back(chaintest::Put(keys[static_cast<size_t>(k)], *nonce, absl::StrCat("key", k),
                                   std::string(16 << 10, static_cast<char>('a' + *nonce % 26)),
                                   kPartition));
      written += 16 << 10;
    }
    const absl::Status s = chaintest::CommitTxs(chain, txs);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return most;
    most = std::max(most, chain.ledger->MemtableBytes());
  }
  return most;
}

// The write buffer bounds what the memtables hold: 12 MiB of values (and as much again of undo
// records) through a ledger with 1 MiB buffers never leave more than about two buffers in memory;
// the same writes through RocksDB's default (64 MiB) all stay in its first memtable.
TEST_F(LedgerTest, TheWriteBufferBoundsTheMemtables) {
  constexpr uint64_t kMiB = 1 << 20;
  uint64_t nonce = 0;
  LedgerOptions small;
  small.sync = false;
  small.write_buffer_bytes = 1 * kMiB;
  {
    Chain chain = Open(small);
    const uint64_t most = CommitPutsAndWatchMemtables(chain, keys_, &nonce, 12 * kMiB);
    EXPECT_GT(most, 0u);
    // Two buffers and the overshoot of the block that filled the last one (one arena block).
    EXPECT_LE(most, 3 * kMiB);
  }
  LedgerOptions dflt;
  dflt.sync = false;
  Chain chain = Open(dflt);
  const uint64_t most = CommitPutsAndWatchMemtables(chain, keys_, &nonce, 12 * kMiB);
  EXPECT_GT(most, 12 * kMiB);
}

// SetWriteBufferBytes applies live: a ledger opened with RocksDB's default grows its memtable past
// 4 MiB; lowered to 1 MiB, the next writes switch it out, and once it is flushed (a later switch
// waits for that: two at most) the memtables hold at most about two of the new buffers.
TEST_F(LedgerTest, SetWriteBufferBytesAppliesToTheNextWrites) {
  constexpr uint64_t kMiB = 1 << 20;
  LedgerOptions options;
  options.sync = false;
  Chain chain = Open(options);
  uint64_t nonce = 0;
  EXPECT_GT(CommitPutsAndWatchMemtables(chain, keys_, &nonce, 3 * kMiB), 4 * kMiB);
  EXPECT_EQ(chain.ledger->SetWriteBufferBytes(0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(chain.ledger->SetWriteBufferBytes(1 * kMiB).ok());
  // Up to 8 MiB more of values, stopping once the big memtable is gone.
  bool bounded = false;
  for (int i = 0; i < 64 && !bounded; ++i) {
    CommitPutsAndWatchMemtables(chain, keys_, &nonce, 128 << 10);
    bounded = chain.ledger->MemtableBytes() <= 3 * kMiB;
  }
  EXPECT_TRUE(bounded) << chain.ledger->MemtableBytes();
}

// The block cache's capacity bounds what it holds, live: reading back 12 MiB of blocks (flushed to
// table files through 1 MiB write buffers) fills the default 32 MiB cache past 8 MiB; lowered to
// 4 MiB it holds no more than that beside its pinned blocks, and reading everything again does
// not raise it.
// Unsynced commits through 1 MiB write buffers: many flushes to table files from a few MiB.
LedgerOptions SmallBuffers() {
  LedgerOptions options;
  options.sync = false;
  options.write_buffer_bytes = 1 << 20;
  return options;
}

TEST_F(LedgerTest, SetBlockCacheCapacityBoundsWhatTheCacheHolds) {
  constexpr uint64_t kMiB = 1 << 20;
  const LedgerOptions options = SmallBuffers();
  Chain chain = Open(options);
  EXPECT_EQ(chain.ledger->BlockCacheCapacity(), options.block_cache_bytes);
  uint64_t nonce = 0;
  CommitPutsAndWatchMemtables(chain, keys_, &nonce, 12 * kMiB);
  const uint64_t tip = chain.ledger->last_height();
  auto read_every_block = [&] {
    for (uint64_t h = 0; h <= tip; ++h) {
      absl::StatusOr<node::chain::Block> b = chain.ledger->GetBlock(h);
      ASSERT_TRUE(b.ok()) << h << ": " << b.status();
    }
  };
  read_every_block();
  EXPECT_GT(chain.ledger->BlockCacheBytes(), 8 * kMiB);
  EXPECT_EQ(chain.ledger->SetBlockCacheCapacity(0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(chain.ledger->SetBlockCacheCapacity(4 * kMiB).ok());
  EXPECT_EQ(chain.ledger->BlockCacheCapacity(), 4 * kMiB);
  EXPECT_LE(chain.ledger->BlockCacheBytes(), 4 * kMiB + chain.ledger->BlockCachePinnedBytes());
  read_every_block();
  EXPECT_LE(chain.ledger->BlockCacheBytes(), 4 * kMiB + chain.ledger->BlockCachePinnedBytes());
  EXPECT_GT(chain.ledger->BlockCacheBytes(), 2 * kMiB);  // and it is used
}

// WriteStallNow reads RocksDB's write path: 12 MiB through 1 MiB write buffers leave table files
// at level 0 between compactions (seen after some block), none once the ledger is compacted, and
// an idle ledger's writes are neither stopped nor delayed.
TEST_F(LedgerTest, WriteStallNowShowsLevelZeroFiles) {
  Chain chain = Open(SmallBuffers());
  uint64_t nonce = 0;
  uint64_t most_level0 = 0;
  for (int i = 0; i < 96; ++i) {
    CommitPutsAndWatchMemtables(chain, keys_, &nonce, 128 << 10);
    most_level0 = std::max(most_level0, chain.ledger->WriteStallNow().level0_files);
  }
  EXPECT_GT(most_level0, 0u);
  ASSERT_TRUE(chain.ledger->Compact().ok());
  const Ledger::WriteStall idle = chain.ledger->WriteStallNow();
  EXPECT_EQ(idle.level0_files, 0u);
  EXPECT_FALSE(idle.stopped);
  EXPECT_EQ(idle.delayed_write_rate, 0u);
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

TEST_F(LedgerTest, ValuesAtOlderHeightsComeFromTheUndoRecords) {
  Chain chain = Open();
  auto put = [&](const std::string& key, const std::string& value) {
    ASSERT_TRUE(
        chaintest::CommitTxs(chain, {chaintest::Put(keys_[0], *chain.executor->NextNonce(Addr(0)),
                                                    key, value, kPartition)})
            .ok());
  };
  put("k", "one");    // height 1
  put("other", "x");  // height 2: "k" unchanged
  put("k", "two");    // height 3
  put("k", "two");    // height 4: the same value again changes nothing
  // A key whose bytes extend "k" with what looks like a height must not be read as "k".
  put(std::string("k\0\0\0\0\0\0\0\2", 9), "impostor");  // height 5
  ASSERT_EQ(chain.ledger->last_height(), 5u);

  const std::vector<std::optional<std::string>> want = {std::nullopt, "one", "one",
                                                        "two",        "two", "two"};
  for (uint64_t h = 0; h <= 5; ++h) {
    absl::StatusOr<std::optional<std::string>> v = chain.ledger->GetValueAt("k", h);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, want[h]) << "height " << h;
  }
  absl::StatusOr<std::optional<std::string>> other = chain.ledger->GetValueAt("other", 1);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value()) << "not yet written at height 1";
  EXPECT_EQ(chain.ledger->GetValueAt("k", 6).status().code(), absl::StatusCode::kOutOfRange);
  // Accounts have their history too: keys_[0]'s nonce was 0 at genesis, 3 after block 3.
  absl::StatusOr<std::optional<std::string>> acct =
      chain.ledger->GetStateAt(AccountKey(Addr(0)), 3);
  ASSERT_TRUE(acct.ok() && acct->has_value());
  node::chain::Account a;
  ASSERT_TRUE(DecodeAccount(**acct, &a));
  EXPECT_EQ(a.nonce(), 3u);
  EXPECT_EQ(a.balance(), 1000u);
}

// Counts the records of the closed ledger at `path` whose key starts with `prefix` and for which
// `pred(key, value)` holds.
int CountRecords(const std::string& path, char prefix,
                 const std::function<bool(absl::string_view, absl::string_view)>& pred) {
  rocksdb::DB* raw = nullptr;
  CHECK(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), path, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  int n = 0;
  const std::string p(1, prefix);
  for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next()) {
    n += pred(absl::string_view(it->key().data(), it->key().size()),
              absl::string_view(it->value().data(), it->value().size()));
  }
  CHECK(it->status().ok());
  return n;
}

uint64_t Be64(absl::string_view s) {
  uint64_t v = 0;
  for (unsigned char c : s.substr(0, 8)) v = (v << 8) | c;
  return v;
}

TEST_F(LedgerTest, PruningKeepsTheLastBlocksAndDropsWhatOnlyTheOlderOnesNeeded) {
  LedgerOptions options;
  options.retain_blocks = 10;
  options.prune_step = 4;
  options.height_keyed_meta = {kCertKeyPrefix};
  std::map<uint64_t, std::string> tx_at;  // height -> the hash of its Put
  auto commit = [&](Chain& chain) {
    const uint64_t h = chain.ledger->last_height() + 1;
    TxPtr put = chaintest::Put(keys_[0], *chain.executor->NextNonce(Addr(0)), "k",
                               absl::StrCat("v", h), kPartition);
    tx_at[h] = put->hash;
    ASSERT_TRUE(chaintest::CommitTxs(chain, {put}, {{CertKey(h), absl::StrCat("cert", h)}}).ok());
  };
  {
    Chain chain = Open(options);
    for (int i = 0; i < 40; ++i) {
      commit(chain);
      // Never fewer than retain_blocks blocks, never more than retain_blocks + prune_step - 1.
      const uint64_t kept = chain.ledger->last_height() + 1 - chain.ledger->earliest_height();
      ASSERT_GE(kept, std::min<uint64_t>(10, chain.ledger->last_height() + 1));
      ASSERT_LE(kept, 13u);
    }
    // Pruned at heights 13, 17, ..., 37: blocks from 28 on are kept.
    EXPECT_EQ(chain.ledger->earliest_height(), 28u);
    EXPECT_EQ(chain.ledger->pruned_below(), 28u);
    EXPECT_EQ(chain.ledger->history_from(), 28u);

    absl::StatusOr<node::chain::Block> gone = chain.ledger->GetBlock(27);
    EXPECT_EQ(gone.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(gone.status().message()), HasSubstr("pruned (blocks from 28"));
    EXPECT_EQ(chain.ledger->GetBlock(0).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_TRUE(chain.ledger->GetBlock(28).ok());
    EXPECT_EQ(chain.ledger->GetBlockReceipts(5).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(chain.ledger->GetBlock(41).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(chain.ledger->GetBlockReceipts(28)->size(), 1u);
    // The tx index entries of pruned blocks are still on disk (the compaction filter drops
    // them later) and must not be followed.
    absl::StatusOr<node::chain::Receipt> old_receipt = chain.ledger->GetReceipt(tx_at[5]);
    EXPECT_EQ(old_receipt.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(old_receipt.status().message()), HasSubstr("is in block 5, pruned"));
    EXPECT_EQ(chain.ledger->GetTx(tx_at[5]).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(chain.ledger->GetReceipt(tx_at[30])->block_height(), 30u);
    EXPECT_TRUE(chain.ledger->GetTx(tx_at[30]).ok());
    EXPECT_EQ(chain.ledger->GetTxHeight(tx_at[5]).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(chain.ledger->GetTxHeight(tx_at[30]).value(), std::optional<uint64_t>(30));
    absl::StatusOr<std::vector<std::optional<std::string>>> some =
        chain.ledger->GetTxs({tx_at[5], tx_at[30]});
    ASSERT_TRUE(some.ok()) << some.status();
    EXPECT_FALSE((*some)[0].has_value()) << "pruned";
    EXPECT_EQ((*some)[1], chain.ledger->GetTx(tx_at[30]).value());
    EXPECT_EQ(chain.ledger->GetConsensusMeta(CertKey(27)).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(chain.ledger->GetConsensusMeta(CertKey(28)).value_or(""), "cert28");
    // State history from the mark on, exactly as before; below it, refused.
    EXPECT_EQ(chain.ledger->GetValueAt("k", 27).status().code(),
              absl::StatusCode::kFailedPrecondition);
    for (uint64_t h = 28; h <= 40; ++h) {
      EXPECT_EQ(chain.ledger->GetValueAt("k", h).value_or(std::nullopt),
                std::optional<std::string>(absl::StrCat("v", h)))
          << h;
    }
    ASSERT_TRUE(chain.ledger->Compact().ok());
  }
  // On disk after a compaction: no block, receipt, undo record or tx index entry of the pruned
  // heights is left; those of the kept heights all are.
  const std::string path = dir_ + "/ledger";
  auto any = [](absl::string_view, absl::string_view) { return true; };
  EXPECT_EQ(CountRecords(path, 'b', any), 13);
  EXPECT_EQ(CountRecords(path, 'r', any), 13);
  auto undo_height = [](absl::string_view key) { return Be64(key.substr(key.size() - 8)); };
  EXPECT_EQ(
      CountRecords(path, 'u',
                   [&](absl::string_view k, absl::string_view) { return undo_height(k) <= 28; }),
      0);
  // "k" and the sender's account changed in each of blocks 29..40.
  EXPECT_EQ(
      CountRecords(path, 'u',
                   [&](absl::string_view k, absl::string_view) { return undo_height(k) > 28; }),
      2 * 12);
  EXPECT_EQ(
      CountRecords(path, 't', [](absl::string_view, absl::string_view v) { return Be64(v) < 28; }),
      0);
  EXPECT_EQ(CountRecords(path, 't', any), 13);

  // The marks survive a reopen, and pruning goes on from them.
  Chain chain = Open(options);
  EXPECT_EQ(chain.ledger->earliest_height(), 28u);
  // Its tx index entry is gone with the compaction: as if never committed.
  EXPECT_EQ(chain.ledger->GetReceipt(tx_at[20]).status().code(), absl::StatusCode::kNotFound);
  for (int i = 0; i < 4; ++i) commit(chain);
  EXPECT_EQ(chain.ledger->earliest_height(), 32u);
  EXPECT_EQ(chain.ledger->GetValueAt("k", 44).value_or(std::nullopt), "v44");
  EXPECT_EQ(chain.ledger->GetValueAt("k", 32).value_or(std::nullopt), "v32");
}

TEST_F(LedgerTest, WithoutRetainBlocksNothingIsPruned) {
  Chain chain = Open();
  for (uint64_t h = 1; h <= 80; ++h) {
    ASSERT_TRUE(
        chaintest::CommitTxs(chain, chaintest::SeededBlockTxs(3, h, *chain.executor, keys_)).ok());
  }
  EXPECT_EQ(chain.ledger->earliest_height(), 0u);
  EXPECT_EQ(chain.ledger->pruned_below(), 0u);
  EXPECT_TRUE(chain.ledger->GetBlock(0).ok());
  EXPECT_TRUE(chain.ledger->GetStateAt(AccountKey(Addr(0)), 0).ok());
}

TEST_F(LedgerTest, ReopenChecksTheStoredStateHashAndCanRehashTheWholeState) {
  std::string root;
  {
    Chain chain = Open();
    for (uint64_t h = 1; h <= 4; ++h) {
      ASSERT_TRUE(
          chaintest::CommitTxs(chain, chaintest::SeededBlockTxs(11, h, *chain.executor, keys_))
              .ok());
    }
    root = chain.executor->state_root();
  }
  const std::string path = dir_ + "/ledger";
  // A ledger from before the hash was stored: the reopen rehashes once and stores it. Its blocks
  // wrote no undo records either, so the state before its tip is not readable.
  TamperWithLedger(path, "l", std::nullopt);
  {
    Chain chain = Open();
    EXPECT_EQ(chain.executor->state_root(), root);
    absl::StatusOr<std::optional<StateRoot>> stored = chain.ledger->LoadAccumulator();
    ASSERT_TRUE(stored.ok() && stored->has_value());
    EXPECT_EQ((*stored)->Root(), root);
    EXPECT_EQ(chain.ledger->GetStateAt(AccountKey(Addr(0)), 3).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(chain.ledger->GetStateAt(AccountKey(Addr(0)), 4).ok());
  }
  EXPECT_EQ(Open().ledger->GetStateAt(AccountKey(Addr(0)), 3).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "the mark survives a reopen";
  // A state value changed on disk: the stored hash still matches the block, so only the full
  // rehash notices, and refuses to open.
  TamperWithLedger(path, "s" + AccountKey(Addr(1)), EncodeAccount(999999, 0));
  LedgerOptions verify;
  verify.verify_state_on_open = true;
  absl::StatusOr<Chain> refused = OpenChain(path, kPartition, genesis_, verify);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "stored state hash"))
      << refused.status();
  // A stored hash that is not the block's root: refused on every open.
  TamperWithLedger(path, "l", StateRoot().Serialize());
  EXPECT_EQ(OpenChain(path, kPartition, genesis_).status().code(), absl::StatusCode::kDataLoss);
  TamperWithLedger(path, "l", "short");
  EXPECT_EQ(OpenChain(path, kPartition, genesis_).status().code(), absl::StatusCode::kDataLoss);
}

// The executor reads the ledger through a small cache: a chain executed over it, with the cache
// far smaller than the state, ends in the same state and roots as one held wholly in memory.
TEST_F(LedgerTest, AnExecutorOverTheLedgerWithATinyCacheMatchesOneInMemory) {
  LedgerOptions options;
  options.state_cache_bytes = 600;  // a few entries: most reads go to RocksDB
  Chain chain = Open(options);
  absl::StatusOr<std::unique_ptr<Executor>> memory = Executor::FromGenesis(kPartition, genesis_);
  ASSERT_TRUE(memory.ok());
  for (uint64_t h = 1; h <= 40; ++h) {
    std::vector<TxPtr> txs = chaintest::SeededBlockTxs(5, h, **memory, keys_);
    BlockExecution in_memory = *(*memory)->Execute(h, txs);
    (*memory)->Apply(in_memory);
    ASSERT_TRUE(chaintest::CommitTxs(chain, txs).ok());
    ASSERT_EQ(chain.executor->state_root(), in_memory.state_root) << "height " << h;
  }
  const StateCacheStats cache = chain.executor->cache_stats();
  EXPECT_LE(cache.bytes, 600u);
  EXPECT_GT(cache.misses, 40u) << "the ledger answered reads the cache could not hold";
  absl::StatusOr<StateMap> stored = chain.ledger->LoadState();
  ASSERT_TRUE(stored.ok());
  const std::map<std::string, std::string> sorted(stored->begin(), stored->end());
  EXPECT_EQ(sorted, (*memory)->SnapshotForTest());
}

}  // namespace
}  // namespace partitions
