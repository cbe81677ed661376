// ChannelDescriptor / ChannelTable: the node's p2p channels as data, after CometBFT's
// ChannelDescriptor (p2p/conn/connection.go), but with strict priority instead of byte-ratio
// weights, so no other traffic can hold consensus back.
//
// One descriptor per wire channel (proto/p2p.proto's Channel) says
// - for egress (p2p/egress_scheduler.h): its priority (higher goes first), its queue bound in
//   bytes, what a full queue does (refuse the new message, or drop the oldest one not yet on the
//   wire), and whether its rate is derived from the cap (cap minus what the channels above it
//   used, never below a floor: TX_FORWARD, so forwarding can never starve consensus);
// - for ingress: the dispatcher lane of the receiving partition it feeds, and which message
//   kinds may travel on it. Kinds are small integers (0..KindSet::kMaxKind) that the upper layer
//   defines (partitions/partition_message_kind.h); p2p stores and tests them, never interprets
//   them. A message of a kind its channel does not allow is refused by the receiver and counted.
//
// The node builds one table (partitions::NodeChannelTable()) and hands the same table to the
// egress valve and to its partitions, so sending and receiving agree on it.
//
// Thread-safety: a ChannelTable is immutable after Create; any thread may read it.
//
//   ASSIGN_OR_RETURN(p2p::ChannelTable table, p2p::ChannelTable::Create(descriptors));
//   const p2p::ChannelDescriptor* d = table.Find(channel);
//   if (d == nullptr || !d->Allows(kind)) return Refuse();
//   dispatcher.Offer(dispatcher.FindLane(d->lane), std::move(message));
#ifndef P2P_CHANNEL_H_
#define P2P_CHANNEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "p2p/network.h"

namespace p2p {

// A set of message kinds, as the upper layer numbers them.
class KindSet {
 public:
  static constexpr uint32_t kMaxKind = 63;

  constexpr KindSet() = default;  // empty
  static constexpr KindSet All() { return KindSet(~uint64_t{0}); }
  // REQUIRES: every kind <= kMaxKind.
  static KindSet Of(std::initializer_list<uint32_t> kinds);
  // This set plus `kind`. REQUIRES: kind <= kMaxKind.
  KindSet With(uint32_t kind) const;

  bool Contains(uint32_t kind) const { return kind <= kMaxKind && ((bits_ >> kind) & 1) != 0; }
  bool empty() const { return bits_ == 0; }
  uint64_t bits() const { return bits_; }
  friend bool operator==(KindSet a, KindSet b) { return a.bits_ == b.bits_; }

 private:
  constexpr explicit KindSet(uint64_t bits) : bits_(bits) {}
  uint64_t bits_ = 0;
};

// What a full egress queue does with one more message.
enum class OverflowPolicy {
  // Enqueue returns ResourceExhausted (counted and logged): traffic that must never vanish
  // silently, and whose sender reacts (consensus, sync).
  kRefuseNew,
  // The oldest message not yet on the wire is dropped to make room (counted): traffic where the
  // newest matters most and loss is recovered elsewhere (forwarding, bulk).
  kDropOldest,
};

struct ChannelDescriptor {
  Channel channel = node::p2p::CHANNEL_UNSPECIFIED;
  // Strict priority: a channel with a higher value always goes first. Distinct in a table.
  int priority = 0;
  // Bound of this channel's egress queue in payload bytes (all peers and partitions). >= 1.
  size_t queue_bytes = 0;
  OverflowPolicy overflow = OverflowPolicy::kRefuseNew;
  // Held to max(floor, cap - what the higher-priority channels used). At most one per table.
  bool derived_rate = false;
  // The receiving partition's dispatcher lane this channel feeds. Not empty.
  std::string lane;
  // Message kinds that may travel on this channel.
  KindSet kinds;

  bool Allows(uint32_t kind) const { return kinds.Contains(kind); }
  // "CONSENSUS", "SYNC", ...
  const std::string& name() const { return ChannelName(channel); }
};

class ChannelTable {
 public:
  // InvalidArgument naming the bad entry unless: every wire channel (CONSENSUS..BULK) appears
  // exactly once, priorities are distinct, queue_bytes >= 1, lane is not empty, and at most one
  // channel has derived_rate.
  static absl::StatusOr<ChannelTable> Create(std::vector<ChannelDescriptor> descriptors);

  // The descriptor of `channel`; nullptr when it is not a wire channel (refuse the message).
  const ChannelDescriptor* Find(Channel channel) const;
  // The descriptors, highest priority first.
  const std::vector<ChannelDescriptor>& by_priority() const { return by_priority_; }
  // Position of `channel` in by_priority(), or -1 when it is not a wire channel.
  int PriorityIndex(Channel channel) const;
  // Position of the derived-rate channel in by_priority(), or -1 when there is none.
  int derived_rate_index() const { return derived_rate_index_; }

 private:
  ChannelTable() = default;

  std::vector<ChannelDescriptor> by_priority_;
  std::array<int, kNumChannels + 1> index_{};  // by Channel value; -1 = not in the table
  int derived_rate_index_ = -1;
};

// p2p's defaults, every kind allowed on every channel (p2p knows no kinds):
//   channel     priority  queue    overflow     derived  lane
//   CONSENSUS   4          8 MiB   refuse new   no       consensus
//   SYNC        3         32 MiB   refuse new   no       sync
//   TX_FORWARD  2         16 MiB   drop oldest  yes      tx_forward
//   BULK        1         32 MiB   drop oldest  no       bulk
std::vector<ChannelDescriptor> DefaultChannelDescriptors();
const ChannelTable& DefaultChannelTable();

}  // namespace p2p

#endif  // P2P_CHANNEL_H_
