// bench_state: block execution and commit over a large state, and what that state costs in memory.
//
// BM_ExecuteCommitOverState/keys:K/disk:D/uniform:U loads K Put entries through execution (no
// consensus, no signatures: the executor does not check them; unsynced blocks of 2,000, then one
// full compaction), then times blocks of 500 txs, each block executed, committed with fsync and
// applied as a node does:
//   uniform:0  transfers among 500 active senders (what loadgen offers): the working set is small,
//              the loaded state is mostly cold;
//   uniform:1  Puts overwriting keys drawn uniformly from the loaded ones (when K = 0, new keys
//              drawn uniformly from 9e9 others, as long as the loaded ones: inserts at random
//              positions, as the overwrites are, with nothing to overwrite): the worst case,
//              nearly every read misses the cache;
//   uniform:2  (K = 0 only) Puts of new keys in sequence, the empty-state baseline of figures
//              before 2026-12-03: it measures the skip list's in-order inserts as much as the
//              state's size.
// Cases: K = 0 and 1,000,000 for each workload, and K = 10,000 for uniform:1 (overwrites of a
// state that fits the caches: the same work per tx as at 1,000,000, a small state).
// disk:1 is the executor over the ledger with its bounded cache (the default 64 MiB); disk:0
// holds the whole state in memory beside the ledger, as the executor did before the state moved
// to disk. The figure is the steady state: the first 100 blocks after the load are timed once
// on their own (cold_tx_s: the block cache, the executor's cache and the OS page cache fill),
// then 5 s of blocks warm up untimed, then blocks are timed. Counters: rss_mib (the process's
// resident memory after the load and the timed blocks), load_s, cold_tx_s, txs per second
// (wall clock). It links noded's allocator (tcmalloc).
//
// RSS is per process: run each case alone, e.g.
//   bench_state --benchmark_filter='keys:1000000/disk:1/uniform:0'
// (tools/bench_scenarios.py state runs the cases that way and prints the table).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/executor.h"
#include "partitions/ledger.h"
#include "partitions/rocksdb_consensus_store.h"
#include "rocksdb/cache.h"
#include "tests/bench/bench_chain_util.h"

namespace partitions {
namespace {

double RssMib() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0;
  long resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

std::string Sender(int i) { return absl::StrFormat("%032d", i); }
std::string Key(uint64_t i) { return absl::StrFormat("key%010d", i); }

// One Put, unsigned: a unique hash and a short body stand in for the signed encoding.
TxPtr MakePut(const std::string& sender, uint64_t nonce, const std::string& key,
              const std::string& value, uint64_t serial, uint32_t partition = 0) {
  auto d = std::make_shared<base::DecodedTx>();
  d->tx.set_partition(partition);
  d->tx.set_sender(sender);
  d->tx.set_nonce(nonce);
  d->tx.mutable_put()->set_key(key);
  d->tx.mutable_put()->set_value(value);
  d->hash = absl::StrFormat("%032d", serial);
  d->signed_bytes = key;
  return d;
}

class Loaded {
 public:
  Loaded(uint64_t keys, bool disk) {
    dir_ = "/tmp/state_bench_XXXXXX";
    CHECK(mkdtemp(dir_.data()) != nullptr);
    LedgerOptions options;
    options.sync = false;
    absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", 0, {}, options);
    CHECK(chain.ok()) << chain.status();
    chain_ = *std::move(chain);
    if (!disk) chain_.executor = std::make_unique<Executor>(0, StateMap());
    const absl::Time start = absl::Now();
    constexpr int kLoadBlock = 2000;
    for (uint64_t next = 0; next < keys;) {
      std::vector<TxPtr> txs;
      for (int i = 0; i < kLoadBlock && next < keys; ++i, ++next) {
        txs.push_back(MakePut(Sender(i), ++nonces_[i], Key(next), std::string(32, 'v'), serial_++));
      }
      Commit(txs);
    }
    // Settle the ledger as a node that grew the state over time would have it, rather than
    // timing the loaded state's compaction debt.
    const absl::Status compacted = chain_.ledger->Compact();
    CHECK(compacted.ok()) << compacted;
    load_s_ = absl::ToDoubleSeconds(absl::Now() - start);
  }
  ~Loaded() {
    chain_.executor.reset();
    chain_.ledger.reset();
    std::filesystem::remove_all(dir_);
  }

