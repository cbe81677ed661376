#include "partitions/pbft_types.h"

#include "absl/strings/str_cat.h"

namespace partitions {

const char* ConsensusStateName(ConsensusState state) {
  switch (state) {
    case ConsensusState::kNormal:
      return "NORMAL";
    case ConsensusState::kViewChange:
      return "VIEW_CHANGE";
    case ConsensusState::kRecovering:
      return "RECOVERING";
    case ConsensusState::kDiverged:
      return "DIVERGED";
  }
  return "UNKNOWN";
}

bool PbftCounters::Admitted(PbftAdmission admission) {
  switch (admission) {
    case PbftAdmission::kAdded:
      return true;
    case PbftAdmission::kInvalid:
      ++dropped_invalid;
      break;
    case PbftAdmission::kOutsideWatermarks:
      ++dropped_outside_watermarks;
      break;
    case PbftAdmission::kDuplicate:
      ++dropped_duplicate;
      break;
    case PbftAdmission::kConflicting:
      ++dropped_conflicting;
      break;
  }
  return false;
}

absl::Status PbftConfig::Validate() const {
  if (n == 0 || (n - 1) % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pbft.n must be 3f+1, got ", n));
  }
  if (self >= n) {
    return absl::InvalidArgumentError(absl::StrCat("pbft.self must be < n, got ", self));
  }
  if (checkpoint_interval == 0 || window < 2 * checkpoint_interval ||
      window % checkpoint_interval != 0) {
    return absl::InvalidArgumentError(
        "pbft.window must be a multiple of pbft.checkpoint_interval and >= 2x it");
  }
  if (max_inflight == 0 || max_inflight > window) {
    return absl::InvalidArgumentError("pbft.max_inflight must be in [1, window]");
  }
  if (max_batch_txs == 0) return absl::InvalidArgumentError("pbft.max_batch_txs must be >= 1");
  if (request_timeout_ms <= 0 || view_change_timeout_ms <= 0 || retransmit_ms <= 0) {
    return absl::InvalidArgumentError("pbft timeouts must be > 0 ms");
  }
  if (max_backoff_shift > 20) return absl::InvalidArgumentError("pbft.max_backoff_shift <= 20");
  if (sync_chunk == 0) return absl::InvalidArgumentError("pbft.sync_chunk must be >= 1");
  return absl::OkStatus();
}

}  // namespace partitions
