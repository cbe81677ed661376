#include "p2p/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"
#include "p2p/handshake.h"
#include "p2p/peer_connection.h"
#include "p2p/reassembler.h"

namespace p2p {

using node::p2p::StreamMessage;

namespace {

// Chunk size of messages sent on the transport directly (not through an egress valve).
constexpr size_t kDirectChunkBytes = 64 * 1024;
// Direct sends number their messages from here, apart from the valve's scheduler's ids.
constexpr uint64_t kDirectIdBase = uint64_t{1} << 63;

// Adds one connection's bytes (and its last round trip, once measured) to `s`: the live
// connection in PeerLinks, an ended or replaced one to its peer's totals.
void AddConnectionFigures(const PeerConnection& conn, PeerLinkStats* s) {
  s->bytes_sent += conn.bytes_written();
  s->bytes_received += conn.bytes_read();
  if (const int64_t rtt = conn.last_rtt_ns(); rtt >= 0) s->rtt_ns = rtt;
}

}  // namespace

struct GrpcTransport::Counters {
  std::atomic<uint64_t> frames_received{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> messages_delivered{0};
  std::atomic<uint64_t> frames_refused{0};
  std::atomic<uint64_t> handshakes_accepted{0};
  std::atomic<uint64_t> handshakes_refused{0};
  std::atomic<uint64_t> frames_written{0};
  std::atomic<uint64_t> frames_dropped_no_peer{0};
  std::atomic<uint64_t> frames_dropped_peer_queue{0};
  std::atomic<uint64_t> streams_written{0};
  std::atomic<uint64_t> links_stalled{0};
  std::atomic<uint64_t> pongs_received{0};
  std::atomic<uint64_t> channels_opened{0};
};

// A dialed stream and what it needs, owned together so a connection whose writer is still
// blocked in a write can be left to finish after the dialer has moved on.
struct GrpcTransport::DialCall {
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<StreamMessage, StreamMessage>>
      stream;  // before ctx dies
};

// The accepting side: handshake, then the connection runs on the gRPC handler thread.
class GrpcTransport::Service final : public node::p2p::PeerService::Service {
 public:
  explicit Service(GrpcTransport* t) : t_(t) {}

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<StreamMessage, StreamMessage>* stream) override {
    {
      absl::MutexLock l(&t_->mu_);
      if (t_->stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "node stopping");
    }
    return Serve(ctx, stream);
  }

