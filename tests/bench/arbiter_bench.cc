// Cost of one arbiter allocation (one resource, n partitions), as run on every arbiter tick.
//
//   ninja -C build bench_arbiter && build/tests/bench/bench_arbiter --benchmark_min_time=0.2
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "flowctl/arbiter.h"

namespace flowctl {
namespace {

void BM_AllocateFairShares(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<ArbiterConsumer> consumers(state.range(0));
  for (ArbiterConsumer& c : consumers) {
    c = {.weight = 1 + 9 * unit(rng),
         .guarantee = 5 * unit(rng),
         .ceiling = 50 + 100 * unit(rng),
         .demand = 100 * unit(rng)};
  }
  for (auto _ : state) {
    auto shares = AllocateFairShares(1000, consumers);
    benchmark::DoNotOptimize(shares);
  }
}
BENCHMARK(BM_AllocateFairShares)->Arg(4)->Arg(16)->Arg(64);

}  // namespace
}  // namespace flowctl
