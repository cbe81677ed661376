// PbftReplica: checkpoints (stable checkpoint, watermarks, log GC) and block sync.
#include <algorithm>

#include "partitions/pbft_replica.h"

namespace partitions {

using ::node::consensus::CommittedBatch;
using ::node::consensus::StableCheckpointRecord;

void PbftReplica::OnCheckpoint(const ConsensusMessage& msg) {
  const auto& cp = msg.checkpoint();
  if (cp.seq() <= h_) {
    ++counters_.dropped_duplicate;  // already stable here; peers re-announce their latest
    return;
  }
  if (cp.seq() % config_.checkpoint_interval != 0 || cp.state_digest().size() != kTxHashBytes) {
    ++counters_.dropped_invalid;
    return;
  }
  auto& votes = checkpoints_[cp.seq()];
  auto it = votes.find(msg.sender());
  if (it != votes.end()) {
    if (it->second.checkpoint().state_digest() == cp.state_digest()) {
      ++counters_.dropped_duplicate;
    } else {
      ++counters_.dropped_conflicting;
    }
    return;
  }
  votes.emplace(msg.sender(), msg);
  // Bound memory: keep each sender's most recent (window / K + 2) checkpoints. Far-ahead ones
  // are kept too, since they are how a lagging replica learns that it is behind.
  const size_t keep = config_.window / config_.checkpoint_interval + 2;
  size_t mine = 0;
  for (auto rit = checkpoints_.rbegin(); rit != checkpoints_.rend(); ++rit) {
    if (rit->second.count(msg.sender()) > 0 && ++mine > keep) {
      rit->second.erase(msg.sender());
    }
  }
  std::map<std::string, std::vector<ConsensusMessage>> by_digest;
  for (const auto& [sender, m] : votes) by_digest[m.checkpoint().state_digest()].push_back(m);
  for (auto& [digest, proof] : by_digest) {
    if (proof.size() >= config_.quorum()) {
      proof.resize(config_.quorum());
      AdvanceStable(cp.seq(), digest, proof);
      return;
    }
  }
}

void PbftReplica::SendOwnCheckpoint(uint64_t seq) {
  if (seq <= h_) return;  // already stable (we were catching up)
  ConsensusMessage msg;
  msg.mutable_checkpoint()->set_seq(seq);
  msg.mutable_checkpoint()->set_state_digest(chain_digest_);
  msg = Signed(std::move(msg));
  Persist(deps_.store->AppendLog({msg}));
  own_checkpoints_[seq] = chain_digest_;
  Broadcast(msg);
  auto& votes = checkpoints_[seq];
  votes[config_.self] = msg;
  std::vector<ConsensusMessage> proof;
  for (const auto& [sender, m] : votes) {
    if (m.checkpoint().state_digest() == chain_digest_ && proof.size() < config_.quorum()) {
      proof.push_back(m);
    }
  }
  if (proof.size() >= config_.quorum()) AdvanceStable(seq, chain_digest_, proof);
}

void PbftReplica::AdvanceStable(uint64_t seq, const std::string& digest,
                                const std::vector<ConsensusMessage>& proof) {
  if (seq <= h_) return;
  auto own = own_checkpoints_.find(seq);
  if (own != own_checkpoints_.end() && own->second != digest) {
    status_ = absl::InternalError("pbft: own checkpoint differs from a stable checkpoint");
    return;
  }
  h_ = seq;
  stable_digest_ = digest;
  stable_proof_ = proof;
  StableCheckpointRecord record;
  record.set_seq(seq);
  record.set_state_digest(digest);
  for (const ConsensusMessage& m : proof) *record.add_proof() = m;
  Persist(deps_.store->PutStableCheckpoint(record));
  log_.erase(log_.begin(), log_.upper_bound(seq));
  checkpoints_.erase(checkpoints_.begin(), checkpoints_.upper_bound(seq));
  own_checkpoints_.erase(own_checkpoints_.begin(), own_checkpoints_.lower_bound(seq));
  fetched_for_.erase(fetched_for_.begin(), fetched_for_.upper_bound(seq));
  next_seq_ = std::max(next_seq_, seq + 1);
  if (last_executed_ < seq) {
    // State transfer: the batches up to `seq` are GC'd everywhere; fetch them with certificates.
    recovering_ = true;
    sync_target_ = std::max(sync_target_, seq);
    RequestSync();
  }
}

uint32_t PbftReplica::NextSyncPeer() {
  const uint32_t others = config_.n - 1;
  const uint32_t offset = 1 + (sync_rr_++ % others);
  return (config_.self + offset) % config_.n;
}

void PbftReplica::RequestSync() {
  if (config_.n == 1) return;
  ConsensusMessage msg;
  msg.mutable_sync_request()->set_from_seq(last_executed_ + 1);
  msg.mutable_sync_request()->set_to_seq(last_executed_ + config_.sync_chunk);
  SendTo(NextSyncPeer(), Signed(std::move(msg)), PbftChannel::kSync);
  sync_in_flight_ = true;
}

bool PbftReplica::EvidenceAhead() const {
  // f+1 commits for a seq we have not executed mean at least one correct replica prepared it;
  // if we are still stuck on it after a retransmit period, asking for the certificate is cheaper
  // than a view change.
  for (auto it = log_.upper_bound(last_executed_); it != log_.end(); ++it) {
    if (it->second.commits.size() >= config_.f() + 1) return true;
  }
  for (auto it = checkpoints_.upper_bound(last_executed_); it != checkpoints_.end(); ++it) {
    if (it->second.size() >= config_.f() + 1) return true;
  }
  return false;
}

void PbftReplica::OnSyncRequest(const ConsensusMessage& msg) {
  const auto& req = msg.sync_request();
  ConsensusMessage resp_msg;
  auto* resp = resp_msg.mutable_sync_response();
  resp->set_last_executed(last_executed_);
  if (req.from_seq() >= 1 && req.to_seq() >= req.from_seq()) {
    const uint64_t last =
        std::min({req.to_seq(), req.from_seq() + config_.sync_chunk - 1, last_executed_});
    for (uint64_t s = req.from_seq(); s <= last; ++s) {
      std::optional<CommittedBatch> batch = deps_.blocks->GetCommitted(s);
      if (!batch) break;
      *resp->add_batches() = std::move(*batch);
    }
  }
  SendTo(msg.sender(), Signed(std::move(resp_msg)), PbftChannel::kSync);
}

void PbftReplica::OnSyncResponse(const ConsensusMessage& msg) {
  sync_in_flight_ = false;
  const auto& resp = msg.sync_response();
  const uint64_t before = last_executed_;
  const uint64_t horizon = last_executed_ + std::max<uint64_t>(config_.window, config_.sync_chunk);
  for (const CommittedBatch& batch : resp.batches()) {
    if (batch.seq() <= last_executed_ || synced_.count(batch.seq()) > 0) continue;
    if (batch.seq() > horizon) break;
    if (!validator_.ValidCommittedBatch(batch)) {
      ++counters_.dropped_invalid;
      break;
    }
    synced_.emplace(batch.seq(), batch);
  }
  TryExecute();
  const bool progressed = last_executed_ > before;
  const bool behind = recovering_ || resp.last_executed() > last_executed_;
  if (progressed && behind && !sync_in_flight_) RequestSync();
}

}  // namespace partitions
