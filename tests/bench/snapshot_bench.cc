// bench_snapshot: what a replica far behind pays to catch up, by replaying every block against
// by installing a snapshot of the state (partitions/snapshot_sync.h), as history and state grow.
//
// BM_Join/history:H/keys:K builds a source ledger of H blocks whose state holds K Put entries
// (loaded in the first blocks, 2,000 per block) and then H - K/2000 blocks of 20 txs that
// overwrite loaded keys and move funds (history grows, the state does not). Then, side by side
// in one run, on fresh ledgers synced as a node's are (fsync per write):
//   replay_s    executes and commits the H blocks one by one (what block sync does, minus the
//               network and the commit certificates' signature checks: a lower bound);
//   snapshot_s  fetches the state at H from three in-process peers serving the source ledger
//               (manifest built and checked: f+1 identical and the lanes summing to the root;
//               every chunk read at that height, checked and staged) and installs it.
// Counters: replay_s, snapshot_s, chunks, state_mib (keys and values). One iteration each.
//
// BM_Prune/history:H builds the same chain (10,000 keys) twice, side by side, synced as a node's
// ledger: keeping every block, and pruning all but the last 1,064 (state.retain_blocks at its
// least with the default snapshot gap and window). Counters: commit_s of each (what pruning costs
// the commits), disk_mib of each ledger directory after a full compaction (what it saves), and
// blocks each holds.
//
//   bench_snapshot --benchmark_filter='history:20000'
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "flowctl/clock.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/executor.h"
#include "partitions/ledger.h"
#include "partitions/snapshot_sync.h"
#include "tests/bench/bench_chain_util.h"