  void Commit(const std::vector<TxPtr>& txs) { CommitBenchBlock(chain_, txs); }

  // A block of `n` Puts, overwriting keys drawn from the first `keys`; when 0, new keys drawn
  // uniformly from a large space or (`sequential`) in order.
  std::vector<TxPtr> UniformPuts(int n, uint64_t keys, bool sequential, std::mt19937_64& rng) {
    std::vector<TxPtr> txs;
    for (int i = 0; i < n; ++i) {
      const uint64_t k = keys > 0     ? rng() % keys
                         : sequential ? (1ull << 40) + serial_
                                      : 1000000000 + rng() % 9000000000ull;
      txs.push_back(MakePut(Sender(i), ++nonces_[i], Key(k), std::string(32, 'w'), serial_++));
    }
    return txs;
  }
  // A block of the workload (the `uniform` argument: 0 transfers, 1 uniform Puts, 2 Puts of new
  // keys in sequence).
  std::vector<TxPtr> Block(int workload, uint64_t keys, std::mt19937_64& rng) {
    return workload > 0 ? UniformPuts(kBlockTxs, keys, workload == 2, rng)
                        : ActiveTransfers(kBlockTxs, rng);
  }

  // The first blocks after the load, timed once: the caches are cold (the block cache, the
  // executor's cache, the memtable empty after the compaction). Returns txs per second.
  double TimeColdBlocks(int workload, uint64_t keys, std::mt19937_64& rng) {
    constexpr int kColdBlocks = 100;
    std::vector<std::vector<TxPtr>> blocks;
    for (int i = 0; i < kColdBlocks; ++i) blocks.push_back(Block(workload, keys, rng));
    const absl::Time start = absl::Now();
    for (const auto& txs : blocks) Commit(txs);
    return kColdBlocks * kBlockTxs / absl::ToDoubleSeconds(absl::Now() - start);
  }

  static constexpr int kBlockTxs = 500;

  // A block of `n` transfers (of 0: balances do not matter here) between the first `n` senders.
  std::vector<TxPtr> ActiveTransfers(int n, std::mt19937_64& rng) {
    std::vector<TxPtr> txs;
    for (int i = 0; i < n; ++i) {
      auto d = std::make_shared<base::DecodedTx>();
      d->tx.set_partition(0);
      d->tx.set_sender(Sender(i));
      d->tx.set_nonce(++nonces_[i]);
      d->tx.mutable_transfer()->set_to(Sender(static_cast<int>(rng() % n)));
      d->tx.mutable_transfer()->set_amount(0);
      d->hash = absl::StrFormat("%032d", serial_++);
      d->signed_bytes = d->hash;
      txs.push_back(std::move(d));
    }
    return txs;
  }

  double load_s() const { return load_s_; }

