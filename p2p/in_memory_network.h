// InMemoryHub / InMemoryNetwork: the Network interface within one process, for tests and the
// consensus simulator.
//
// A hub connects any number of nodes; every node is a peer of every other. Send/Broadcast put an
// envelope into the hub's queue; nothing is delivered until someone pumps: the test itself
// (DeliverNext / DeliverAll / DeliverBySeq: fully deterministic), or the hub's optional delivery
// thread (StartDeliveryThread, with a real clock). Envelopes become deliverable at their
// deliver-at time on the hub's clock and are delivered in (deliver-at, send order) order unless
// the test picks one by seq (reordering).
//
// Faults: a hook sees each envelope when it is sent and decides deliver / drop / delay; links can
// be cut and healed (SetLinkUp), which fires peer down/up events on both ends and makes Send
// return Unavailable; envelopes already queued on a cut link are dropped at delivery time.
//
// Thread-safety: all methods are thread-safe. Handlers run on the pumping thread with no hub
// lock held, so they may Send. The hub must outlive its nodes. Destroying a node waits for a
// delivery to it that is in progress on another thread; a handler must not destroy its own node.
//
//   tests::FakeClock clock;
//   p2p::InMemoryHub hub(&clock);
//   auto a = hub.AddNode("a"), b = hub.AddNode("b");
//   b->SetHandlers(on_message, on_peer);
//   ASSERT_OK(a->Send("b", 1, p2p::Channel::CONSENSUS, "hi"));
//   hub.DeliverAll();
#ifndef P2P_IN_MEMORY_NETWORK_H_
#define P2P_IN_MEMORY_NETWORK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "p2p/network.h"

namespace p2p {

class InMemoryNetwork;

struct Envelope {
  uint64_t seq = 0;        // send order, unique within the hub
  int64_t deliver_at = 0;  // hub clock nanos
  NodeId from;
  NodeId to;
  PartitionId partition = 0;
  Channel channel = node::p2p::CONSENSUS;
  std::string payload;
};

// What the fault hook decides for one envelope.
struct FaultDecision {
  enum class Action { kDeliver, kDrop, kDelay };
  Action action = Action::kDeliver;
  int64_t delay_nanos = 0;

  static FaultDecision Deliver() { return {}; }
  static FaultDecision Drop() { return {Action::kDrop, 0}; }
  static FaultDecision Delay(int64_t nanos) { return {Action::kDelay, nanos}; }
};

class InMemoryHub {
 public:
  using FaultHook = std::function<FaultDecision(const Envelope&)>;
  static constexpr int64_t kNever = INT64_MAX;

  // REQUIRES: `clock` outlives the hub.
  explicit InMemoryHub(const flowctl::Clock* clock = flowctl::Clock::Real(),
                       size_t max_frame_bytes = 16 << 20);
  ~InMemoryHub();  // stops the delivery thread; REQUIRES: every node destroyed first
  InMemoryHub(const InMemoryHub&) = delete;
  InMemoryHub& operator=(const InMemoryHub&) = delete;

  // A new node, linked (up) to every existing node. No events are fired for the initial links.
  // REQUIRES: `id` is new and non-empty.
  std::unique_ptr<InMemoryNetwork> AddNode(const NodeId& id);

  // Cuts or heals the link between a and b; fires kDown/kUp at both ends when it changes.
  void SetLinkUp(const NodeId& a, const NodeId& b, bool up);
  // Cuts or heals every link of `id` (a crash / restart from the others' point of view).
  void SetNodeUp(const NodeId& id, bool up);
  // Installed hook (or nullptr for none) sees every envelope at send time.
  void SetFaultHook(FaultHook hook);

  // Delivers the earliest envelope whose time has come. False if there is none.
  bool DeliverNext();
  // DeliverNext until it returns false or `max` were delivered; returns the number delivered.
  size_t DeliverAll(size_t max = 1'000'000);
  // Delivers the queued envelope `seq` now, whatever its time. False if no such envelope.
  bool DeliverBySeq(uint64_t seq);
  // Earliest deliver-at among queued envelopes, kNever when empty.
  int64_t NextDeliveryTime() const;
  size_t pending() const;
  std::vector<Envelope> PendingForTest() const;

  uint64_t delivered() const;
  uint64_t dropped() const;  // by the hook, by cut links or to removed nodes

  // A thread that delivers continuously (for tests using a real clock). Idempotent.
  void StartDeliveryThread();
  void StopDeliveryThread();

 private:
  friend class InMemoryNetwork;
  struct Slot;  // one node's handlers, shared with its InMemoryNetwork

  absl::Status Enqueue(const NodeId& from, const NodeId& to, PartitionId partition, Channel channel,
                       std::string payload);
  absl::Status BroadcastFrom(const NodeId& from, PartitionId partition, Channel channel,
                             std::string payload);
  void RemoveNode(const NodeId& id);
  std::vector<NodeId> PeersOf(const NodeId& id, bool connected_only) const;
  void Deliver(Envelope env);
  bool LinkUpLocked(const NodeId& a, const NodeId& b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FireEvents(std::vector<std::pair<std::shared_ptr<Slot>, std::pair<NodeId, PeerEvent>>> ev);
  void DeliveryLoop();

  const flowctl::Clock* const clock_;
  const size_t max_frame_bytes_;

  mutable absl::Mutex mu_;
  std::map<NodeId, std::shared_ptr<Slot>> nodes_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<NodeId, NodeId>> cut_links_ ABSL_GUARDED_BY(mu_);  // (min, max)
  std::map<std::pair<int64_t, uint64_t>, Envelope> queue_ ABSL_GUARDED_BY(mu_);
  FaultHook hook_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_thread_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<std::thread> thread_;  // only touched by Start/StopDeliveryThread
  absl::Mutex thread_mu_;                // serializes Start/StopDeliveryThread
};

class InMemoryNetwork final : public Network {
 public:
  ~InMemoryNetwork() override;

  const NodeId& self() const override { return id_; }
  std::vector<NodeId> peers() const override;
  std::vector<NodeId> connected_peers() const override;
  absl::Status Send(const NodeId& peer, PartitionId partition, Channel channel,
                    std::string payload) override;
  absl::Status Broadcast(PartitionId partition, Channel channel, std::string payload) override;
  void SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) override;

 private:
  friend class InMemoryHub;
  InMemoryNetwork(InMemoryHub* hub, NodeId id, std::shared_ptr<InMemoryHub::Slot> slot)
      : hub_(hub), id_(std::move(id)), slot_(std::move(slot)) {}

  InMemoryHub* const hub_;
  const NodeId id_;
  const std::shared_ptr<InMemoryHub::Slot> slot_;
};

}  // namespace p2p

#endif  // P2P_IN_MEMORY_NETWORK_H_
