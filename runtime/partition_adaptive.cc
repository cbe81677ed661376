// Partition: adaptive admission bookkeeping. A client tx admitted through an `adaptive` stage
// keeps its slot from admission until it commits (CommitLocked: a latency sample), leaves the
// pool otherwise, waits behind its client's nonce gap, or is held past max_hold (the sweep
// below); see flowctl/adaptive_stage.h.
#include <string>
#include <utility>
#include <vector>

#include "flowctl/adaptive_limiter.h"
#include "runtime/partition_impl.h"

namespace runtime {

bool Partition::Impl::TrackAdaptive(const std::shared_ptr<flowctl::AdaptiveLimiter>& limiter,
                                    const std::string& tx_hash, int64_t admitted_nanos) {
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&wait_mu_);
  auto [it, inserted] = adaptive_tickets_.try_emplace(tx_hash);
  if (!inserted) return false;
  it->second.ticket = flowctl::AdaptiveLimiter::Track(limiter, admitted_nanos);
  it->second.tracked_nanos = now;
  return true;
}

void Partition::Impl::UntrackAdaptive(const std::string& tx_hash) {
  flowctl::AdaptiveLimiter::Ticket refused;
  {
    absl::MutexLock lock(&wait_mu_);
    auto it = adaptive_tickets_.find(tx_hash);
    if (it == adaptive_tickets_.end()) return;
    refused = std::move(it->second.ticket);
    adaptive_tickets_.erase(it);
  }
  refused.Cancel();
}

void Partition::Impl::SweepAdaptiveTicketsLocked(int64_t now) {
  // Young tickets are not judged gone: their tx may be between insertion and the pool's Add.
  constexpr int64_t kGraceNanos = 1'000'000'000;
  // A tx waiting behind its client's nonce gap keeps its slot this long, then waits without one:
  // it waits on its client, not on the cluster, and while such txs held their slots (until
  // max_hold) the client's gap-filling tx was refused for want of a slot and admission stalled.
  constexpr int64_t kGapHoldNanos = 200'000'000;
  const partitions::TxPoolStats pool = pool_->stats();
  const bool expiring = pool.expired != swept_expired_;
  swept_expired_ = pool.expired;
  // Waived txs stay pooled until their gap is filled, outside the limit. Only while the pool is
  // below half its high water: the pool gate refuses gap-filling txs too, so a pool filled with
  // gapped txs would admit nothing until they expired.
  const partitions::TxPoolLimits limits = pool_->limits();
  const bool may_waive = static_cast<double>(pool.txs) <
                         0.5 * limits.high_water * static_cast<double>(limits.max_txs);
  std::vector<std::string> candidates;  // held >= kGapHoldNanos
  std::vector<flowctl::AdaptiveLimiter::Ticket> overdue;
  {
    absl::MutexLock lock(&wait_mu_);
    for (auto it = adaptive_tickets_.begin(); it != adaptive_tickets_.end();) {
      if (it->second.ticket.Overdue(now)) {
        overdue.push_back(std::move(it->second.ticket));
        adaptive_tickets_.erase(it++);
        continue;
      }
      if (now - it->second.tracked_nanos >= kGapHoldNanos) candidates.push_back(it->first);
      ++it;
    }
  }
  for (flowctl::AdaptiveLimiter::Ticket& t : overdue) t.Timeout();
  if (candidates.empty()) return;
  // The pool's lock is taken outside wait_mu_ (lock order: pool before wait_mu_).
  const std::vector<std::string> gapped =
      may_waive ? pool_->Gapped(candidates) : std::vector<std::string>();
  const std::vector<std::string> gone = pool_->Missing(candidates);
  std::vector<flowctl::AdaptiveLimiter::Ticket> waived, dropped;
  {
    absl::MutexLock lock(&wait_mu_);
    for (const std::string& hash : gapped) {
      if (auto it = adaptive_tickets_.find(hash); it != adaptive_tickets_.end()) {
        waived.push_back(std::move(it->second.ticket));
        adaptive_tickets_.erase(it);
      }
    }
    for (const std::string& hash : gone) {
      auto it = adaptive_tickets_.find(hash);
      if (it == adaptive_tickets_.end() || now - it->second.tracked_nanos < kGraceNanos) continue;
      dropped.push_back(std::move(it->second.ticket));
      adaptive_tickets_.erase(it);
    }
  }
  for (flowctl::AdaptiveLimiter::Ticket& t : waived) t.Waive();
  for (flowctl::AdaptiveLimiter::Ticket& t : dropped) {
    if (expiring) {
      t.Drop();
    } else {
      t.Cancel();
    }
  }
}

}  // namespace runtime
