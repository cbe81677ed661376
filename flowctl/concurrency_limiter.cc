#include "flowctl/concurrency_limiter.h"

namespace flowctl {

ConcurrencyLimiter::Permit ConcurrencyLimiter::TryAcquire() {
  // A CAS rather than fetch_add-then-undo: an optimistic increment would briefly push the count
  // past the limit and make a concurrent TryAcquire fail although a slot was free.
  int64_t current = in_flight_.load(std::memory_order_relaxed);
  while (true) {
    if (current >= limit_.load(std::memory_order_relaxed)) return Permit();
    if (in_flight_.compare_exchange_weak(current, current + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
      return Permit(this);
    }
  }
}

}  // namespace flowctl
