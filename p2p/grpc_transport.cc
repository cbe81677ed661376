#include "p2p/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

// Calls into one callback stream, and the stream's end. A reactor may call its stream's
// operations freely from inside its own reactions (it is alive until they return); from any
// other thread (the link's writes, cancels from the watchdog or Stop) they go through the guard,
// which counts them. The stream is finished (server: Finish; client: the hold removed) once it is
// ending and no read, no write and no outside call is in progress, by whichever thread gets it
// there, so nothing calls a reactor that gRPC may have destroyed.
class GrpcTransport::LinkGuard final : public LinkStream {
 public:
  // The reactor's side.
  class Ops {
   public:
    virtual ~Ops() = default;
    virtual void RawStartWrite(const StreamMessage* msg) = 0;
    virtual void RawStartRead(StreamMessage* msg) = 0;
    virtual void RawCancel() = 0;
    virtual void RawFinish(const grpc::Status& status) = 0;
  };
  explicit LinkGuard(Ops* ops) : ops_(ops) {}

  // LinkStream: any thread, including the reactions.
  bool StartWrite(const StreamMessage* msg) override {
    {
      absl::MutexLock l(&mu_);
      if (ending_) return false;
      ++users_;
      ++writes_;
    }
    ops_->RawStartWrite(msg);
    Exit();
    return true;
  }
  void Cancel() override { CancelIf(/*only_handshaking=*/false); }
  // The handshake deadline's cancel: none once the handshake has succeeded (MarkConnected), so a
  // deadline that passes while the link is being registered does not cancel it.
  void CancelHandshake() { CancelIf(/*only_handshaking=*/true); }
  void MarkConnected() {
    absl::MutexLock l(&mu_);
    connected_ = true;
  }

  // The reactions'. A read is started only while the stream is not ending.
  bool StartRead(StreamMessage* msg) {
    {
      absl::MutexLock l(&mu_);
      if (ending_) return false;
      reading_ = true;
    }
    ops_->RawStartRead(msg);
    return true;
  }
  void ReadDone() {
    {
      absl::MutexLock l(&mu_);
      reading_ = false;
    }
    MaybeFinish();
  }
  void WriteDone() {
    {
      absl::MutexLock l(&mu_);
      --writes_;
    }
    MaybeFinish();
  }
  // No new operation from now on; the stream finishes with `status` once idle. `cancel`: cancel
  // the call, so a read or write in flight completes now.
  void End(const grpc::Status& status, bool cancel) {
    {
      absl::MutexLock l(&mu_);
      if (!ending_) {
        ending_ = true;
        status_ = status;
      }
    }
    if (cancel) Cancel();
    MaybeFinish();
  }

 private:
  void CancelIf(bool only_handshaking) {
    {
      absl::MutexLock l(&mu_);
      if (finished_ || cancelled_ || (only_handshaking && connected_)) return;
      cancelled_ = true;
      ++users_;
    }
    ops_->RawCancel();
    Exit();
  }
  void Exit() {
    {
      absl::MutexLock l(&mu_);
      --users_;
    }
    MaybeFinish();
  }
  void MaybeFinish() {
    grpc::Status status;
    {
      absl::MutexLock l(&mu_);
      if (!ending_ || finished_ || users_ > 0 || writes_ > 0 || reading_) return;
      finished_ = true;
      status = status_;
    }
    ops_->RawFinish(status);  // the last call this guard makes
  }

