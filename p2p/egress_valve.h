// EgressValve: the third valve as a decorator over any Network. The node wraps whichever network
// it runs on (GrpcTransport between processes, InMemoryNetwork in tests), so every cluster, real
// or simulated, sends through the same egress scheduler: global byte cap, strict channel
// priority from the channel table (p2p/channel.h), derived forwarding rate, per-partition weights,
// chunking, bounded queues.
//
//   module -> valve.Send/Broadcast -> [fault injector, tests only] -> EgressScheduler
//          -> the sending thread itself, or the sender thread (or ReleaseDue by hand)
//          -> inner network
//
// A frame the scheduler lets out at once (the cap not binding, its peer not blocked, nothing of
// higher priority waiting) is handed on by the thread that called Send/Broadcast before it
// returns; the sender thread takes what has to wait (p2p/egress_sender.h).
//
// How released frames reach the inner network depends on what it offers:
// - a FrameWriter (p2p/frame_writer.h; GrpcTransport): each chunk is handed on as it is released,
//   and the transport's per-peer backpressure reaches the scheduler (SetPeerBlocked) through the
//   writer's pressure handler;
// - a plain Network (InMemoryNetwork): the chunks are paced the same way and the whole message is
//   handed to inner->Send when its last chunk is released. A failure there is counted
//   (inner_send_failures): the valve had already accepted the message.
// Inbound traffic is not touched: the inner network calls the handlers directly, except that a
// peer-down event first drops that peer's queued messages from the scheduler.
//
// Send errors are the Network's: InvalidArgument (unknown peer, bad channel, payload over
// max_frame_bytes), Unavailable (peer not connected, asked of the inner network), and
// ResourceExhausted (a kRefuseNew channel's queue is full).
//
// Threads: Start() runs one sender thread (and the fault injector's release thread when faults
// are on), and from then on Send/Broadcast may hand frames on themselves; without Start()
// nothing is released until someone calls ReleaseDue(), which lets a test
// on a FakeClock drive egress deterministically. Network methods, ReleaseDue, scheduler() and
// Stats are thread-safe; Start/Stop from the owner. The inner network (and the FrameWriter) must
// outlive the valve; the handlers the valve installs on it stay safe to call after the valve is
// gone (they hold the scheduler, not the valve).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<p2p::EgressValve> valve,
//                    p2p::EgressValve::Create(transport.get(), transport.get(), options, clock));
//   valve->SetHandlers(on_message, on_peer_event);
//   RETURN_IF_ERROR(transport->Start());
//   RETURN_IF_ERROR(valve->Start());
//   RETURN_IF_ERROR(valve->Send(peer, /*partition=*/1, node::p2p::CONSENSUS, bytes));
#ifndef P2P_EGRESS_VALVE_H_
#define P2P_EGRESS_VALVE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "p2p/egress_scheduler.h"
#include "p2p/egress_sender.h"
#include "p2p/fault_injector.h"
#include "p2p/frame_writer.h"
#include "p2p/network.h"

namespace p2p {

struct EgressValveOptions {
  EgressOptions egress;
  // Tests only: delay / loss of whole messages before the scheduler (p2p/fault_injector.h). No
  // injector is built unless enabled(); noded sets it from --p2p-fault-*.
  FaultOptions fault;
};

struct EgressValveStats {
  EgressStats egress;
  // Whole messages the inner network refused when the valve handed them on (no FrameWriter).
  uint64_t inner_send_failures = 0;
  FaultStats fault;  // zeros when faults are off
};

class EgressValve final : public Network {
 public:
  // `inner` carries the bytes; `frames` is the same transport seen as a FrameWriter, or null when
  // it has none. Installs the pressure handler on `frames`, so call it before the inner network
  // starts. InvalidArgument for bad fault options.
  // REQUIRES: inner (and frames) outlive the valve; clock outlives it.
  static absl::StatusOr<std::unique_ptr<EgressValve>> Create(
      Network* inner, FrameWriter* frames, EgressValveOptions options,
      const flowctl::Clock* clock = flowctl::Clock::Real());
  ~EgressValve() override;  // Stop()
  EgressValve(const EgressValve&) = delete;
  EgressValve& operator=(const EgressValve&) = delete;

  // Starts the sender thread (and the fault injector's). FailedPrecondition the second time.
  absl::Status Start();
  // Idempotent. Messages still queued stay in the scheduler (never sent).
  void Stop();

  // Driven by hand (no Start): hands every frame the scheduler lets out at the clock's now (after
  // releasing due fault-delayed messages into it) to the inner network. Returns nanos until more
  // may be released, EgressScheduler::kNever when nothing waits. REQUIRES: Start() not called.
  int64_t ReleaseDue();

  // Live settings (cap, floor, partition weights) and the scheduler's own stats.
  EgressScheduler& scheduler() { return *scheduler_; }
  EgressValveStats Stats() const;

  // Network.
  const NodeId& self() const override { return inner_->self(); }
  std::vector<NodeId> peers() const override { return inner_->peers(); }
  std::vector<NodeId> connected_peers() const override { return inner_->connected_peers(); }
  absl::Status Send(const NodeId& peer, PartitionId partition, Channel channel,
                    std::string payload) override;
  absl::Status Broadcast(PartitionId partition, Channel channel, std::string payload) override;
  // Installs the handlers on the inner network (see the file comment for peer-down events).
  void SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) override;

 private:
  EgressValve(Network* inner, FrameWriter* frames, EgressValveOptions options,
              const flowctl::Clock* clock);

  // OK when `peer` is connected; else InvalidArgument (unknown) or Unavailable.
  absl::Status CheckPeer(const NodeId& peer) const;
  // One message to one peer: through the fault injector when it exists, else to the scheduler.
  absl::Status Submit(const NodeId& peer, PartitionId partition, Channel channel,
                      std::shared_ptr<const std::string> payload);
  // Releases what the sender may hand on now, on this thread, or at the end of this thread's
  // DeferredSends scope (p2p/network.h).
  void Release();
  // Hands a released frame to the inner network.
  void Deliver(EgressFrame frame);

  // Constant after construction.
  Network* const inner_;
  FrameWriter* const frames_;  // null: whole messages go to inner_->Send
  const EgressValveOptions options_;
  const flowctl::Clock* const clock_;
  // Shared with the handlers installed on the inner network, which may outlive the valve.
  const std::shared_ptr<EgressScheduler> scheduler_;
  std::unique_ptr<FaultInjector> fault_;  // null unless options_.fault.enabled()

  std::atomic<uint64_t> inner_send_failures_{0};
  absl::Mutex release_mu_;  // one ReleaseDue at a time, so one peer's messages keep their order
  absl::Mutex mu_;          // Start/Stop against each other
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Releases the scheduler's frames: on the thread that sent them when they may go at once, on
  // its own thread otherwise (p2p/egress_sender.h). Last: its sink uses the members above.
  const std::unique_ptr<EgressSender> sender_;
};

}  // namespace p2p

#endif  // P2P_EGRESS_VALVE_H_
