// PbftReplica: rebuilding from the ConsensusStore after a restart, and the start event.
#include <algorithm>
#include <utility>

#include "flowctl/status_macros.h"
#include "partitions/pbft_replica.h"

namespace partitions {

using ::node::consensus::PersistedConsensus;

absl::Status PbftReplica::Restore() {
  ASSIGN_OR_RETURN(PersistedConsensus persisted, deps_.store->Load());
  const auto& pv = persisted.view();
  view_ = pv.view();
  installed_ = pv.installed() || view_ == 0;
  if (!installed_ && pv.has_own_view_change()) {
    own_view_change_ = pv.own_view_change();
    view_changes_.AddOwn(view_, pv.own_view_change());
  }
  if (installed_ && pv.has_new_view()) new_view_msg_ = pv.new_view();
  if (installed_) last_installed_view_ = view_;
  checkpoints_.RestoreStable(persisted.stable_checkpoint());
  const uint64_t h = low_watermark();
  next_seq_ = std::max(h, last_executed_) + 1;
  if (last_executed_ < h) sync_.RecoverTo(h);
  // Nothing signed before is contradicted: own checkpoints, prepared certificates and the
  // installed view's messages come back.
  checkpoints_.RestoreOwn(persisted.log());
  const uint64_t own_max = log_.Restore(persisted.log(), h, view_, installed_);
  next_seq_ = std::max(next_seq_, own_max + 1);
  return absl::OkStatus();
}

void PbftReplica::OnStart() {
  reported_state_ = ConsensusState::kNormal;
  out_.push_back(PbftSetTimer{PbftTimer::kRetransmit, config_.retransmit_ms});
  if (!installed_) {
    if (own_view_change_) Broadcast(*own_view_change_);
    out_.push_back(PbftSetTimer{PbftTimer::kViewChange, ViewChangeTimeout()});
  }
  // Resume restored slots: prepare what was accepted, commit what was prepared.
  for (uint64_t seq : log_.WithPrePrepare()) ContinueAfterTxs(seq);
  // A restarted replica may be behind; ask one peer (cheap if it is not).
  if (config_.n > 1) RequestSync();
  TryExecute();
}

}  // namespace partitions