 private:
  // The handshake, then (when it succeeds) the connection until it ends.
  grpc::Status Serve(grpc::ServerContext* ctx,
                     grpc::ServerReaderWriter<StreamMessage, StreamMessage>* stream) {
    const uint64_t watch = t_->WatchHandshake([ctx] { ctx->TryCancel(); });
    struct Unwatch {
      GrpcTransport* t;
      uint64_t id;
      ~Unwatch() { t->UnwatchHandshake(id); }
    } unwatch{t_, watch};
    StreamMessage msg;
    if (!stream->Read(&msg)) {
      // The sync Read cannot tell "closed at once" from "first message does not parse";
      // either way a log line and a count (handshakes_refused), not silence.
      t_->counters_->handshakes_refused.fetch_add(1);
      LOG(WARNING) << "p2p " << t_->self_ << ": refused stream from " << ctx->peer()
                   << ": no handshake (closed, or the first message is not a StreamMessage)";
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "no handshake: the stream closed or its first message did not parse");
    }
    if (!msg.has_client_hello()) return Refuse(ctx, "expected ClientHello");
    if (absl::Status shape = CheckClientHelloShape(msg.client_hello()); !shape.ok()) {
      return Refuse(ctx, std::string(shape.message()));  // before any lookup or log
    }
    const node::p2p::ClientHello hello = msg.client_hello();
    const NodeId& claimed = hello.node_id();
    if (NodeIdFromPublicKey(hello.public_key()) != claimed) {
      return Refuse(ctx, absl::StrCat("node id ", claimed, " does not match its public key"));
    }
    {
      absl::MutexLock l(&t_->mu_);
      auto it = t_->peers_.find(claimed);
      if (it == t_->peers_.end() || it->second.public_key != hello.public_key()) {
        return Refuse(ctx, absl::StrCat("unknown peer ", claimed,
                                        ": its key is not in the configured peer set"));
      }
    }
    if (hello.expected_peer_id() != t_->self_) {
      return Refuse(
          ctx, absl::StrCat("dialed ", hello.expected_peer_id(), " but this node is ", t_->self_));
    }
    const std::string server_nonce = NewHandshakeNonce();
    StreamMessage reply;
    node::p2p::ServerHello* sh = reply.mutable_server_hello();
    sh->set_public_key(t_->key_.public_key().bytes());
    sh->set_node_id(t_->self_);
    sh->set_nonce(server_nonce);
    sh->set_signature(t_->key_.Sign(HandshakeTranscript(HandshakeRole::kServer, claimed, t_->self_,
                                                        hello.nonce(), server_nonce)));
    if (!stream->Write(reply)) return grpc::Status(grpc::StatusCode::CANCELLED, "closed");
    if (!stream->Read(&msg)) return grpc::Status(grpc::StatusCode::CANCELLED, "closed");
    if (!msg.has_client_auth()) return Refuse(ctx, "expected ClientAuth");
    absl::Status ok =
        VerifyHandshake(HandshakeRole::kClient, hello.public_key(), claimed, claimed, t_->self_,
                        hello.nonce(), server_nonce, msg.client_auth().signature());
    if (!ok.ok()) return Refuse(ctx, std::string(ok.message()));
    reply.mutable_server_accept();
    if (!stream->Write(reply)) return grpc::Status(grpc::StatusCode::CANCELLED, "closed");
    t_->counters_->handshakes_accepted.fetch_add(1);
    t_->UnwatchHandshake(watch);
    // The stream lives until this handler returns, which RunConnection's full Detach ensures
    // comes after the writer's last write.
    auto conn = t_->NewConnection(
        claimed, [stream](const StreamMessage& m) { return stream->Write(m); },
        [stream](StreamMessage* m) { return stream->Read(m); }, [ctx] { ctx->TryCancel(); },
        nullptr);
    t_->RunConnection(conn);
    return grpc::Status::OK;
  }

  grpc::Status Refuse(grpc::ServerContext* ctx, const std::string& why) {
    LOG(WARNING) << "p2p " << t_->self_ << ": refused stream from " << ctx->peer() << ": " << why;
    t_->counters_->handshakes_refused.fetch_add(1);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
  }

  GrpcTransport* const t_;
};

GrpcTransport::GrpcTransport(base::PrivateKey key, GrpcTransportOptions options,
                             const flowctl::Clock* clock)
    : key_(std::move(key)),
      self_(NodeIdFromPublicKey(key_.public_key().bytes())),
      options_(std::move(options)),
      clock_(clock),
      counters_(std::make_shared<Counters>()),
      service_(std::make_unique<Service>(this)) {
  absl::MutexLock l(&mu_);
  for (const PeerSpec& spec : options_.peers) {
    const NodeId id = NodeIdFromPublicKey(spec.public_key);
    if (id != self_) peers_[id] = Peer{spec.public_key, spec.address, nullptr, {}};
  }
}

GrpcTransport::~GrpcTransport() { Stop(); }

absl::Status GrpcTransport::Start() {
  {
    absl::MutexLock l(&mu_);
    CHECK(!started_) << "GrpcTransport started twice";
    for (const PeerSpec& spec : options_.peers) {
      if (!base::PublicKey::FromBytes(spec.public_key).ok()) {
        return absl::InvalidArgumentError("peer public key is not a 32-byte Ed25519 key");
      }
    }
    started_ = true;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address,
                           options_.server_credentials != nullptr
                               ? options_.server_credentials
                               : grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service_.get());
  // gRPC sets SO_REUSEPORT by default: a second node on a taken port would bind and split the
  // traffic silently. A taken port must be a start error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options_.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(options_.keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(options_.keepalive_time_ms / 2));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen_address));
  }
  port_.store(port);
  watchdog_ = std::thread([this] {
    flowctl::NameThisThread("p2p-watchdog");
    WatchdogLoop();
  });
  absl::MutexLock l(&mu_);
  for (const auto& [id, peer] : peers_) {
    if (self_ < id)
      dialers_.emplace_back([this, id = id] {
        flowctl::NameThisThread(absl::StrCat("p2p-dial-", id));
        DialLoop(id);
      });
  }
  LOG(INFO) << "p2p " << self_ << ": listening on port " << port << ", " << peers_.size()
            << " peers";
  return absl::OkStatus();
}

