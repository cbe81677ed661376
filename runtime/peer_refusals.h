// PeerRefusals: what each peer sent that this node refused, by reason, summed over partitions.
//
// A replica that misbehaves (bad signatures, malformed or replayed messages, messages for
// partitions that do not exist, txs that do not verify) shows up by name here, in
// `nodectl peers` (ListPeers) and in the metric noded_peer_messages_refused_total{peer,reason}.
// The partitions keep their own per-partition totals as well (PartitionFlowStats).
//
// The set of peers is fixed at construction (the configured ones); a count for any other id is
// ignored (the transport admits configured peers only).
//
// Example:
//   PeerRefusals refusals(network->peers());
//   refusals.Count(from, PeerRefusals::kBadSignature);
//   uint64_t n = refusals.count(from, PeerRefusals::kBadSignature);
//
// Thread-safe: lock-free counters over an immutable index.
#ifndef RUNTIME_PEER_REFUSALS_H_
#define RUNTIME_PEER_REFUSALS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "p2p/network.h"

namespace runtime {

class PeerRefusals {
 public:
  enum Reason {
    kUnknownPartition,  // a partition this node does not run
    kMalformed,         // does not parse, or no known message kind
    kWrongChannel,      // a kind its channel may not carry
    kBadSignature,      // not signed by the connection's replica, or a bad signature
    kBadTx,             // a forwarded or fetched tx that does not decode or verify
    kBadFrame,          // a transport frame refused (oversized, or it does not reassemble)
    kStoppedPartition,  // for a partition this node has stopped (not the peer's fault)
    kNumReasons,
  };
  // "unknown_partition", "malformed", ...
  static const char* ReasonName(Reason r);

  explicit PeerRefusals(const std::vector<p2p::NodeId>& peers);

  void Count(const p2p::NodeId& peer, Reason reason, uint64_t n = 1);
  uint64_t count(const p2p::NodeId& peer, Reason reason) const;

 private:
  using Counters = std::array<std::atomic<uint64_t>, kNumReasons>;
  absl::flat_hash_map<p2p::NodeId, std::unique_ptr<Counters>> counters_;
};

}  // namespace runtime

#endif  // RUNTIME_PEER_REFUSALS_H_
