// PartitionMessageKind: what a PartitionMessage (proto/partition.proto) carries, numbered as the
// channel table's kinds (p2p/channel.h: p2p stores these numbers, only this layer names them).
//
// The receiving partition decodes a peer message on its lane, takes its kind (KindOf) and checks
// it against the descriptor of the channel it came on (CheckChannelKind); a refused message is
// dropped and counted, never handled. The table that says which kind may travel where is
// NodeChannelTable() (partitions/partition_channels.h).
//
// Pure functions; thread-safe.
//
//   ASSIGN_OR_RETURN(PartitionMessageKind kind, KindOf(msg));
//   if (!CheckChannelKind(*table.Find(channel), kind).ok()) return CountRefusal();
#ifndef PARTITIONS_PARTITION_MESSAGE_KIND_H_
#define PARTITIONS_PARTITION_MESSAGE_KIND_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "p2p/channel.h"
#include "proto/partition.pb.h"

namespace partitions {

enum class PartitionMessageKind : uint32_t {
  kConsensus = 0,  // body.consensus: a PBFT message (normal case, view change, checkpoint, sync)
  kTxs = 1,        // body.txs: forwarded transactions, proposal bodies, answers to a fetch
  kFetch = 2,      // body.fetch: a request for transactions a replica misses
  kSnapshot = 3,   // body.snapshot_*: snapshot state sync (requests, manifests, chunks)
  kAdmission = 4,  // body.admission: a replica's node-wide admission (flowctl/peer_admission.h)
};

// "consensus", "txs", "fetch", "snapshot", "admission".
const char* PartitionMessageKindName(PartitionMessageKind kind);

// The kind of a decoded message. InvalidArgument when it has no body (or one this build does not
// know): such a message is malformed.
absl::StatusOr<PartitionMessageKind> KindOf(const node::partition::PartitionMessage& message);

// The set of `kinds`, for a channel descriptor.
p2p::KindSet KindsOf(std::initializer_list<PartitionMessageKind> kinds);

// OK when `descriptor`'s channel may carry `kind`; otherwise InvalidArgument naming both.
absl::Status CheckChannelKind(const p2p::ChannelDescriptor& descriptor, PartitionMessageKind kind);

}  // namespace partitions

#endif  // PARTITIONS_PARTITION_MESSAGE_KIND_H_