namespace partitions {
namespace {

constexpr int kLoadPerBlock = 2000;
constexpr int kTxsPerBlock = 20;
constexpr int kSenders = 100;

std::string Sender(int i) { return absl::StrFormat("%032d", i); }
std::string Key(uint64_t i) { return absl::StrFormat("key%010d", i); }

// Unsigned txs (the executor does not check signatures): a unique hash, a short body.
TxPtr MakeTx(int sender, uint64_t nonce, uint64_t serial, const std::string* key,
             const std::string& value) {
  auto d = std::make_shared<base::DecodedTx>();
  d->tx.set_partition(0);
  d->tx.set_sender(Sender(sender));
  d->tx.set_nonce(nonce);
  if (key != nullptr) {
    d->tx.mutable_put()->set_key(*key);
    d->tx.mutable_put()->set_value(value);
  } else {
    d->tx.mutable_transfer()->set_to(Sender((sender + 1) % kSenders));
    d->tx.mutable_transfer()->set_amount(1);
  }
  d->hash = absl::StrFormat("%032d", serial);
  d->signed_bytes = d->hash;
  return d;
}

void Ok(const absl::Status& s) { CHECK(s.ok()) << s; }

// The txs of block `height` (1-based) of the chain with `keys` loaded: deterministic, so the
// source and the replay build the same blocks. `nonces` is the senders' next nonce.
std::vector<TxPtr> BlockTxs(uint64_t height, uint64_t keys, std::vector<uint64_t>& nonces) {
  std::vector<TxPtr> txs;
  const uint64_t load_blocks = (keys + kLoadPerBlock - 1) / kLoadPerBlock;
  if (height <= load_blocks) {
    for (uint64_t k = (height - 1) * kLoadPerBlock; k < std::min(keys, height * kLoadPerBlock);
         ++k) {
      const int s = static_cast<int>(k % kSenders);
      const std::string key = Key(k);
      txs.push_back(MakeTx(s, ++nonces[s], height * 100000 + txs.size(), &key,
                           std::string(48, static_cast<char>('a' + k % 26))));
    }
    return txs;
  }
  for (int i = 0; i < kTxsPerBlock; ++i) {
    const int s = static_cast<int>((height * 7 + static_cast<uint64_t>(i)) % kSenders);
    const std::string key = Key((height * 7919 + static_cast<uint64_t>(i) * 104729) % keys);
    const bool put = i % 2 == 0;
    txs.push_back(MakeTx(s, ++nonces[s], height * 100000 + static_cast<uint64_t>(i),
                         put ? &key : nullptr, absl::StrFormat("v%d", height)));
  }
  return txs;
}

struct TempDir {
  TempDir() {
    path = "/tmp/snapshot_bench_XXXXXX";
    CHECK(mkdtemp(path.data()) != nullptr);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

Chain OpenFresh(const std::string& dir, bool sync, uint64_t retain_blocks = 0) {
  LedgerOptions options;
  options.sync = sync;
  options.retain_blocks = retain_blocks;
  absl::StatusOr<Chain> chain = OpenChain(dir, 0, {}, options);
  CHECK(chain.ok()) << chain.status();
  return *std::move(chain);
}

void BM_Join(benchmark::State& state) {
  const auto history = static_cast<uint64_t>(state.range(0));
  const auto keys = static_cast<uint64_t>(state.range(1));
  TempDir dir;
  // The source: built unsynced (it is not what is measured).
  Chain source = OpenFresh(dir.path + "/source", /*sync=*/false);
  {
    std::vector<uint64_t> nonces(kSenders, 0);
    for (uint64_t h = 1; h <= history; ++h) CommitBenchBlock(source, BlockTxs(h, keys, nonces));
    Ok(source.ledger->Compact());
  }
  const std::string root = source.executor->state_root();
  double replay_s = 0;
  double snapshot_s = 0;
  uint64_t chunks = 0;
  double state_mib = 0;
  for (auto _ : state) {
    {
      Chain replay = OpenFresh(dir.path + "/replay", /*sync=*/true);
      std::vector<uint64_t> nonces(kSenders, 0);
      const absl::Time start = absl::Now();
      for (uint64_t h = 1; h <= history; ++h) CommitBenchBlock(replay, BlockTxs(h, keys, nonces));
      replay_s = absl::ToDoubleSeconds(absl::Now() - start);
      CHECK_EQ(replay.executor->state_root(), root);
    }
    {
      Chain joiner = OpenFresh(dir.path + "/joiner", /*sync=*/true);
      std::vector<std::unique_ptr<SnapshotServer>> servers;
      for (int i = 0; i < 3; ++i) {
        servers.push_back(std::make_unique<SnapshotServer>(
            source.ledger.get(), flowctl::Clock::Real(),
            SnapshotServer::Options{.serve_bytes_per_second = 1e12}));
      }
      const absl::Time start = absl::Now();
      SnapshotFetcher fetcher(joiner.ledger.get(), {.n = 4, .self = 3});
      std::vector<SnapshotFetcher::Send> sends;
      Ok(fetcher.Start({.seq = history, .chain_digest = std::string(32, 'c'), .state_root = root},
                       flowctl::Clock::Real()->NowNanos(), &sends));
      std::deque<SnapshotFetcher::Send> queue(sends.begin(), sends.end());
      while (!queue.empty()) {
        SnapshotFetcher::Send send = std::move(queue.front());
        queue.pop_front();
        const node::partition::PartitionMessage answer =
            servers[send.to]->Answer(3, send.msg.snapshot_request());
        std::vector<SnapshotFetcher::Send> more;
        const int64_t now = flowctl::Clock::Real()->NowNanos();
        Ok(answer.has_snapshot_manifest()
               ? fetcher.OnManifest(send.to, answer.snapshot_manifest(), now, &more)
               : fetcher.OnChunk(send.to, answer.snapshot_chunk(), now, &more));
        for (auto& m : more) queue.push_back(std::move(m));
      }
      CHECK(fetcher.complete());
      chunks = fetcher.stats().chunks_total;
      absl::StatusOr<StateRoot> lanes = fetcher.Install({});
      Ok(lanes.status());
      joiner.executor->Reset(*lanes);
      snapshot_s = absl::ToDoubleSeconds(absl::Now() - start);
      CHECK_EQ(joiner.executor->state_root(), root);
      uint64_t bytes = 0;
      Ok(joiner.ledger->ScanStateAt(history, "", [&](absl::string_view k, absl::string_view v) {
        bytes += k.size() + v.size();
        return true;
      }));
      state_mib = static_cast<double>(bytes) / (1 << 20);
    }
  }
  state.counters["replay_s"] = replay_s;
  state.counters["snapshot_s"] = snapshot_s;
  state.counters["chunks"] = static_cast<double>(chunks);
  state.counters["state_mib"] = state_mib;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

void BM_Prune(benchmark::State& state) {
  const auto history = static_cast<uint64_t>(state.range(0));
  constexpr uint64_t kKeys = 10'000;
  constexpr uint64_t kRetain = 1'064;
  TempDir dir;
  for (auto _ : state) {
    for (const bool prune : {false, true}) {
      const std::string path = dir.path + (prune ? "/pruned" : "/full");
      Chain chain = OpenFresh(path, /*sync=*/true, prune ? kRetain : 0);
      std::vector<uint64_t> nonces(kSenders, 0);
      const absl::Time start = absl::Now();
      for (uint64_t h = 1; h <= history; ++h) CommitBenchBlock(chain, BlockTxs(h, kKeys, nonces));
      const double commit_s = absl::ToDoubleSeconds(absl::Now() - start);
      Ok(chain.ledger->Compact());
      const std::string name = prune ? "pruned_" : "full_";
      state.counters[name + "commit_s"] = commit_s;
      state.counters[name + "disk_mib"] = static_cast<double>(DirBytes(path)) / (1 << 20);
      state.counters[name + "blocks"] =
          static_cast<double>(chain.ledger->last_height() + 1 - chain.ledger->earliest_height());
    }
  }
}

BENCHMARK(BM_Prune)
    ->ArgName("history")
    ->Arg(2'000)
    ->Arg(20'000)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

BENCHMARK(BM_Join)
    ->ArgNames({"history", "keys"})
    ->Args({2'000, 10'000})
    ->Args({20'000, 10'000})
    ->Args({2'000, 100'000})
    ->Args({20'000, 100'000})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace partitions

BENCHMARK_MAIN();