 private:
  std::string dir_;
  Chain chain_;
  uint64_t nonces_[2000] = {};
  uint64_t serial_ = 0;
  double load_s_ = 0;
};

// The loaded state of the case running (see BM_ExecuteCommitOverState). Closed by main before
// exit: RocksDB's own statics must outlive it.
std::unique_ptr<Loaded> loaded;
int64_t loaded_case = -1;
double cold_tx_s = 0;
std::mt19937_64 rng(7);

void BM_ExecuteCommitOverState(benchmark::State& state) {
  const uint64_t keys = static_cast<uint64_t>(state.range(0));
  const bool disk = state.range(1) != 0;
  const int workload = static_cast<int>(state.range(2));
  // Google Benchmark calls this once per warm-up and trial run; the state is loaded once per
  // process and case, and later calls go on from where the last one left it.
  const int64_t this_case = (state.range(0) * 2 + state.range(1)) * 3 + state.range(2);
  if (loaded == nullptr || loaded_case != this_case) {
    loaded.reset();
    loaded = std::make_unique<Loaded>(keys, disk);
    loaded_case = this_case;
    cold_tx_s = loaded->TimeColdBlocks(workload, keys, rng);
  }
  state.counters["load_s"] = loaded->load_s();
  state.counters["cold_tx_s"] = cold_tx_s;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<TxPtr> txs = loaded->Block(workload, keys, rng);
    state.ResumeTiming();
    loaded->Commit(txs);
  }
  state.SetItemsProcessed(state.iterations() * Loaded::kBlockTxs);
  state.counters["rss_mib"] = RssMib();
}
BENCHMARK(BM_ExecuteCommitOverState)
    ->ArgNames({"keys", "disk", "uniform"})
    ->ArgsProduct({{0, 1000000}, {1, 0}, {0, 1}})
    ->Args({10000, 1, 1})
    ->Args({0, 1, 2})
    ->Args({0, 0, 2})
    ->Unit(benchmark::kMillisecond)
    ->MinWarmUpTime(5.0)
    ->MinTime(5.0)
    ->UseRealTime();

// Memtables of many ledgers in one process, as a node with many partitions has them.
// BM_LedgersWriteBuffers/ledgers:N/budget_mib:B opens N ledgers whose write buffers divide B MiB
// (LedgerWriteBufferBytes; B = 0: RocksDB's default 64 MiB each, as every ledger had before
// resources.ledger_write_buffer_bytes), then commits kRounds rounds of one block of 500
// transfers (unsigned, unsynced) to each ledger in turn. Counters: memtable_mib_peak (the most
// the N ledgers' memtables held together, read after each round), memtable_mib_end, rss_mib
// (after the rounds), txs per second (wall clock). Run each case alone (RSS is per process):
//   bench_state --benchmark_filter='LedgersWriteBuffers/ledgers:16/budget_mib:256/'
void BM_LedgersWriteBuffers(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const uint64_t budget = static_cast<uint64_t>(state.range(1)) << 20;
  constexpr int kRounds = 240;
  constexpr int kBlockTxs = 500;
  std::string dir = "/tmp/state_bench_XXXXXX";
  CHECK(mkdtemp(dir.data()) != nullptr);
  LedgerOptions options;
  options.sync = false;
  options.write_buffer_bytes = LedgerWriteBufferBytes(budget, static_cast<size_t>(n));
  std::vector<Chain> chains;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Chain> chain =
        OpenChain(absl::StrFormat("%s/ledger%d", dir, i), static_cast<uint32_t>(i), {}, options);
    CHECK(chain.ok()) << chain.status();
    chains.push_back(*std::move(chain));
  }
  std::mt19937_64 rng(11);
  std::vector<std::vector<uint64_t>> nonces(static_cast<size_t>(n),
                                            std::vector<uint64_t>(kBlockTxs, 0));
  uint64_t serial = 0;
  uint64_t peak = 0;
  uint64_t end = 0;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < n; ++i) {
        state.PauseTiming();
        std::vector<TxPtr> txs;
        for (int t = 0; t < kBlockTxs; ++t) {
          auto d = std::make_shared<base::DecodedTx>();
          d->tx.set_partition(static_cast<uint32_t>(i));
          d->tx.set_sender(Sender(t));
          d->tx.set_nonce(++nonces[static_cast<size_t>(i)][static_cast<size_t>(t)]);
          d->tx.mutable_transfer()->set_to(Sender(static_cast<int>(rng() % kBlockTxs)));
          d->tx.mutable_transfer()->set_amount(0);
          d->hash = absl::StrFormat("%064d", serial++);
          d->signed_bytes = std::string(200, 'x');  // about a signed transfer's size
          txs.push_back(std::move(d));
        }
        state.ResumeTiming();
        CommitBenchBlock(chains[static_cast<size_t>(i)], txs);
      }
      state.PauseTiming();
      end = 0;
      for (const Chain& c : chains) end += c.ledger->MemtableBytes();
      peak = std::max(peak, end);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * kRounds * n * kBlockTxs);
  state.counters["memtable_mib_peak"] = static_cast<double>(peak) / (1 << 20);
  state.counters["memtable_mib_end"] = static_cast<double>(end) / (1 << 20);
  state.counters["write_buffer_mib"] = static_cast<double>(options.write_buffer_bytes) / (1 << 20);
  state.counters["rss_mib"] = RssMib();
  chains.clear();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_LedgersWriteBuffers)
    ->ArgNames({"ledgers", "budget_mib"})
    ->Args({16, 0})
    ->Args({16, 256})
    ->Args({1, 0})
    ->Args({1, 256})
    ->Args({1, 16})
    ->Args({1, 32})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// Block caches of many ledgers in one process, as a node with many partitions has them.
