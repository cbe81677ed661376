// PbftReplica: checkpoints (stable checkpoint, watermarks, log GC) and block sync.
#include <algorithm>

#include "partitions/pbft_replica.h"

namespace partitions {

void PbftReplica::OnCheckpoint(const ConsensusMessage& msg) {
  switch (checkpoints_.Add(msg)) {
    case CheckpointTracker::Vote::kStale:  // already stable here; peers re-announce their latest
    case CheckpointTracker::Vote::kDuplicate:
      ++counters_.dropped_duplicate;
      return;
    case CheckpointTracker::Vote::kInvalid:
      ++counters_.dropped_invalid;
      return;
    case CheckpointTracker::Vote::kConflicting:
      ++counters_.dropped_conflicting;
      return;
    case CheckpointTracker::Vote::kAdded:
      break;
  }
  if (auto quorum = checkpoints_.QuorumAt(msg.checkpoint().seq())) {
    AdvanceStable(quorum->seq, quorum->digest, quorum->proof);
  }
}

void PbftReplica::SendOwnCheckpoint(uint64_t seq) {
  if (seq <= low_watermark()) return;  // already stable (we were catching up)
  ConsensusMessage msg;
  msg.mutable_checkpoint()->set_seq(seq);
  msg.mutable_checkpoint()->set_state_digest(chain_digest_);
  msg = Signed(std::move(msg));
  Persist(deps_.store->AppendLog({msg}));
  checkpoints_.AddOwn(msg);
  Broadcast(msg);
  if (auto proof = checkpoints_.ProofFor(seq, chain_digest_)) {
    AdvanceStable(seq, chain_digest_, *proof);
  }
}

void PbftReplica::AdvanceStable(uint64_t seq, const std::string& digest,
                                const std::vector<ConsensusMessage>& proof) {
  if (seq <= low_watermark()) return;
  if (absl::Status s = checkpoints_.MakeStable(seq, digest, proof); !s.ok()) {
    status_ = std::move(s);
    return;
  }
  Persist(deps_.store->PutStableCheckpoint(checkpoints_.StableRecord()));
  log_.DropThrough(seq);
  fetched_for_.erase(fetched_for_.begin(), fetched_for_.upper_bound(seq));
  next_seq_ = std::max(next_seq_, seq + 1);
  if (last_executed_ < seq) {
    // State transfer: the batches up to `seq` are GC'd everywhere; fetch them with certificates.
    sync_.RecoverTo(seq);
    RequestSync();
  }
}

void PbftReplica::RequestSync() {
  if (auto req = sync_.NextRequest(last_executed_)) {
    SendTo(req->peer, Signed(std::move(req->msg)), PbftChannel::kSync);
  }
}

bool PbftReplica::EvidenceAhead() const {
  // f+1 commits for a seq we have not executed mean at least one correct replica prepared it;
  // if we are still stuck on it after a retransmit period, asking for the certificate is cheaper
  // than a view change. So do f+1 checkpoints above it.
  return log_.CommitsAbove(last_executed_, config_.f() + 1) ||
         checkpoints_.VotesAbove(last_executed_, config_.f() + 1);
}

void PbftReplica::OnSyncRequest(const ConsensusMessage& msg) {
  ConsensusMessage resp = sync_.Serve(msg.sync_request(), last_executed_, *deps_.blocks);
  SendTo(msg.sender(), Signed(std::move(resp)), PbftChannel::kSync);
}

void PbftReplica::OnSyncResponse(const ConsensusMessage& msg) {
  const auto& resp = msg.sync_response();
  const uint64_t before = last_executed_;
  if (sync_.Accept(resp, last_executed_, validator_)) ++counters_.dropped_invalid;
  TryExecute();
  const bool progressed = last_executed_ > before;
  const bool behind = sync_.recovering() || resp.last_executed() > last_executed_;
  if (progressed && behind && !sync_.in_flight()) RequestSync();
}

}  // namespace partitions
