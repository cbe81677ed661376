// GrpcTransport: the Network between real nodes, over authenticated gRPC streams.
//
// - Identity: an Ed25519 key (base/ed25519.h, read from PEM by the caller); node id =
//   NodeIdFromPublicKey (p2p/network.h).
// - One PeerService.Connect bidirectional stream per pair of configured peers: the node with the
//   LOWER id dials the higher one (so there is exactly one stream per pair, and a restarted node
//   is re-dialled or re-dials by itself). The dialer retries with exponential backoff and jitter;
//   gRPC keepalive pings detect dead connections.
// - Handshake (proto/p2p.proto, p2p/handshake.h): both sides sign a transcript binding both ids
//   and both nonces. A key outside the configured peer set, a bad signature, or anything but the
//   handshake before it completes ends the stream with PERMISSION_DENIED and a log line. Frames
//   of an unauthenticated stream never reach the handlers; peer up/down events fire only for
//   authenticated connections.
// - Links on gRPC's callback API: no thread per link. Both sides run the handshake and then the
//   connection as reactions on gRPC's callback threads (PeerService is a callback service; a
//   dialer starts a ClientBidiReactor and waits, idle, for its link to end; the call itself may
//   outlive that while a cancelled write is pending, and deletes itself when gRPC completes it).
// - Egress: a plain transport. In the node, an EgressValve (p2p/egress_valve.h) sits in front
//   and hands it paced chunks through FrameWriter::WriteFrame; each goes to a bounded queue per
//   peer connection (p2p/peer_connection.h). The thread that queues a frame starts the write when
//   the link has none in flight; a write's completion starts the next with whatever was queued
//   meanwhile, batched into one stream message. Per-peer backpressure: once a peer's queue holds
//   `peer_release_bytes`, the pressure handler (the valve's scheduler) is told the peer is
//   blocked, and unblocked when writes have drained half.
//   Send/Broadcast called on the transport itself skip any scheduling: the message is cut into
//   64 KiB chunks and queued at once (tests and tools; with a valve in front, send through it).
// - Ingress: each read's completion reads frame headers, reassembles chunks (p2p/reassembler.h)
//   and calls the message handler with the undecoded payload, then starts the next read. The
//   handler runs on one of gRPC's callback threads (shared with the node's client API): it must
//   not block (the node's queues it into the partition's lanes, which drop when full). So must
//   the peer event handler, which runs there too, under the link's lock, and must not call Stop.
//
// Thread-safety: Network methods, WriteFrame and Stats from any thread; SetHandlers and
// SetPressureHandler before Start; Start/Stop from the owner. Stop() cancels every stream and
// shuts the server down with a short deadline; it then waits for every accepted link to finish,
// which a write the kernel never takes would hold (dialed links are not waited for).
//
//   ASSIGN_OR_RETURN(base::PrivateKey key, base::PrivateKey::ReadPemFile(path));
//   p2p::GrpcTransportOptions opt;
//   opt.listen_address = "0.0.0.0:26656";
//   opt.peers.push_back({peer_public_key_bytes, "10.0.0.2:26656"});
//   auto t = std::make_unique<p2p::GrpcTransport>(std::move(key), opt);
//   t->SetHandlers(on_message, on_peer_event);
//   RETURN_IF_ERROR(t->Start());
#ifndef P2P_GRPC_TRANSPORT_H_
#define P2P_GRPC_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "flowctl/clock.h"
#include "p2p/egress_frame.h"
#include "p2p/frame_writer.h"
#include "p2p/network.h"
#include "p2p/peer_connection.h"
#include "proto/p2p.grpc.pb.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class ServerCredentials;
class Server;
}  // namespace grpc

