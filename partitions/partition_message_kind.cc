#include "partitions/partition_message_kind.h"

#include "absl/strings/str_cat.h"

namespace partitions {

const char* PartitionMessageKindName(PartitionMessageKind kind) {
  switch (kind) {
    case PartitionMessageKind::kConsensus:
      return "consensus";
    case PartitionMessageKind::kTxs:
      return "txs";
    case PartitionMessageKind::kFetch:
      return "fetch";
    case PartitionMessageKind::kSnapshot:
      return "snapshot";
    case PartitionMessageKind::kAdmission:
      return "admission";
  }
  return "unknown";
}

absl::StatusOr<PartitionMessageKind> KindOf(const node::partition::PartitionMessage& message) {
  switch (message.body_case()) {
    case node::partition::PartitionMessage::kConsensus:
      return PartitionMessageKind::kConsensus;
    case node::partition::PartitionMessage::kTxs:
      return PartitionMessageKind::kTxs;
    case node::partition::PartitionMessage::kFetch:
      return PartitionMessageKind::kFetch;
    case node::partition::PartitionMessage::kSnapshotRequest:
    case node::partition::PartitionMessage::kSnapshotManifest:
    case node::partition::PartitionMessage::kSnapshotChunk:
      return PartitionMessageKind::kSnapshot;
    case node::partition::PartitionMessage::kAdmission:
      return PartitionMessageKind::kAdmission;
    case node::partition::PartitionMessage::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("partition message without a known body");
}

p2p::KindSet KindsOf(std::initializer_list<PartitionMessageKind> kinds) {
  p2p::KindSet set;
  for (PartitionMessageKind k : kinds) {
    set = set.With(static_cast<uint32_t>(k));
  }
  return set;
}

absl::Status CheckChannelKind(const p2p::ChannelDescriptor& descriptor, PartitionMessageKind kind) {
  if (descriptor.Allows(static_cast<uint32_t>(kind))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a ", PartitionMessageKindName(kind),
                                                 " message may not travel on channel ",
                                                 descriptor.name()));
}

}  // namespace partitions