void GrpcTransport::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (!started_) return;
  }
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, ctx] : dialing_) ctx->TryCancel();
    for (auto& [id, peer] : peers_) {
      if (peer.conn) peer.conn->Close();
    }
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(options_.shutdown_grace_ms));
    server_->Wait();
  }
  for (std::thread& t : dialers_) t.join();
  dialers_.clear();
  if (watchdog_.joinable()) watchdog_.join();
  ReapAbandoned(absl::Milliseconds(options_.shutdown_grace_ms));
  absl::MutexLock l(&mu_);
  if (!abandoned_.empty()) {
    // Still blocked in a write the kernel has not taken: leave them (and their streams) to the
    // process; they hold what they use, the counters included.
    LOG(WARNING) << "p2p " << self_ << ": " << abandoned_.size()
                 << " stalled connection(s) still blocked in a write at stop; left running";
    for (Abandoned& a : abandoned_) new Abandoned(std::move(a));  // deliberately never freed
    abandoned_.clear();
  }
}

void GrpcTransport::ReapAbandoned(absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {
    std::vector<Abandoned> done;
    bool left = false;
    {
      absl::MutexLock l(&mu_);
      for (auto it = abandoned_.begin(); it != abandoned_.end();) {
        if (it->conn->WriterDone()) {
          done.push_back(std::move(*it));
          it = abandoned_.erase(it);
        } else {
          ++it;
        }
      }
      left = !abandoned_.empty();
    }
    for (Abandoned& a : done) {
      a.conn->JoinWriter();
      a.call->stream->Finish();  // cancelled: returns at once
    }
    if (!left || absl::Now() >= deadline) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

uint64_t GrpcTransport::WatchHandshake(std::function<void()> cancel) {
  absl::MutexLock l(&mu_);
  const uint64_t id = next_watch_id_++;
  handshakes_[id] = HandshakeWatch{absl::Now() + absl::Milliseconds(options_.handshake_timeout_ms),
                                   std::move(cancel)};
  return id;
}

void GrpcTransport::UnwatchHandshake(uint64_t id) {
  absl::MutexLock l(&mu_);
  handshakes_.erase(id);
}

void GrpcTransport::WatchdogLoop() {
  // Links are checked at a quarter of the smallest interval that matters, at most every second.
  int64_t check_ms = 1000;
  for (int64_t v : {options_.ping_interval_ms, options_.ping_timeout_ms, options_.write_stall_ms}) {
    if (v > 0) check_ms = std::min(check_ms, std::max<int64_t>(v / 4, 5));
  }
  for (;;) {
    std::vector<std::shared_ptr<PeerConnection>> conns;
    absl::Time next;
    uint64_t seen = 0;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      next = now + absl::Milliseconds(check_ms);
      for (auto it = handshakes_.begin(); it != handshakes_.end();) {
        if (it->second.deadline <= now) {
          LOG(WARNING) << "p2p " << self_ << ": handshake timed out; stream cancelled";
          it->second.cancel();  // TryCancel: does not block or call back into us
          it = handshakes_.erase(it);
        } else {
          next = std::min(next, it->second.deadline);
          ++it;
        }
      }
      for (const auto& [id, peer] : peers_) {
        if (peer.conn) conns.push_back(peer.conn);
      }
      seen = next_watch_id_;
    }
    // Outside mu_: a connection's lock is taken before mu_ elsewhere (its pressure callback).
    CheckLinks(conns);
    conns.clear();
    absl::MutexLock l(&mu_);
    // Wakes at the earliest deadline, on a new watch (ids grow), or on stop.
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || next_watch_id_ != seen;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), next);
  }
}

