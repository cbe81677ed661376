#include "partitions/executor.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "gtest/gtest.h"
#include "partitions/tx_pool.h"
#include "tests/mocks/fake_clock.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

using Snapshot = std::map<std::string, std::string>;

uint64_t TotalSupply(const Snapshot& s) {
  uint64_t total = 0;
  for (const auto& [k, v] : s) {
    node::chain::Account a;
    if (k[0] == 'a' && DecodeAccount(v, &a)) total += a.balance();
  }
  return total;
}

node::chain::Account AccountIn(const Snapshot& s, const std::string& address) {
  node::chain::Account a;
  if (auto it = s.find(AccountKey(address)); it != s.end()) DecodeAccount(it->second, &a);
  return a;
}

struct Workload {
  std::vector<base::PrivateKey> keys;
  node::chain::GenesisConfig genesis;
  std::vector<TxPtr> txs;
};

// Random transfers and puts, mostly with the right nonce, some replayed or ahead, some beyond
// the sender's funds.
Workload MakeWorkload(uint32_t seed, int n_keys, int n_txs) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.keys = chaintest::Keys(n_keys);
  for (const auto& k : w.keys) {
    auto* a = w.genesis.add_allocations();
    a->set_address_hex(absl::BytesToHexString(k.public_key().bytes()));
    a->set_balance(rng() % 1000);
  }
  std::vector<uint64_t> next(n_keys, 1);
  for (int i = 0; i < n_txs; ++i) {
    const int s = static_cast<int>(rng() % n_keys);
    uint64_t nonce = next[s];
    const int fault = static_cast<int>(rng() % 20);
    if (fault == 0 && nonce > 1)
      nonce -= 1 + rng() % (nonce - 1);  // replayed
    else if (fault == 1)
      nonce += 1 + rng() % 3;  // ahead
    else
      ++next[s];
    if (rng() % 4 == 0) {
      w.txs.push_back(chaintest::Put(w.keys[s], nonce, absl::StrCat("key", rng() % 10),
                                     absl::StrCat("v", rng())));
    } else {
      const std::string to = rng() % 10 == 0 ? std::string(32, 'z')  // a fresh account
                                             : w.keys[rng() % n_keys].public_key().bytes();
      w.txs.push_back(chaintest::Transfer(w.keys[s], nonce, to, rng() % 400));
    }
  }
  return w;
}

// Executes `txs` in blocks of seeded random sizes; returns the final root.
std::string RunInBlocks(Executor& exec, const std::vector<TxPtr>& txs, uint32_t seed,
                        std::vector<node::chain::Receipt>* receipts = nullptr) {
  std::mt19937 rng(seed);
  uint64_t height = 1;
  for (size_t i = 0; i < txs.size();) {
    const size_t n = std::min<size_t>(txs.size() - i, 1 + rng() % 40);
    BlockExecution r = *exec.Execute(height++, absl::MakeConstSpan(txs).subspan(i, n));
    exec.Apply(r);
    if (receipts) receipts->insert(receipts->end(), r.receipts.begin(), r.receipts.end());
    i += n;
  }
  return exec.state_root();
}

TEST(ExecutorTest, GenesisFromConfig) {
  auto keys = chaintest::Keys(2);
  auto exec = Executor::FromGenesis(3, chaintest::Genesis(keys, 50));
  ASSERT_TRUE(exec.ok()) << exec.status();
  EXPECT_EQ((*exec)->GetAccount(keys[0].public_key().bytes())->balance(), 50u);
  EXPECT_EQ(*(*exec)->NextNonce(keys[1].public_key().bytes()), 1u);
  EXPECT_EQ((*exec)->GetAccount(std::string(32, 'q'))->balance(), 0u);

  node::chain::GenesisConfig bad = chaintest::Genesis(keys, 50);
  bad.mutable_allocations(1)->set_address_hex("xyz");
  EXPECT_TRUE(absl::StrContains(Executor::FromGenesis(3, bad).status().message(),
                                "allocations[1].address_hex"));
  bad = chaintest::Genesis(keys, UINT64_MAX / 2 + 1);
  EXPECT_TRUE(absl::StrContains(Executor::FromGenesis(3, bad).status().message(), "overflows"));
  bad = chaintest::Genesis({keys[0], keys[0]}, 1);
  EXPECT_TRUE(absl::StrContains(Executor::FromGenesis(3, bad).status().message(), "duplicates"));
}

