// PeerConnection: one authenticated peer stream as GrpcTransport uses it, independent of which
// side dialed: a bounded queue of outbound frames written one stream message at a time, and the
// reassembly state of the reader. No thread of its own: the thread that queues a frame starts
// the write when none is in flight, and the write's completion (a gRPC callback) starts the next
// one with everything queued meanwhile, batched.
//
// The stream is reached through LinkStream (in the transport: the callback reactor's guard, so a
// call never reaches a reactor that has finished). After Close the connection starts no new
// write; a write already taken by another thread may still start, on the cancelled stream, and
// complete not ok.
//
// Threads: Push, PushAll, Close, MaybePing, StallReason and the getters from any thread;
// OnWriteDone from the stream's write completion; reassembler(), OnPing, OnPong and CountRead from
// the stream's read completions (one at a time).
//
// Stalled links (docs/ARCHITECTURE.md): the transport's watchdog calls MaybePing and StallReason
// with its clock; a requested ping goes out in the next stream message, and the peer's ping is
// answered in ours, so a ping's answer waits behind everything the link already holds (in gRPC and
// in the kernel). A link is stalled when a write has been in flight too long, or when a ping has
// gone unanswered too long on a link whose peer answered one before.
//
// Backpressure: when the queue reaches `release_bytes`, `on_pressure(true)` tells the egress
// scheduler (through the transport's pressure handler) to release nothing more for this peer;
// when writes have drained it to half of that, `on_pressure(false)`. Both are called under the
// connection's lock, so no call of a closed connection can follow the peer-down event (which the
// transport fires after Close, and on which the egress valve drops the peer's queue).
//
//   auto conn = std::make_shared<PeerConnection>(peer, guard, 16 << 20, 256 << 10,
//                                                max_frame_bytes, &writes);
//   conn->Push(frame);  // any thread: starts a write when the link is idle
//   ... in the write's completion: conn->OnWriteDone(ok);
//   conn->Close();      // nothing more is queued; the stream is cancelled
#ifndef P2P_PEER_CONNECTION_H_
#define P2P_PEER_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "p2p/egress_frame.h"
#include "p2p/network.h"
#include "p2p/reassembler.h"
#include "proto/p2p.pb.h"

namespace p2p {

// A peer write or an inbound message's handler that takes longer than this is logged (at most
// once a second): while either lasts, everything queued behind it on that link waits.
inline constexpr std::chrono::milliseconds kSlowPeerIo{250};

// When a link counts as stalled; a zero field turns its check off.
struct LinkStallLimits {
  int64_t write_ns = 0;           // a write in flight longer than this ...
  double write_bytes_per_ns = 0;  // ... plus its bytes at this rate
  int64_t ping_timeout_ns = 0;    // a ping unanswered this long
};

// What a connection needs of its stream.
class LinkStream {
 public:
  virtual ~LinkStream() = default;
  // Starts writing `msg`, which stays untouched until the connection's OnWriteDone. Never called
  // while a write is in flight. False when the stream is ending: nothing was started (and no
  // OnWriteDone will come for it).
  virtual bool StartWrite(const node::p2p::StreamMessage* msg) = 0;
  // Ends the stream: the read and the write in flight complete, not ok. Idempotent.
  virtual void Cancel() = 0;
};

class PeerConnection {
 public:
  // `writes` counts stream messages written. CONSENSUS frames may use twice `queue_bytes`.
  PeerConnection(NodeId peer, std::shared_ptr<LinkStream> stream, size_t queue_bytes,
                 size_t batch_bytes, size_t max_frame_bytes, std::atomic<uint64_t>* writes,
                 const flowctl::Clock* clock = flowctl::Clock::Real());

  // Turns on backpressure (see above). Before the first Push.
  void SetPressureCallback(size_t release_bytes, std::function<void(bool blocked)> on_pressure);

  PeerConnection(const PeerConnection&) = delete;
  PeerConnection& operator=(const PeerConnection&) = delete;

  const NodeId& peer() const { return peer_; }
  Reassembler& reassembler() { return reassembler_; }

  // Queues a frame, and starts a write when none is in flight. False (frame dropped) when closed
  // or over the bound.
  bool Push(EgressFrame f);
  // Queues every chunk of one message together (so no other message of its partition and
  // channel comes between them), or none: false when closed or when they do not all fit.
  bool PushAll(std::vector<EgressFrame> frames);

  // The write started last has completed (`ok` false: the stream failed, and the connection
  // closes). Starts the next one when anything is queued.
  void OnWriteDone(bool ok);

  // Ends the connection: nothing more is queued or written, and the stream is cancelled.
  // Idempotent.
  void Close();

  // Link liveness (see above). `now_ns` is on the clock given at construction.
  // Requests a ping when none is outstanding and `interval_ns` has passed since the last one.
  void MaybePing(int64_t now_ns, int64_t interval_ns);
  // The reader, for a received batch's fields.
  void OnPing(uint64_t id);
  void OnPong(uint64_t id, int64_t now_ns);
  // Why the link is stalled at `now_ns`, or "" (also once closed).
  std::string StallReason(int64_t now_ns, const LinkStallLimits& limits);
  // Closes the link as stalled.
  void MarkStalled();
  bool stalled() const;
  bool closed() const;
  // The last ping's round trip, or -1 before any was answered.
  int64_t last_rtt_ns() const;
  // Payload bytes of frames written to the stream / counted by the reader with CountRead.
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  void CountRead(size_t bytes) { bytes_read_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  // Reports the peer blocked once the queue reaches the release mark (see Backpressure).
  void SignalPressureLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Something to write: frames, or a ping or pong to send.
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next stream message's content (the write token is held: writing_) into batch_.
  void TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a write of what TakeBatchLocked took; the caller holds the write token, not mu_.
  void StartTakenWrite();
  // Takes the write token and starts a write when the link is idle, open and has work.
  void MaybeStartWrite();
  // Closes; `*cancel` says whether the caller must cancel the stream (the first close does).
  void CloseLocked(bool* cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NodeId peer_;
  const std::shared_ptr<LinkStream> stream_;
  const size_t queue_bytes_;
  const size_t batch_bytes_;
  std::atomic<uint64_t>* const writes_;
  const flowctl::Clock* const clock_;
  Reassembler reassembler_;  // the read completions only

  // The message being written and the frames it was built from: touched only by the holder of
  // the write token (writing_), from TakeBatchLocked until the write's completion.
  std::vector<EgressFrame> batch_frames_;
  uint64_t batch_ping_ = 0;
  uint64_t batch_pong_ = 0;
  size_t batch_bytes_taken_ = 0;
  node::p2p::StreamMessage msg_;
  std::chrono::steady_clock::time_point write_start_;

  // The write in flight: its start on clock_ (0: none) and bytes.
  std::atomic<int64_t> write_started_ns_{0};
  std::atomic<size_t> write_bytes_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};

  mutable absl::Mutex mu_;
  std::deque<EgressFrame> out_ ABSL_GUARDED_BY(mu_);
  size_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the write token: a write started or starting
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  size_t release_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no backpressure
  std::function<void(bool)> on_pressure_ ABSL_GUARDED_BY(mu_);
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ping_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t ping_to_send_ ABSL_GUARDED_BY(mu_) = 0;  // for the next message
  uint64_t pong_to_send_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ping_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ping_requested_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool pinged_ ABSL_GUARDED_BY(mu_) = false;
  bool peer_answers_pings_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_rtt_ns_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace p2p

#endif  // P2P_PEER_CONNECTION_H_