namespace p2p {

class PeerConnection;

struct PeerSpec {
  std::string public_key;  // raw 32 bytes
  std::string address;     // host:port; may be empty and set later with SetPeerAddress
};

struct GrpcTransportOptions {
  std::string listen_address = "127.0.0.1:0";  // port 0: pick one, see port()
  std::vector<PeerSpec> peers;
  // Largest message (payload bytes) sent or accepted; larger ones are refused.
  size_t max_frame_bytes = 16 << 20;
  int64_t initial_backoff_ms = 50;
  int64_t max_backoff_ms = 2000;
  int64_t keepalive_time_ms = 10'000;
  int64_t keepalive_timeout_ms = 5'000;
  // Frames queued for one peer's link beyond this are dropped (counted): a stalled peer must
  // not hold the node's memory. CONSENSUS frames get twice the room.
  size_t peer_queue_bytes = 16 << 20;
  // Per-peer backpressure: once a peer's link queue holds this much, the pressure handler (the
  // egress valve) releases nothing more for it until its writes have drained half (0: off). Keeps
  // the scheduler's priorities per link: a slow link gets its SYNC before its TX_FORWARD.
  size_t peer_release_bytes = 512 << 10;
  // Bytes of frames packed into one stream message at most.
  size_t max_batch_bytes = 256 << 10;
  // A stream must finish the handshake within this, or it is cancelled (both sides).
  int64_t handshake_timeout_ms = 5'000;
  // Deadline of Stop()'s server shutdown.
  int64_t shutdown_grace_ms = 500;
  // Stalled links (docs/ARCHITECTURE.md): every ping_interval_ms each link carries a ping that
  // the peer answers behind whatever the link already holds. A link is closed as stalled when a
  // ping has gone unanswered ping_timeout_ms (only on links whose peer answered one: an older
  // node never does), or a write has been blocked write_stall_ms plus its bytes at
  // write_stall_bytes_per_s; the dialing side then opens a new TCP connection. 0 turns a check
  // off (ping_interval_ms 0: no pings).
  int64_t ping_interval_ms = 1'000;
  int64_t ping_timeout_ms = 5'000;
  int64_t write_stall_ms = 5'000;
  size_t write_stall_bytes_per_s = 32 << 10;
  // TLS: credentials of the listening port and of the dialers; null = plaintext. For
  // mutual TLS the server credentials require a client certificate. The Ed25519 handshake runs
  // inside either way. `tls_peer_name`, when set, is the name checked in every peer's
  // certificate instead of the host of its address.
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  std::string tls_peer_name;
};

struct TransportStats {
  uint64_t frames_received = 0;
  uint64_t bytes_received = 0;  // payload bytes
  uint64_t messages_delivered = 0;
  uint64_t frames_refused = 0;          // bad or oversized inbound frames
  uint64_t handshakes_accepted = 0;     // both directions
  uint64_t handshakes_refused = 0;      // both directions
  uint64_t frames_written = 0;          // frames queued on a connection (WriteFrame or Send)
  uint64_t frames_dropped_no_peer = 0;  // written for a peer that was gone
  uint64_t frames_dropped_peer_queue = 0;
  uint64_t streams_written = 0;  // stream messages written (batches)
  uint64_t links_stalled = 0;    // links closed as stalled (see GrpcTransportOptions)
  uint64_t pongs_received = 0;   // answers to this node's link pings
  uint64_t channels_opened = 0;  // gRPC channels the dialers made (a new one: a new TCP connection)
};

// One peer's link over the transport's life (every connection to it), for ListPeers.
struct PeerLinkStats {
  bool connected = false;
  uint64_t bytes_sent = 0;      // frame payload bytes written to it
  uint64_t bytes_received = 0;  // frame payload bytes read from it
  uint64_t connections = 0;     // authenticated streams (the first one included)
  uint64_t stalls = 0;          // links to it closed as stalled
  int64_t rtt_ns = -1;          // the last link ping's round trip (-1: none answered yet)
};

class GrpcTransport final : public Network, public FrameWriter {
 public:
  GrpcTransport(base::PrivateKey key, GrpcTransportOptions options,
                const flowctl::Clock* clock = flowctl::Clock::Real());
  ~GrpcTransport() override;  // Stop()
  GrpcTransport(const GrpcTransport&) = delete;
  GrpcTransport& operator=(const GrpcTransport&) = delete;

  // Binds, serves and starts dialing. Once only. InvalidArgument for a bad peer key;
  // Unavailable if the address cannot be bound.
  absl::Status Start();
  // Idempotent; bounded in time.
  void Stop();

  // The bound port (after Start).
  int port() const { return port_.load(); }
  // Sets (or changes) where a peer is dialed. Ignored for unknown peers.
  void SetPeerAddress(const NodeId& peer, const std::string& address);

  TransportStats Stats() const;
  std::map<NodeId, PeerLinkStats> PeerLinks() const;

