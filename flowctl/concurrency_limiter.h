// ConcurrencyLimiter: caps how many requests are in flight at once.
//
// TryAcquire() hands out a Permit while fewer than limit() permits are held, and an empty Permit
// otherwise. A Permit is a move-only RAII handle: the slot is given back when the Permit is
// destroyed or Release()d, exactly once, whichever path the request takes.
//
// SetLimit() changes the limit live. Lowering it below the number in flight revokes nothing: held
// permits stay valid, and new admissions stop until enough of them are released.
//
// All methods are thread-safe and lock-free: one atomic counter, a CAS loop to admit (so the
// counter never exceeds the limit in effect when a permit was granted, even transiently) and a
// fetch_sub to release. The limiter must outlive every Permit it hands out.
//
//   flowctl::ConcurrencyLimiter limiter(/*limit=*/64);
//   flowctl::ConcurrencyLimiter::Permit permit = limiter.TryAcquire();
//   if (!permit) return Reject("too many requests in flight");
//   Handle(request);  // the slot is released when `permit` goes out of scope
#ifndef FLOWCTL_CONCURRENCY_LIMITER_H_
#define FLOWCTL_CONCURRENCY_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <utility>

#include "flowctl/slot_permit.h"

namespace flowctl {

class ConcurrencyLimiter {
 public:
  // One admitted request's slot (flowctl/slot_permit.h). Empty when default-constructed, moved
  // from, released, or returned by a TryAcquire that failed.
  using Permit = SlotPermit<ConcurrencyLimiter>;

  // `limit` is the max number of permits held at once; 0 admits nothing.
  explicit ConcurrencyLimiter(int64_t limit) : limit_(limit < 0 ? 0 : limit) {}

  ConcurrencyLimiter(const ConcurrencyLimiter&) = delete;
  ConcurrencyLimiter& operator=(const ConcurrencyLimiter&) = delete;

  // A held Permit if in_flight() < limit() at the moment of the CAS, else an empty one.
  // Thread-safe, lock-free.
  Permit TryAcquire();

  // Changes the limit live (negative is treated as 0). Held permits are never revoked.
  // Thread-safe.
  void SetLimit(int64_t limit) { limit_.store(limit < 0 ? 0 : limit, std::memory_order_relaxed); }

  // Permits held now. May exceed limit() right after SetLimit() lowered it. Thread-safe.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }

 private:
  friend Permit;
  void ReleaseOne() { in_flight_.fetch_sub(1, std::memory_order_release); }

  std::atomic<int64_t> limit_;
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace flowctl

#endif  // FLOWCTL_CONCURRENCY_LIMITER_H_