  Ops* const ops_;
  absl::Mutex mu_;
  int users_ ABSL_GUARDED_BY(mu_) = 0;   // outside calls in progress
  int writes_ ABSL_GUARDED_BY(mu_) = 0;  // writes started, not completed
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;  // the handshake succeeded
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

// What a dial attempt came to, for the dialer thread waiting on it.
struct GrpcTransport::DialAttempt {
  absl::Notification ended;  // the link will deliver nothing more and is unregistered
  std::atomic<bool> authenticated{false};
  std::atomic<bool> stalled{false};
};

// One side of a peer link on gRPC's callback API: the handshake as a sequence of reactions, then
// the connection: each read's completion delivers its frames and starts the next read; writes
// are the PeerConnection's. Server and client differ only in the handshake's steps and in how the
// call is finished.
template <class Reactor>
class GrpcTransport::Link : public Reactor, public LinkGuard::Ops {
 public:
  Link(GrpcTransport* t, NodeId peer)
      : t_(t),
        self_(t->self_),
        counters_(t->counters_),
        guard_(std::make_shared<LinkGuard>(this)),
        peer_(std::move(peer)) {}

  // Reads and writes complete on gRPC's callback threads, possibly at once: the handshake's
  // steps and the link's end are serialized by mu_; frames are delivered outside it.
  void OnReadDone(bool ok) override {
    guard_->ReadDone();
    std::shared_ptr<PeerConnection> conn;
    {
      absl::MutexLock l(&mu_);
      if (ended_) return;
      if (conn_ == nullptr) {
        HandshakeRead(ok);
        return;
      }
      conn = conn_;
    }
    if (ok && t_->Deliver(*conn, &in_) && guard_->StartRead(&in_)) return;
    absl::MutexLock l(&mu_);
    EndConnection();
  }
  void OnWriteDone(bool ok) override {
    std::shared_ptr<PeerConnection> conn;
    {
      absl::MutexLock l(&mu_);
      conn = conn_;
      if (conn == nullptr && !ended_) HandshakeWritten(ok);
    }
    if (conn != nullptr) conn->OnWriteDone(ok);
    guard_->WriteDone();
  }

  void RawStartWrite(const StreamMessage* msg) override { this->StartWrite(msg); }
  void RawStartRead(StreamMessage* msg) override { this->StartRead(msg); }

 protected:
  // Steps of the handshake (reactions, under mu_).
  virtual void HandshakeRead(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  virtual void HandshakeWritten(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The link has ended: it delivers nothing more, and is unregistered. Once, under mu_.
  virtual void OnEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}

  // Queues a handshake message behind the one being written, if any.
  void WriteHandshake(StreamMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (hs_writing_) {
      hs_queued_.push_back(std::move(msg));
      return;
    }
    hs_out_ = std::move(msg);
    hs_writing_ = guard_->StartWrite(&hs_out_);
  }
  // A handshake write completed: the next one, if queued. False when none is in flight now.
  bool NextHandshakeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    hs_writing_ = false;
    if (hs_queued_.empty()) return false;
    StreamMessage next = std::move(hs_queued_.front());
    hs_queued_.pop_front();
    WriteHandshake(std::move(next));
    return hs_writing_;
  }
  // The handshake succeeded: the connection starts (the handshake's writes are all done).
  void Authenticated() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    counters_->handshakes_accepted.fetch_add(1);
    guard_->MarkConnected();
    t_->UnwatchHandshake(watch_);
    conn_ = std::make_shared<PeerConnection>(
        peer_, guard_, t_->options_.peer_queue_bytes, t_->options_.max_batch_bytes,
        t_->options_.max_frame_bytes, &counters_->streams_written, t_->clock_);
    t_->WatchPressure(*conn_);
    t_->Register(conn_);
    if (!guard_->StartRead(&in_)) EndConnection();
  }
  // The handshake failed: the stream ends with `status` (cancelled when `cancel`).
  void EndHandshake(const grpc::Status& status, bool cancel) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    t_->UnwatchHandshake(watch_);
    ended_ = true;
    OnEnded();
    guard_->End(status, cancel);
  }
  void EndConnection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    conn_->Close();
    t_->Unregister(conn_);
    ended_ = true;
    OnEnded();
    guard_->End(grpc::Status::OK, /*cancel=*/true);
  }

  GrpcTransport* const t_;  // not touched once ended_
  const NodeId self_;
  const std::shared_ptr<Counters> counters_;
  const std::shared_ptr<LinkGuard> guard_;
  StreamMessage in_;  // the read in flight's
  absl::Mutex mu_;
  NodeId peer_ ABSL_GUARDED_BY(mu_);         // on the accepting side, the claimed id once read
  uint64_t watch_ ABSL_GUARDED_BY(mu_) = 0;  // the handshake deadline
  StreamMessage hs_out_ ABSL_GUARDED_BY(mu_);
  std::deque<StreamMessage> hs_queued_ ABSL_GUARDED_BY(mu_);
  bool hs_writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<PeerConnection> conn_ ABSL_GUARDED_BY(mu_);  // once authenticated
};

