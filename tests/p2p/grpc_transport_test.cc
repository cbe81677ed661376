// Three GrpcTransport nodes in one process on 127.0.0.1 (ports picked by the kernel), plus raw
// gRPC clients that speak the handshake by hand to test refusals.
#include "p2p/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "p2p/egress_valve.h"
#include "p2p/handshake.h"
#include "tests/p2p/p2p_test_util.h"

namespace p2p {
namespace {

using node::p2p::StreamMessage;
using ::testing::HasSubstr;

using ::p2p::testing::Eventually;
using ::p2p::testing::KeyFromByte;
using ::p2p::testing::kWait;

struct Received {
  NodeId from;
  PartitionId partition;
  Channel channel;
  std::string payload;
};

class Node {
 public:
  // `stall_checks`: links are closed as stalled (GrpcTransportOptions) after 400 ms; otherwise
  // pings still flow but nothing is closed, so a test may hold a reader as long as it needs.
  Node(char seed, const std::vector<base::PrivateKey>& peer_keys,
       std::string listen = "127.0.0.1:0", bool stall_checks = false)
      : key_(KeyFromByte(seed)) {
    GrpcTransportOptions opt;
    opt.listen_address = std::move(listen);
    opt.initial_backoff_ms = 20;
    opt.max_backoff_ms = 200;
    opt.handshake_timeout_ms = 300;
    opt.max_frame_bytes = 8 << 20;
    if (stall_checks) {
      opt.ping_interval_ms = 50;
      opt.ping_timeout_ms = 400;
      opt.write_stall_ms = 400;
    } else {
      opt.ping_timeout_ms = 0;
      opt.write_stall_ms = 0;
    }
    for (const base::PrivateKey& k : peer_keys) opt.peers.push_back({k.public_key().bytes(), ""});
    t_ = std::make_unique<GrpcTransport>(key_, opt);
    EgressValveOptions vo;
    vo.egress.max_frame_bytes = 8 << 20;
    absl::StatusOr<std::unique_ptr<EgressValve>> v = EgressValve::Create(t_.get(), t_.get(), vo);
    CHECK(v.ok()) << v.status();
    v_ = *std::move(v);
    v_->SetHandlers(
        [this](const NodeId& from, PartitionId p, Channel ch, std::string payload) {
          absl::MutexLock l(&mu_);
          // Hold(true) stalls the reader thread here, as a node too slow to read would.
          mu_.Await(absl::Condition(
              +[](bool* hold) { return !*hold; }, &hold_));
          got_.push_back({from, p, ch, std::move(payload)});
        },
        [this](const NodeId& peer, PeerEvent ev) {
          absl::MutexLock l(&mu_);
          events_.push_back(peer + (ev == PeerEvent::kUp ? " up" : " down"));
        });
  }

  absl::Status Start() {
    if (absl::Status s = t_->Start(); !s.ok()) return s;
    return v_->Start();
  }
  void Stop() {
    v_->Stop();
    t_->Stop();
  }

