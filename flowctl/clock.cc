#include "flowctl/clock.h"

#include <time.h>

namespace flowctl {

int64_t RealClock::NowNanos() const {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
}

int64_t ThreadCpuNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
}

const Clock* Clock::Real() {
  static const RealClock* const kClock = new RealClock();
  return kClock;
}

}  // namespace flowctl
