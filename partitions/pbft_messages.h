// Builders of the messages a PBFT replica signs and the view records it persists.
//
// Each returns an unsigned envelope (no sender, no signature: the replica signs it) or a record
// for ConsensusStore::PutView. Pure functions of their arguments; thread-safe.
//
//   ConsensusMessage prepare = Sign(PrepareMessage(view, seq, digest));
//   store->PutView(InstalledViewRecord(view, new_view_msg));
#ifndef PARTITIONS_PBFT_MESSAGES_H_
#define PARTITIONS_PBFT_MESSAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "partitions/pbft_types.h"

namespace partitions {

ConsensusMessage PrePrepareMessage(uint64_t view, uint64_t seq, const std::string& digest,
                                   const std::vector<std::string>& tx_hashes, uint32_t proposer);
ConsensusMessage PrepareMessage(uint64_t view, uint64_t seq, const std::string& digest);
ConsensusMessage CommitMessage(uint64_t view, uint64_t seq, const std::string& digest);
// A checkpoint vote for (chain digest, state root) after executing `seq`, with its
// CheckpointDigest.
ConsensusMessage CheckpointMessage(uint64_t seq, const std::string& chain_digest,
                                   const std::string& state_root);
// A ViewChange for `new_view` from the stable checkpoint `stable` with the prepared
// certificates above it.
ConsensusMessage ViewChangeMessage(
    uint64_t new_view, const node::consensus::StableCheckpointRecord& stable,
    const std::vector<node::consensus::PreparedCertificate>& prepared);
// A NewView for `view` with its 2f+1 ViewChanges and the (signed) pre-prepares it re-issues.
ConsensusMessage NewViewMessage(uint64_t view,
                                const std::vector<const ConsensusMessage*>& view_changes,
                                const std::vector<ConsensusMessage>& pre_prepares);
ConsensusMessage NewViewRequestMessage(uint64_t min_view);

// In a view change to `view`, with this replica's signed ViewChange.
node::consensus::PersistedView ViewChangeRecord(uint64_t view,
                                                const ConsensusMessage& own_view_change);
// In `view`, installed by the signed NewView `new_view`.
node::consensus::PersistedView InstalledViewRecord(uint64_t view, const ConsensusMessage& new_view);

}  // namespace partitions

#endif  // PARTITIONS_PBFT_MESSAGES_H_