// The accepting side.
class GrpcTransport::ServerLink final
    : public Link<grpc::ServerBidiReactor<StreamMessage, StreamMessage>> {
 public:
  ServerLink(GrpcTransport* t, grpc::CallbackServerContext* ctx) : Link(t, NodeId()), ctx_(ctx) {
    absl::MutexLock l(&mu_);
    watch_ = t->WatchHandshake(guard_);
    guard_->StartRead(&in_);
  }
  void RawCancel() override { ctx_->TryCancel(); }
  void RawFinish(const grpc::Status& status) override { Finish(status); }
  void OnDone() override { delete this; }

 private:
  enum class Step { kHello, kAuth, kAccepting };

  void HandshakeRead(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) override {
    if (!ok) {
      if (step_ == Step::kHello) {
        // The read cannot tell "closed at once" from "first message does not parse"; either way
        // a log line and a count (handshakes_refused), not silence.
        counters_->handshakes_refused.fetch_add(1);
        LOG(WARNING) << "p2p " << self_ << ": refused stream from " << ctx_->peer()
                     << ": no handshake (closed, or the first message is not a StreamMessage)";
        EndHandshake(grpc::Status(grpc::StatusCode::CANCELLED,
                                  "no handshake: the stream closed or its first message did not "
                                  "parse"),
                     /*cancel=*/false);
      } else {
        EndHandshake(grpc::Status(grpc::StatusCode::CANCELLED, "closed"), /*cancel=*/true);
      }
      return;
    }
    if (step_ == Step::kHello) {
      OnHello();
    } else if (step_ == Step::kAuth) {
      OnAuth();
    } else {
      Refuse("a message before the handshake's end");
    }
  }

  void OnHello() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!in_.has_client_hello()) return Refuse("expected ClientHello");
    if (absl::Status shape = CheckClientHelloShape(in_.client_hello()); !shape.ok()) {
      return Refuse(std::string(shape.message()));  // before any lookup or log
    }
    hello_ = in_.client_hello();
    const NodeId& claimed = hello_.node_id();
    if (NodeIdFromPublicKey(hello_.public_key()) != claimed) {
      return Refuse(absl::StrCat("node id ", claimed, " does not match its public key"));
    }
    if (!t_->IsPeerKey(claimed, hello_.public_key())) {
      return Refuse(
          absl::StrCat("unknown peer ", claimed, ": its key is not in the configured peer set"));
    }
    if (hello_.expected_peer_id() != self_) {
      return Refuse(
          absl::StrCat("dialed ", hello_.expected_peer_id(), " but this node is ", self_));
    }
    peer_ = claimed;
    server_nonce_ = NewHandshakeNonce();
    StreamMessage reply;
    node::p2p::ServerHello* sh = reply.mutable_server_hello();
    sh->set_public_key(t_->key_.public_key().bytes());
    sh->set_node_id(self_);
    sh->set_nonce(server_nonce_);
    sh->set_signature(t_->key_.Sign(HandshakeTranscript(HandshakeRole::kServer, claimed, self_,
                                                        hello_.nonce(), server_nonce_)));
    step_ = Step::kAuth;
    WriteHandshake(std::move(reply));
    guard_->StartRead(&in_);
  }

  void OnAuth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!in_.has_client_auth()) return Refuse("expected ClientAuth");
    absl::Status ok =
        VerifyHandshake(HandshakeRole::kClient, hello_.public_key(), peer_, peer_, self_,
                        hello_.nonce(), server_nonce_, in_.client_auth().signature());
    if (!ok.ok()) return Refuse(std::string(ok.message()));
    step_ = Step::kAccepting;
    StreamMessage accept;
    accept.mutable_server_accept();
    WriteHandshake(std::move(accept));
  }

  void HandshakeWritten(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) override {
    if (!ok) {
      EndHandshake(grpc::Status(grpc::StatusCode::CANCELLED, "closed"), /*cancel=*/true);
      return;
    }
    if (NextHandshakeWrite()) return;
    if (step_ == Step::kAccepting) Authenticated();  // the accept went out
  }

  void Refuse(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    LOG(WARNING) << "p2p " << self_ << ": refused stream from " << ctx_->peer() << ": " << why;
    counters_->handshakes_refused.fetch_add(1);
    EndHandshake(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why), /*cancel=*/false);
  }

  grpc::CallbackServerContext* const ctx_;
  Step step_ ABSL_GUARDED_BY(mu_) = Step::kHello;
  node::p2p::ClientHello hello_ ABSL_GUARDED_BY(mu_);
  std::string server_nonce_ ABSL_GUARDED_BY(mu_);
};