  GrpcTransport& t() { return *t_; }
  // The egress valve in front of the transport, as a node has it.
  EgressValve& v() { return *v_; }
  const NodeId& id() const { return t_->self(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", t_->port()); }

  std::vector<Received> got() {
    absl::MutexLock l(&mu_);
    return got_;
  }
  size_t got_count() {
    absl::MutexLock l(&mu_);
    return got_.size();
  }
  void Hold(bool hold) {
    absl::MutexLock l(&mu_);
    hold_ = hold;
  }
  std::vector<std::string> events() {
    absl::MutexLock l(&mu_);
    return events_;
  }
  bool Connected(const NodeId& peer) {
    for (const NodeId& p : t_->connected_peers()) {
      if (p == peer) return true;
    }
    return false;
  }

  base::PrivateKey key_;

 private:
  std::unique_ptr<GrpcTransport> t_;
  std::unique_ptr<EgressValve> v_;
  absl::Mutex mu_;
  std::vector<Received> got_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
};

// Speaks PeerService by hand.
class RawClient {
 public:
  explicit RawClient(int port)
      : channel_(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials())),
        stub_(node::p2p::PeerService::NewStub(channel_)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
    stream_ = stub_->Connect(&ctx_);
  }

  // Claims `claimed_key` and signs with `signer`. True when the server accepted.
  bool Handshake(const std::string& claimed_key, const base::PrivateKey& signer,
                 const NodeId& target) {
    const std::string nonce = NewHandshakeNonce();
    const NodeId self = NodeIdFromPublicKey(claimed_key);
    StreamMessage m;
    m.mutable_client_hello()->set_public_key(claimed_key);
    m.mutable_client_hello()->set_node_id(self);
    m.mutable_client_hello()->set_expected_peer_id(target);
    m.mutable_client_hello()->set_nonce(nonce);
    if (!stream_->Write(m) || !stream_->Read(&m) || !m.has_server_hello()) return false;
    const std::string server_nonce = m.server_hello().nonce();
    m.mutable_client_auth()->set_signature(signer.Sign(
        HandshakeTranscript(HandshakeRole::kClient, self, target, nonce, server_nonce)));
    if (!stream_->Write(m) || !stream_->Read(&m)) return false;
    return m.has_server_accept();
  }

  bool Write(const StreamMessage& m) { return stream_->Write(m); }

  grpc::Status Finish() {
    stream_->WritesDone();
    StreamMessage m;
    while (stream_->Read(&m)) {
    }
    return stream_->Finish();
  }
  // Waits for the server to end the stream, sending nothing.
  grpc::Status AwaitEnd() {
    StreamMessage m;
    while (stream_->Read(&m)) {
    }
    return stream_->Finish();
  }
  grpc::Status Cancel() {
    ctx_.TryCancel();
    return stream_->Finish();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<node::p2p::PeerService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<StreamMessage, StreamMessage>> stream_;
};

StreamMessage OneFrame(PartitionId p, Channel ch, uint32_t length, std::string payload) {
  StreamMessage m;
  node::p2p::Frame* f = m.mutable_frames()->add_frames();
  f->mutable_header()->set_partition(p);
  f->mutable_header()->set_channel(ch);
  f->mutable_header()->set_length(length);
  f->mutable_header()->set_chunk_index(0);
  f->mutable_header()->set_chunk_count(1);
  f->mutable_header()->set_message_id(1);
  f->set_payload(std::move(payload));
  return m;
}

class GrpcTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 'e' is configured everywhere but never started: raw clients use its key.
    for (char c : std::string("abce")) keys_.emplace(c, KeyFromByte(c));
    for (char c : std::string("abc")) StartNode(c, "127.0.0.1:0");
    for (auto& [c, n] : nodes_) WireAddresses(c);
    for (auto& [c, n] : nodes_) {
      for (auto& [d, m] : nodes_) {
        if (c != d) {
          ASSERT_TRUE(Eventually([&] { return n->Connected(m->id()); }));
        }
      }
    }
  }

  void TearDown() override {
    for (auto& [c, n] : nodes_) n->Hold(false);
    for (auto& [c, n] : nodes_) n->Stop();
    nodes_.clear();
  }

  void StartNode(char c, const std::string& listen) {
    std::vector<base::PrivateKey> peers;
    for (auto& [d, k] : keys_) {
      if (d != c) peers.push_back(k);
    }
    nodes_[c] = std::make_unique<Node>(c, peers, listen);
    ASSERT_TRUE(nodes_[c]->Start().ok());
  }

  void WireAddresses(char c) {
    for (auto& [d, m] : nodes_) {
      if (d == c) continue;
      nodes_[c]->t().SetPeerAddress(m->id(), m->address());
      m->t().SetPeerAddress(nodes_[c]->id(), nodes_[c]->address());
    }
  }

  Node& n(char c) { return *nodes_.at(c); }
  NodeId e_id() { return NodeIdFromPublicKey(keys_.at('e').public_key().bytes()); }