// BM_LedgersBlockCaches/ledgers:N/cache_kib:C opens N ledgers with block caches of C KiB each,
// and the write buffers a node's default budget gives N partitions, loads each with kKeys Puts of
// 1 KiB values (unsynced blocks of 2,000, then a full compaction:
// 32 MiB of state per ledger, larger than any cache here), then reads kReads values drawn
// uniformly over every ledger's keys, untimed (the caches fill), and kReads more, timed (reads
// per second, wall clock). C = 32768 is state.block_cache_bytes' default, what every ledger held
// before the partition's memory share bounded it; 7282 is what the default share gives each of
// 16 partitions (resources.memory_bytes 1 GiB / 16 x 32 / 288 MiB of configured memory), 14564
// that plus what a quiet partition's block cache borrows of its pool's and lanes' room there
// (half of their 192/288 of the share, a third of it to the block cache: docs/ARCHITECTURE.md,
// "Cache borrowing").
// Counters: block_cache_mib (what the N caches hold after the reads, pinned blocks included),
// rss_mib (after the reads), load_s. Run each case alone (RSS is per process):
//   bench_state --benchmark_filter='LedgersBlockCaches/ledgers:16/cache_kib:32768/'
void BM_LedgersBlockCaches(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  constexpr uint64_t kKeys = 32768;
  constexpr int kReads = 400000;
  constexpr int kLoadBlock = 2000;
  std::string dir = "/tmp/state_bench_XXXXXX";
  CHECK(mkdtemp(dir.data()) != nullptr);
  LedgerOptions options;
  options.sync = false;
  options.block_cache_bytes = static_cast<size_t>(state.range(1)) << 10;
  // The memtables as a node of N partitions divides them (resources.ledger_write_buffer_bytes).
  options.write_buffer_bytes = LedgerWriteBufferBytes(uint64_t{256} << 20, static_cast<size_t>(n));
  std::vector<Chain> chains;
  const absl::Time start = absl::Now();
  uint64_t serial = 0;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Chain> chain =
        OpenChain(absl::StrFormat("%s/ledger%d", dir, i), static_cast<uint32_t>(i), {}, options);
    CHECK(chain.ok()) << chain.status();
    std::vector<uint64_t> nonces(kLoadBlock, 0);
    for (uint64_t next = 0; next < kKeys;) {
      std::vector<TxPtr> txs;
      for (int t = 0; t < kLoadBlock && next < kKeys; ++t, ++next) {
        txs.push_back(MakePut(Sender(t), ++nonces[static_cast<size_t>(t)], Key(next),
                              std::string(1024, 'v'), serial++, static_cast<uint32_t>(i)));
      }
      CommitBenchBlock(*chain, txs);
    }
    const absl::Status compacted = chain->ledger->Compact();
    CHECK(compacted.ok()) << compacted;
    chains.push_back(*std::move(chain));
  }
  const double load_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::mt19937_64 rng(13);
  auto read = [&](int count) {
    for (int r = 0; r < count; ++r) {
      const Chain& c = chains[rng() % static_cast<uint64_t>(n)];
      absl::StatusOr<std::optional<std::string>> v = c.ledger->GetValue(Key(rng() % kKeys));
      CHECK(v.ok() && v->has_value()) << v.status();
    }
  };
  read(kReads);  // the caches fill
  for (auto _ : state) read(kReads);
  uint64_t cached = 0;
  for (const Chain& c : chains) cached += c.ledger->BlockCacheBytes();
  state.SetItemsProcessed(state.iterations() * kReads);
  state.counters["block_cache_mib"] = static_cast<double>(cached) / (1 << 20);
  state.counters["rss_mib"] = RssMib();
  state.counters["load_s"] = load_s;
  chains.clear();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_LedgersBlockCaches)
    ->ArgNames({"ledgers", "cache_kib"})
    ->Args({16, 32768})
    ->Args({16, 7282})
    ->Args({16, 14564})
    ->Args({1, 32768})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// The consensus stores (PBFT logs) of many partitions in one process, as a node has them.
