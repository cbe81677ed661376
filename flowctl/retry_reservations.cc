#include "flowctl/retry_reservations.h"

#include <algorithm>

namespace flowctl {

RetryReservations::RetryReservations(Options options)
    : lead_nanos_(std::max<int64_t>(0, absl::ToInt64Nanoseconds(options.lead))),
      grace_nanos_(std::max<int64_t>(0, absl::ToInt64Nanoseconds(options.grace))),
      grace_fraction_(std::max(0.0, options.grace_fraction)),
      max_grace_nanos_(std::max(grace_nanos_, absl::ToInt64Nanoseconds(options.max_grace))),
      max_tickets_(std::max<size_t>(1, options.max_tickets)),
      max_reserved_(std::max<int64_t>(0, options.max_reserved)) {}

void RetryReservations::set_max_reserved(int64_t units) {
  max_reserved_.store(std::max<int64_t>(0, units), std::memory_order_relaxed);
}

uint64_t RetryReservations::Issue(int64_t now_nanos, int64_t slot_nanos) {
  if (!enabled()) return 0;
  slot_nanos = std::max(slot_nanos, now_nanos);
  absl::MutexLock l(&mu_);
  ExpireLocked(now_nanos);
  if (tickets_.size() >= max_tickets_) return 0;
  uint64_t ticket = 0;
  do {
    ticket = absl::Uniform<uint64_t>(bits_);
  } while (ticket == 0 || tickets_.contains(ticket));
  tickets_.emplace(ticket, Ticket{.slot_nanos = slot_nanos});
  const auto grace = std::clamp(
      static_cast<int64_t>(grace_fraction_ * static_cast<double>(slot_nanos - now_nanos)),
      grace_nanos_, max_grace_nanos_);
  by_expiry_.emplace(slot_nanos + grace, ticket);
  const int64_t index = slot_nanos / kBucketNanos;
  Bucket& b = buckets_[static_cast<size_t>(index) % kBuckets];
  if (b.index != index) b = {.index = index, .count = 0};
  ++b.count;
  ++stats_.issued;
  outstanding_.store(static_cast<int64_t>(tickets_.size()), std::memory_order_relaxed);
  return ticket;
}

RetryReservations::Verdict RetryReservations::Admit(uint64_t ticket, int64_t now_nanos,
                                                    int64_t free_units) {
  if (ticket == 0 && (free_units <= 0 || outstanding_.load(std::memory_order_relaxed) == 0)) {
    return {.admitted = free_units > 0};  // the common case: no lock
  }
  absl::MutexLock l(&mu_);
  ExpireLocked(now_nanos);
  if (ticket != 0) {
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) {
      ++stats_.unknown;
    } else {
      const bool in_window = now_nanos >= it->second.slot_nanos - lead_nanos_;
      // Spent either way (expired ones are gone): in its window it admits; early, the request
      // is no better than a fresh one, and its refusal gives a new ticket (a kept one would hold
      // room for a client that was served, or that holds the new ticket instead).
      EraseLocked(it);
      if (in_window) {
        ++stats_.redeemed;
        return {.admitted = true, .redeemed = true};
      }
      ++stats_.early;
    }
  }
  return {.admitted = free_units > ReservedLocked(now_nanos)};
}

int64_t RetryReservations::Reserved(int64_t now_nanos) {
  if (outstanding_.load(std::memory_order_relaxed) == 0) return 0;
  absl::MutexLock l(&mu_);
  ExpireLocked(now_nanos);
  return ReservedLocked(now_nanos);
}

RetryReservations::Stats RetryReservations::stats(int64_t now_nanos) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now_nanos);
  Stats s = stats_;
  s.outstanding = static_cast<int64_t>(tickets_.size());
  s.reserved = ReservedLocked(now_nanos);
  return s;
}

void RetryReservations::ExpireLocked(int64_t now_nanos) {
  while (!by_expiry_.empty() && by_expiry_.top().first < now_nanos) {
    const uint64_t ticket = by_expiry_.top().second;
    by_expiry_.pop();
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) continue;  // used
    EraseLocked(it);
    ++stats_.expired;
  }
}

void RetryReservations::EraseLocked(absl::flat_hash_map<uint64_t, Ticket>::iterator it) {
  const int64_t index = it->second.slot_nanos / kBucketNanos;
  Bucket& b = buckets_[static_cast<size_t>(index) % kBuckets];
  if (b.index == index && b.count > 0) --b.count;
  tickets_.erase(it);
  outstanding_.store(static_cast<int64_t>(tickets_.size()), std::memory_order_relaxed);
}

int64_t RetryReservations::ReservedLocked(int64_t now_nanos) const {
  const int64_t cap = max_reserved_.load(std::memory_order_relaxed);
  if (cap == 0 || tickets_.empty()) return 0;
  // Due: every outstanding ticket whose slot is at most now + lead (expired ones are gone from
  // the buckets), i.e. slots in [now - max_grace, now + lead]. Buckets are whole, so the lead's
  // edge counts a bucket early or late by under kBucketNanos.
  const int64_t first = std::max<int64_t>(0, now_nanos - max_grace_nanos_) / kBucketNanos;
  const int64_t last = (now_nanos + lead_nanos_) / kBucketNanos;
  int64_t held = 0;
  for (int64_t i = first; i <= last && held < cap; ++i) {
    const Bucket& b = buckets_[static_cast<size_t>(i) % kBuckets];
    if (b.index == i) held += b.count;
  }
  return std::min(held, cap);
}

}  // namespace flowctl