// The dialing side. Deletes itself when gRPC is done with it; the dialer waits only for the
// attempt's end (a write the kernel has not taken can hold the call for long after).
class GrpcTransport::ClientLink final
    : public Link<grpc::ClientBidiReactor<StreamMessage, StreamMessage>> {
 public:
  ClientLink(GrpcTransport* t, NodeId peer, std::string expected_key,
             std::shared_ptr<grpc::Channel> channel, std::shared_ptr<DialAttempt> attempt)
      : Link(t, std::move(peer)),
        expected_key_(std::move(expected_key)),
        channel_(std::move(channel)),
        stub_(node::p2p::PeerService::NewStub(channel_)),
        attempt_(std::move(attempt)) {}

  // Starts the call; `guard()` cancels it. Call once, right after construction.
  void Start() {
    stub_->async()->Connect(&ctx_, this);
    AddHold();  // removed when the stream finishes (RawFinish): writes come from other threads
    {
      absl::MutexLock l(&mu_);
      StartHandshake();
    }
    StartCall();
  }
  const std::shared_ptr<LinkGuard>& guard() const { return guard_; }

  void RawCancel() override { ctx_.TryCancel(); }
  void RawFinish(const grpc::Status&) override { RemoveHold(); }
  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock l(&mu_);
      if (!authenticated_ && why_.empty()) {
        if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
          LOG(WARNING) << "p2p " << self_ << ": peer " << peer_
                       << " refused us: " << status.error_message();
        } else {
          VLOG(1) << "p2p " << self_ << ": dial " << peer_ << " failed: " << status.error_message();
        }
      }
    }
    delete this;
  }

 private:
  enum class Step { kServerHello, kAccept };

  // The hello and the first read, posted until StartCall.
  void StartHandshake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    watch_ = t_->WatchHandshake(guard_);
    client_nonce_ = NewHandshakeNonce();
    StreamMessage msg;
    node::p2p::ClientHello* hello = msg.mutable_client_hello();
    hello->set_public_key(t_->key_.public_key().bytes());
    hello->set_node_id(self_);
    hello->set_expected_peer_id(peer_);
    hello->set_nonce(client_nonce_);
    WriteHandshake(std::move(msg));
    guard_->StartRead(&in_);
  }

  void HandshakeRead(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) override {
    if (!ok) return Fail("");
    if (step_ == Step::kServerHello) {
      if (!in_.has_server_hello()) return Fail("expected ServerHello");
      const node::p2p::ServerHello& sh = in_.server_hello();
      if (sh.node_id() != peer_ || sh.public_key() != expected_key_) {
        return Fail(absl::StrCat("the node at this address is ", sh.node_id(), ", not ", peer_));
      }
      absl::Status verified =
          VerifyHandshake(HandshakeRole::kServer, sh.public_key(), sh.node_id(), self_, peer_,
                          client_nonce_, sh.nonce(), sh.signature());
      if (!verified.ok()) return Fail(std::string(verified.message()));
      StreamMessage msg;
      msg.mutable_client_auth()->set_signature(t_->key_.Sign(
          HandshakeTranscript(HandshakeRole::kClient, self_, peer_, client_nonce_, sh.nonce())));
      step_ = Step::kAccept;
      WriteHandshake(std::move(msg));
      guard_->StartRead(&in_);
      return;
    }
    if (!in_.has_server_accept()) return Fail("expected ServerAccept");
    accepted_ = true;
    if (!hs_writing_) Connected();
  }

  void HandshakeWritten(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) override {
    if (!ok) return Fail("");
    if (NextHandshakeWrite()) return;
    if (accepted_) Connected();  // the accept came before our auth's write completed
  }

  void Connected() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    authenticated_ = true;
    attempt_->authenticated.store(true);
    Authenticated();
  }

  void Fail(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    why_ = why;
    if (!why.empty()) {
      counters_->handshakes_refused.fetch_add(1);
      LOG(WARNING) << "p2p " << self_ << ": refused peer " << peer_ << ": " << why;
    }
    EndHandshake(grpc::Status(grpc::StatusCode::CANCELLED, why), /*cancel=*/true);
  }

  void OnEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) override {
    if (conn_ != nullptr) attempt_->stalled.store(conn_->stalled());
    attempt_->ended.Notify();
  }

  const std::string expected_key_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<node::p2p::PeerService::Stub> stub_;
  const std::shared_ptr<DialAttempt> attempt_;
  grpc::ClientContext ctx_;
  Step step_ ABSL_GUARDED_BY(mu_) = Step::kServerHello;
  std::string client_nonce_ ABSL_GUARDED_BY(mu_);
  std::string why_ ABSL_GUARDED_BY(mu_);
  bool accepted_ ABSL_GUARDED_BY(mu_) = false;
  bool authenticated_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream accepted while the node stops: finished at once.