  std::map<char, base::PrivateKey> keys_;
  std::map<char, std::unique_ptr<Node>> nodes_;
};

TEST_F(GrpcTransportTest, FramesArriveIntactChunkedOnesInterleavedWithConsensus) {
  ASSERT_TRUE(n('a').v().scheduler().SetCap(10e6).ok());  // 20 KB chunks
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131) >> 3);
  ASSERT_TRUE(n('a').v().Send(n('b').id(), 3, node::p2p::BULK, big).ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        n('a').v().Send(n('b').id(), 1, node::p2p::CONSENSUS, absl::StrCat("vote", i)).ok());
  }
  ASSERT_TRUE(n('c').v().Broadcast(2, node::p2p::SYNC, "block").ok());
  ASSERT_TRUE(Eventually([&] { return n('b').got_count() == 12 && n('a').got_count() == 1; }));
  const std::vector<Received> got = n('b').got();
  // The ten votes overtook the 4 MiB message, which took ~400 ms at the cap.
  int votes_seen = 0;
  bool big_seen = false;
  for (const Received& r : got) {
    if (r.channel == node::p2p::CONSENSUS) {
      EXPECT_FALSE(big_seen);
      EXPECT_EQ(r.from, n('a').id());
      EXPECT_EQ(r.partition, 1u);
      EXPECT_EQ(r.payload, absl::StrCat("vote", votes_seen++));
    } else if (r.channel == node::p2p::BULK) {
      big_seen = true;
      EXPECT_EQ(r.partition, 3u);
      EXPECT_TRUE(r.payload == big) << r.payload.size();
    } else {
      EXPECT_EQ(r.from, n('c').id());
      EXPECT_EQ(r.payload, "block");
    }
  }
  EXPECT_EQ(votes_seen, 10);
  EXPECT_TRUE(big_seen);
  EXPECT_EQ(n('a').got()[0].payload, "block");
  const EgressValveStats st = n('a').v().Stats();
  EXPECT_GE(st.egress.channels[3].frames_sent, (4u << 20) / 20'000);
}

// A peer that reads slowly blocks only its own link: its writer queue fills, the scheduler stops
// releasing frames for it (the rest wait there, bounded), other peers are served meanwhile, and
// when it reads again its SYNC goes out ahead of the forwarding queued before it.
TEST_F(GrpcTransportTest, SlowPeerGetsItsSyncBeforeQueuedForwarding) {
  n('b').Hold(true);
  const std::string tx(64 << 10, 't');
  // How much b's socket buffers and gRPC's flow-control windows absorb before the writer queue
  // backs up depends on the kernel and on gRPC's BDP probing (the peer may block and unblock
  // while they grow), so send 1 MiB rounds, each leaving the scheduler or blocking before the
  // next, until b is blocked and over its bound here; at most 256 MiB.
  size_t sent = 0;
  auto egress = [&] { return n('a').v().Stats().egress; };
  for (;;) {
    const EgressStats e = egress();
    if (e.blocked_peers == 1 && e.blocked_peer_drops > 0) break;
    ASSERT_LT(sent, 4096u) << "b never blocked";
    for (int i = 0; i < 16; ++i, ++sent) {
      ASSERT_TRUE(n('a').v().Send(n('b').id(), 1, node::p2p::TX_FORWARD, tx).ok());
    }
    ASSERT_TRUE(Eventually([&] {
      const EgressStats e = egress();
      return e.blocked_peers == 1 || e.channel(node::p2p::TX_FORWARD).queued_messages == 0;
    }));
  }
  ASSERT_TRUE(n('a').v().Send(n('b').id(), 1, node::p2p::SYNC, "sync").ok());
  ASSERT_TRUE(n('a').v().Send(n('c').id(), 1, node::p2p::SYNC, "to-c").ok());
  ASSERT_TRUE(Eventually([&] { return n('c').got_count() == 1; }));  // not behind b's backlog
  const EgressValveStats st = n('a').v().Stats();
  EXPECT_GE(st.egress.peer_block_events, 1u);
  EXPECT_GT(st.egress.blocked_peer_drops, 0u);  // b's share of the scheduler is bounded
  EXPECT_EQ(st.egress.channel(node::p2p::TX_FORWARD).messages_refused, 0u);
  EXPECT_EQ(st.egress.channel(node::p2p::TX_FORWARD).messages_dropped,
            st.egress.blocked_peer_drops);
  const size_t expected = sent - st.egress.blocked_peer_drops + 1;
  n('b').Hold(false);
  ASSERT_TRUE(Eventually([&] { return n('b').got_count() == expected; }))
      << n('b').got_count() << " of " << expected;
  const std::vector<Received> got = n('b').got();
  size_t sync_at = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].channel == node::p2p::SYNC) sync_at = i;
  }
  ASSERT_LT(sync_at, got.size());
  EXPECT_EQ(got[sync_at].payload, "sync");
  // Forwarding still waiting in the scheduler went after the SYNC (without backpressure, every
  // forwarded message was ahead of it in the 16 MiB writer queue).
  EXPECT_GE(got.size() - sync_at - 1, 1u) << "sync arrived at " << sync_at;
  EXPECT_EQ(n('a').v().Stats().egress.blocked_peers, 0u);
}

