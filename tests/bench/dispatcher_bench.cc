// Dispatcher throughput and Offer latency with a trivial handler.
//
// BM_DispatcherThroughput/producers/lanes/payload/timed: `producers` threads each offer
// kPerProducer messages (round-robin over `lanes` lanes, so lanes:1 means every producer contends
// on one lane), then the benchmark waits until every admitted message has been handled (Drain).
// items_per_second counts handled messages end to end (Offer -> queue -> pool -> handler).
// With timed:1 every Offer is timed with the clock into a Histogram and reported as counters
// offer_p50_ns / offer_p99_ns / offer_p999_ns (timing adds two clock reads per Offer).
// The pool has 2 workers.
//
//   build-*/tests/bench/bench_dispatcher --benchmark_min_time=0.05
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "flowctl/clock.h"
#include "flowctl/dispatcher.h"
#include "flowctl/histogram.h"
#include "flowctl/worker_pool.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

constexpr int kPerProducer = 200'000;

int64_t ProcessCpuNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
}

void BM_DispatcherThroughput(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  const int lanes = static_cast<int>(state.range(1));
  const size_t payload_bytes = static_cast<size_t>(state.range(2));
  const bool timed = state.range(3) != 0;

  WorkerPool pool({.threads = 2});
  CHECK(pool.Start().ok());
  std::vector<Dispatcher::LaneConfig> configs;
  for (int l = 0; l < lanes; ++l) {
    configs.push_back({std::string(1, static_cast<char>('a' + l)), 1,
                       [](Message m) { benchmark::DoNotOptimize(m.payload.data()); }});
  }
  Dispatcher::Options options;
  options.name = std::string("bench");
  options.budget = {int64_t{4} << 20, int64_t{4} << 30};
  options.lanes = std::move(configs);
  std::unique_ptr<Dispatcher> d = std::move(Dispatcher::Create(&pool, std::move(options)).value());

  const Clock* clock = Clock::Real();
  Histogram offer_latency;
  const std::string payload(payload_bytes, 'p');
  // Production setting: the packaged Abseil checks lock ordering on every Mutex operation unless
  // told not to (noded's main should do the same).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const int64_t process_cpu_start = ProcessCpuNanos();
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        int lane = p % lanes;
        for (int i = 0; i < kPerProducer; ++i) {
          Message m;
          m.payload = payload;
          m.peer = static_cast<uint32_t>(p);
          if (timed) {
            const int64_t start = clock->NowNanos();
            d->Offer(lane, std::move(m));
            offer_latency.Record(clock->NowNanos() - start);
          } else {
            d->Offer(lane, std::move(m));
          }
          if (++lane == lanes) lane = 0;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(d->Drain(absl::Seconds(120)).ok());
  }
  const int64_t process_cpu = ProcessCpuNanos() - process_cpu_start;
  int64_t quanta = 0;
  for (const WorkerPool::GroupStats& g : pool.GetGroupStats()) quanta += g.quanta;
  d->Stop();
  int64_t processed = 0;
  int64_t dropped = 0;
  for (const Dispatcher::LaneStats& s : d->GetStats()) {
    processed += s.processed;
    dropped += s.dropped();
  }
  state.SetItemsProcessed(processed);
  state.counters["dropped"] = static_cast<double>(dropped);
  // CPU of the whole process (producers + workers) per handled message: robust on a busy machine,
  // where wall-clock throughput mostly measures how much CPU the scheduler gave us.
  state.counters["cpu_ns_per_msg"] =
      processed == 0 ? 0.0 : static_cast<double>(process_cpu) / static_cast<double>(processed);
  state.counters["msgs_per_quantum"] =
      quanta == 0 ? 0.0 : static_cast<double>(processed) / static_cast<double>(quanta);
  if (timed) {
    const HistogramSnapshot s = offer_latency.Snapshot();
    state.counters["offer_p50_ns"] = static_cast<double>(s.Percentile(0.5));
    state.counters["offer_p99_ns"] = static_cast<double>(s.Percentile(0.99));
    state.counters["offer_p999_ns"] = static_cast<double>(s.Percentile(0.999));
  }
}

BENCHMARK(BM_DispatcherThroughput)
    ->ArgNames({"producers", "lanes", "payload", "timed"})
    ->Args({1, 1, 8, 0})
    ->Args({2, 1, 8, 0})
    ->Args({2, 2, 8, 0})
    ->Args({1, 1, 256, 0})
    ->Args({2, 2, 256, 0})
    ->Args({1, 1, 8, 1})
    ->Args({2, 1, 8, 1})
    ->Args({2, 2, 8, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace flowctl