class RefusedStream final : public grpc::ServerBidiReactor<StreamMessage, StreamMessage> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class GrpcTransport::Service final : public node::p2p::PeerService::CallbackService {
 public:
  explicit Service(GrpcTransport* t) : t_(t) {}

  grpc::ServerBidiReactor<StreamMessage, StreamMessage>* Connect(
      grpc::CallbackServerContext* ctx) override {
    {
      absl::MutexLock l(&t_->mu_);
      if (t_->stopping_) {
        return new RefusedStream(grpc::Status(grpc::StatusCode::UNAVAILABLE, "node stopping"));
      }
    }
    return new ServerLink(t_, ctx);
  }

 private:
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
  std::vector<std::shared_ptr<LinkGuard>> dialing;
  std::vector<std::shared_ptr<PeerConnection>> conns;
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, guard] : dialing_) dialing.push_back(guard);
    for (auto& [id, peer] : peers_) {
      if (peer.conn) conns.push_back(peer.conn);
    }
  }
  // Outside mu_: a cancel may run the link's end, which takes mu_.
  for (const std::shared_ptr<LinkGuard>& g : dialing) g->Cancel();
  for (const std::shared_ptr<PeerConnection>& c : conns) c->Close();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(options_.shutdown_grace_ms));
    server_->Wait();  // every accepted link finished
  }
  // Each dialer returns once its link ended: it delivers nothing more. A dialed call whose write
  // the kernel has not taken may outlive this; it touches only what it owns.
  for (std::thread& t : dialers_) t.join();
  dialers_.clear();
  if (watchdog_.joinable()) watchdog_.join();
}