// The transport on its own (no valve): a message is cut into 64 KiB chunks and queued at once.
TEST_F(GrpcTransportTest, PlainTransportSendsWithoutAValve) {
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7) >> 2);
  const uint64_t written = n('a').t().Stats().frames_written;
  ASSERT_TRUE(n('a').t().Send(n('b').id(), 4, node::p2p::BULK, big).ok());
  ASSERT_TRUE(n('a').t().Broadcast(4, node::p2p::SYNC, "small").ok());
  ASSERT_TRUE(Eventually([&] { return n('b').got_count() == 2 && n('c').got_count() == 1; }));
  const std::vector<Received> got = n('b').got();
  EXPECT_TRUE(got[0].payload == big) << got[0].payload.size();
  EXPECT_EQ(got[1].payload, "small");
  EXPECT_EQ(n('a').t().Stats().frames_written - written, (1u << 20) / (64u << 10) + 2);
  EXPECT_EQ(n('a').v().Stats().egress.channel(node::p2p::BULK).frames_sent, 0u);
  EXPECT_TRUE(absl::IsInvalidArgument(
      n('a').t().Send(n('b').id(), 4, node::p2p::BULK, std::string((8 << 20) + 1, 'x'))));
  EXPECT_TRUE(absl::IsInvalidArgument(n('a').t().Send("nobody", 4, node::p2p::BULK, "x")));
}

TEST_F(GrpcTransportTest, UnknownPeerRefusedWithPermissionDenied) {
  const base::PrivateKey stranger = KeyFromByte('z');
  RawClient raw(n('a').t().port());
  EXPECT_FALSE(raw.Handshake(stranger.public_key().bytes(), stranger, n('a').id()));
  grpc::Status st = raw.Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("unknown peer"));
  EXPECT_GE(n('a').t().Stats().handshakes_refused, 1u);

  // A real node with an unknown key, configured to reach 'a', never gets connected.
  std::vector<base::PrivateKey> peers = {keys_.at('a')};
  Node z('z', peers);
  ASSERT_TRUE(z.Start().ok());
  z.t().SetPeerAddress(n('a').id(), n('a').address());
  if (z.id() < n('a').id()) {
    ASSERT_TRUE(Eventually([&] { return n('a').t().Stats().handshakes_refused >= 2; }));
  }
  EXPECT_TRUE(z.t().connected_peers().empty());
  z.Stop();
  for (const std::string& ev : n('a').events()) EXPECT_THAT(ev, ::testing::Not(HasSubstr(z.id())));
}

