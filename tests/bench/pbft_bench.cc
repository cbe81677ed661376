// Throughput of the PBFT state machine alone: 4 replicas in one thread, every message delivered
// immediately (FIFO, no network, no delays), 500-tx batches, in-memory consensus store, a no-op
// signer (signatures are the transport's cost, measured elsewhere). One iteration = one block
// committed by all 4 replicas, so CPU time per iteration is the CPU per block for the whole
// 4-replica cluster, and items_per_second is blocks/s.
//
//   build-pbft/tests/bench/bench_pbft --benchmark_min_time=0.5
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_replica.h"
#include "partitions/round_times.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/mocks/fake_pbft_crypto.h"

namespace partitions {
namespace {

class AllTxs final : public PbftTxSource {
 public:
  bool HasTx(absl::string_view, uint64_t) const override { return true; }
};

class NoBlocks final : public PbftBlockSource {
 public:
  std::optional<node::consensus::CommittedBatch> GetCommitted(uint64_t) const override {
    return std::nullopt;
  }
};

class Cluster {
 public:
  explicit Cluster(uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      PbftConfig config;
      config.n = n;
      config.self = i;
      stores_.push_back(std::make_unique<tests::FakeConsensusStore>());
      auto r = PbftReplica::Create(config, {&crypto_, &txs_, stores_.back().get(), &blocks_}, {});
      replicas_.push_back(std::move(*r));
      Apply(i, replicas_.back()->Step(PbftStart{}));
    }
    Drain();
  }

  bool CanPropose() const { return replicas_[0]->CanPropose(); }

  void Propose(std::vector<std::string> batch) {
    Apply(0, replicas_[0]->Step(PbftBatchReady{std::move(batch)}));
  }

  void Drain() {
    while (!queue_.empty()) {
      auto [to, msg] = std::move(queue_.front());
      queue_.pop_front();
      Apply(to, replicas_[to]->Step(PbftMessage{*msg}));
    }
  }

  uint64_t commits() const { return commits_; }

 private:
  void Apply(uint32_t from, std::vector<PbftAction> actions) {
    for (PbftAction& a : actions) {
      if (auto* b = std::get_if<PbftBroadcast>(&a)) {
        auto msg = std::make_shared<const ConsensusMessage>(std::move(b->msg));
        for (uint32_t to = 0; to < replicas_.size(); ++to) {
          if (to != from) queue_.emplace_back(to, msg);
        }
      } else if (auto* s = std::get_if<PbftSend>(&a)) {
        queue_.emplace_back(s->to, std::make_shared<const ConsensusMessage>(std::move(s->msg)));
      } else if (std::holds_alternative<PbftCommit>(a)) {
        ++commits_;
      }
    }
  }

  // Signatures are free here: the benchmark measures the state machine alone.
  tests::FakePbftCrypto crypto_{0, tests::FakePbftCrypto::Trust::kAll};
  AllTxs txs_;
  NoBlocks blocks_;
  std::vector<std::unique_ptr<tests::FakeConsensusStore>> stores_;
  std::vector<std::unique_ptr<PbftReplica>> replicas_;
  std::deque<std::pair<uint32_t, std::shared_ptr<const ConsensusMessage>>> queue_;
  uint64_t commits_ = 0;
};

std::vector<std::string> MakeBatch(uint64_t block, int txs) {
  std::vector<std::string> batch;
  batch.reserve(txs);
  for (int i = 0; i < txs; ++i) {
    batch.push_back(ChainDigest(GenesisDigest(), block * 1000 + i, "bench"));
  }
  return batch;
}

// One block at a time: propose, deliver everything, all 4 replicas commit.
void BM_PbftCommit500TxBlocks(benchmark::State& state) {
  const int txs = static_cast<int>(state.range(0));
  Cluster cluster(4);
  std::vector<std::vector<std::string>> batches;
  for (uint64_t b = 0; b < 64; ++b) batches.push_back(MakeBatch(b, txs));
  uint64_t block = 0;
  for (auto _ : state) {
    cluster.Propose(batches[block++ % batches.size()]);
    cluster.Drain();
  }
  if (cluster.commits() != 4 * block) state.SkipWithError("not every replica committed");
  state.SetItemsProcessed(static_cast<int64_t>(block));
  state.counters["txs_per_block"] = txs;
}
BENCHMARK(BM_PbftCommit500TxBlocks)->Arg(500)->Arg(1)->Unit(benchmark::kMicrosecond);

// Pipelined: the primary fills the window (up to max_inflight blocks) before delivery.
void BM_PbftPipelined500TxBlocks(benchmark::State& state) {
  Cluster cluster(4);
  std::vector<std::vector<std::string>> batches;
  for (uint64_t b = 0; b < 64; ++b) batches.push_back(MakeBatch(b, 500));
  uint64_t block = 0;
  for (auto _ : state) {
    int proposed = 0;
    while (cluster.CanPropose() && proposed < 16) {
      cluster.Propose(batches[block++ % batches.size()]);
      ++proposed;
    }
    cluster.Drain();
  }
  if (cluster.commits() != 4 * block) state.SkipWithError("not every replica committed");
  state.SetItemsProcessed(static_cast<int64_t>(block));
}
BENCHMARK(BM_PbftPipelined500TxBlocks)->Unit(benchmark::kMicrosecond);

// What timing the rounds costs a replica (partitions/round_times.h): one iteration = the stamps of
// one backup's round (pre-prepare seen, prepare sent, commit sent, block applied), against
// the ~1.5 ms of CPU a block costs a node (docs/BENCHMARKS.md).
void BM_RoundTimesOneRound(benchmark::State& state) {
  RoundTimes times;
  uint64_t seq = 0;
  int64_t now = 1;
  for (auto _ : state) {
    ++seq;
    times.PrePrepareSeen(0, seq, now);
    times.Proposed(0, seq, now += 1'000);
    times.Prepared(0, seq, now += 2'000'000);
    const int64_t start = now += 3'000'000;
    benchmark::DoNotOptimize(times.Applied(seq, start, now += 1'000'000));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RoundTimesOneRound)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace partitions