  // Network.
  const NodeId& self() const override { return self_; }
  std::vector<NodeId> peers() const override;
  std::vector<NodeId> connected_peers() const override;
  absl::Status Send(const NodeId& peer, PartitionId partition, Channel channel,
                    std::string payload) override;
  absl::Status Broadcast(PartitionId partition, Channel channel, std::string payload) override;
  void SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) override;

  // FrameWriter.
  void WriteFrame(EgressFrame frame) override;
  void SetPressureHandler(PressureHandler handler) override;  // before Start

  // Called (from a link's read completion) for each inbound frame refused as bad or oversized,
  // with the authenticated peer that sent it. Before Start.
  using RefusedFrameHandler = std::function<void(const NodeId& peer)>;
  void SetRefusedFrameHandler(RefusedFrameHandler handler);

 private:
  class Service;
  struct Peer {
    std::string public_key;
    std::string address;
    std::shared_ptr<PeerConnection> conn;  // the authenticated connection, if any
    PeerLinkStats ended;  // the connections that ended: bytes, connections, stalls, last rtt
  };
  struct Counters;

  class LinkGuard;
  struct DialAttempt;
  template <class Reactor>
  class Link;
  class ServerLink;
  class ClientLink;

  // One stream message read from `conn`'s peer: pings, pongs, frames reassembled and delivered.
  // False when the peer broke the protocol (the link then closes).
  bool Deliver(PeerConnection& conn, node::p2p::StreamMessage* msg);
  // Whether `public_key` is the configured key of peer `id`.
  bool IsPeerKey(const NodeId& id, const std::string& public_key) const;
  // The watchdog's link checks: pings due, stalled links closed.
  void CheckLinks(const std::vector<std::shared_ptr<PeerConnection>>& conns);
  // Send without scheduling: the message's chunks are queued on the connection at once.
  absl::Status SendShared(const NodeId& peer, PartitionId partition, Channel channel,
                          std::shared_ptr<const std::string> payload);
  // Connects the connection's backpressure to the pressure handler (peer_release_bytes).
  void WatchPressure(PeerConnection& conn);
  void Register(const std::shared_ptr<PeerConnection>& conn);
  void Unregister(const std::shared_ptr<PeerConnection>& conn);
  void DialLoop(NodeId peer);
  // One dialed link, from the call to its end: true when it got through the handshake; `*stalled`
  // when it was closed as stalled (the next dial then opens a new channel, so a new TCP
  // connection).
  bool DialOnce(const NodeId& peer, const std::string& expected_key,
                const std::shared_ptr<grpc::Channel>& channel, bool* stalled);
  bool WaitBackoff(int64_t ms);  // false when stopping
  // Handshake deadlines: the stream is cancelled if its handshake is still going at the deadline.
  uint64_t WatchHandshake(std::shared_ptr<LinkGuard> guard);
  void UnwatchHandshake(uint64_t id);
  void WatchdogLoop();

  const base::PrivateKey key_;
  const NodeId self_;
  const GrpcTransportOptions options_;
  const flowctl::Clock* const clock_;

  // Shared with dialed connections, which may outlive the transport when abandoned at Stop.
  std::shared_ptr<Counters> counters_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> dialers_;
  std::thread watchdog_;
  std::atomic<int> port_{0};

  // Serializes peer events, so a handler sees up/down for one peer in order.
  absl::Mutex event_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<NodeId, Peer> peers_ ABSL_GUARDED_BY(mu_);
  // Each dialer's current link, so Stop can cancel it.
  std::map<NodeId, std::shared_ptr<LinkGuard>> dialing_ ABSL_GUARDED_BY(mu_);
  MessageHandler on_message_;                // set before Start
  PeerEventHandler on_peer_event_;           // set before Start
  PressureHandler on_pressure_;              // set before Start
  RefusedFrameHandler on_refused_frame_;     // set before Start
  std::atomic<uint64_t> next_direct_id_{0};  // message ids of Send/Broadcast on the transport
  struct HandshakeWatch {
    absl::Time deadline;
    std::shared_ptr<LinkGuard> guard;
  };
  std::map<uint64_t, HandshakeWatch> handshakes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watch_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace p2p

#endif  // P2P_GRPC_TRANSPORT_H_
