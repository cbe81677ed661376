// TokenBucket::TryAcquire against a bare clock read and a mutex-protected classic bucket, with 1
// and 2 threads sharing one bucket.
//
//   BM_ClockRead            Clock::Real()->NowNanos(): the floor every bucket pays.
//   BM_TokenBucket_Admit    huge rate and burst, so every call admits and wins its CAS.
//   BM_TokenBucket_Refuse   closed in debt, so every call is refused (no write).
//   BM_MutexBucket_Admit    the classic refill-then-take bucket under an absl::Mutex.
//   BM_MutexBucket_Refuse
//
// The "admitted" counter is the fraction of calls admitted (1 for *_Admit, 0 for *_Refuse), as a
// check that each variant measures the path it names.
//
//   build-x/tests/bench/bench_token_bucket --benchmark_repetitions=3 --benchmark_min_time=0.2
#include <algorithm>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "flowctl/clock.h"
#include "flowctl/token_bucket.h"

namespace {

using ::flowctl::Clock;
using ::flowctl::TokenBucket;

// The textbook bucket (Guava/Envoy style): a token count and a last-refill time under a mutex.
// Reads the clock outside the lock, as TokenBucket does, so the difference is the synchronization.
class MutexTokenBucket {
 public:
  MutexTokenBucket(double rate, double burst, const Clock* clock)
      : clock_(clock), rate_(rate), burst_(burst), tokens_(burst), last_(clock->NowNanos()) {}

  bool TryAcquire(double n) {
    const int64_t now = clock_->NowNanos();
    absl::MutexLock lock(&mu_);
    if (now > last_) {
      tokens_ = std::min(burst_, tokens_ + static_cast<double>(now - last_) * rate_ / 1e9);
      last_ = now;
    }
    if (tokens_ < n) return false;
    tokens_ -= n;
    return true;
  }

 private:
  const Clock* const clock_;
  const double rate_;
  const double burst_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  int64_t last_ ABSL_GUARDED_BY(mu_);
};

// Every call admits: 1e18 tokens/s (1e-9 ns per token) and a burst of one second's worth, so a
// thread whose clock read is up to a second older than another's still finds tokens.
constexpr double kHugeRate = 1e18;
constexpr double kHugeBurst = TokenBucket::kMaxTokens;
// Every call refuses: one token per 1000 s, no burst, and the one admission spent up front.
constexpr double kTinyRate = 1e-3;

template <typename Bucket>
void RunBucket(benchmark::State& state, Bucket& bucket) {
  int64_t admitted = 0;
  for (auto _ : state) {
    const bool ok = bucket.TryAcquire(1);
    admitted += ok;
    benchmark::DoNotOptimize(ok);
  }
  state.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted), benchmark::Counter::kAvgIterations);
}

void BM_ClockRead(benchmark::State& state) {
  const Clock* clock = Clock::Real();
  for (auto _ : state) benchmark::DoNotOptimize(clock->NowNanos());
}
BENCHMARK(BM_ClockRead)->Threads(1)->Threads(2);

// Buckets are function-local statics: every thread of a run shares one, which is the point.
void BM_TokenBucket_Admit(benchmark::State& state) {
  static TokenBucket bucket(kHugeRate, kHugeBurst);
  RunBucket(state, bucket);
}
BENCHMARK(BM_TokenBucket_Admit)->Threads(1)->Threads(2);

void BM_MutexBucket_Admit(benchmark::State& state) {
  static MutexTokenBucket bucket(kHugeRate, kHugeBurst, Clock::Real());
  RunBucket(state, bucket);
}
BENCHMARK(BM_MutexBucket_Admit)->Threads(1)->Threads(2);

TokenBucket& RefusingTokenBucket() {
  static TokenBucket* bucket = [] {
    auto* b = new TokenBucket(kTinyRate, 0);
    b->TryAcquire(1);  // zero burst: admitted once, then 1000 s of debt
    return b;
  }();
  return *bucket;
}

void BM_TokenBucket_Refuse(benchmark::State& state) { RunBucket(state, RefusingTokenBucket()); }
BENCHMARK(BM_TokenBucket_Refuse)->Threads(1)->Threads(2);

void BM_MutexBucket_Refuse(benchmark::State& state) {
  static MutexTokenBucket bucket(kTinyRate, 0, Clock::Real());
  RunBucket(state, bucket);
}
BENCHMARK(BM_MutexBucket_Refuse)->Threads(1)->Threads(2);

}  // namespace
