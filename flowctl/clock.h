// Clock: the one source of time for flow control, so tests can substitute a fake.
//
// Time is an int64 count of nanoseconds on a monotonic timeline with an arbitrary origin; it never
// goes backwards. Implementations are thread-safe: NowNanos() may be called from any thread.
//
//   const flowctl::Clock* clock = flowctl::Clock::Real();
//   int64_t start = clock->NowNanos();
//   ...
//   absl::Duration spent = absl::Nanoseconds(clock->NowNanos() - start);
//
// tests/mocks/fake_clock.h holds the fake (time moves only when the test says so).
#ifndef FLOWCTL_CLOCK_H_
#define FLOWCTL_CLOCK_H_

#include <cstdint>

namespace flowctl {

inline constexpr int64_t kNanosPerSecond = 1'000'000'000;

class Clock {
 public:
  virtual ~Clock() = default;

  // Monotonic nanoseconds. Thread-safe.
  virtual int64_t NowNanos() const = 0;

  // The process-wide monotonic clock (CLOCK_MONOTONIC). Never null, never destroyed.
  static const Clock* Real();
};

// CLOCK_MONOTONIC. Stateless; use Clock::Real() rather than making your own.
class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override;
};

// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID), in nanoseconds: what a piece of
// work cost, not counting time the thread was preempted. Not a Clock (it stands still while the
// thread sleeps).
int64_t ThreadCpuNanos();

}  // namespace flowctl

#endif  // FLOWCTL_CLOCK_H_
