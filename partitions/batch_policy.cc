#include "partitions/batch_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace partitions {

absl::Status BatchPolicy::Validate(const Options& options) {
  if (options.max_txs < 1) return absl::InvalidArgumentError("batch.max_txs: must be >= 1, got 0");
  if (options.max_bytes < 1) {
    return absl::InvalidArgumentError("batch.max_bytes: must be >= 1, got 0");
  }
  if (options.max_delay_nanos < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.max_delay_nanos: must be >= 0, got ", options.max_delay_nanos));
  }
  return absl::OkStatus();
}

BatchPolicy::Decision BatchPolicy::Decide(int64_t now_nanos, uint64_t ready_txs,
                                          uint64_t ready_bytes, int64_t oldest_ready_nanos,
                                          bool can_propose, uint64_t in_flight,
                                          int64_t partial_not_before_nanos) const {
  Decision d;
  // Nothing to cut, or the replica would not take it: the replica's next event (an executed
  // batch, a new view) or the pool's next arrival asks again.
  if (ready_txs == 0 || !can_propose) return d;
  if (ready_txs >= options_.max_txs || ready_bytes >= options_.max_bytes) {
    d.cut = true;
    return d;
  }
  // Partial: it waits for company, and for the proposals in flight to execute (the commit asks
  // again).
  if (options_.max_partial_in_flight > 0 && in_flight >= options_.max_partial_in_flight) return d;
  const int64_t deadline =
      std::max(oldest_ready_nanos + options_.max_delay_nanos, partial_not_before_nanos);
  if (now_nanos >= deadline) {
    d.cut = true;
  } else {
    d.wake_at_nanos = deadline;
  }
  return d;
}

}  // namespace partitions
