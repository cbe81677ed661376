// RequestTimer: the PBFT request timer. It runs while the installed view has work (requests
// pending in the pool, or log entries not executed yet) and starts over whenever a batch
// executes; when it fires, the primary made no progress for its timeout.
//
// The timeout is request_timeout_ms << shift. Each time the replica leaves an installed view (its
// request timer fired, or f+1 others left it) the shift grows by one, up to max_backoff_shift; it
// returns to 0 when a batch executes (or a snapshot installs), or when the installed view has no
// work. So views that install but cannot commit within the timeout (slow links, a quorum that
// needs every one of its members and one of them is slow to verify a proposal) give the next view
// twice as long, until one is long enough. This is Castro & Liskov's "wait 2T" one view earlier:
// the first view after a failed one already gets 2T. Without it, the simulator's slow_quorum
// fault (every proposal arriving after the timeout) changes views for ever and commits nothing.
//
// Invariant: armed() is true between a PbftSetTimer for it and its firing or PbftCancelTimer;
// it emits a set or cancel only when that changes (or, on progress, to start over).
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   RequestTimer timer(config);
//   timer.set_pending(pool_count);
//   timer.Update(installed && (timer.pending() > 0 || has_unexecuted), out);  // after each Step
//   timer.Restart(out);                                                        // on progress
#ifndef PARTITIONS_PBFT_REQUEST_TIMER_H_
#define PARTITIONS_PBFT_REQUEST_TIMER_H_

#include <algorithm>
#include <cstdint>

#include "partitions/pbft_outbox.h"
#include "partitions/pbft_types.h"

namespace partitions {

class RequestTimer {
 public:
  explicit RequestTimer(const PbftConfig& config)
      : base_timeout_ms_(config.request_timeout_ms), max_shift_(config.max_backoff_shift) {}

  // Uncommitted requests in the pool (PbftPendingRequests).
  uint64_t pending() const { return pending_; }
  void set_pending(uint64_t count) { pending_ = count; }
  bool armed() const { return armed_; }

  // Arms the timer if `want` and it is not running; cancels it if it runs and not `want`.
  void Update(bool want, PbftOutbox& out);
  void Cancel(PbftOutbox& out);
  // Progress: a running timer starts over.
  void Restart(PbftOutbox& out);
  // It fired (PbftTimerFired): no longer running.
  void Fired() { armed_ = false; }
  // The replica left an installed view that made no progress: the next timeout is twice as long
  // (capped).
  void Backoff() { shift_ = std::min(shift_ + 1, max_shift_); }
  // Progress, or nothing to wait for: back to the base timeout.
  void ResetBackoff() { shift_ = 0; }
  int64_t timeout_ms() const { return base_timeout_ms_ << shift_; }

 private:
  const int64_t base_timeout_ms_;
  const uint32_t max_shift_;
  uint32_t shift_ = 0;
  uint64_t pending_ = 0;
  bool armed_ = false;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_REQUEST_TIMER_H_
