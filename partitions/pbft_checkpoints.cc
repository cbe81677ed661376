#include "partitions/pbft_checkpoints.h"

#include <utility>

#include "partitions/pbft_certs.h"

namespace partitions {

CheckpointTracker::CheckpointTracker(const PbftConfig& config)
    : config_(config), stable_digest_(GenesisDigest()) {}

node::consensus::StableCheckpointRecord CheckpointTracker::StableRecord() const {
  node::consensus::StableCheckpointRecord record;
  record.set_seq(stable_seq_);
  record.set_state_digest(stable_digest_);
  for (const ConsensusMessage& m : stable_proof_) *record.add_proof() = m;
  return record;
}

PbftAdmission CheckpointTracker::Add(const ConsensusMessage& msg) {
  const auto& cp = msg.checkpoint();
  if (cp.seq() <= stable_seq_) return PbftAdmission::kDuplicate;
  if (cp.seq() % config_.checkpoint_interval != 0 || !WellFormedCheckpoint(cp)) {
    return PbftAdmission::kInvalid;
  }
  auto& votes = votes_[cp.seq()];
  auto it = votes.find(msg.sender());
  if (it != votes.end()) {
    return it->second.checkpoint().state_digest() == cp.state_digest()
               ? PbftAdmission::kDuplicate
               : PbftAdmission::kConflicting;
  }
  votes.emplace(msg.sender(), msg);
  // Bound memory: keep each sender's most recent (window / K + 2) checkpoints.
  const size_t keep = config_.window / config_.checkpoint_interval + 2;
  size_t kept = 0;
  for (auto rit = votes_.rbegin(); rit != votes_.rend(); ++rit) {
    if (rit->second.count(msg.sender()) > 0 && ++kept > keep) rit->second.erase(msg.sender());
  }
  return PbftAdmission::kAdded;
}

void CheckpointTracker::AddOwn(const ConsensusMessage& msg) {
  own_[msg.checkpoint().seq()] = msg.checkpoint().state_digest();
  votes_[msg.checkpoint().seq()][config_.self] = msg;
}

std::optional<CheckpointTracker::Quorum> CheckpointTracker::QuorumAt(uint64_t seq) const {
  auto it = votes_.find(seq);
  if (it == votes_.end()) return std::nullopt;
  std::map<std::string, std::vector<ConsensusMessage>> by_digest;
  for (const auto& [sender, m] : it->second) by_digest[m.checkpoint().state_digest()].push_back(m);
  for (auto& [digest, proof] : by_digest) {
    if (proof.size() >= config_.quorum()) {
      proof.resize(config_.quorum());
      return Quorum{seq, digest, std::move(proof)};
    }
  }
  return std::nullopt;
}

std::optional<std::vector<ConsensusMessage>> CheckpointTracker::ProofFor(
    uint64_t seq, const std::string& digest) const {
  auto it = votes_.find(seq);
  if (it == votes_.end()) return std::nullopt;
  std::vector<ConsensusMessage> proof;
  for (const auto& [sender, m] : it->second) {
    if (m.checkpoint().state_digest() == digest && proof.size() < config_.quorum()) {
      proof.push_back(m);
    }
  }
  if (proof.size() < config_.quorum()) return std::nullopt;
  return proof;
}

absl::Status CheckpointTracker::MakeStable(uint64_t seq, const std::string& digest,
                                           const std::vector<ConsensusMessage>& proof) {
  auto own = own_.find(seq);
  if (own != own_.end() && own->second != digest) {
    return absl::InternalError("pbft: own checkpoint differs from a stable checkpoint");
  }
  stable_seq_ = seq;
  stable_digest_ = digest;
  stable_proof_ = proof;
  votes_.erase(votes_.begin(), votes_.upper_bound(seq));
  own_.erase(own_.begin(), own_.lower_bound(seq));
  return absl::OkStatus();
}

const std::string& CheckpointTracker::stable_chain_digest() const {
  if (stable_proof_.empty() || stable_proof_.front().checkpoint().chain_digest().empty()) {
    return stable_digest_;
  }
  return stable_proof_.front().checkpoint().chain_digest();
}

const std::string& CheckpointTracker::stable_state_root() const {
  static const std::string* const kUnknown = new std::string();
  return stable_proof_.empty() ? *kUnknown : stable_proof_.front().checkpoint().state_root();
}

const ConsensusMessage* CheckpointTracker::OwnVote(uint64_t seq) const {
  if (own_.count(seq) == 0) return nullptr;
  auto it = votes_.find(seq);
  if (it == votes_.end()) return nullptr;
  auto mine = it->second.find(config_.self);
  return mine == it->second.end() ? nullptr : &mine->second;
}

const ConsensusMessage* CheckpointTracker::LatestOwnVote() const {
  return own_.empty() ? nullptr : OwnVote(own_.rbegin()->first);
}

bool CheckpointTracker::VotesAbove(uint64_t seq, size_t senders) const {
  for (auto it = votes_.upper_bound(seq); it != votes_.end(); ++it) {
    if (it->second.size() >= senders) return true;
  }
  return false;
}

void CheckpointTracker::RestoreStable(const node::consensus::StableCheckpointRecord& record) {
  if (record.seq() == 0) return;
  stable_seq_ = record.seq();
  stable_digest_ = record.state_digest();
  stable_proof_.assign(record.proof().begin(), record.proof().end());
}

void CheckpointTracker::RestoreOwn(const google::protobuf::RepeatedPtrField<ConsensusMessage>& log,
                                   uint64_t executed) {
  for (const ConsensusMessage& m : log) {
    if (!m.has_checkpoint() || m.sender() != config_.self) continue;
    const uint64_t seq = m.checkpoint().seq();
    if (seq <= stable_seq_ || seq > executed || !WellFormedCheckpoint(m.checkpoint())) continue;
    own_[m.checkpoint().seq()] = m.checkpoint().state_digest();
    votes_[m.checkpoint().seq()][m.sender()] = m;
  }
}

}  // namespace partitions
