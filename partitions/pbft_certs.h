// PBFT digests and certificate checks: batch and chain digests, the bytes a signature covers, and
// validation of the certificates nested in view changes, new views and block sync; plus the
// deterministic new-view plan that the new primary computes and every backup recomputes.
//
// Pure functions of their inputs and the replica's config; PbftValidator only reads through the
// PbftCrypto it is given. Not thread-safe beyond that crypto's own guarantees.
//
//   PbftValidator validator(config, &crypto);
//   if (!validator.ValidViewChange(msg)) ++counters.dropped_invalid;
//   NewViewPlan plan = validator.Plan(view_changes);
#ifndef PARTITIONS_PBFT_CERTS_H_
#define PARTITIONS_PBFT_CERTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "partitions/pbft_types.h"

namespace partitions {

inline constexpr size_t kTxHashBytes = 32;

// SHA-256 over the concatenated hashes (32 bytes).
std::string BatchDigest(const std::vector<std::string>& tx_hashes);
std::string BatchDigest(const google::protobuf::RepeatedPtrField<std::string>& tx_hashes);
// 32 zero bytes: the chain digest before seq 1.
std::string GenesisDigest();
// SHA-256(previous || seq as 8 bytes big endian || batch_digest).
std::string ChainDigest(const std::string& previous, uint64_t seq, const std::string& batch_digest);
// What checkpoint votes match on: SHA-256("noded/checkpoint/v1" || chain_digest || state_root).
std::string CheckpointDigest(const std::string& chain_digest, const std::string& state_root);
// A checkpoint's three digests are 32 bytes each and state_digest is CheckpointDigest of the
// other two. (A new vote must be; a proof of a checkpoint made stable before votes carried roots
// is also accepted in view changes, see ValidCheckpointProof.)
bool WellFormedCheckpoint(const node::consensus::Checkpoint& cp);
// The serialized envelope with the signature cleared (deterministic serialization).
std::string SigningBytes(const ConsensusMessage& msg);
// The view a normal-case message belongs to (pre-prepare, prepare, commit); 0 for others.
uint64_t MessageView(const ConsensusMessage& msg);
// The seq of a pre-prepare, prepare, commit or checkpoint; 0 for others.
uint64_t MessageSeq(const ConsensusMessage& msg);

// What a new view re-issues: the stable checkpoint it starts from and one batch per seq in
// (min_s, max_s] (the prepared batch of the highest view, or a null batch for a gap).
struct NewViewPlan {
  struct Entry {
    uint64_t seq = 0;
    std::string digest;
    std::vector<std::string> tx_hashes;  // empty: null batch
  };
  uint64_t min_s = 0;
  std::string min_digest;
  std::vector<ConsensusMessage> min_proof;
  uint64_t max_s = 0;
  std::vector<Entry> entries;
};

class PbftValidator {
 public:
  // `crypto` must outlive the validator.
  PbftValidator(const PbftConfig& config, const PbftCrypto* crypto);

  // Digest matches the hashes, every hash is 32 bytes, size within max_batch_txs.
  bool ValidBatch(const node::consensus::PrePrepare& pp) const;
  // seq 0 with the genesis digest and no proof, or 2f+1 distinct signed matching checkpoints, all
  // of one format (votes without chain digest and root, from before votes carried them, only
  // with `allow_old_format`: a view change may still carry such a proof).
  bool ValidCheckpointProof(uint64_t seq, const std::string& digest,
                            const google::protobuf::RepeatedPtrField<ConsensusMessage>& proof,
                            bool allow_old_format = true) const;
  // A signed pre-prepare of a view below `below_view` for a seq in (h, h+L], plus 2f signed
  // prepares from distinct backups that match it.
  bool ValidPreparedCertificate(const node::consensus::PreparedCertificate& cert,
                                uint64_t below_view, uint64_t h) const;
  // Signed envelope holding a well-formed ViewChange with valid proof and certificates.
  bool ValidViewChange(const ConsensusMessage& msg) const;
  // 2f+1 signed commits of one view from distinct replicas matching the batch's seq and digest.
  bool ValidCommittedBatch(const node::consensus::CommittedBatch& batch) const;

  // REQUIRES: every element is a valid ViewChange envelope for the same view.
  NewViewPlan Plan(const std::vector<const ConsensusMessage*>& view_changes) const;
  // A NewView envelope for a view w > 0 from w's primary, holding 2f+1 valid ViewChanges for w
  // from distinct replicas, and exactly the pre-prepares of their Plan, signed by that primary:
  // the plan; nullopt otherwise.
  std::optional<NewViewPlan> CheckNewView(const ConsensusMessage& msg) const;

 private:
  const PbftConfig config_;
  const PbftCrypto* const crypto_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_CERTS_H_
