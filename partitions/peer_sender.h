// PeerSender: one partition's way out to the other replicas: the Network, the partition id and
// the replica set, with every refused send or broadcast counted (the network refuses when a
// queue is full or a peer is unknown; consensus and sync recover by retransmitting).
//
// Thread-safety: every method is thread-safe (the Network is; counters are atomics).
//
//   PeerSender out(network, /*partition=*/1, replica_ids, /*self=*/0);
//   out.Broadcast(p2p::Channel::CONSENSUS, message);
#ifndef PARTITIONS_PEER_SENDER_H_
#define PARTITIONS_PEER_SENDER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "p2p/network.h"
#include "proto/partition.pb.h"

namespace partitions {

class PeerSender {
 public:
  // `network` outlives the sender; `replica_ids` sorted, `self` its index in them.
  PeerSender(p2p::Network* network, uint32_t partition, std::vector<p2p::NodeId> replica_ids,
             uint32_t self)
      : network_(network), partition_(partition), ids_(std::move(replica_ids)), self_(self) {}

  // To replica `to`; false (and counted) when the network refuses. Sending to self or to an
  // index outside the set does nothing and returns false.
  bool Send(uint32_t to, p2p::Channel channel, const node::partition::PartitionMessage& msg);
  // To every other replica; false (and counted) when the network refuses.
  bool Broadcast(p2p::Channel channel, const node::partition::PartitionMessage& msg);

  uint32_t self() const { return self_; }
  size_t replicas() const { return ids_.size(); }
  uint64_t send_failures() const { return send_failures_.load(std::memory_order_relaxed); }
  uint64_t broadcast_failures() const {
    return broadcast_failures_.load(std::memory_order_relaxed);
  }

 private:
  p2p::Network* const network_;
  const uint32_t partition_;
  const std::vector<p2p::NodeId> ids_;
  const uint32_t self_;
  std::atomic<uint64_t> send_failures_{0};
  std::atomic<uint64_t> broadcast_failures_{0};
};

}  // namespace partitions

#endif  // PARTITIONS_PEER_SENDER_H_