void GrpcTransport::CheckLinks(const std::vector<std::shared_ptr<PeerConnection>>& conns) {
  constexpr int64_t kMs = 1'000'000;
  LinkStallLimits limits;
  limits.write_ns = options_.write_stall_ms * kMs;
  limits.write_bytes_per_ns = static_cast<double>(options_.write_stall_bytes_per_s) / 1e9;
  limits.ping_timeout_ns = options_.ping_timeout_ms * kMs;
  const int64_t now = clock_->NowNanos();
  for (const std::shared_ptr<PeerConnection>& conn : conns) {
    if (options_.ping_interval_ms > 0) conn->MaybePing(now, options_.ping_interval_ms * kMs);
    const std::string why = conn->StallReason(now, limits);
    if (why.empty()) continue;
    counters_->links_stalled.fetch_add(1, std::memory_order_relaxed);
    {
      absl::MutexLock l(&mu_);
      auto it = peers_.find(conn->peer());
      if (it != peers_.end()) ++it->second.ended.stalls;
    }
    LOG(WARNING) << "p2p " << self_ << ": link to peer " << conn->peer() << " stalled: " << why
                 << "; closing it for a new connection";
    conn->MarkStalled();
  }
}

void GrpcTransport::SetPeerAddress(const NodeId& peer, const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = peers_.find(peer);
  if (it != peers_.end()) it->second.address = address;
}

void GrpcTransport::Register(const std::shared_ptr<PeerConnection>& conn) {
  absl::MutexLock el(&event_mu_);
  std::shared_ptr<PeerConnection> old;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) {
      conn->Close();
      return;
    }
    Peer& p = peers_[conn->peer()];
    old = std::move(p.conn);
    if (old) AddConnectionFigures(*old, &p.ended);
    p.conn = conn;
    ++p.ended.connections;
  }
  if (old) {
    old->Close();
    if (on_peer_event_) on_peer_event_(conn->peer(), PeerEvent::kDown);
  }
  LOG(INFO) << "p2p " << self_ << ": peer " << conn->peer() << " up";
  if (on_peer_event_) on_peer_event_(conn->peer(), PeerEvent::kUp);
}

void GrpcTransport::Unregister(const std::shared_ptr<PeerConnection>& conn) {
  absl::MutexLock el(&event_mu_);
  {
    absl::MutexLock l(&mu_);
    auto it = peers_.find(conn->peer());
    if (it == peers_.end() || it->second.conn != conn) return;  // replaced: no event
    AddConnectionFigures(*conn, &it->second.ended);
    it->second.conn.reset();
  }
  LOG(INFO) << "p2p " << self_ << ": peer " << conn->peer() << " down";
  if (on_peer_event_) on_peer_event_(conn->peer(), PeerEvent::kDown);
}

std::map<NodeId, PeerLinkStats> GrpcTransport::PeerLinks() const {
  std::map<NodeId, PeerLinkStats> out;
  std::vector<std::shared_ptr<PeerConnection>> live;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, peer] : peers_) {
      out[id] = peer.ended;
      if (peer.conn) live.push_back(peer.conn);
    }
  }
  // Outside mu_, as in the watchdog: a connection's lock is never taken under mu_ here.
  for (const std::shared_ptr<PeerConnection>& c : live) {
    PeerLinkStats& s = out[c->peer()];
    s.connected = true;
    AddConnectionFigures(*c, &s);
  }
  return out;
}

void GrpcTransport::WatchPressure(PeerConnection& conn) {
  if (options_.peer_release_bytes == 0 || !on_pressure_) return;
  conn.SetPressureCallback(options_.peer_release_bytes, [this, peer = conn.peer()](bool blocked) {
    on_pressure_(peer, blocked);
  });
}

void GrpcTransport::SetPressureHandler(PressureHandler handler) {
  on_pressure_ = std::move(handler);
}

void GrpcTransport::SetRefusedFrameHandler(RefusedFrameHandler handler) {
  on_refused_frame_ = std::move(handler);
}

std::shared_ptr<PeerConnection> GrpcTransport::NewConnection(const NodeId& peer,
                                                             PeerConnection::WriteFn write,
                                                             PeerConnection::ReadFn read,
                                                             std::function<void()> cancel,
                                                             std::shared_ptr<void> keep_alive) {
  // The write function holds `keep_alive` (a dialed stream) and the counters the connection
  // counts into, so an abandoned connection never outlives either.
  auto conn = std::make_shared<PeerConnection>(
      peer,
      [write = std::move(write), keep_alive = std::move(keep_alive),
       counters = counters_](const StreamMessage& m) { return write(m); },
      std::move(read), std::move(cancel), options_.peer_queue_bytes, options_.max_batch_bytes,
      options_.max_frame_bytes, &counters_->streams_written, clock_);
  WatchPressure(*conn);
  return conn;
}