TEST(ExecutorTest, NoncePolicy) {
  auto keys = chaintest::Keys(2);
  const std::string a = keys[0].public_key().bytes();
  const std::string b = keys[1].public_key().bytes();
  auto exec = *Executor::FromGenesis(0, chaintest::Genesis(keys, 100));
  BlockExecution r = *exec->Execute(
      1, {chaintest::Transfer(keys[0], 1, b, 30),   // ok
          chaintest::Transfer(keys[0], 2, b, 500),  // insufficient funds: nonce consumed
          chaintest::Transfer(keys[0], 2, b, 1),    // replayed
          chaintest::Transfer(keys[0], 9, b, 1),    // ahead
          chaintest::Transfer(keys[0], 3, a, 70),   // to self
          chaintest::Put(keys[1], 1, "k", "v"),     // put
          chaintest::Transfer(keys[0], 4, b, 0, /*partition=*/0)});
  ASSERT_EQ(r.receipts.size(), 7u);
  using R = node::chain::Receipt;
  EXPECT_EQ(r.receipts[0].status(), R::SUCCESS);
  EXPECT_EQ(r.receipts[1].status(), R::FAILED);
  EXPECT_TRUE(absl::StartsWith(r.receipts[1].error(), "insufficient funds"));
  EXPECT_EQ(r.receipts[2].status(), R::REJECTED);
  EXPECT_TRUE(absl::StartsWith(r.receipts[2].error(), "replayed nonce"));
  EXPECT_EQ(r.receipts[3].status(), R::REJECTED);
  EXPECT_TRUE(absl::StartsWith(r.receipts[3].error(), "nonce gap"));
  EXPECT_EQ(r.receipts[4].status(), R::SUCCESS);
  EXPECT_EQ(r.receipts[5].status(), R::SUCCESS);
  EXPECT_EQ(r.receipts[6].status(), R::SUCCESS);
  EXPECT_EQ(r.receipts[6].tx_index(), 6u);
  EXPECT_EQ(r.receipts[6].block_height(), 1u);
  EXPECT_EQ(exec->GetAccount(a)->balance(), 100u) << "Execute alone changes nothing";
  exec->Apply(r);
  EXPECT_EQ(exec->GetAccount(a)->balance(), 70u);
  EXPECT_EQ(exec->GetAccount(a)->nonce(), 4u);
  EXPECT_EQ(exec->GetAccount(b)->balance(), 130u);
  EXPECT_EQ(exec->GetValue("k")->value_or(""), "v");
}

// Replayed nonces need account state: the pool refuses them at admission, the executor gives a
// REJECTED receipt if one reaches a block anyway.
TEST(ExecutorTest, ReplayedNonceRefusedByPoolAndExecutor) {
  const base::PrivateKey key = chaintest::Key(1);
  const std::string to = chaintest::Key(9).public_key().bytes();
  tests::FakeClock clock;
  TxPool pool(TxPoolLimits{}, &clock, [](absl::string_view) { return uint64_t{3}; });
  absl::Status s = pool.Add(chaintest::Transfer(key, 2, to, 1), TxOrigin::kClient);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "replayed nonce")) << s;

  auto exec = Executor::FromGenesis(0, chaintest::Genesis({key}, 100));
  ASSERT_TRUE(exec.ok());
  TxPtr first = chaintest::Transfer(key, 1, to, 1);
  BlockExecution r1 = *(*exec)->Execute(1, {first});
  (*exec)->Apply(r1);
  BlockExecution r2 = *(*exec)->Execute(2, {first});
  ASSERT_EQ(r2.receipts.size(), 1u);
  EXPECT_EQ(r2.receipts[0].status(), node::chain::Receipt::REJECTED);
  EXPECT_TRUE(absl::StartsWith(r2.receipts[0].error(), "replayed nonce"));
  EXPECT_TRUE(r2.delta.writes.empty());
}

TEST(ExecutorTest, WrongPartitionIsRejected) {
  auto keys = chaintest::Keys(1);
  auto exec = *Executor::FromGenesis(4, chaintest::Genesis(keys, 100));
  BlockExecution r = *exec->Execute(1, {chaintest::Transfer(keys[0], 1, std::string(32, 'x'), 5,
                                                            /*partition=*/5)});
  EXPECT_EQ(r.receipts[0].status(), node::chain::Receipt::REJECTED);
  EXPECT_TRUE(absl::StartsWith(r.receipts[0].error(), "wrong partition"));
  EXPECT_TRUE(r.delta.writes.empty());
}

