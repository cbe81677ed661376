// Test helpers for the chain tests: deterministic keys and signed transactions.
#ifndef TESTS_PARTITIONS_CHAIN_TEST_UTIL_H_
#define TESTS_PARTITIONS_CHAIN_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "partitions/executor.h"
#include "partitions/ledger.h"
#include "partitions/tx_pool.h"
#include "proto/chain.pb.h"
#include "tests/temp_dirs.h"

namespace chaintest {

// The key whose seed is `i` repeated: the same for every run.
inline base::PrivateKey Key(int i) {
  absl::StatusOr<base::PrivateKey> k =
      base::PrivateKey::FromSeed(std::string(32, static_cast<char>(i)));
  CHECK(k.ok()) << k.status();
  return *std::move(k);
}

inline std::vector<base::PrivateKey> Keys(int n) {
  std::vector<base::PrivateKey> keys;
  for (int i = 0; i < n; ++i) keys.push_back(Key(i + 1));
  return keys;
}

inline partitions::TxPtr Decode(const std::string& signed_bytes, uint32_t partition = 0) {
  base::TxLimits limits;
  limits.partition = partition;
  absl::StatusOr<base::DecodedTx> d = base::DecodeSignedTx(signed_bytes, limits);
  CHECK(d.ok()) << d.status();
  return std::make_shared<const base::DecodedTx>(*std::move(d));
}

inline partitions::TxPtr Transfer(const base::PrivateKey& from, uint64_t nonce,
                                  const std::string& to, uint64_t amount, uint32_t partition = 0,
                                  const std::string& memo = "") {
  node::chain::Transaction tx;
  tx.set_partition(partition);
  tx.set_nonce(nonce);
  tx.mutable_transfer()->set_to(to);
  tx.mutable_transfer()->set_amount(amount);
  tx.set_memo(memo);
  return Decode(base::SignTx(tx, from), partition);
}

inline partitions::TxPtr Put(const base::PrivateKey& from, uint64_t nonce, const std::string& key,
                             const std::string& value, uint32_t partition = 0) {
  node::chain::Transaction tx;
  tx.set_partition(partition);
  tx.set_nonce(nonce);
  tx.mutable_put()->set_key(key);
  tx.mutable_put()->set_value(value);
  return Decode(base::SignTx(tx, from), partition);
}

inline node::chain::GenesisConfig Genesis(const std::vector<base::PrivateKey>& keys,
                                          uint64_t balance) {
  node::chain::GenesisConfig g;
  for (const auto& k : keys) {
    auto* a = g.add_allocations();
    a->set_address_hex(absl::BytesToHexString(k.public_key().bytes()));
    a->set_balance(balance);
  }
  return g;
}

// A block of `txs` on top of `parent_hash` (empty for genesis) with a fixed proposer and a
// timestamp derived from the height, so the same inputs always give the same block hash.
inline node::chain::Block MakeBlock(uint32_t partition, uint64_t height,
                                    const std::string& parent_hash,
                                    const std::vector<partitions::TxPtr>& txs,
                                    const std::string& state_root) {
  node::chain::Block block;
  for (const auto& tx : txs) {
    block.add_tx_hashes(tx->hash);
    block.add_txs(tx->signed_bytes);
  }
  node::chain::BlockHeader* h = block.mutable_header();
  h->set_partition(partition);
  h->set_height(height);
  h->set_parent_hash(parent_hash);
  h->set_tx_root(partitions::TxRoot(block.tx_hashes()));
  h->set_state_root(state_root);
  h->set_proposer(std::string(32, 'p'));
  h->set_view(height / 10);
  h->set_timestamp_ms(static_cast<int64_t>(height) * 1000);
  h->set_tx_count(static_cast<uint32_t>(txs.size()));
  return block;
}

// Executes `txs` on the chain's tip, commits the block, then applies it to the executor.
inline absl::Status CommitTxs(partitions::Chain& chain, const std::vector<partitions::TxPtr>& txs,
                              const partitions::ConsensusMetaWrites& meta = {}) {
  const uint64_t height = chain.ledger->last_height() + 1;
  absl::StatusOr<partitions::BlockExecution> executed = chain.executor->Execute(height, txs);
  if (!executed.ok()) return executed.status();
  partitions::BlockExecution& r = *executed;
  const node::chain::Block block = MakeBlock(chain.ledger->partition(), height,
                                             chain.ledger->last_block_hash(), txs, r.state_root);
  absl::Status s = chain.ledger->CommitBlock(block, r.receipts, r.delta, meta);
  if (s.ok()) chain.executor->Apply(r);
  return s;
}

// An empty directory for test `name` of this process, under the test's temp dir; removed when
// the process exits.
inline std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(::testing::TempDir(), "/", name, "_", getpid());
  std::filesystem::remove_all(dir);
  tests::RemoveAtExit(dir);
  return dir;
}

// A pool whose nonces follow `chain`'s committed state. `chain` and `clock` outlive it.
inline std::unique_ptr<partitions::TxPool> PoolOver(const partitions::Chain& chain,
                                                    const flowctl::Clock* clock,
                                                    const partitions::TxPoolLimits& limits = {}) {
  const partitions::Executor* executor = chain.executor.get();
  return std::make_unique<partitions::TxPool>(
      limits, clock, [executor](absl::string_view s) { return executor->NextNonce(s); });
}

// The transactions of block `height` in a seeded, deterministic chain: 5..24 transfers and puts
// by `keys`, nonces taken from the executor's state (so they depend only on the chain so far),
// some beyond the sender's funds.
inline std::vector<partitions::TxPtr> SeededBlockTxs(uint64_t seed, uint64_t height,
                                                     const partitions::Executor& exec,
                                                     const std::vector<base::PrivateKey>& keys) {
  std::mt19937_64 rng(seed * 1000003 + height);
  const int n = 5 + static_cast<int>(rng() % 20);
  std::map<int, uint64_t> used;
  std::vector<partitions::TxPtr> txs;
  for (int i = 0; i < n; ++i) {
    const int s = static_cast<int>(rng() % keys.size());
    const uint64_t nonce = *exec.NextNonce(keys[s].public_key().bytes()) + used[s]++;
    if (rng() % 5 == 0) {
      txs.push_back(Put(keys[s], nonce, "key" + std::to_string(rng() % 50),
                        "value" + std::to_string(rng()), exec.partition()));
    } else {
      txs.push_back(Transfer(keys[s], nonce, keys[rng() % keys.size()].public_key().bytes(),
                             rng() % 300, exec.partition()));
    }
  }
  return txs;
}

}  // namespace chaintest

#endif  // TESTS_PARTITIONS_CHAIN_TEST_UTIL_H_
