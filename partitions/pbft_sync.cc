// PbftReplica: checkpoints (stable checkpoint, watermarks, log GC) and block sync.
#include <algorithm>

#include "partitions/pbft_messages.h"
#include "partitions/pbft_replica.h"

namespace partitions {

void PbftReplica::OnCheckpoint(const ConsensusMessage& msg) {
  if (!counters_.Admitted(checkpoints_.Add(msg))) return;  // at or below h: a duplicate
  if (auto quorum = checkpoints_.QuorumAt(msg.checkpoint().seq())) {
    AdvanceStable(quorum->seq, quorum->digest, quorum->proof);
  }
}

void PbftReplica::SendOwnCheckpoint(uint64_t seq) {
  if (seq <= low_watermark()) return;  // already stable (we were catching up)
  checkpoints_.AddOwn(out_.Publish(CheckpointMessage(seq, chain_digest_)));
  if (auto proof = checkpoints_.ProofFor(seq, chain_digest_)) {
    AdvanceStable(seq, chain_digest_, *proof);
  }
}

void PbftReplica::AdvanceStable(uint64_t seq, const std::string& digest,
                                const std::vector<ConsensusMessage>& proof) {
  if (seq <= low_watermark()) return;
  if (absl::Status s = checkpoints_.MakeStable(seq, digest, proof); !s.ok()) {
    out_.Halt(std::move(s));
    return;
  }
  out_.PutStableCheckpoint(checkpoints_.StableRecord());
  log_.DropThrough(seq);
  fetcher_.DropThrough(seq);
  next_seq_ = std::max(next_seq_, seq + 1);
  if (last_executed_ < seq) {
    // State transfer: the batches up to `seq` are GC'd everywhere; fetch them with certificates.
    sync_.RecoverTo(seq);
    sync_.Ask(last_executed_, out_);
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
  sync_.Answer(msg, last_executed_, *deps_.blocks, out_);
}

void PbftReplica::OnSyncResponse(const ConsensusMessage& msg) {
  const auto& resp = msg.sync_response();
  const uint64_t before = last_executed_;
  if (sync_.Accept(resp, last_executed_, validator_)) ++counters_.dropped_invalid;
  TryExecute();
  const bool progressed = last_executed_ > before;
  const bool behind = sync_.recovering() || resp.last_executed() > last_executed_;
  if (progressed && behind && !sync_.in_flight()) sync_.Ask(last_executed_, out_);
}

}  // namespace partitions