TEST_F(GrpcTransportTest, WrongKeyRefused) {
  // Claims to be 'e' (a configured peer) but does not hold e's key.
  RawClient raw(n('a').t().port());
  EXPECT_FALSE(raw.Handshake(keys_.at('e').public_key().bytes(), KeyFromByte('z'), n('a').id()));
  grpc::Status st = raw.Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("bad signature"));
  EXPECT_FALSE(n('a').Connected(e_id()));
}

TEST_F(GrpcTransportTest, FramesBeforeHandshakeNeverReachTheNode) {
  RawClient raw(n('a').t().port());
  ASSERT_TRUE(raw.Write(OneFrame(1, node::p2p::CONSENSUS, 5, "sneak")));
  grpc::Status st = raw.Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(n('a').t().Stats().messages_delivered, 0u);
  EXPECT_EQ(n('a').got_count(), 0u);
}

TEST_F(GrpcTransportTest, SilentClientIsCancelledAtTheHandshakeDeadline) {
  RawClient raw(n('a').t().port());
  // Sends nothing; its own deadline (15 s) would give DEADLINE_EXCEEDED.
  const absl::Time t0 = absl::Now();
  grpc::Status st = raw.AwaitEnd();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

TEST_F(GrpcTransportTest, OversizedFrameRefusedOnSendAndOnReceipt) {
  absl::Status s =
      n('a').v().Send(n('b').id(), 1, node::p2p::BULK, std::string((8 << 20) + 1, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("exceeds max_frame_bytes"));
  EXPECT_EQ(n('a').v().Stats().egress.oversized_refused, 1u);

  // An authenticated sender that ignores the limit: its oversized frame is refused, the next
  // frame still arrives.
  RawClient raw(n('a').t().port());
  ASSERT_TRUE(raw.Handshake(keys_.at('e').public_key().bytes(), keys_.at('e'), n('a').id()));
  ASSERT_TRUE(Eventually([&] { return n('a').Connected(e_id()); }));
  ASSERT_TRUE(raw.Write(OneFrame(1, node::p2p::BULK, (8 << 20) + 1, "x")));
  ASSERT_TRUE(raw.Write(OneFrame(1, node::p2p::CONSENSUS, 2, "ok")));
  ASSERT_TRUE(Eventually([&] { return n('a').got_count() == 1; }));
  EXPECT_EQ(n('a').got()[0].payload, "ok");
  EXPECT_EQ(n('a').got()[0].from, e_id());
  EXPECT_EQ(n('a').t().Stats().frames_refused, 1u);
  raw.Cancel();
  ASSERT_TRUE(Eventually([&] { return !n('a').Connected(e_id()); }));
}

TEST_F(GrpcTransportTest, ReconnectsAfterAPeerRestarts) {
  const NodeId b = n('b').id();
  const std::string b_listen = n('b').address();
  n('b').Stop();
  nodes_.erase('b');
  ASSERT_TRUE(Eventually([&] { return !n('a').Connected(b) && !n('c').Connected(b); }));
  EXPECT_TRUE(absl::IsUnavailable(n('a').v().Send(b, 1, node::p2p::CONSENSUS, "x")));

  StartNode('b', b_listen);  // same key, same port
  WireAddresses('b');
  ASSERT_TRUE(Eventually([&] {
    return n('a').Connected(b) && n('c').Connected(b) && n('b').Connected(n('a').id()) &&
           n('b').Connected(n('c').id());
  }));
  ASSERT_TRUE(n('a').v().Send(b, 1, node::p2p::CONSENSUS, "again").ok());
  ASSERT_TRUE(n('b').v().Send(n('c').id(), 1, node::p2p::CONSENSUS, "back").ok());
  ASSERT_TRUE(Eventually([&] { return n('b').got_count() == 1 && n('c').got_count() == 1; }));
  EXPECT_EQ(n('b').got()[0].payload, "again");
  EXPECT_EQ(n('c').got()[0].payload, "back");
  const std::vector<std::string> ev = n('a').events();
  EXPECT_THAT(ev, ::testing::Contains(b + " down"));
  EXPECT_EQ(std::count(ev.begin(), ev.end(), b + " up"), 2);
}

// A peer whose reader stops (its handler holds it, as a wedged node or a link that delivers
// nothing would) stops answering pings: the dialing side closes the link as stalled and dials
// again on a new channel (a new TCP connection), which carries messages once the peer reads
// again. Without the check the link stays up and silent.
TEST(GrpcTransportStallTest, ALinkWhosePeerStopsAnsweringIsClosedAndReplaced) {
  const base::PrivateKey ka = KeyFromByte('a'), kb = KeyFromByte('b');
  // The lower node id dials: give it the check and hold the other's reader.
  const bool a_dials =
      NodeIdFromPublicKey(ka.public_key().bytes()) < NodeIdFromPublicKey(kb.public_key().bytes());
  Node a('a', {kb}, "127.0.0.1:0", /*stall_checks=*/a_dials);
  Node b('b', {ka}, "127.0.0.1:0", /*stall_checks=*/!a_dials);
  Node& dialer = a_dials ? a : b;
  Node& held = a_dials ? b : a;
  struct Unhold {
    Node& n;
    ~Unhold() { n.Hold(false); }  // else its stop would wait for its held reader
  } unhold{held};
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  a.t().SetPeerAddress(b.id(), b.address());
  b.t().SetPeerAddress(a.id(), a.address());
  ASSERT_TRUE(Eventually([&] { return a.Connected(b.id()) && b.Connected(a.id()); }));
  // Pings answered: both ends know their peer answers.
  ASSERT_TRUE(Eventually(
      [&] { return a.t().Stats().pongs_received >= 2 && b.t().Stats().pongs_received >= 2; }));
  EXPECT_EQ(dialer.t().Stats().links_stalled, 0u);
  EXPECT_EQ(dialer.t().Stats().channels_opened, 1u);

  held.Hold(true);
  ASSERT_TRUE(dialer.v().Send(held.id(), 1, node::p2p::CONSENSUS, "held").ok());
  ASSERT_TRUE(Eventually([&] { return dialer.t().Stats().links_stalled >= 1; }));
  ASSERT_TRUE(Eventually([&] {
    const std::vector<std::string> ev = dialer.events();
    return std::count(ev.begin(), ev.end(), held.id() + " down") >= 1;
  }));

  held.Hold(false);
  ASSERT_TRUE(Eventually([&] { return a.Connected(b.id()) && b.Connected(a.id()); }));
  ASSERT_TRUE(Eventually([&] {
    (void)dialer.v().Send(held.id(), 1, node::p2p::CONSENSUS, "after");
    for (const Received& r : held.got()) {
      if (r.payload == "after") return true;
    }
    return false;
  }));
  EXPECT_EQ(dialer.t().Stats().channels_opened, 2u);  // the redial did not reuse the channel
  // What ListPeers shows for the link: two connections, one stall, a round trip, the bytes:
  // "held" and at least one "after" each way (the loop above may send "after" more than once,
  // and a copy written just before a close may never arrive). The writer counts a batch once
  // its write returned, which can be after the peer already delivered it: waited for.
  const uint64_t both = std::string("held").size() + std::string("after").size();
  EXPECT_TRUE(Eventually([&] {
    return dialer.t().PeerLinks().at(held.id()).bytes_sent >= both &&
           held.t().PeerLinks().at(dialer.id()).bytes_received >= both;
  })) << "sent "
      << dialer.t().PeerLinks().at(held.id()).bytes_sent << ", received "
      << held.t().PeerLinks().at(dialer.id()).bytes_received << ", want " << both << " each";
  const PeerLinkStats link = dialer.t().PeerLinks().at(held.id());
  EXPECT_TRUE(link.connected);
  EXPECT_EQ(link.connections, 2u);
  EXPECT_EQ(link.stalls, 1u);
  EXPECT_GE(link.rtt_ns, 0);
  a.Stop();
  b.Stop();
}

}  // namespace
}  // namespace p2p
