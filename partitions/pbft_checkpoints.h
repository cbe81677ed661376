// CheckpointTracker: a PBFT replica's checkpoint votes and its stable checkpoint.
//
// Holds the signed Checkpoint messages seen above the stable checkpoint, by seq and sender, the
// digests of this replica's own checkpoints, and the stable checkpoint itself (seq, checkpoint
// digest and its proof of 2f+1 matching signed checkpoints), which is the replica's low
// watermark h. A vote's digest binds its chain digest and state root (CheckpointDigest), so a
// stable checkpoint says both what was ordered and what executing it produced.
// It decides when a seq has a proof; the replica decides what becoming stable means (persisting
// the record, GC of its log, block sync).
//
// Invariants: every vote held is for a seq above stable_seq(); peers' votes are for multiples of
// the checkpoint interval with 32-byte digests, at most window / K + 2 per peer (its most recent
// ones: far-ahead votes are kept, since they are how a lagging replica learns that it is
// behind); own digests are kept from stable_seq() up. Messages must be signature-verified by the
// caller; their digests are checked here (WellFormedCheckpoint).
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   CheckpointTracker checkpoints(config);
//   if (checkpoints.Add(msg) == PbftAdmission::kAdded) {
//     if (auto q = checkpoints.QuorumAt(seq)) {
//       RETURN_IF_ERROR(checkpoints.MakeStable(q->seq, q->digest, q->proof));
//     }
//   }
#ifndef PARTITIONS_PBFT_CHECKPOINTS_H_
#define PARTITIONS_PBFT_CHECKPOINTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "partitions/pbft_types.h"

namespace partitions {

class CheckpointTracker {
 public:
  // 2f+1 matching checkpoints for one seq.
  struct Quorum {
    uint64_t seq = 0;
    std::string digest;
    std::vector<ConsensusMessage> proof;  // exactly 2f+1, by sender
  };

  // Starts at the genesis checkpoint (seq 0, GenesisDigest(), no proof).
  explicit CheckpointTracker(const PbftConfig& config);

  uint64_t stable_seq() const { return stable_seq_; }
  const std::string& stable_digest() const { return stable_digest_; }
  const std::vector<ConsensusMessage>& stable_proof() const { return stable_proof_; }
  // The chain digest and state root 2f+1 replicas signed at stable_seq(), from its proof. At seq 0
  // (and for a record written before votes carried them): the chain digest is stable_digest()
  // and the root is empty (unknown).
  const std::string& stable_chain_digest() const;
  const std::string& stable_state_root() const;
  // The stable checkpoint as persisted (ConsensusStore::PutStableCheckpoint).
  node::consensus::StableCheckpointRecord StableRecord() const;

  // A peer's Checkpoint. Refused: kInvalid (seq not a multiple of the interval, or digests that
  // are not 32 bytes or do not match, see WellFormedCheckpoint), kDuplicate (at or below the stable
  // checkpoint, which peers re-announce; or the same sender, seq and digest again) or kConflicting
  // (same sender and seq, another digest). Applies the per-sender bound after adding.
  PbftAdmission Add(const ConsensusMessage& msg);
  // This replica's own signed Checkpoint (replaces an earlier own vote for its seq).
  void AddOwn(const ConsensusMessage& msg);
  // The first digest (in byte order) with 2f+1 votes at `seq`, and its proof; nullopt if none.
  std::optional<Quorum> QuorumAt(uint64_t seq) const;
  // 2f+1 votes at `seq` for `digest` (the first by sender), or nullopt if there are fewer.
  std::optional<std::vector<ConsensusMessage>> ProofFor(uint64_t seq,
                                                        const std::string& digest) const;

  // Makes (seq, digest, proof) the stable checkpoint and drops the votes at or below it.
  // REQUIRES: seq > stable_seq(). An own checkpoint for seq with another digest is an internal
  // error (this replica's state diverged): nothing changes then.
  absl::Status MakeStable(uint64_t seq, const std::string& digest,
                          const std::vector<ConsensusMessage>& proof);

  // This replica's own vote at `seq`, nullptr if it has none there (or no longer holds it).
  const ConsensusMessage* OwnVote(uint64_t seq) const;
  // This replica's latest own vote, to re-announce; nullptr if it is not held (any more).
  const ConsensusMessage* LatestOwnVote() const;
  // True if some seq above `seq` has votes from at least `senders` replicas.
  bool VotesAbove(uint64_t seq, size_t senders) const;

  // After a restart: the persisted stable checkpoint (seq 0: none), then the own checkpoints
  // found in the persisted log. Skipped: others' messages, those at or below the stable
  // checkpoint, votes in the format before state roots (no peer would match them any more), and
  // votes above `executed`, the ledger's height: a ledger behind its own votes was rebuilt (e.g.
  // after a divergence), so those votes describe a state it no longer has.
  void RestoreStable(const node::consensus::StableCheckpointRecord& record);
  void RestoreOwn(const google::protobuf::RepeatedPtrField<ConsensusMessage>& log,
                  uint64_t executed);

 private:
  const PbftConfig config_;
  std::map<uint64_t, std::map<uint32_t, ConsensusMessage>> votes_;  // seq -> sender -> message
  std::map<uint64_t, std::string> own_;                             // seq -> own chain digest
  uint64_t stable_seq_ = 0;
  std::string stable_digest_;
  std::vector<ConsensusMessage> stable_proof_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_CHECKPOINTS_H_
