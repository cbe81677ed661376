// RequestTimer: the PBFT request timer. It runs while the installed view has work (requests
// pending in the pool, or log entries not executed yet) and starts over whenever a batch
// executes; when it fires, the primary made no progress for request_timeout_ms.
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

#include <cstdint>

#include "partitions/pbft_outbox.h"
#include "partitions/pbft_types.h"

namespace partitions {

class RequestTimer {
 public:
  explicit RequestTimer(const PbftConfig& config) : timeout_ms_(config.request_timeout_ms) {}

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

 private:
  const int64_t timeout_ms_;
  uint64_t pending_ = 0;
  bool armed_ = false;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_REQUEST_TIMER_H_