bool GrpcTransport::RunConnection(const std::shared_ptr<PeerConnection>& conn,
                                  absl::Duration writer_wait) {
  conn->StartWriter();
  Register(conn);
  StreamMessage msg;
  while (conn->Read(&msg)) {
    if (!msg.has_frames()) {
      LOG(WARNING) << "p2p " << self_ << ": peer " << conn->peer()
                   << " sent a handshake message on an open stream; closing it";
      break;
    }
    if (msg.frames().ping() != 0) conn->OnPing(msg.frames().ping());
    if (msg.frames().pong() != 0) {
      counters_->pongs_received.fetch_add(1, std::memory_order_relaxed);
      conn->OnPong(msg.frames().pong(), clock_->NowNanos());
    }
    for (node::p2p::Frame& f : *msg.mutable_frames()->mutable_frames()) {
      counters_->frames_received.fetch_add(1, std::memory_order_relaxed);
      counters_->bytes_received.fetch_add(f.payload().size(), std::memory_order_relaxed);
      conn->CountRead(f.payload().size());
      absl::StatusOr<std::optional<Reassembler::Message>> m =
          conn->reassembler().Add(f.header(), std::move(*f.mutable_payload()));
      if (!m.ok()) {
        counters_->frames_refused.fetch_add(1, std::memory_order_relaxed);
        if (on_refused_frame_) on_refused_frame_(conn->peer());
        LOG_EVERY_N(WARNING, 100) << "p2p " << self_ << ": frame from " << conn->peer()
                                  << " refused: " << m.status().message();
        continue;
      }
      if (!m->has_value()) continue;
      counters_->messages_delivered.fetch_add(1, std::memory_order_relaxed);
      if (on_message_) {
        // The reader is the peer's flow control: while a handler holds it, the peer's writes to
        // us block once its HTTP/2 window is spent. Worth a line when a handler lasts.
        const auto start = std::chrono::steady_clock::now();
        on_message_(conn->peer(), (*m)->partition, (*m)->channel, std::move((*m)->payload));
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start);
        if (took > kSlowPeerIo) {
          LOG_EVERY_T(WARNING, 1) << "p2p " << self_ << ": handling a message from " << conn->peer()
                                  << " took " << took.count() << " ms";
        }
      }
    }
  }
  const bool detached = conn->Detach(writer_wait);
  Unregister(conn);
  return detached;
}

void GrpcTransport::WriteFrame(EgressFrame frame) {
  std::shared_ptr<PeerConnection> conn;
  {
    absl::ReaderMutexLock l(&mu_);
    auto it = peers_.find(frame.peer);
    if (it != peers_.end()) conn = it->second.conn;
  }
  if (conn == nullptr) {
    counters_->frames_dropped_no_peer.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!conn->Push(std::move(frame))) {
    counters_->frames_dropped_peer_queue.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counters_->frames_written.fetch_add(1, std::memory_order_relaxed);
}

bool GrpcTransport::WaitBackoff(int64_t ms) {
  absl::MutexLock l(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(ms));
  return !stopping_;
}

void GrpcTransport::DialLoop(NodeId peer) {
  std::mt19937_64 rng(std::hash<std::string>()(self_ + peer));
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  int64_t backoff = options_.initial_backoff_ms;
  std::shared_ptr<grpc::Channel> channel;
  std::string channel_address;
  for (;;) {
    std::string address, key;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this, &peer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !peers_[peer].address.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      address = peers_[peer].address;
      key = peers_[peer].public_key;
    }
    if (channel == nullptr || address != channel_address) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options_.keepalive_time_ms));
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.keepalive_timeout_ms));
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                  static_cast<int>(options_.initial_backoff_ms));
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(options_.initial_backoff_ms));
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(options_.max_backoff_ms));
      // Our own stream per peer; do not share a TCP connection with other channels.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // Mutual TLS when configured; the handshake below still runs inside.
      if (!options_.tls_peer_name.empty()) {
        args.SetSslTargetNameOverride(options_.tls_peer_name);
      }
      channel = grpc::CreateCustomChannel(address,
                                          options_.channel_credentials != nullptr
                                              ? options_.channel_credentials
                                              : grpc::InsecureChannelCredentials(),
                                          args);
      channel_address = address;
      counters_->channels_opened.fetch_add(1, std::memory_order_relaxed);
    }
    ReapAbandoned(absl::ZeroDuration());
    auto stub = node::p2p::PeerService::NewStub(channel);
    bool authenticated = false;
    bool stalled = false;
    {
      auto call = std::make_shared<DialCall>();
      call->channel = channel;
      {
        absl::MutexLock l(&mu_);
        if (stopping_) return;
        dialing_[peer] = &call->ctx;
      }
      authenticated = DialOnce(peer, key, call, stub.get(), &stalled);
      absl::MutexLock l(&mu_);
      dialing_.erase(peer);
    }
    // A stalled link's TCP connection may stay slow (a congestion controller that learned a
    // policer's rate keeps it for tens of round trips) or hold megabytes the kernel has not
    // sent: the next stream gets a new connection, not one on the same channel.
    if (stalled) channel.reset();
    backoff = authenticated ? options_.initial_backoff_ms
                            : std::min(backoff * 2, options_.max_backoff_ms);
    if (!WaitBackoff(static_cast<int64_t>(static_cast<double>(backoff) * jitter(rng)))) return;
  }
}

