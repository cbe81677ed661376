// FrameWriter: what a transport that writes chunked frames offers the egress valve in front of it
// (p2p/egress_valve.h). GrpcTransport implements it; a Network without it (InMemoryNetwork) gets
// whole messages from the valve instead, handed on when their last chunk is released.
//
// With a FrameWriter, the valve paces chunks, and the transport's per-peer writer queues can push
// back: while a peer's queue is full the transport reports the peer blocked, and the valve's
// scheduler keeps that peer's messages in its priority queues instead of releasing them, so
// priorities hold per link.
//
// Thread-safety: WriteFrame is called from the valve's sender thread (or the thread that drives
// the valve by hand) and must not block. SetPressureHandler is called once, before the transport
// starts; the transport may call the handler from any thread, and must not call it for a
// connection after that connection's peer-down event has been delivered.
//
//   class MyTransport final : public Network, public FrameWriter { ... };
//   EgressValve valve(&transport, /*frames=*/&transport, options, clock);
#ifndef P2P_FRAME_WRITER_H_
#define P2P_FRAME_WRITER_H_

#include <functional>

#include "p2p/egress_frame.h"
#include "p2p/network.h"

namespace p2p {

class FrameWriter {
 public:
  // (peer, blocked): true once the peer's writer queue is full, false once it has drained.
  using PressureHandler = std::function<void(const NodeId& peer, bool blocked)>;

  virtual ~FrameWriter() = default;

  // Queues one chunk for its peer's connection. A frame for a peer that is gone or whose queue
  // is over its bound is dropped and counted by the transport (the valve already accepted the
  // message; modules retransmit or sync).
  virtual void WriteFrame(EgressFrame frame) = 0;

  // See the file comment.
  virtual void SetPressureHandler(PressureHandler handler) = 0;
};

}  // namespace p2p

#endif  // P2P_FRAME_WRITER_H_
