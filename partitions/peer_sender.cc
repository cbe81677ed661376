#include "partitions/peer_sender.h"

#include "glog/logging.h"

namespace partitions {

bool PeerSender::Send(uint32_t to, p2p::Channel channel,
                      const node::partition::PartitionMessage& msg) {
  if (to >= ids_.size() || to == self_) return false;
  absl::Status s = network_->Send(ids_[to], partition_, channel, msg.SerializeAsString());
  if (s.ok()) return true;
  send_failures_.fetch_add(1, std::memory_order_relaxed);
  VLOG(1) << "partition " << partition_ << ": send to replica " << to << ": " << s;
  return false;
}

bool PeerSender::Broadcast(p2p::Channel channel, const node::partition::PartitionMessage& msg) {
  if (ids_.size() <= 1) return true;
  absl::Status s = network_->Broadcast(partition_, channel, msg.SerializeAsString());
  if (s.ok()) return true;
  broadcast_failures_.fetch_add(1, std::memory_order_relaxed);
  VLOG(1) << "partition " << partition_ << ": broadcast: " << s;
  return false;
}

}  // namespace partitions
