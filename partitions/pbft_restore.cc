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
    view_changes_[view_][config_.self] = pv.own_view_change();
    latest_vc_view_[config_.self] = view_;
  }
  if (installed_ && pv.has_new_view()) new_view_msg_ = pv.new_view();
  if (installed_) last_installed_view_ = view_;
  const auto& sc = persisted.stable_checkpoint();
  if (sc.seq() > 0) {
    h_ = sc.seq();
    stable_digest_ = sc.state_digest();
    stable_proof_.assign(sc.proof().begin(), sc.proof().end());
  }
  next_seq_ = std::max(h_, last_executed_) + 1;
  if (last_executed_ < h_) {
    recovering_ = true;
    sync_target_ = h_;
  }

  // Rebuild: pre-prepares and prepares by (view, seq) give prepared certificates; messages of the
  // installed current view go back into the slots, so nothing signed before is contradicted.
  std::map<std::pair<uint64_t, uint64_t>, ConsensusMessage> pps;
  std::map<std::pair<uint64_t, uint64_t>, std::map<uint32_t, ConsensusMessage>> prepares;
  for (const ConsensusMessage& m : persisted.log()) {
    const uint64_t seq = MessageSeq(m);
    if (seq <= h_) continue;
    const uint64_t v = MessageView(m);
    switch (m.body_case()) {
      case ConsensusMessage::kPrePrepare:
        pps[{v, seq}] = m;
        if (m.sender() == config_.self && v == view_) next_seq_ = std::max(next_seq_, seq + 1);
        break;
      case ConsensusMessage::kPrepare:
        prepares[{v, seq}][m.sender()] = m;
        break;
      case ConsensusMessage::kCommit:
        if (installed_ && v == view_) {
          Slot& slot = log_[seq];
          slot.commits[m.sender()] = m;
          if (m.sender() == config_.self) slot.sent_commit = true;
        }
        break;
      case ConsensusMessage::kCheckpoint:
        if (m.sender() == config_.self) {
          own_checkpoints_[seq] = m.checkpoint().state_digest();
          checkpoints_[seq][m.sender()] = m;
        }
        break;
      default:
        break;
    }
  }
  for (auto& [key, pp] : pps) {
    const auto [v, seq] = key;
    Slot& slot = log_[seq];
    const std::string& digest = pp.pre_prepare().digest();
    const uint32_t primary = config_.PrimaryOf(v);
    node::consensus::PreparedCertificate cert;
    *cert.mutable_pre_prepare() = pp;
    for (const auto& [sender, p] : prepares[key]) {
      if (sender != primary && p.prepare().digest() == digest &&
          static_cast<uint32_t>(cert.prepares_size()) < 2 * config_.f()) {
        *cert.add_prepares() = p;
      }
    }
    const bool is_prepared = static_cast<uint32_t>(cert.prepares_size()) >= 2 * config_.f();
    if (is_prepared && (!slot.cert || slot.cert_view <= v)) {
      slot.cert = cert;
      slot.cert_view = v;
    }
    if (installed_ && v == view_) {
      slot.pre_prepare = pp;
      slot.digest = digest;
      for (const auto& [sender, p] : prepares[key]) slot.prepares[sender] = p;
    }
  }
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
  std::vector<uint64_t> seqs;
  for (const auto& [seq, slot] : log_) {
    if (slot.pre_prepare) seqs.push_back(seq);
  }
  for (uint64_t seq : seqs) ContinueAfterTxs(seq);
  // A restarted replica may be behind; ask one peer (cheap if it is not).
  if (config_.n > 1) RequestSync();
  TryExecute();
}

}  // namespace partitions
