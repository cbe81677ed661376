// Network: how a node's modules talk to their peers, whatever carries the bytes.
//
// Two transports: GrpcTransport (p2p/grpc_transport.h: authenticated gRPC streams) and
// InMemoryNetwork (p2p/in_memory_network.h: a hub in one process for tests and the consensus
// simulator). One decorator: EgressValve (p2p/egress_valve.h) puts the egress scheduler (global
// cap, channel priorities, chunking) in front of either; the node always sends through it.
//
// Messages are opaque payloads tagged with a partition and a channel. The receiving side hands
// them to the inbound handler after reading only the frame header, so the payload is decoded by
// the module that owns it (on its own dispatcher lane), not on a transport thread.
//
// Node ids: NodeIdFromPublicKey() = lowercase hex of the first 16 bytes of SHA-256 of the raw
// 32-byte Ed25519 public key (32 characters). Ids sort as strings; in a transport, the lower id
// of a pair dials the higher. The in-memory network accepts any string as an id.
//
// Thread-safety: Send/Broadcast/peers may be called from any thread. SetHandlers must be called
// before the network starts delivering (before GrpcTransport::Start; for InMemoryNetwork before
// the first message is pumped to this node). Handlers are called from transport threads, may run
// concurrently for different peers, and must not block (queue the work and return).
//
//   network->SetHandlers(
//       [&](const p2p::NodeId& from, p2p::PartitionId part, p2p::Channel ch, std::string bytes) {
//         partitions.at(part)->dispatcher().Offer(from, ch, std::move(bytes));
//       },
//       [&](const p2p::NodeId& peer, p2p::PeerEvent ev) { LOG(INFO) << peer << " " << ev; });
//   RETURN_IF_ERROR(network->Broadcast(/*partition=*/1, p2p::Channel::CONSENSUS, msg_bytes));
#ifndef P2P_NETWORK_H_
#define P2P_NETWORK_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/p2p.pb.h"

namespace p2p {

using NodeId = std::string;
using PartitionId = uint32_t;
using Channel = node::p2p::Channel;

// The wire channels are CONSENSUS..BULK (proto/p2p.proto); what each one is for (priority, queue
// bound, overflow policy, receiving lane, allowed message kinds) is data: p2p/channel.h.
inline constexpr int kNumChannels = 4;
inline bool IsValidChannel(int c) { return c >= node::p2p::CONSENSUS && c <= node::p2p::BULK; }
// "CONSENSUS", "SYNC", ...
inline const std::string& ChannelName(Channel c) { return node::p2p::Channel_Name(c); }

enum class PeerEvent { kUp, kDown };
std::ostream& operator<<(std::ostream& os, PeerEvent e);

// Lowercase hex of the first 16 bytes of SHA-256(raw_public_key).
NodeId NodeIdFromPublicKey(absl::string_view raw_public_key);

class Network {
 public:
  // (peer the message came from, partition, channel, payload).
  using MessageHandler = std::function<void(const NodeId& from, PartitionId partition,
                                            Channel channel, std::string payload)>;
  using PeerEventHandler = std::function<void(const NodeId& peer, PeerEvent event)>;

  virtual ~Network() = default;

  // This node's id.
  virtual const NodeId& self() const = 0;
  // The configured peers (never self), sorted.
  virtual std::vector<NodeId> peers() const = 0;
  // Peers currently connected and authenticated, sorted.
  virtual std::vector<NodeId> connected_peers() const = 0;

  // Queues `payload` for `peer`. OK means accepted for sending, not delivered: a message may
  // still be lost if the connection drops (modules retransmit or sync). Errors:
  // InvalidArgument (unknown peer, bad channel, payload over the max frame size),
  // Unavailable (peer not connected), ResourceExhausted (the channel's or the peer's queue is
  // full).
  virtual absl::Status Send(const NodeId& peer, PartitionId partition, Channel channel,
                            std::string payload) = 0;
  // Send to every connected peer. Errors as Send, for the payload itself; peers that are down
  // are skipped.
  virtual absl::Status Broadcast(PartitionId partition, Channel channel, std::string payload) = 0;

  // See the thread-safety note above.
  virtual void SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) = 0;
};

// While a DeferredSends lives on a thread, a network may put off handing that thread's accepted
// messages on until the scope ends (the egress valve releases them then): for a caller that
// sends while holding a lock other threads wait on. Nested scopes: the outermost one runs what
// was put off. Sends are still accepted (or refused) when called; only their release waits.
//
//   {
//     p2p::DeferredSends hold;
//     absl::MutexLock lock(&mu_);
//     net->Broadcast(...);  // queued now, handed on when `hold` ends
//   }
class DeferredSends {
 public:
  DeferredSends();
  ~DeferredSends();  // runs what was put off, in order
  DeferredSends(const DeferredSends&) = delete;
  DeferredSends& operator=(const DeferredSends&) = delete;

  // For networks: when a scope is active on this thread, records `release` under `key` (once per
  // key and scope) and returns true; otherwise returns false and the caller releases now.
  static bool Defer(const void* key, std::function<void()> release);

 private:
  const bool outermost_;
  std::vector<std::pair<const void*, std::function<void()>>> releases_;
};

}  // namespace p2p

#endif  // P2P_NETWORK_H_
