// FakeClock: a Clock whose time moves only when a test advances it.
//
// Thread-safe (time is one atomic), so a test may advance it while worker threads read it.
//
//   tests::FakeClock clock;            // starts at 1 s, so "now - 1 s" stays positive
//   flowctl::TokenBucket bucket(100, 10, &clock);
//   clock.Advance(absl::Milliseconds(10));
#ifndef TESTS_MOCKS_FAKE_CLOCK_H_
#define TESTS_MOCKS_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "flowctl/clock.h"

namespace tests {

class FakeClock final : public flowctl::Clock {
 public:
  explicit FakeClock(int64_t start_nanos = flowctl::kNanosPerSecond) : now_(start_nanos) {}

  int64_t NowNanos() const override { return now_.load(std::memory_order_acquire); }

  void AdvanceNanos(int64_t nanos) { now_.fetch_add(nanos, std::memory_order_acq_rel); }
  void Advance(absl::Duration d) { AdvanceNanos(absl::ToInt64Nanoseconds(d)); }
  // REQUIRES: nanos >= NowNanos() (time never goes backwards).
  void SetNanos(int64_t nanos) { now_.store(nanos, std::memory_order_release); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAKE_CLOCK_H_
