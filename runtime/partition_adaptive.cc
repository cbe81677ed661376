// Partition: adaptive admission bookkeeping. A client tx admitted through an `adaptive` stage
// keeps its slot from admission until it commits (CommitLocked: a latency sample), leaves the
// pool otherwise, or is held past max_hold (the sweep below); see flowctl/adaptive_stage.h.
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
  // Young tickets are skipped: their tx may be between insertion and the pool's Add.
  constexpr int64_t kGraceNanos = 1'000'000'000;
  const uint64_t expired = pool_->stats().expired;
  const bool expiring = expired != swept_expired_;
  swept_expired_ = expired;
  std::vector<std::string> candidates;
  std::vector<flowctl::AdaptiveLimiter::Ticket> overdue;
  {
    absl::MutexLock lock(&wait_mu_);
    for (auto it = adaptive_tickets_.begin(); it != adaptive_tickets_.end();) {
      if (it->second.ticket.Overdue(now)) {
        overdue.push_back(std::move(it->second.ticket));
        adaptive_tickets_.erase(it++);
        continue;
      }
      if (now - it->second.tracked_nanos >= kGraceNanos) candidates.push_back(it->first);
      ++it;
    }
  }
  for (flowctl::AdaptiveLimiter::Ticket& t : overdue) t.Timeout();
  // The pool's lock is taken outside wait_mu_ (lock order: pool before wait_mu_).
  std::vector<flowctl::AdaptiveLimiter::Ticket> gone;
  for (const std::string& hash : candidates) {
    if (pool_->Get(hash) != nullptr) continue;
    absl::MutexLock lock(&wait_mu_);
    if (auto it = adaptive_tickets_.find(hash); it != adaptive_tickets_.end()) {
      gone.push_back(std::move(it->second.ticket));
      adaptive_tickets_.erase(it);
    }
  }
  for (flowctl::AdaptiveLimiter::Ticket& t : gone) {
    if (expiring) {
      t.Drop();
    } else {
      t.Cancel();
    }
  }
}

}  // namespace runtime