// BM_ConsensusStores/stores:N/legacy:L opens N stores and appends kBlocks blocks' worth of log to
// each in turn (one synced AppendLog per block: three prepares of about 1 KiB, as a prepared
// certificate with its batch digests, and a commit), with a stable checkpoint every 128 blocks
// (which deletes the log below it), then closes and reopens every store and loads its log (a
// restart). legacy:1 approximates what each store had before 2026-12-07 (RocksDB's
// OptimizeForSmallDb): a 2 MiB write buffer and a 16 MiB block cache of its own (one shard here;
// the memtables were charged to that cache, which bounded nothing, and the sizes of its two-level
// index aside); legacy:0 is today's: the default 512 KiB write buffer and one 8 MiB cache for all
// (Node::kConsensusStoreCacheBytes). Counters:
// memtable_mib_peak (the N stores' memtables together, read after each round), cache_mib (their
// caches after the reloads), rss_mib (at the end), appends per second (wall clock, the fsyncs
// included). Run each case alone (RSS is per process):
//   bench_state --benchmark_filter='ConsensusStores/stores:16/legacy:0'
void BM_ConsensusStores(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool legacy = state.range(1) != 0;
  constexpr int kBlocks = 600;
  constexpr uint64_t kCheckpointEvery = 128;
  std::string dir = "/tmp/state_bench_XXXXXX";
  CHECK(mkdtemp(dir.data()) != nullptr);
  std::shared_ptr<rocksdb::Cache> shared = rocksdb::NewLRUCache(8 << 20, 1);
  ConsensusStoreOptions options;
  if (legacy) {
    options.own_cache_bytes = 16 << 20;
    options.write_buffer_bytes = 2 << 20;
  } else {
    options.block_cache = shared;
  }
  auto open_all = [&] {
    std::vector<std::unique_ptr<RocksDbConsensusStore>> stores;
    for (int i = 0; i < n; ++i) {
      auto store = RocksDbConsensusStore::Open(absl::StrFormat("%s/store%d", dir, i), options);
      CHECK(store.ok()) << store.status();
      stores.push_back(*std::move(store));
    }
    return stores;
  };
  std::vector<std::unique_ptr<RocksDbConsensusStore>> stores = open_all();
  uint64_t peak = 0;
  for (auto _ : state) {
    for (uint64_t seq = 1; seq <= kBlocks; ++seq) {
      for (auto& store : stores) {
        std::vector<ConsensusMessage> log;
        for (int k = 0; k < 4; ++k) {
          ConsensusMessage m;
          auto* vote = k < 3 ? m.mutable_prepare() : nullptr;
          if (vote != nullptr) {
            vote->set_seq(seq);
            vote->set_digest(std::string(1000, static_cast<char>('a' + k)));
          } else {
            m.mutable_commit()->set_seq(seq);
            m.mutable_commit()->set_digest(std::string(32, 'c'));
          }
          m.set_sender(static_cast<uint32_t>(k));
          m.set_signature(std::string(64, 's'));
          log.push_back(std::move(m));
        }
        {
          absl::Status s = store->AppendLog(log);
          CHECK(s.ok()) << s;
        }
        if (seq % kCheckpointEvery == 0) {
          node::consensus::StableCheckpointRecord record;
          record.set_seq(seq - kCheckpointEvery);
          {
            absl::Status s = store->PutStableCheckpoint(record);
            CHECK(s.ok()) << s;
          }
        }
      }
      state.PauseTiming();
      uint64_t memtables = 0;
      for (const auto& store : stores) memtables += store->Memory().memtable_bytes;
      peak = std::max(peak, memtables);
      state.ResumeTiming();
    }
  }
  stores.clear();
  stores = open_all();
  uint64_t caches = 0;  // the stores' own caches (legacy), or the shared one's usage below
  for (const auto& store : stores) {
    {
      absl::Status s = store->Load().status();
      CHECK(s.ok()) << s;
    }
    caches += store->Memory().own_cache_bytes;
  }
  if (!legacy) caches = shared->GetUsage();
  state.SetItemsProcessed(state.iterations() * kBlocks * n);
  state.counters["memtable_mib_peak"] = static_cast<double>(peak) / (1 << 20);
  state.counters["cache_mib"] = static_cast<double>(caches) / (1 << 20);
  state.counters["rss_mib"] = RssMib();
  stores.clear();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_ConsensusStores)
    ->ArgNames({"stores", "legacy"})
    ->Args({16, 1})
    ->Args({16, 0})
    ->Args({64, 1})
    ->Args({64, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace partitions

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  partitions::loaded.reset();
  benchmark::Shutdown();
  return 0;
}