bool GrpcTransport::DialOnce(const NodeId& peer, const std::string& expected_key,
                             const std::shared_ptr<DialCall>& call,
                             node::p2p::PeerService::Stub* stub, bool* stalled) {
  grpc::ClientContext* const ctx = &call->ctx;
  const uint64_t watch = WatchHandshake([ctx] { ctx->TryCancel(); });
  struct Unwatch {
    GrpcTransport* t;
    uint64_t id;
    ~Unwatch() { t->UnwatchHandshake(id); }
  } unwatch{this, watch};
  call->stream = stub->Connect(ctx);
  auto* const stream = call->stream.get();
  auto fail = [&](const std::string& why) {
    ctx->TryCancel();
    grpc::Status st = stream->Finish();
    if (!why.empty()) {
      counters_->handshakes_refused.fetch_add(1);
      LOG(WARNING) << "p2p " << self_ << ": refused peer " << peer << ": " << why;
    } else if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      LOG(WARNING) << "p2p " << self_ << ": peer " << peer << " refused us: " << st.error_message();
    } else {
      VLOG(1) << "p2p " << self_ << ": dial " << peer << " failed: " << st.error_message();
    }
    return false;
  };
  const std::string client_nonce = NewHandshakeNonce();
  StreamMessage msg;
  node::p2p::ClientHello* hello = msg.mutable_client_hello();
  hello->set_public_key(key_.public_key().bytes());
  hello->set_node_id(self_);
  hello->set_expected_peer_id(peer);
  hello->set_nonce(client_nonce);
  if (!stream->Write(msg)) return fail("");
  if (!stream->Read(&msg)) return fail("");
  if (!msg.has_server_hello()) return fail("expected ServerHello");
  const node::p2p::ServerHello sh = msg.server_hello();
  if (sh.node_id() != peer || sh.public_key() != expected_key) {
    return fail(absl::StrCat("the node at this address is ", sh.node_id(), ", not ", peer));
  }
  absl::Status ok = VerifyHandshake(HandshakeRole::kServer, sh.public_key(), sh.node_id(), self_,
                                    peer, client_nonce, sh.nonce(), sh.signature());
  if (!ok.ok()) return fail(std::string(ok.message()));
  msg.mutable_client_auth()->set_signature(key_.Sign(
      HandshakeTranscript(HandshakeRole::kClient, self_, peer, client_nonce, sh.nonce())));
  if (!stream->Write(msg)) return fail("");
  if (!stream->Read(&msg)) return fail("");
  if (!msg.has_server_accept()) return fail("expected ServerAccept");
  counters_->handshakes_accepted.fetch_add(1);
  UnwatchHandshake(watch);
  auto conn = NewConnection(
      peer, [stream](const StreamMessage& m) { return stream->Write(m); },
      [stream](StreamMessage* m) { return stream->Read(m); }, [ctx] { ctx->TryCancel(); }, call);
  // A writer still blocked a second after the stream was cancelled is left to finish on its own
  // (with the stream it uses), so the dialer can open a new connection now.
  const bool detached = RunConnection(conn, absl::Seconds(1));
  *stalled = conn->stalled();
  ctx->TryCancel();
  if (detached) {
    stream->Finish();
  } else {
    LOG(WARNING) << "p2p " << self_ << ": the writer to peer " << peer
                 << " is still blocked in a write; redialing without it";
    absl::MutexLock l(&mu_);
    abandoned_.push_back(Abandoned{conn, call});
  }
  return true;
}

