// Chain benchmarks: Ed25519 verification (the node's per-core ceiling for admitted txs), tx
// decoding, tx pool add/select, and executing + durably committing 500-tx blocks.
//
//   build-x/tests/bench/bench_chain --benchmark_min_time=0.5
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/executor.h"
#include "partitions/ledger.h"
#include "partitions/state_root.h"
#include "partitions/tx_pool.h"
#include "tests/mocks/fake_clock.h"

namespace partitions {
namespace {

base::PrivateKey KeyFor(int i) {
  std::string seed(32, '\0');
  for (int b = 0; b < 4; ++b) seed[b] = static_cast<char>((i >> (8 * b)) & 0xff);
  seed[31] = 1;
  return *base::PrivateKey::FromSeed(seed);
}

TxPtr MakeTransfer(const base::PrivateKey& from, uint64_t nonce, const std::string& to,
                   uint64_t amount) {
  node::chain::Transaction tx;
  tx.set_nonce(nonce);
  tx.mutable_transfer()->set_to(to);
  tx.mutable_transfer()->set_amount(amount);
  auto d = base::DecodeSignedTx(base::SignTx(tx, from), base::TxLimits{});
  CHECK(d.ok()) << d.status();
  return std::make_shared<const base::DecodedTx>(*std::move(d));
}

// One signature check as the node runs it (key parse + verify), single thread.
void BM_Ed25519VerifyTx(benchmark::State& state) {
  TxPtr tx = MakeTransfer(KeyFor(1), 1, KeyFor(2).public_key().bytes(), 5);
  for (auto _ : state) {
    absl::Status s = base::VerifySignature(*tx);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Ed25519VerifyTx);

// What VerifySignature did before the key cache: parse the sender's key, then verify.
void BM_Ed25519VerifyTxParsingTheKey(benchmark::State& state) {
  TxPtr tx = MakeTransfer(KeyFor(1), 1, KeyFor(2).public_key().bytes(), 5);
  for (auto _ : state) {
    absl::StatusOr<base::PublicKey> key = base::PublicKey::FromBytes(tx->sender());
    benchmark::DoNotOptimize(key->Verify(tx->tx_bytes(), tx->signature()));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Ed25519VerifyTxParsingTheKey);

// The raw verify with the public key already parsed (the floor under BM_Ed25519VerifyTx).
void BM_Ed25519VerifyRaw(benchmark::State& state) {
  const base::PrivateKey key = KeyFor(1);
  const std::string msg(120, 'm');
  const std::string sig = key.Sign(msg);
  for (auto _ : state) benchmark::DoNotOptimize(key.public_key().Verify(msg, sig));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Ed25519VerifyRaw);

void BM_DecodeSignedTx(benchmark::State& state) {
  TxPtr tx = MakeTransfer(KeyFor(1), 1, KeyFor(2).public_key().bytes(), 5);
  for (auto _ : state) {
    auto d = base::DecodeSignedTx(tx->signed_bytes, base::TxLimits{});
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(tx->size()));
}
BENCHMARK(BM_DecodeSignedTx);

// One entry update of the state root (remove old value, add new): two LtHash expansions.
void BM_StateRootUpdate(benchmark::State& state) {
  StateRoot root;
  const std::string key = "a" + std::string(32, 'k');
  const std::string v1(16, '1'), v2(16, '2');
  root.Add(key, v1);
  for (auto _ : state) {
    root.Remove(key, v1);
    root.Add(key, v2);
    root.Remove(key, v2);
    root.Add(key, v1);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_StateRootUpdate);

// 1000 senders x 10 nonces, pre-signed once.
const std::vector<TxPtr>& PoolTxs() {
  static const auto* txs = [] {
    auto* v = new std::vector<TxPtr>();
    const std::string to = KeyFor(0).public_key().bytes();
    for (int n = 1; n <= 10; ++n) {
      for (int s = 1; s <= 1000; ++s) v->push_back(MakeTransfer(KeyFor(s), n, to, 1));
    }
    return v;
  }();
  return *txs;
}

TxPoolLimits BenchLimits() {
  TxPoolLimits limits;
  limits.max_txs = 1'000'000;
  limits.max_bytes = 1u << 30;
  return limits;
}

// Add 10k txs (1000 senders, 10 nonces each) to an empty pool.
void BM_PoolAdd(benchmark::State& state) {
  const std::vector<TxPtr>& txs = PoolTxs();
  tests::FakeClock clock;
  for (auto _ : state) {
    state.PauseTiming();
    auto pool = std::make_unique<TxPool>(BenchLimits(), &clock, nullptr);
    state.ResumeTiming();
    for (const TxPtr& tx : txs) CHECK(pool->Add(tx, TxOrigin::kClient).ok());
    state.PauseTiming();
    pool.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(txs.size()));
}
BENCHMARK(BM_PoolAdd)->Unit(benchmark::kMillisecond);

// Select 500-tx batches (1 MiB cap) from a pool of 10k txs across 1000 senders.
void BM_PoolSelect500(benchmark::State& state) {
  tests::FakeClock clock;
  TxPool pool(BenchLimits(), &clock, nullptr);
  for (const TxPtr& tx : PoolTxs()) CHECK(pool.Add(tx, TxOrigin::kClient).ok());
  for (auto _ : state) {
    std::vector<TxPtr> batch = pool.SelectBatch(500, 1 << 20);
    if (batch.size() < 500) {
      state.PauseTiming();
      pool.ReleaseAllProposed();
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(batch);
  }
  state.SetItemsProcessed(state.iterations() * 500);
}
BENCHMARK(BM_PoolSelect500)->Unit(benchmark::kMicrosecond);

// Execute a 500-transfer block and commit it (one WriteBatch; arg 1 = fsync, 0 = no fsync).
// Signing the next block's txs is excluded from the timing.
void BM_LedgerCommit500(benchmark::State& state) {
  const bool sync = state.range(0) != 0;
  std::string dir = "/tmp/chain_bench_XXXXXX";
  CHECK(mkdtemp(dir.data()) != nullptr);
  constexpr int kSenders = 500;
  std::vector<base::PrivateKey> keys;
  node::chain::GenesisConfig genesis;
  for (int i = 0; i < kSenders; ++i) {
    keys.push_back(KeyFor(i + 10));
    auto* a = genesis.add_allocations();
    a->set_address_hex(absl::BytesToHexString(keys.back().public_key().bytes()));
    a->set_balance(1'000'000);
  }
  LedgerOptions options;
  options.sync = sync;
  absl::StatusOr<Chain> chain = OpenChain(dir + "/ledger", 0, genesis, options);
  CHECK(chain.ok()) << chain.status();
  for (auto _ : state) {
    state.PauseTiming();
    const uint64_t height = chain->ledger->last_height() + 1;
    std::vector<TxPtr> txs;
    for (int i = 0; i < kSenders; ++i) {
      txs.push_back(
          MakeTransfer(keys[i], height, keys[(i + 1) % kSenders].public_key().bytes(), 1));
    }
    state.ResumeTiming();
    BlockExecution r = *chain->executor->Execute(height, txs);
    node::chain::Block block;
    for (const TxPtr& tx : txs) {
      block.add_tx_hashes(tx->hash);
      block.add_txs(tx->signed_bytes);
    }
    node::chain::BlockHeader* h = block.mutable_header();
    h->set_height(height);
    h->set_parent_hash(chain->ledger->last_block_hash());
    h->set_tx_root(TxRoot(block.tx_hashes()));
    h->set_state_root(r.state_root);
    h->set_tx_count(kSenders);
    CHECK(chain->ledger->CommitBlock(block, r.receipts, r.delta).ok());
    chain->executor->Apply(r);
  }
  state.SetItemsProcessed(state.iterations() * kSenders);
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  chain->ledger.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_LedgerCommit500)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace partitions