uint64_t GrpcTransport::WatchHandshake(std::shared_ptr<LinkGuard> guard) {
  absl::MutexLock l(&mu_);
  const uint64_t id = next_watch_id_++;
  handshakes_[id] = HandshakeWatch{absl::Now() + absl::Milliseconds(options_.handshake_timeout_ms),
                                   std::move(guard)};
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
    std::vector<std::shared_ptr<LinkGuard>> expired;
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
          expired.push_back(std::move(it->second.guard));
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
    // Outside mu_: a cancel may run the link's end, which takes mu_; and a connection's lock is
    // taken before mu_ elsewhere (its pressure callback).
    for (const std::shared_ptr<LinkGuard>& g : expired) g->CancelHandshake();
    expired.clear();
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

bool GrpcTransport::IsPeerKey(const NodeId& id, const std::string& public_key) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = peers_.find(id);
  return it != peers_.end() && it->second.public_key == public_key;
}

bool GrpcTransport::Deliver(PeerConnection& conn, StreamMessage* msg) {
  if (!msg->has_frames()) {
    LOG(WARNING) << "p2p " << self_ << ": peer " << conn.peer()
                 << " sent a handshake message on an open stream; closing it";
    return false;
  }
  if (msg->frames().ping() != 0) conn.OnPing(msg->frames().ping());
  if (msg->frames().pong() != 0) {
    counters_->pongs_received.fetch_add(1, std::memory_order_relaxed);
    conn.OnPong(msg->frames().pong(), clock_->NowNanos());
  }
  for (node::p2p::Frame& f : *msg->mutable_frames()->mutable_frames()) {
    counters_->frames_received.fetch_add(1, std::memory_order_relaxed);
    counters_->bytes_received.fetch_add(f.payload().size(), std::memory_order_relaxed);
    conn.CountRead(f.payload().size());
    absl::StatusOr<std::optional<Reassembler::Message>> m =
        conn.reassembler().Add(f.header(), std::move(*f.mutable_payload()));
    if (!m.ok()) {
      counters_->frames_refused.fetch_add(1, std::memory_order_relaxed);
      if (on_refused_frame_) on_refused_frame_(conn.peer());
      LOG_EVERY_N(WARNING, 100) << "p2p " << self_ << ": frame from " << conn.peer()
                                << " refused: " << m.status().message();
      continue;
    }
    if (!m->has_value()) continue;
    counters_->messages_delivered.fetch_add(1, std::memory_order_relaxed);
    if (on_message_) {
      // The link reads its next message when this returns: while a handler holds it, the peer's
      // writes to us stop once its HTTP/2 window is spent, and the handler holds one of gRPC's
      // callback threads. Worth a line when a handler lasts.
      const auto start = std::chrono::steady_clock::now();
      on_message_(conn.peer(), (*m)->partition, (*m)->channel, std::move((*m)->payload));
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (took > kSlowPeerIo) {
        LOG_EVERY_T(WARNING, 1) << "p2p " << self_ << ": handling a message from " << conn.peer()
                                << " took " << took.count() << " ms";
      }
    }
  }
  return true;
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
    bool stalled = false;
    const bool authenticated = DialOnce(peer, key, channel, &stalled);
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
                             const std::shared_ptr<grpc::Channel>& channel, bool* stalled) {
  auto attempt = std::make_shared<DialAttempt>();
  auto* link = new ClientLink(this, peer, expected_key, channel, attempt);  // deletes itself
  {
    absl::MutexLock l(&mu_);
    if (stopping_) {
      delete link;  // never started
      return false;
    }
    dialing_[peer] = link->guard();
  }
  link->Start();
  attempt->ended.WaitForNotification();
  {
    absl::MutexLock l(&mu_);
    dialing_.erase(peer);
  }
  *stalled = attempt->stalled.load();
  return attempt->authenticated.load();
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