std::vector<NodeId> GrpcTransport::peers() const {
  std::vector<NodeId> out;
  absl::ReaderMutexLock l(&mu_);
  for (const auto& [id, peer] : peers_) out.push_back(id);
  return out;
}

std::vector<NodeId> GrpcTransport::connected_peers() const {
  std::vector<NodeId> out;
  absl::ReaderMutexLock l(&mu_);
  for (const auto& [id, peer] : peers_) {
    if (peer.conn) out.push_back(id);
  }
  return out;
}

absl::Status GrpcTransport::Send(const NodeId& peer, PartitionId partition, Channel channel,
                                 std::string payload) {
  return SendShared(peer, partition, channel,
                    std::make_shared<const std::string>(std::move(payload)));
}

absl::Status GrpcTransport::SendShared(const NodeId& peer, PartitionId partition, Channel channel,
                                       std::shared_ptr<const std::string> payload) {
  if (!IsValidChannel(channel)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid channel ", static_cast<int>(channel)));
  }
  if (payload->size() > options_.max_frame_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", payload->size(), " bytes on ", ChannelName(channel),
                     " exceeds max_frame_bytes ", options_.max_frame_bytes));
  }
  std::shared_ptr<PeerConnection> conn;
  {
    absl::ReaderMutexLock l(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return absl::InvalidArgumentError(absl::StrCat("unknown peer ", peer));
    conn = it->second.conn;
  }
  if (conn == nullptr) return absl::UnavailableError(absl::StrCat("peer ", peer, " not connected"));
  const size_t total = payload->size();
  const uint32_t count =
      total == 0 ? 1 : static_cast<uint32_t>((total + kDirectChunkBytes - 1) / kDirectChunkBytes);
  const uint64_t id = kDirectIdBase | next_direct_id_.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = clock_->NowNanos();
  std::vector<EgressFrame> frames(count);
  for (uint32_t i = 0; i < count; ++i) {
    EgressFrame& f = frames[i];
    f.peer = peer;
    f.partition = partition;
    f.channel = channel;
    f.message_id = id;
    f.message_length = static_cast<uint32_t>(total);
    f.chunk_index = i;
    f.chunk_count = count;
    f.data = payload;
    f.offset = size_t{i} * kDirectChunkBytes;
    f.length = std::min(kDirectChunkBytes, total - f.offset);
    f.enqueued_at = now;
  }
  if (!conn->PushAll(std::move(frames))) {
    counters_->frames_dropped_peer_queue.fetch_add(count, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat("peer ", peer, ": writer queue full"));
  }
  counters_->frames_written.fetch_add(count, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status GrpcTransport::Broadcast(PartitionId partition, Channel channel, std::string payload) {
  auto shared = std::make_shared<const std::string>(std::move(payload));
  absl::Status first_error;
  for (const NodeId& peer : connected_peers()) {
    absl::Status s = SendShared(peer, partition, channel, shared);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  return first_error;
}

void GrpcTransport::SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) {
  on_message_ = std::move(on_message);
  on_peer_event_ = std::move(on_peer_event);
}

TransportStats GrpcTransport::Stats() const {
  TransportStats s;
  s.frames_received = counters_->frames_received.load();
  s.bytes_received = counters_->bytes_received.load();
  s.messages_delivered = counters_->messages_delivered.load();
  s.frames_refused = counters_->frames_refused.load();
  s.handshakes_accepted = counters_->handshakes_accepted.load();
  s.handshakes_refused = counters_->handshakes_refused.load();
  s.frames_written = counters_->frames_written.load();
  s.frames_dropped_no_peer = counters_->frames_dropped_no_peer.load();
  s.frames_dropped_peer_queue = counters_->frames_dropped_peer_queue.load();
  s.streams_written = counters_->streams_written.load();
  s.links_stalled = counters_->links_stalled.load();
  s.pongs_received = counters_->pongs_received.load();
  s.channels_opened = counters_->channels_opened.load();
  return s;
}

}  // namespace p2p