// Every tx executed alone: supply conserved, REJECTED changes nothing, FAILED changes only the
// sender's nonce, SUCCESS changes exactly what the operation says.
TEST(ExecutorTest, RandomizedInvariantsPerTransaction) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    Workload w = MakeWorkload(seed, 6, 150);
    auto exec = *Executor::FromGenesis(0, w.genesis);
    const uint64_t supply = TotalSupply(exec->SnapshotForTest());
    int counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < w.txs.size(); ++i) {
      const base::DecodedTx& tx = *w.txs[i];
      const Snapshot before = exec->SnapshotForTest();
      BlockExecution r = *exec->Execute(i + 1, {w.txs[i]});
      exec->Apply(r);
      const Snapshot after = exec->SnapshotForTest();
      ASSERT_EQ(TotalSupply(after), supply);
      const node::chain::Receipt& rc = r.receipts.at(0);
      ++counts[rc.status()];
      const node::chain::Account s0 = AccountIn(before, tx.sender());
      const node::chain::Account s1 = AccountIn(after, tx.sender());
      Snapshot expected = before;
      switch (rc.status()) {
        case node::chain::Receipt::REJECTED:
          break;
        case node::chain::Receipt::FAILED:
          expected[AccountKey(tx.sender())] = EncodeAccount(s0.balance(), s0.nonce() + 1);
          break;
        case node::chain::Receipt::SUCCESS:
          if (tx.tx.has_put()) {
            expected[AccountKey(tx.sender())] = EncodeAccount(s0.balance(), s0.nonce() + 1);
            expected[ValueKey(tx.tx.put().key())] = tx.tx.put().value();
          } else {
            const std::string& to = tx.tx.transfer().to();
            const uint64_t amount = tx.tx.transfer().amount();
            expected[AccountKey(tx.sender())] =
                EncodeAccount(s0.balance() - (to == tx.sender() ? 0 : amount), s0.nonce() + 1);
            if (to != tx.sender()) {
              const node::chain::Account t0 = AccountIn(before, to);
              expected[AccountKey(to)] = EncodeAccount(t0.balance() + amount, t0.nonce());
            }
          }
          break;
        default:
          FAIL() << "unexpected status " << rc.status();
      }
      ASSERT_EQ(after, expected) << "tx " << i << " status " << rc.status() << " " << rc.error();
      ASSERT_EQ(s1.nonce(),
                rc.status() == node::chain::Receipt::REJECTED ? s0.nonce() : tx.nonce());
    }
    // The workload exercises every outcome.
    EXPECT_GT(counts[node::chain::Receipt::SUCCESS], 0);
    EXPECT_GT(counts[node::chain::Receipt::FAILED], 0);
    EXPECT_GT(counts[node::chain::Receipt::REJECTED], 0);
  }
}

TEST(ExecutorTest, SameInputsSameRootRegardlessOfBlockBoundaries) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    Workload w = MakeWorkload(seed, 8, 300);
    auto e1 = *Executor::FromGenesis(0, w.genesis);
    auto e2 = *Executor::FromGenesis(0, w.genesis);
    auto e3 = *Executor::FromGenesis(0, w.genesis);
    std::vector<node::chain::Receipt> r1, r2;
    const std::string root1 = RunInBlocks(*e1, w.txs, seed, &r1);
    const std::string root2 = RunInBlocks(*e2, w.txs, seed, &r2);
    const std::string root3 = RunInBlocks(*e3, w.txs, seed + 1000);  // other block sizes
    EXPECT_EQ(root1, root2);
    EXPECT_EQ(root1, root3);
    ASSERT_EQ(r1.size(), r2.size());
    for (size_t i = 0; i < r1.size(); ++i) {
      EXPECT_EQ(r1[i].SerializeAsString(), r2[i].SerializeAsString());
    }
    EXPECT_EQ(e1->SnapshotForTest(), e3->SnapshotForTest());
    // The incremental root equals one computed from scratch over the final state.
    StateMap full;
    for (const auto& [k, v] : e1->SnapshotForTest()) full[k] = v;
    EXPECT_EQ(Executor(0, full).state_root(), root1);
    EXPECT_EQ(TotalSupply(e1->SnapshotForTest()),
              TotalSupply((*Executor::FromGenesis(0, w.genesis))->SnapshotForTest()));
  }
}

