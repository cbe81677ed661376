// RetryReservations: room held for refused clients that come back when they were told to.
//
// A measured retry-after (rate_meter.h, RetrySlots) tells a refused client when room should be
// there for it. Under an open-loop flood that promise is usually broken: fresh requests from
// clients that are not waiting take the room first, and the client that waited is refused again
// (issue 18, item 6: about a third of honoured hints were kept). A reservation keeps it: the
// refusal carries a ticket for its slot, and from `lead` before the slot until its grace after it
// (half the wait, 0.5-5 s) one unit of room is held for the ticket. Fresh requests are admitted
// only into room that no due ticket holds; the ticket's holder is admitted whatever the room (the
// caller bounds how far past its limit such requests may go). A ticket is used once, admits only
// in its window (earlier it is spent as a fresh request; later it has expired), and the room
// held at once is capped (`max_reserved`), so clients that never come back cost at most that much
// room for at most lead + grace each.
//
// What a "unit" is belongs to the caller (the pool counts txs). Tickets are random 64-bit values:
// a client cannot take another's reservation by guessing.
//
// Thread-safety: thread-safe. The fresh path reads one atomic while no ticket is outstanding.
//
//   flowctl::RetryReservations book({.max_reserved = 256});
//   // refusal: uint64_t ticket = book.Issue(now, now + retry_after_nanos);
//   // admission: if (!book.Admit(request_ticket, now, /*free_units=*/limit - used).admitted) ...
#ifndef FLOWCTL_RETRY_RESERVATIONS_H_
#define FLOWCTL_RETRY_RESERVATIONS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flowctl {

class RetryReservations {
 public:
  struct Options {
    // Room held at once for due tickets; 0 = off (Issue gives no tickets, Admit is free room).
    int64_t max_reserved = 0;
    // A ticket holds room from `lead` before its slot (the client's clock and network are not
    // ours) until its grace after it: `grace_fraction` of the wait it was told (a client waiting
    // longer is less exact), within [grace, max_grace].
    absl::Duration lead = absl::Milliseconds(50);
    absl::Duration grace = absl::Milliseconds(500);
    double grace_fraction = 0.5;
    absl::Duration max_grace = absl::Seconds(5);
    // Tickets outstanding at most (issued, not used, not expired); beyond, refusals get none.
    size_t max_tickets = 1 << 16;
  };

  struct Stats {
    uint64_t issued = 0;
    uint64_t redeemed = 0;  // used in their window (and so admitted)
    uint64_t early = 0;     // sent back before their window (spent as a fresh request)
    uint64_t expired = 0;   // never sent back
    uint64_t unknown = 0;   // presented but not outstanding (used, expired, or never issued)
    int64_t outstanding = 0;
    int64_t reserved = 0;  // room held now for due tickets
  };

  RetryReservations() : RetryReservations(Options{}) {}
  explicit RetryReservations(Options options);
  RetryReservations(const RetryReservations&) = delete;
  RetryReservations& operator=(const RetryReservations&) = delete;

  bool enabled() const { return max_reserved() > 0; }
  int64_t max_reserved() const { return max_reserved_.load(std::memory_order_relaxed); }
  // Live: 0 turns reservations off (outstanding tickets stay valid but hold no room).
  void set_max_reserved(int64_t units);

  // A ticket for the retry of a refusal at `now` told to come back at `slot_nanos`; 0 when off
  // or when max_tickets are outstanding.
  uint64_t Issue(int64_t now_nanos, int64_t slot_nanos) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether one request may take one unit of room now. `ticket` is what the request carried (0:
  // none); `free_units` the room left under the caller's limit for fresh requests. A known
  // ticket is spent: before its window the request is judged as a fresh one; inside it, it is
  // admitted whatever the room (`redeemed`): its room was held
  // below the limit, and the caller lets it past the limit by at most what it holds (the pool:
  // into half its forwarding reserve). Any other request is admitted when the free room exceeds
  // what due tickets hold.
  struct Verdict {
    bool admitted = false;
    bool redeemed = false;
  };
  Verdict Admit(uint64_t ticket, int64_t now_nanos, int64_t free_units) ABSL_LOCKS_EXCLUDED(mu_);

  // Room held now for due tickets (at most max_reserved).
  int64_t Reserved(int64_t now_nanos) ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats(int64_t now_nanos) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Slots are counted in buckets of kBucketNanos over a ring longer than any slot's distance
  // from now (RetryAfterBounds::max is 10 s) plus the window.
  static constexpr int64_t kBucketNanos = 10'000'000;
  static constexpr size_t kBuckets = 4096;  // 40.96 s
  struct Bucket {
    int64_t index = -1;  // slot / kBucketNanos this bucket counts; -1 = none
    int64_t count = 0;
  };
  struct Ticket {
    int64_t slot_nanos;
  };

  void ExpireLocked(int64_t now_nanos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes an outstanding ticket: from the table, its slot's bucket and the outstanding count.
  void EraseLocked(absl::flat_hash_map<uint64_t, Ticket>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ReservedLocked(int64_t now_nanos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t lead_nanos_;
  const int64_t grace_nanos_;
  const double grace_fraction_;
  const int64_t max_grace_nanos_;
  const size_t max_tickets_;
  std::atomic<int64_t> max_reserved_;
  std::atomic<int64_t> outstanding_{0};  // tickets_.size(), for the lock-free fresh path

  mutable absl::Mutex mu_;
  absl::BitGen bits_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Ticket> tickets_ ABSL_GUARDED_BY(mu_);
  // (expiry, ticket), soonest first; a used ticket's entry is skipped when it comes up.
  std::priority_queue<std::pair<int64_t, uint64_t>, std::vector<std::pair<int64_t, uint64_t>>,
                      std::greater<>>
      by_expiry_ ABSL_GUARDED_BY(mu_);
  std::array<Bucket, kBuckets> buckets_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_RETRY_RESERVATIONS_H_
