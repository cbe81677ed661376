// Cost of the interceptor hot path: ConcurrencyLimiter against a mutex-protected counter, and a
// full Admit + Finish through a typical chain (gate, concurrency, rate) with 1 and 2 threads.
//
//   ninja -C build bench_stage_chain
//   build/tests/bench/bench_stage_chain --benchmark_min_time=0.2
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "flowctl/builtin_stages.h"
#include "flowctl/concurrency_limiter.h"
#include "flowctl/stage_chain.h"

namespace flowctl {
namespace {

// Baseline: the obvious locked implementation of a concurrency limit.
class MutexLimiter {
 public:
  explicit MutexLimiter(int64_t limit) : limit_(limit) {}
  bool TryAcquire() {
    absl::MutexLock lock(&mu_);
    if (in_flight_ >= limit_) return false;
    ++in_flight_;
    return true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

 private:
  absl::Mutex mu_;
  const int64_t limit_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

void BM_ConcurrencyLimiter_AcquireRelease(benchmark::State& state) {
  static ConcurrencyLimiter* limiter = new ConcurrencyLimiter(1'000'000);
  for (auto _ : state) {
    ConcurrencyLimiter::Permit permit = limiter->TryAcquire();
    benchmark::DoNotOptimize(permit);
  }
}
BENCHMARK(BM_ConcurrencyLimiter_AcquireRelease)->Threads(1)->Threads(2);

void BM_MutexLimiter_AcquireRelease(benchmark::State& state) {
  static MutexLimiter* limiter = new MutexLimiter(1'000'000);
  for (auto _ : state) {
    const bool admitted = limiter->TryAcquire();
    benchmark::DoNotOptimize(admitted);
    if (admitted) limiter->Release();
  }
}
BENCHMARK(BM_MutexLimiter_AcquireRelease)->Threads(1)->Threads(2);

// gate (an atomic load) -> concurrency -> rate (real clock, never empty), as a partition runs it.
StageChainHolder* TypicalChain(bool gate_open) {
  static std::atomic<bool>* open = new std::atomic<bool>(true);
  open->store(gate_open);
  auto predicate = std::make_shared<const RegisteredPredicate>(RegisteredPredicate{
      .predicate = [](const RequestMeta&) { return open->load(std::memory_order_relaxed); },
      .rejects_as = RejectKind::kUnavailable});
  return new StageChainHolder(StageChain::Of(
      {}, {std::make_shared<GateStage>("health", "consensus_normal", predicate,
                                       absl::Milliseconds(100)),
           std::make_shared<ConcurrencyStage>("concurrency", 1'000'000, absl::Milliseconds(10)),
           std::make_shared<RateStage>("rate", 1e12, 1e12, RateStage::Unit::kRequests,
                                       Clock::Real())}));
}

void BM_StageChain_AdmitFinish(benchmark::State& state) {
  static StageChainHolder* holder = TypicalChain(true);
  const RequestMeta meta{.partition = 1, .size_bytes = 256, .peer = "client-1"};
  for (auto _ : state) {
    Admission admission = holder->Admit(meta);
    benchmark::DoNotOptimize(admission.admitted());
  }
}
BENCHMARK(BM_StageChain_AdmitFinish)->Threads(1)->Threads(2);

// A rejection by the first stage: what a flood of refused requests costs.
void BM_StageChain_RejectAtGate(benchmark::State& state) {
  static StageChainHolder* holder = TypicalChain(false);
  const RequestMeta meta{.partition = 1, .size_bytes = 256, .peer = "client-1"};
  for (auto _ : state) {
    Admission admission = holder->Admit(meta);
    benchmark::DoNotOptimize(admission.decision().retry_after());
  }
}
BENCHMARK(BM_StageChain_RejectAtGate)->Threads(1)->Threads(2);

}  // namespace
}  // namespace flowctl
