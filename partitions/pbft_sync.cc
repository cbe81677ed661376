// PbftReplica: checkpoints (stable checkpoint, watermarks, log GC) and block sync.
#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "partitions/pbft_messages.h"
#include "partitions/pbft_replica.h"

namespace partitions {

void PbftReplica::OnCheckpoint(const ConsensusMessage& msg) {
  if (!counters_.Admitted(checkpoints_.Add(msg))) return;  // at or below h: a duplicate
  if (auto quorum = checkpoints_.QuorumAt(msg.checkpoint().seq())) {
    AdvanceStable(quorum->seq, quorum->digest, quorum->proof);
  }
}

void PbftReplica::OnExecuted(uint64_t seq, const std::string& state_root) {
  auto it = awaiting_root_.find(seq);
  if (it == awaiting_root_.end()) return;  // not asked for, or no longer needed
  const std::string chain_digest = std::move(it->second);
  awaiting_root_.erase(it);
  if (seq == low_watermark()) {
    MatchesStable(chain_digest, state_root);
  } else if (seq % config_.checkpoint_interval == 0) {
    SendOwnCheckpoint(seq, chain_digest, state_root);
  }
}

void PbftReplica::SendOwnCheckpoint(uint64_t seq, const std::string& chain_digest,
                                    const std::string& state_root) {
  if (seq <= low_watermark()) return;  // already stable (we were catching up)
  const ConsensusMessage own = out_.Publish(CheckpointMessage(seq, chain_digest, state_root));
  checkpoints_.AddOwn(own);
  const std::string& digest = own.checkpoint().state_digest();
  if (auto proof = checkpoints_.ProofFor(seq, digest)) AdvanceStable(seq, digest, *proof);
}

bool PbftReplica::MatchesStable(const std::string& chain_digest, const std::string& state_root) {
  const std::string& agreed_root = checkpoints_.stable_state_root();
  const bool root_differs =
      !state_root.empty() && !agreed_root.empty() && state_root != agreed_root;
  if (chain_digest == checkpoints_.stable_chain_digest() && !root_differs) return true;
  Diverge({.seq = low_watermark(),
           .own_chain_digest = chain_digest,
           .own_state_root = state_root,
           .agreed_chain_digest = checkpoints_.stable_chain_digest(),
           .agreed_state_root = agreed_root});
  return false;
}

void PbftReplica::Diverge(Divergence divergence) {
  out_.Halt(absl::DataLossError(divergence.ToString()));
  divergence_ = std::move(divergence);
}

std::string PbftReplica::Divergence::ToString() const {
  auto hex = [](const std::string& bytes) {
    return bytes.empty() ? std::string("(not known)") : absl::BytesToHexString(bytes);
  };
  return absl::StrCat("state diverged at height ", seq, ": own state root ", hex(own_state_root),
                      ", agreed ", hex(agreed_state_root), " (own chain digest ",
                      hex(own_chain_digest), ", agreed ", hex(agreed_chain_digest), ")");
}

void PbftReplica::AdvanceStable(uint64_t seq, const std::string& digest,
                                const std::vector<ConsensusMessage>& proof) {
  if (seq <= low_watermark()) return;
  // 2f+1 others signed another state than this replica's own vote at seq: this one diverged.
  const ConsensusMessage* own = checkpoints_.OwnVote(seq);
  if (own != nullptr && own->checkpoint().state_digest() != digest && !proof.empty()) {
    const auto& mine = own->checkpoint();
    const auto& agreed = proof.front().checkpoint();
    Diverge({.seq = seq,
             .own_chain_digest = mine.chain_digest(),
             .own_state_root = mine.state_root(),
             .agreed_chain_digest = agreed.chain_digest(),
             .agreed_state_root = agreed.state_root()});
    return;
  }
  if (absl::Status s = checkpoints_.MakeStable(seq, digest, proof); !s.ok()) {
    out_.Halt(std::move(s));
    return;
  }
  out_.PutStableCheckpoint(checkpoints_.StableRecord());
  beyond_window_.clear();  // a new window: what was beyond the old one may be in it
  awaiting_root_.erase(awaiting_root_.begin(), awaiting_root_.lower_bound(seq));
  log_.DropThrough(seq);
  fetcher_.DropThrough(std::min(seq, last_executed_));  // held synced batches keep their marks
  next_seq_ = std::max(next_seq_, seq + 1);
  // State transfer: the batches up to `seq` are GC'd everywhere; fetch them with certificates,
  // or the state at `seq`.
  if (last_executed_ < seq) Recover();
}

void PbftReplica::Recover() {
  const uint64_t target = low_watermark();
  sync_.RecoverTo(target);
  // The batches in hand reach it (a sync answer brought them with the checkpoint): executing
  // them is all there is to do, no request and no snapshot.
  if (sync_.HeldThrough(last_executed_) >= target) return;
  // A snapshot wanted already is wanted again at the newer checkpoint: the owner may switch to
  // it if the older one cannot be fetched (peers that installed a newer snapshot do not keep it).
  if (target > snapshot_seq_ && config_.snapshot_min_gap > 0 && !snapshots_abandoned_ &&
      (snapshot_seq_ != 0 || target - last_executed_ >= config_.snapshot_min_gap) &&
      !checkpoints_.stable_state_root().empty()) {
    snapshot_seq_ = target;
    out_.Add(PbftSnapshotWanted{.seq = target,
                                .chain_digest = checkpoints_.stable_chain_digest(),
                                .state_root = checkpoints_.stable_state_root()});
    return;
  }
  AskSync();  // for what comes after the batches in hand
}

void PbftReplica::AskSync() {
  if (snapshot_seq_ == 0) sync_.Ask(last_executed_, low_watermark(), beyond_window_, out_);
}

void PbftReplica::OnSnapshotAbandoned() {
  if (snapshot_seq_ == 0) return;
  snapshot_seq_ = 0;
  snapshots_abandoned_ = true;
  AskSync();
  TryExecute();
}

void PbftReplica::OnSnapshotInstalled(uint64_t seq, const std::string& chain_digest) {
  // One of the PbftSnapshotWanted (the owner fetches one of them, not always the latest).
  if (snapshot_seq_ == 0 || seq > snapshot_seq_ || seq <= last_executed_) return;
  snapshot_seq_ = 0;
  last_executed_ = seq;
  chain_digest_ = chain_digest;
  ++counters_.snapshots_installed;
  awaiting_root_.erase(awaiting_root_.begin(), awaiting_root_.upper_bound(seq));
  sync_.DropThrough(seq);
  fetcher_.DropThrough(seq);
  if (seq == low_watermark() && !MatchesStable(chain_digest_, "")) return;
  sync_.NoteExecuted(last_executed_);
  request_timer_.ResetBackoff();
  request_timer_.Restart(out_);
  // A newer checkpoint became stable meanwhile, or a peer told us it executed beyond the
  // snapshot: the batches up to there.
  if (sync_.recovering() || sync_.peer_executed() > last_executed_) AskSync();
  TryExecute();
}

bool PbftReplica::EvidenceAhead() const {
  // f+1 commits for a seq we have not executed mean at least one correct replica prepared it;
  // if we are still stuck on it after a retransmit period, asking for the certificate is cheaper
  // than a view change. So do f+1 checkpoints above it, and f+1 replicas sending beyond our
  // window: one of them is correct, so a checkpoint above ours is stable (a block sync answer
  // carries it).
  return log_.CommitsAbove(last_executed_, config_.f() + 1) ||
         checkpoints_.VotesAbove(last_executed_, config_.f() + 1) ||
         beyond_window_.size() >= config_.f() + 1;
}

void PbftReplica::NoteBeyondWindow(uint32_t sender, uint64_t seq, PbftAdmission admission) {
  if (admission == PbftAdmission::kOutsideWatermarks && seq > low_watermark() + config_.window) {
    beyond_window_.insert(sender);
  }
}

void PbftReplica::OnSyncRequest(const ConsensusMessage& msg) {
  sync_.Answer(msg, last_executed_, *deps_.blocks, checkpoints_.StableRecord(), out_);
}

void PbftReplica::OnSyncResponse(const ConsensusMessage& msg) {
  const auto& resp = msg.sync_response();
  // The batches are held first, so that the stable checkpoint below, if it moves the window,
  // does not ask for them again (Recover); then executed, and the next chunk asked for.
  const uint64_t before = last_executed_;
  if (sync_.Accept(resp, msg.sender(), last_executed_, validator_)) ++counters_.dropped_invalid;
  if (resp.has_stable() && resp.stable().seq() > low_watermark()) {
    // A stable checkpoint we did not know (we missed its votes, or the peer no longer keeps the
    // batches we asked for). If 2f+1 signed it, it is as good as the votes we missed: it moves
    // our low watermark, and Recover fetches the state there (snapshot sync) or the batches up
    // to it if we have not executed them.
    const auto& stable = resp.stable();
    if (validator_.ValidCheckpointProof(stable.seq(), stable.state_digest(), stable.proof(),
                                        /*allow_old_format=*/false)) {
      AdvanceStable(stable.seq(), stable.state_digest(),
                    std::vector<ConsensusMessage>(stable.proof().begin(), stable.proof().end()));
    } else {
      ++counters_.dropped_invalid;
    }
  }
  TryExecute();
  const bool progressed = last_executed_ > before;
  const bool behind = sync_.recovering() || resp.last_executed() > last_executed_;
  if (progressed && behind && !sync_.in_flight()) AskSync();
}

}  // namespace partitions
