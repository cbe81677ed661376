// AdaptiveTickets: the adaptive stage's follower of admitted txs (a RequestLifecycle). It keeps
// one AdaptiveLimiter::Ticket per pooled tx, by tx hash, and releases each exactly once:
//   - committed (OnCommitted): Commit, an admission -> commit latency sample;
//   - refused by the pool after OnPooled (OnDropped kRefused) or removed (kRemoved): Cancel, no
//     feedback;
//   - expired in the pool (OnDropped kExpired): Drop, a congestion signal;
//   and, on OnTick (at most every `sweep_every`), asking the caller's pool (PoolQuery):
//   - overdue, held past the limiter's max_hold: Timeout, a censored latency sample. Without it,
//     txs that cannot commit yet (behind nonce gaps) filled every slot and nothing was admitted
//     to fill the gaps;
//   - waived: held >= `gap_hold` and Gapped (an earlier nonce of its sender is neither committed
//     nor pooled), while the pool holds fewer than `waive_below_high_water` x its high-water
//     txs: released with no feedback; the tx waits in the pool outside the limit, on its client
//     rather than on the cluster. Only below that level: the pool gate refuses gap-filling txs
//     too, so a pool filled with gapped txs would admit nothing until they expired;
//   - gone: held >= `grace` and Missing from the pool without a lifecycle event (younger ones may
//     be between OnPooled and the pool's Add): Drop if the pool expired txs since the last sweep
//     (an expiry is congestion), Cancel otherwise.
// The number of tickets is bounded by the limiter: OnPooled is called while the tx's permit is
// held, and max_hold bounds how long each is kept.
//
// Thread-safety: all methods are thread-safe. One internal mutex, a leaf except that tickets are
// released (taking the limiter's leaf lock) and the PoolQuery is called after it is dropped.
//
//   auto tickets = std::make_unique<AdaptiveTickets>(limiter);
//   tickets->OnPooled(tx_hash, admitted_nanos);  // while the request's Permit is still held
//   tickets->OnCommitted({tx_hash}, now);          // latency sample
//   tickets->OnTick(now, pool_query);              // timeouts, waivers, txs gone from the pool
#ifndef FLOWCTL_ADAPTIVE_TICKETS_H_
#define FLOWCTL_ADAPTIVE_TICKETS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "flowctl/adaptive_limiter.h"
#include "flowctl/request_lifecycle.h"

namespace flowctl {

struct AdaptiveTicketOptions {
  // A ticket younger than this is not judged gone when the pool lacks its tx. > 0.
  absl::Duration grace = absl::Seconds(1);
  // A gapped tx keeps its slot this long before it is waived. >= 0.
  absl::Duration gap_hold = absl::Milliseconds(200);
  // Waive only while pooled txs < this x the pool's high-water txs. [0, 1]; 0 never waives.
  double waive_below_high_water = 0.5;
  // OnTick does its work at most this often (it takes the pool's lock). >= 0.
  absl::Duration sweep_every = absl::Milliseconds(100);
};

class AdaptiveTickets final : public RequestLifecycle {
 public:
  // REQUIRES: limiter is non-null.
  explicit AdaptiveTickets(std::shared_ptr<AdaptiveLimiter> limiter,
                           AdaptiveTicketOptions options = {});
  AdaptiveTickets(const AdaptiveTickets&) = delete;
  AdaptiveTickets& operator=(const AdaptiveTickets&) = delete;
  // Cancels every ticket still held (no feedback).
  ~AdaptiveTickets() override = default;

  // Takes a ticket (one more slot, unconditionally: the request's permit is still held).
  void OnPooled(absl::string_view id, int64_t admitted_nanos) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCommitted(absl::Span<const std::string> ids, int64_t now_nanos) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnDropped(absl::string_view id, DropReason reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnTick(int64_t now_nanos, const PoolQuery& pool) override ABSL_LOCKS_EXCLUDED(mu_);

  // Tickets held now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  const AdaptiveTicketOptions& options() const { return options_; }

 private:
  struct Held {
    AdaptiveLimiter::Ticket ticket;
    int64_t pooled_nanos = 0;  // clock time of OnPooled
  };
  // Almost always one per id; more only while a duplicate submission is on its way to refusal.
  using HeldList = absl::InlinedVector<Held, 1>;

  const std::shared_ptr<AdaptiveLimiter> limiter_;
  const AdaptiveTicketOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, HeldList> tickets_ ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_sweep_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t swept_expired_ ABSL_GUARDED_BY(mu_) = 0;  // pool's expired_total at the last sweep
};

}  // namespace flowctl

#endif  // FLOWCTL_ADAPTIVE_TICKETS_H_
