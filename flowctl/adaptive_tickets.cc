#include "flowctl/adaptive_tickets.h"

#include <utility>
#include <vector>

#include "glog/logging.h"

namespace flowctl {

AdaptiveTickets::AdaptiveTickets(std::shared_ptr<AdaptiveLimiter> limiter,
                                 AdaptiveTicketOptions options)
    : limiter_(std::move(limiter)), options_(options) {
  CHECK(limiter_ != nullptr);
}

void AdaptiveTickets::OnPooled(absl::string_view id, int64_t admitted_nanos) {
  AdaptiveLimiter::Ticket ticket = AdaptiveLimiter::Track(limiter_, admitted_nanos);
  const int64_t now = limiter_->clock()->NowNanos();
  absl::MutexLock lock(&mu_);
  tickets_[std::string(id)].push_back({std::move(ticket), now});
  ++size_;
}

void AdaptiveTickets::OnCommitted(absl::Span<const std::string> ids, int64_t now_nanos) {
  std::vector<HeldList> committed;
  {
    absl::MutexLock lock(&mu_);
    if (tickets_.empty()) return;
    for (const std::string& id : ids) {
      auto it = tickets_.find(id);
      if (it == tickets_.end()) continue;
      size_ -= it->second.size();
      committed.push_back(std::move(it->second));
      tickets_.erase(it);
    }
  }
  // Released outside mu_ (the limiter's lock is a leaf). One tx, one sample; a duplicate's extra
  // ticket goes back with no feedback.
  for (HeldList& list : committed) {
    list.front().ticket.Commit(now_nanos);
    for (size_t i = 1; i < list.size(); ++i) list[i].ticket.Cancel();
  }
}

void AdaptiveTickets::OnDropped(absl::string_view id, DropReason reason) {
  HeldList released;
  {
    absl::MutexLock lock(&mu_);
    auto it = tickets_.find(id);
    if (it == tickets_.end()) return;
    if (reason == DropReason::kRefused) {
      // Pairs with one OnPooled: the latest, whose Add was refused.
      released.push_back(std::move(it->second.back()));
      it->second.pop_back();
      if (it->second.empty()) tickets_.erase(it);
    } else {
      released = std::move(it->second);
      tickets_.erase(it);
    }
    size_ -= released.size();
  }
  if (reason == DropReason::kExpired) {
    released.front().ticket.Drop();
  }
  for (Held& held : released) held.ticket.Cancel();  // no-op for the dropped one
}

void AdaptiveTickets::OnTick(int64_t now, const PoolQuery& pool) {
  {
    absl::MutexLock lock(&mu_);
    if (now < next_sweep_nanos_) return;
    next_sweep_nanos_ = now + absl::ToInt64Nanoseconds(options_.sweep_every);
  }
  // The pool is asked with mu_ released (its lock is not ordered against ours).
  const PoolLevel level = pool.Level();
  const int64_t gap_hold = absl::ToInt64Nanoseconds(options_.gap_hold);
  const int64_t grace = absl::ToInt64Nanoseconds(options_.grace);
  std::vector<std::string> candidates;  // held >= gap_hold: may be waived or gone
  std::vector<AdaptiveLimiter::Ticket> overdue;
  bool expiring = false;
  {
    absl::MutexLock lock(&mu_);
    expiring = level.expired_total != swept_expired_;
    swept_expired_ = level.expired_total;
    for (auto it = tickets_.begin(); it != tickets_.end();) {
      HeldList& list = it->second;
      bool candidate = false;
      for (size_t i = 0; i < list.size();) {
        if (list[i].ticket.Overdue(now)) {
          overdue.push_back(std::move(list[i].ticket));
          list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
          --size_;
          continue;
        }
        if (now - list[i].pooled_nanos >= gap_hold) candidate = true;
        ++i;
      }
      if (list.empty()) {
        tickets_.erase(it++);
        continue;
      }
      if (candidate) candidates.push_back(it->first);
      ++it;
    }
  }
  for (AdaptiveLimiter::Ticket& t : overdue) t.Timeout(now);
  if (candidates.empty()) return;

  const bool may_waive =
      static_cast<double>(level.txs) < options_.waive_below_high_water * level.high_water_txs;
  const std::vector<std::string> gapped =
      may_waive ? pool.Gapped(candidates) : std::vector<std::string>();
  const std::vector<std::string> gone = pool.Missing(candidates);

  std::vector<AdaptiveLimiter::Ticket> waived, dropped;
  {
    absl::MutexLock lock(&mu_);
    // Moves the tickets of `id` held at least `min_age` into `out`.
    auto take = [&](const std::string& id, int64_t min_age,
                    std::vector<AdaptiveLimiter::Ticket>& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = tickets_.find(id);
      if (it == tickets_.end()) return;
      HeldList& list = it->second;
      for (size_t i = 0; i < list.size();) {
        if (now - list[i].pooled_nanos < min_age) {
          ++i;
          continue;
        }
        out.push_back(std::move(list[i].ticket));
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
        --size_;
      }
      if (list.empty()) tickets_.erase(it);
    };
    for (const std::string& id : gapped) take(id, gap_hold, waived);
    for (const std::string& id : gone) take(id, grace, dropped);
  }
  for (AdaptiveLimiter::Ticket& t : waived) t.Waive();
  for (AdaptiveLimiter::Ticket& t : dropped) {
    if (expiring) {
      t.Drop();
    } else {
      t.Cancel();
    }
  }
}

size_t AdaptiveTickets::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

}  // namespace flowctl
