#include "runtime/cache_demand.h"

#include <algorithm>

namespace runtime {
namespace {

// The share whose fraction for a cache configured at `configured` (of `limit`) covers `bytes`
// (at most the configured size).
double ShareFor(double bytes, uint64_t configured, uint64_t limit) {
  if (configured == 0) return 0;
  return std::min(bytes, static_cast<double>(configured)) * static_cast<double>(limit) /
         static_cast<double>(configured);
}

}  // namespace

uint64_t CacheDemand::Observe(const Sample& s) {
  if (last_.has_value()) {
    if (s.state_evicted_misses > last_->state_evicted_misses) last_want_nanos_ = s.now_nanos;
    if (s.state_lookups > last_->state_lookups || s.reads > last_->reads) {
      last_use_nanos_ = s.now_nanos;
    }
  } else {
    last_use_nanos_ = s.now_nanos;  // no history: keep what they hold
  }
  last_ = s;
  if (last_want_nanos_.has_value() && s.now_nanos - *last_want_nanos_ < kWantHoldNanos) {
    state_ = State::kWanting;
    return s.limit;
  }
  if (last_use_nanos_.has_value() && s.now_nanos - *last_use_nanos_ < kIdleAfterNanos) {
    state_ = State::kInUse;
    const double share = std::max(ShareFor(kInUseHeadroom * static_cast<double>(s.state_own_bytes),
                                           s.state_configured, s.limit),
                                  ShareFor(kInUseHeadroom * static_cast<double>(s.block_own_bytes),
                                           s.block_configured, s.limit));
    return static_cast<uint64_t>(share);
  }
  state_ = State::kIdle;
  return 0;
}

}  // namespace runtime
