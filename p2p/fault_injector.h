// FaultInjector: opt-in network faults for tests: delay and loss of whole outgoing messages.
//
// The kernels we test on have no netem, so delay and loss are injected in the node itself, where
// a message leaves for a peer: GrpcTransport hands each (peer, message) to Submit() before the
// egress scheduler when options.fault is enabled, and never builds an injector otherwise (the
// default: a node without the test flags runs exactly the normal path).
//
// - Loss drops a WHOLE message with probability `loss` (before chunking, so framing on the
//   stream is never broken; a lost message is what a dead TCP connection loses, and consensus,
//   block sync and tx fetching must recover it by their own timers).
// - Delay holds a message for delay_ms + uniform[0, jitter_ms] and then enqueues it. Per peer,
//   messages stay in order (a held message is never released before an earlier one to the same
//   peer), as on one TCP stream; so jitter stretches gaps, it does not reorder.
// - `peers` / `channels` restrict the faults to some peers (node id or a prefix of one) and
//   channels; other messages pass untouched.
// - Each peer has its own RNG stream (seed, peer id), so one peer's verdicts depend only on the
//   seed and the messages sent to it, whatever the thread interleaving across peers.
//
// Time comes from the injected Clock. Start() runs a release thread that waits in real time for
// the next due message; tests that drive a fake clock skip Start() and call ReleaseDue().
//
// Thread-safety: Submit, ReleaseDue, NextDueNanos and Stats from any thread; Start/Stop from the
// owner. `deliver` is called without internal locks held: inline from Submit for messages that
// are not delayed, from the release thread (or ReleaseDue's caller) for held ones.
//
//   p2p::FaultOptions fo;
//   fo.delay_ms = 20; fo.jitter_ms = 10; fo.loss = 0.02; fo.seed = 7;
//   p2p::FaultInjector inj(fo, [&](const NodeId& to, PartitionId p, Channel ch,
//                                  std::shared_ptr<const std::string> m) {
//     return scheduler.Enqueue(to, p, ch, std::move(m)); }, clock);
//   inj.Start();
//   RETURN_IF_ERROR(inj.Submit(peer, partition, node::p2p::CONSENSUS, payload));
#ifndef P2P_FAULT_INJECTOR_H_
#define P2P_FAULT_INJECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "p2p/network.h"

namespace p2p {

struct FaultOptions {
  int64_t delay_ms = 0;   // fixed delay of every affected message, ms; 0 = none
  int64_t jitter_ms = 0;  // plus uniform [0, jitter_ms] ms
  double loss = 0;        // probability an affected message is dropped, [0, 1]
  uint64_t seed = 1;
  std::vector<std::string> peers;  // node ids or id prefixes; empty = every peer
  std::vector<Channel> channels;   // empty = every channel

  // True when any fault is configured (the transport builds an injector only then).
  bool enabled() const { return delay_ms > 0 || jitter_ms > 0 || loss > 0; }
};

// InvalidArgument naming the bad field (negative delay, loss outside [0, 1], empty peer).
absl::Status ValidateFaultOptions(const FaultOptions& options);
// One line for logs: "delay 20ms + jitter 0..10ms, loss 2%, seed 7, peers all, channels all".
std::string DescribeFaultOptions(const FaultOptions& options);
// "CONSENSUS,SYNC" -> channels; InvalidArgument for an unknown name.
absl::StatusOr<std::vector<Channel>> ParseFaultChannels(const std::string& names);

struct FaultStats {
  uint64_t passed = 0;    // not affected (filtered out, or no delay and not lost)
  uint64_t dropped = 0;   // lost on purpose
  uint64_t delayed = 0;   // held for later
  uint64_t released = 0;  // held, then delivered
  uint64_t held = 0;      // held now
};

class FaultInjector {
 public:
  // Hands a message on (to the egress scheduler). Its status is Submit's for messages that are
  // not held; for held ones it is counted only.
  using Deliver =
      std::function<absl::Status(const NodeId& peer, PartitionId partition, Channel channel,
                                 std::shared_ptr<const std::string> payload)>;

  // REQUIRES: ValidateFaultOptions(options).ok().
  FaultInjector(FaultOptions options, Deliver deliver,
                const flowctl::Clock* clock = flowctl::Clock::Real());
  ~FaultInjector();  // Stop()
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Starts the release thread. Once only.
  void Start();
  // Stops the release thread; messages still held are dropped (the node is stopping).
  // Idempotent.
  void Stop();

  // Drops, holds, or delivers (inline) one message to `peer`. OK when dropped or held, as the
  // network would accept a message it later loses; else the delivery's status.
  absl::Status Submit(const NodeId& peer, PartitionId partition, Channel channel,
                      std::shared_ptr<const std::string> payload);

  // Delivers every held message due at or before the clock's now, in due order. Returns how many.
  size_t ReleaseDue();
  // Due time (clock nanos) of the earliest held message; -1 when none is held.
  int64_t NextDueNanos() const;

  FaultStats Stats() const;
  const FaultOptions& options() const { return options_; }

 private:
  struct Held {
    NodeId peer;
    PartitionId partition;
    Channel channel;
    std::shared_ptr<const std::string> payload;
  };
  struct PeerState {
    std::mt19937_64 rng;
    int64_t last_due = 0;  // keeps one peer's held messages in order
  };

  bool Affects(const NodeId& peer, Channel channel) const;
  PeerState& StateFor(const NodeId& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLoop();

  const FaultOptions options_;
  const Deliver deliver_;
  const flowctl::Clock* const clock_;

  mutable absl::Mutex mu_;
  std::map<NodeId, PeerState> peers_ ABSL_GUARDED_BY(mu_);
  // (due nanos, sequence) -> message; the sequence keeps equal due times in submit order.
  std::map<std::pair<int64_t, uint64_t>, Held> held_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t wake_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when a new earliest message arrives
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  FaultStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t release_errors_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread releaser_;
  // Serializes ReleaseDue callers, so held messages to one peer go out in order.
  absl::Mutex release_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace p2p

#endif  // P2P_FAULT_INJECTOR_H_
