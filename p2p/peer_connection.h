// PeerConnection: one authenticated peer stream as GrpcTransport uses it, independent of which
// side dialed: a bounded queue of outbound frames drained by a writer thread that batches them
// into stream messages, and the reassembly state of the reader.
//
// Threads: the reader (the thread that owns the stream: the gRPC handler on the accepting side,
// the dialer on the dialing side) calls StartWriter, Read, reassembler() and finally Detach.
// Push and Close may be called from any thread. After Detach the stream functions are never
// called again, so the owner may destroy the stream.
//
// Stalled links (docs/ARCHITECTURE.md): the transport's watchdog calls MaybePing and StallReason
// with its clock; the writer sends a requested ping and answers the peer's with the next stream
// message it writes, so a ping's answer waits behind everything the link already holds (in gRPC
// and in the kernel). A link is stalled when a write has been blocked too long, or when a ping
// has gone unanswered too long on a link whose peer answered one before.
//
// Backpressure: when the queue reaches `release_bytes`, `on_pressure(true)` tells the egress
// scheduler (through the transport's pressure handler) to release nothing more for this peer;
// when the writer has drained it to half of that, `on_pressure(false)`. Both are called under the
// connection's lock, so no call of a closed connection can follow the peer-down event (which the
// transport fires after Close, and on which the egress valve drops the peer's queue).
//
//   auto conn = std::make_shared<PeerConnection>(peer, write, read, cancel, 16 << 20, 256 << 10,
//                                                max_frame_bytes, &writes);
//   conn->StartWriter();
//   while (conn->Read(&msg)) { ... conn->reassembler().Add(...) ... }
//   conn->Detach();
#ifndef P2P_PEER_CONNECTION_H_
#define P2P_PEER_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "p2p/egress_frame.h"
#include "p2p/network.h"
#include "p2p/reassembler.h"
#include "proto/p2p.pb.h"

namespace p2p {

// A peer write or an inbound message's handler that takes longer than this is logged (at most
// once a second): while either blocks, everything queued behind it on that link waits.
inline constexpr std::chrono::milliseconds kSlowPeerIo{250};

// When a link counts as stalled; a zero field turns its check off.
struct LinkStallLimits {
  int64_t write_ns = 0;           // a write blocked longer than this ...
  double write_bytes_per_ns = 0;  // ... plus its bytes at this rate
  int64_t ping_timeout_ns = 0;    // a ping unanswered this long
};

class PeerConnection {
 public:
  using WriteFn = std::function<bool(const node::p2p::StreamMessage&)>;
  using ReadFn = std::function<bool(node::p2p::StreamMessage*)>;

  // `cancel` ends the stream (makes blocked Read/Write return false); `writes` counts stream
  // messages written. CONSENSUS frames may use twice `queue_bytes`.
  PeerConnection(NodeId peer, WriteFn write, ReadFn read, std::function<void()> cancel,
                 size_t queue_bytes, size_t batch_bytes, size_t max_frame_bytes,
                 std::atomic<uint64_t>* writes,
                 const flowctl::Clock* clock = flowctl::Clock::Real());

  // Turns on backpressure (see above). Call before StartWriter.
  void SetPressureCallback(size_t release_bytes, std::function<void(bool blocked)> on_pressure);
  ~PeerConnection();  // REQUIRES: Detach() was called if StartWriter() was

  PeerConnection(const PeerConnection&) = delete;
  PeerConnection& operator=(const PeerConnection&) = delete;

  const NodeId& peer() const { return peer_; }
  bool Read(node::p2p::StreamMessage* m) { return read_(m); }
  Reassembler& reassembler() { return reassembler_; }

  // Queues a frame for the writer. False (frame dropped) when closed or over the bound.
  bool Push(EgressFrame f);
  // Queues every chunk of one message together (so no other message of its partition and
  // channel comes between them), or none: false when closed or when they do not all fit.
  bool PushAll(std::vector<EgressFrame> frames);

  void StartWriter();
  // Ends the stream: the writer stops and the reader's Read returns false. Idempotent.
  void Close();
  // The reader's last call: closes, joins the writer, forgets the stream.
  void Detach();
  // As Detach, but waits at most `max_wait` for the writer: false when it is still blocked in a
  // write (a cancelled gRPC write can stay blocked until the kernel takes its bytes). The
  // stream must then outlive the writer: the caller keeps it and calls JoinWriter later.
  bool Detach(absl::Duration max_wait);
  bool WriterDone() const { return writer_done_.HasBeenNotified(); }
  void JoinWriter();

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
  // The last ping's round trip, or -1 before any was answered.
  int64_t last_rtt_ns() const;
  // Payload bytes of frames written to the stream / counted by the reader with CountRead.
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  void CountRead(size_t bytes) { bytes_read_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  void WriterLoop();

  const NodeId peer_;
  const WriteFn write_;
  const ReadFn read_;
  const size_t queue_bytes_;
  const size_t batch_bytes_;
  std::atomic<uint64_t>* const writes_;
  const flowctl::Clock* const clock_;
  Reassembler reassembler_;              // reader thread only
  std::unique_ptr<std::thread> writer_;  // reader thread only
  absl::Notification writer_done_;
  // The write in progress: its start on clock_ (0: none) and bytes. Written by the writer only.
  std::atomic<int64_t> write_started_ns_{0};
  std::atomic<size_t> write_bytes_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};

  mutable absl::Mutex mu_;
  std::deque<EgressFrame> out_ ABSL_GUARDED_BY(mu_);
  size_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  size_t release_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no backpressure
  std::function<void(bool)> on_pressure_ ABSL_GUARDED_BY(mu_);
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ping_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t ping_to_send_ ABSL_GUARDED_BY(mu_) = 0;  // for the writer's next message
  uint64_t pong_to_send_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t ping_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ping_requested_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool pinged_ ABSL_GUARDED_BY(mu_) = false;
  bool peer_answers_pings_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_rtt_ns_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace p2p

#endif  // P2P_PEER_CONNECTION_H_