TEST(ExecutorTest, DifferentOrderDifferentRoot) {
  int differing = 0;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    Workload w = MakeWorkload(seed, 8, 200);
    std::vector<TxPtr> shuffled = w.txs;
    std::mt19937 rng(seed);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    auto e1 = *Executor::FromGenesis(0, w.genesis);
    auto e2 = *Executor::FromGenesis(0, w.genesis);
    const std::string root1 = RunInBlocks(*e1, w.txs, seed);
    const std::string root2 = RunInBlocks(*e2, shuffled, seed);
    const bool same_state = e1->SnapshotForTest() == e2->SnapshotForTest();
    EXPECT_EQ(root1 == root2, same_state) << "the root tracks the state exactly";
    differing += same_state ? 0 : 1;
  }
  EXPECT_EQ(differing, 10) << "a shuffle of a nonce-ordered workload changes the state";

  // A minimal case: B can pay C only after A paid B.
  auto keys = chaintest::Keys(3);
  node::chain::GenesisConfig g = chaintest::Genesis(keys, 0);
  g.mutable_allocations(0)->set_balance(10);
  TxPtr a_to_b = chaintest::Transfer(keys[0], 1, keys[1].public_key().bytes(), 10);
  TxPtr b_to_c = chaintest::Transfer(keys[1], 1, keys[2].public_key().bytes(), 10);
  auto e1 = *Executor::FromGenesis(0, g);
  auto e2 = *Executor::FromGenesis(0, g);
  e1->Apply(*e1->Execute(1, {a_to_b, b_to_c}));
  e2->Apply(*e2->Execute(1, {b_to_c, a_to_b}));
  EXPECT_EQ(e1->GetAccount(keys[2].public_key().bytes())->balance(), 10u);
  EXPECT_EQ(e2->GetAccount(keys[2].public_key().bytes())->balance(), 0u);
  EXPECT_NE(e1->state_root(), e2->state_root());
}

TEST(ExecutorTest, ApplyOnAStaleExecutionDies) {
  auto keys = chaintest::Keys(1);
  auto exec = *Executor::FromGenesis(0, chaintest::Genesis(keys, 10));
  BlockExecution a = *exec->Execute(1, {chaintest::Put(keys[0], 1, "k", "1")});
  BlockExecution b = *exec->Execute(1, {chaintest::Put(keys[0], 1, "k", "2")});
  exec->Apply(a);
  EXPECT_DEATH(exec->Apply(b), "not computed against");
}

TEST(StateRootTest, OrderIndependentAndRemovable) {
  StateRoot x, y;
  x.Add("a", "1");
  x.Add("b", "2");
  y.Add("b", "2");
  y.Add("a", "1");
  EXPECT_EQ(x.Root(), y.Root());
  y.Add("c", "3");
  EXPECT_NE(x.Root(), y.Root());
  y.Remove("c", "3");
  EXPECT_EQ(x.Root(), y.Root());
  StateRoot z;
  z.Add("ab", "c");
  StateRoot w;
  w.Add("a", "bc");
  EXPECT_NE(z.Root(), w.Root()) << "key/value boundary is hashed";
  EXPECT_EQ(StateRoot().Root().size(), 32u);
}

// The root is part of what replicas agree on: any two builds (and any two ways of driving
// OpenSSL) must compute the same one. The expected value comes from an independent
// implementation of the construction in Python: each entry's lanes are the AES-256-CTR keystream
// (the `cryptography` package, zero IV, 2 KiB) under the key SHA-256(len32le(key) || key ||
// value) (hashlib), read as little-endian 16-bit lanes and summed mod 2^16; the root is the
// SHA-256 of the lanes, little-endian.
TEST(StateRootTest, KnownAnswer) {
  StateRoot root;
  root.Add("a", "1");
  root.Add("key", "value");
  root.Add("b", "2");
  root.Remove("b", "2");
  EXPECT_EQ(base::BytesToHex(root.Root()),
            "38ed9374d3cc9c1a5df8dc282c4e522bca14f33fba9b3ab23d696f32e3fdf6cd");
  // The per-thread contexts are reused: a second thread computes the same.
  std::string other;
  std::thread t([&] {
    StateRoot r;
    r.Add("key", "value");
    r.Add("a", "1");
    other = base::BytesToHex(r.Root());
  });
  t.join();
  EXPECT_EQ(other, base::BytesToHex(root.Root()));
}

