// RequestLifecycle: what happens to an admitted request after the interceptor chain, for the
// stages that follow it (the adaptive stage holds a slot until its tx commits).
//
// A request the chain admitted is, from then on, identified by an id the caller chooses (the tx
// hash). The caller reports its life to the chain (StageChain / Admission / StageChainHolder in
// stage_chain.h), which forwards each event to every stage whose Stage::lifecycle() is non-null:
//   admitted  -> Stage::Check returned admit (the chain runs it; no event here);
//   pooled    -> OnPooled(id, admitted_nanos): handed on (to the pool), while the request's
//                Admission still holds its permits, so a stage can turn a permit into a hold of
//                its own without its count dipping;
//   committed -> OnCommitted(ids, now): its block committed;
//   dropped   -> OnDropped(id, reason): it left without committing;
//   and, periodically, OnTick(now, pool): a chance to release what waits on something the stage
//   cannot see, through PoolQuery (which the caller implements over its pool).
// Events for ids a stage does not track are ignored, so callers may report every id.
//
// Thread-safety: implementations are thread-safe; events may arrive from several threads at once
// (pooled from request threads, committed and ticks from the consensus thread). PoolQuery is
// called from inside OnTick only, with none of the stage's locks held.
//
//   class PoolView final : public flowctl::PoolQuery { ... pool_->Gapped(ids) ... };
//   admission.Pooled(tx.hash);                          // before pool Add, permit still held
//   holder.Committed(committed_hashes, clock->NowNanos());
//   holder.Tick(clock->NowNanos(), pool_view);
#ifndef FLOWCTL_REQUEST_LIFECYCLE_H_
#define FLOWCTL_REQUEST_LIFECYCLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace flowctl {

// Why a pooled request left without committing. Decides the feedback a following stage takes.
enum class DropReason {
  // Refused after it was reported pooled (the pool's Add failed): no feedback, as if never
  // pooled. Releases one OnPooled of the id (each OnPooled is paired with at most one of these).
  kRefused,
  // Expired in the pool (waited longer than its TTL uncommitted): a congestion signal.
  kExpired,
  // Left the pool for another reason (its nonce was consumed, an operator removed it): no
  // feedback.
  kRemoved,
};

absl::string_view DropReasonName(DropReason reason);

// A moment's view of the pool, for OnTick.
struct PoolLevel {
  size_t txs = 0;              // requests pooled now
  double high_water_txs = 0;   // the pool's high-water mark in requests (gate closes above it)
  uint64_t expired_total = 0;  // requests the pool has expired since it started (monotonic)
};

// What a stage may ask the caller's pool while it ticks. Implemented by the caller; thread-safe.
class PoolQuery {
 public:
  virtual ~PoolQuery() = default;

  // Of `ids`, those pooled but waiting behind a gap their client must fill (an earlier nonce of
  // their sender is neither committed nor pooled), in the given order.
  virtual std::vector<std::string> Gapped(absl::Span<const std::string> ids) const = 0;
  // Of `ids`, those not in the pool (committed, expired, removed, or never added), in order.
  virtual std::vector<std::string> Missing(absl::Span<const std::string> ids) const = 0;
  virtual PoolLevel Level() const = 0;
};

// Implemented by stages that follow admitted requests; see the file comment. Thread-safe.
class RequestLifecycle {
 public:
  virtual ~RequestLifecycle() = default;

  // The request `id`, admitted at `admitted_nanos` (Clock time), is being handed to the pool.
  // Called while its Admission still holds what this stage kept. Each call is one more pooled
  // request, even for an id already pooled (a duplicate the pool will refuse; its kRefused drop
  // releases it again).
  virtual void OnPooled(absl::string_view id, int64_t admitted_nanos) = 0;
  // These requests committed at `now_nanos`.
  virtual void OnCommitted(absl::Span<const std::string> ids, int64_t now_nanos) = 0;
  virtual void OnDropped(absl::string_view id, DropReason reason) = 0;
  // Periodic, from one thread at a time (the caller's ticker); the stage decides how often it
  // does real work.
  virtual void OnTick(int64_t now_nanos, const PoolQuery& pool) = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_REQUEST_LIFECYCLE_H_
