// PeerConnection: one authenticated peer stream as GrpcTransport uses it, independent of which
// side dialed: a bounded queue of outbound frames drained by a writer thread that batches them
// into stream messages, and the reassembly state of the reader.
//
// Threads: the reader (the thread that owns the stream: the gRPC handler on the accepting side,
// the dialer on the dialing side) calls StartWriter, Read, reassembler() and finally Detach.
// Push and Close may be called from any thread. After Detach the stream functions are never
// called again, so the owner may destroy the stream.
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
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "p2p/egress_frame.h"
#include "p2p/network.h"
#include "p2p/reassembler.h"
#include "proto/p2p.pb.h"

namespace p2p {

// A peer write or an inbound message's handler that takes longer than this is logged (at most
// once a second): while either blocks, everything queued behind it on that link waits.
inline constexpr std::chrono::milliseconds kSlowPeerIo{250};

class PeerConnection {
 public:
  using WriteFn = std::function<bool(const node::p2p::StreamMessage&)>;
  using ReadFn = std::function<bool(node::p2p::StreamMessage*)>;

  // `cancel` ends the stream (makes blocked Read/Write return false); `writes` counts stream
  // messages written. CONSENSUS frames may use twice `queue_bytes`.
  PeerConnection(NodeId peer, WriteFn write, ReadFn read, std::function<void()> cancel,
                 size_t queue_bytes, size_t batch_bytes, size_t max_frame_bytes,
                 std::atomic<uint64_t>* writes);

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

 private:
  void WriterLoop();

  const NodeId peer_;
  const WriteFn write_;
  const ReadFn read_;
  const size_t queue_bytes_;
  const size_t batch_bytes_;
  std::atomic<uint64_t>* const writes_;
  Reassembler reassembler_;              // reader thread only
  std::unique_ptr<std::thread> writer_;  // reader thread only

  absl::Mutex mu_;
  std::deque<EgressFrame> out_ ABSL_GUARDED_BY(mu_);
  size_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  size_t release_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no backpressure
  std::function<void(bool)> on_pressure_ ABSL_GUARDED_BY(mu_);
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> cancel_ ABSL_GUARDED_BY(mu_);
};

}  // namespace p2p

#endif  // P2P_PEER_CONNECTION_H_