// The state in memory, with reads of one key failing on demand (a disk error).
class FailingStore : public StateStore {
 public:
  explicit FailingStore(StateMap state) : inner_(std::move(state)) {}
  absl::StatusOr<std::optional<std::string>> GetState(absl::string_view key) const override {
    ++reads_;
    if (key == failing_) return absl::InternalError("disk read failed");
    return inner_.GetState(key);
  }
  void Fail(std::string key) { failing_ = std::move(key); }
  void Write(const WriteSet& writes) { inner_.Write(writes); }
  int reads() const { return reads_; }

 private:
  MemoryStateStore inner_;
  std::string failing_;
  mutable int reads_ = 0;
};

TEST(ExecutorTest, AStoreReadErrorFailsTheBlockAndTheNonceReadAndChangesNothing) {
  const std::vector<base::PrivateKey> keys = chaintest::Keys(2);
  const StateMap genesis = *GenesisState(chaintest::Genesis(keys, 100));
  FailingStore store(genesis);
  Executor exec(0, &store, HashState(genesis), /*cache_bytes=*/0);
  const std::string a = keys[0].public_key().bytes();
  const std::string b = keys[1].public_key().bytes();
  const std::string root = exec.state_root();

  store.Fail(AccountKey(b));
  absl::StatusOr<BlockExecution> r = exec.Execute(1, {chaintest::Transfer(keys[0], 1, b, 5)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(exec.NextNonce(b).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(exec.state_root(), root);
  // The pool refuses a tx whose sender's nonce cannot be read, with the store's error.
  tests::FakeClock clock;
  TxPool pool(TxPoolLimits{}, &clock, [&exec](absl::string_view s) { return exec.NextNonce(s); });
  absl::Status added = pool.Add(chaintest::Transfer(keys[1], 1, a, 1), TxOrigin::kClient);
  EXPECT_EQ(added.code(), absl::StatusCode::kInternal) << added;
  EXPECT_EQ(pool.stats().txs, 0u);

  store.Fail("");
  r = exec.Execute(1, {chaintest::Transfer(keys[0], 1, b, 5)});
  ASSERT_TRUE(r.ok()) << r.status();
  store.Write(r->delta.writes);  // what the ledger's commit does before Apply
  exec.Apply(*r);
  EXPECT_EQ(exec.GetAccount(b)->balance(), 105u);
}

TEST(ExecutorTest, TheStateCacheStaysWithinItsBoundAndServesRepeatedReads) {
  const std::vector<base::PrivateKey> keys = chaintest::Keys(12);
  const StateMap genesis = *GenesisState(chaintest::Genesis(keys, 100));
  FailingStore store(genesis);
  // Three account entries: 33 key bytes, 16 value bytes and 160 of bookkeeping each.
  constexpr size_t kCapacity = 3 * (33 + 16 + 160) + 2;
  Executor exec(0, &store, HashState(genesis), kCapacity);
  for (const base::PrivateKey& k : keys) ASSERT_TRUE(exec.GetAccount(k.public_key().bytes()).ok());
  StateCacheStats stats = exec.cache_stats();
  EXPECT_LE(stats.bytes, kCapacity);
  EXPECT_EQ(stats.entries, 3u);
  EXPECT_EQ(stats.misses, 12u);
  EXPECT_EQ(store.reads(), 12);
  // The most recent key is cached: reading it again does not touch the store.
  ASSERT_TRUE(exec.GetAccount(keys.back().public_key().bytes()).ok());
  EXPECT_EQ(store.reads(), 12);
  EXPECT_EQ(exec.cache_stats().hits, 1u);
  // The oldest was evicted: it is read from the store again.
  ASSERT_TRUE(exec.GetAccount(keys.front().public_key().bytes()).ok());
  EXPECT_EQ(store.reads(), 13);
  // Absent keys are cached too.
  ASSERT_TRUE(exec.GetValue("never written").ok());
  ASSERT_TRUE(exec.GetValue("never written").ok());
  EXPECT_EQ(store.reads(), 14);
  exec.SetCacheCapacity(0);
  stats = exec.cache_stats();
  EXPECT_EQ(stats.entries, 0u);
  EXPECT_EQ(stats.bytes, 0u);
}

}  // namespace
}  // namespace partitions
