// Hostile peers against a real GrpcTransport on 127.0.0.1 ("a peer that sends garbage
// frames"). Node A has two configured peers: B, an honest GrpcTransport, and G, a test double
// that holds a configured key, runs the real handshake (p2p/handshake.h) by hand over a raw
// (ByteBuffer) stream, and then writes garbage:
//   - frames whose headers make no sense (bad channel, length over the limit, inconsistent
//     chunks, payload size mismatches, seeded random headers): refused one by one and counted in
//     frames_refused, never delivered, the stream stays up;
//   - bytes that are not a StreamMessage at all: A drops the connection (peer down);
//   - a malformed first message (no handshake / malformed ClientHello): refused, logged and
//     counted in handshakes_refused.
// Through all of it A keeps running and keeps exchanging messages with B.
// Waits poll a condition with a bound (real threads and sockets); nothing sleeps to order events.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "p2p/grpc_transport.h"
#include "p2p/handshake.h"
#include "tests/p2p/p2p_test_util.h"

namespace p2p {
namespace {

using node::p2p::StreamMessage;
using ::testing::HasSubstr;

using ::p2p::testing::Eventually;
using ::p2p::testing::KeyFromByte;
using ::p2p::testing::kWait;

constexpr size_t kMaxFrameBytes = 1 << 20;

// A GrpcTransport plus what its handlers saw.
class Peer {
 public:
  Peer(char seed, const std::vector<char>& peer_seeds) {
    GrpcTransportOptions opt;
    opt.initial_backoff_ms = 20;
    opt.max_backoff_ms = 200;
    opt.handshake_timeout_ms = 2000;
    opt.max_frame_bytes = kMaxFrameBytes;
    for (char s : peer_seeds) opt.peers.push_back({KeyFromByte(s).public_key().bytes(), ""});
    t_ = std::make_unique<GrpcTransport>(KeyFromByte(seed), opt);
    t_->SetHandlers(
        [this](const NodeId& from, PartitionId, Channel, std::string payload) {
          absl::MutexLock l(&mu_);
          got_.push_back(from + ":" + payload);
        },
        [](const NodeId&, PeerEvent) {});
    t_->SetRefusedFrameHandler([this](const NodeId& from) {
      absl::MutexLock l(&mu_);
      ++refused_from_[from];
    });
  }
  GrpcTransport& t() { return *t_; }
  // Frames refused, by the peer that sent them (SetRefusedFrameHandler).
  size_t RefusedFrom(const NodeId& from) {
    absl::MutexLock l(&mu_);
    return refused_from_[from];
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", t_->port()); }
  bool Connected(const NodeId& peer) {
    for (const NodeId& p : t_->connected_peers()) {
      if (p == peer) return true;
    }
    return false;
  }
  bool Got(const std::string& entry) {
    absl::MutexLock l(&mu_);
    return std::find(got_.begin(), got_.end(), entry) != got_.end();
  }
  size_t GotFrom(const NodeId& from) {
    absl::MutexLock l(&mu_);
    return std::count_if(got_.begin(), got_.end(),
                         [&](const std::string& e) { return e.rfind(from + ":", 0) == 0; });
  }

 private:
  std::unique_ptr<GrpcTransport> t_;
  absl::Mutex mu_;
  std::vector<std::string> got_ ABSL_GUARDED_BY(mu_);
  std::map<NodeId, size_t> refused_from_ ABSL_GUARDED_BY(mu_);
};

// The test double: PeerService.Connect on raw bytes, one operation at a time.
class GarbagePeer {
 public:
  explicit GarbagePeer(int port)
      : stub_(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials())) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
    call_ = stub_.PrepareCall(&ctx_, "/node.p2p.PeerService/Connect", &cq_);
    call_->StartCall(Tag(1));
    Step(1);
  }
  ~GarbagePeer() {
    ctx_.TryCancel();
    Finish();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  bool WriteBytes(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call_->Write(buffer, Tag(2));
    return Step(2);
  }
  bool Write(const StreamMessage& m) { return WriteBytes(m.SerializeAsString()); }
  bool Read(StreamMessage* m) {
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, Tag(3));
    if (!Step(3)) return false;
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) return false;
    std::string bytes;
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return m->ParseFromString(bytes);
  }

  // The real handshake as the dialer, with `key` (which A has configured). True when accepted.
  bool Handshake(const base::PrivateKey& key, const NodeId& target) {
    const NodeId self = NodeIdFromPublicKey(key.public_key().bytes());
    const std::string nonce = NewHandshakeNonce();
    StreamMessage m;
    m.mutable_client_hello()->set_public_key(key.public_key().bytes());
    m.mutable_client_hello()->set_node_id(self);
    m.mutable_client_hello()->set_expected_peer_id(target);
    m.mutable_client_hello()->set_nonce(nonce);
    if (!Write(m) || !Read(&m) || !m.has_server_hello()) return false;
    const node::p2p::ServerHello sh = m.server_hello();
    if (!VerifyHandshake(HandshakeRole::kServer, sh.public_key(), sh.node_id(), self, target, nonce,
                         sh.nonce(), sh.signature())
             .ok()) {
      return false;
    }
    m.Clear();
    m.mutable_client_auth()->set_signature(
        key.Sign(HandshakeTranscript(HandshakeRole::kClient, self, target, nonce, sh.nonce())));
    return Write(m) && Read(&m) && m.has_server_accept();
  }

  // Half-closes, drains what the server still sends and returns the stream's status.
  grpc::Status Finish() {
    if (finished_) return status_;
    finished_ = true;
    call_->WritesDone(Tag(4));
    Step(4);
    for (int i = 0; i < 1000; ++i) {  // bounded; the deadline ends it anyway
      grpc::ByteBuffer ignored;
      call_->Read(&ignored, Tag(3));
      if (!Step(3)) break;
    }
    call_->Finish(&status_, Tag(5));
    Step(5);
    return status_;
  }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool Step(intptr_t want) {
    void* tag;
    bool ok;
    return cq_.Next(&tag, &ok) && tag == Tag(want) && ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool finished_ = false;
  grpc::Status status_;
};

node::p2p::Frame MakeFrame(uint32_t partition, int channel, uint32_t length, uint32_t index,
                           uint32_t count, uint64_t id, std::string payload) {
  node::p2p::Frame f;
  f.mutable_header()->set_partition(partition);
  f.mutable_header()->set_channel(static_cast<node::p2p::Channel>(channel));
  f.mutable_header()->set_length(length);
  f.mutable_header()->set_chunk_index(index);
  f.mutable_header()->set_chunk_count(count);
  f.mutable_header()->set_message_id(id);
  f.set_payload(std::move(payload));
  return f;
}

class GarbagePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Peer>('a', std::vector<char>{'b', 'g'});
    b_ = std::make_unique<Peer>('b', std::vector<char>{'a'});
    ASSERT_TRUE(a_->t().Start().ok());
    ASSERT_TRUE(b_->t().Start().ok());
    // G's address stays unset: A never dials it; G dials A.
    a_->t().SetPeerAddress(b_->t().self(), b_->address());
    b_->t().SetPeerAddress(a_->t().self(), a_->address());
    ASSERT_TRUE(Eventually([&] { return a_->Connected(b_->t().self()); }));
    ASSERT_TRUE(Eventually([&] { return b_->Connected(a_->t().self()); }));
  }
  void TearDown() override {
    b_->t().Stop();
    a_->t().Stop();
  }

  // A and B still talk both ways; `tag` makes the payloads unique.
  void ExpectHonestTraffic(const std::string& tag) {
    const NodeId a = a_->t().self(), b = b_->t().self();
    ASSERT_TRUE(a_->t().Send(b, 1, Channel::CONSENSUS, "to-b-" + tag).ok());
    ASSERT_TRUE(b_->t().Send(a, 1, Channel::CONSENSUS, "to-a-" + tag).ok());
    EXPECT_TRUE(Eventually([&] { return b_->Got(a + ":to-b-" + tag); }));
    EXPECT_TRUE(Eventually([&] { return a_->Got(b + ":to-a-" + tag); }));
  }

  const NodeId g_ = NodeIdFromPublicKey(KeyFromByte('g').public_key().bytes());
  std::unique_ptr<Peer> a_, b_;
};

TEST_F(GarbagePeerTest, GarbageFramesAfterTheHandshakeAreRefusedThenUndecodableBytesDropThePeer) {
  GarbagePeer g(a_->t().port());
  ASSERT_TRUE(g.Handshake(KeyFromByte('g'), a_->t().self()));
  ASSERT_TRUE(Eventually([&] { return a_->Connected(g_); }));
  const TransportStats before = a_->t().Stats();

  // Frames that parse as protobuf but make no sense.
  StreamMessage bad;
  auto* frames = bad.mutable_frames()->mutable_frames();
  *frames->Add() = MakeFrame(1, 99, 3, 0, 1, 1, "abc");                   // invalid channel
  *frames->Add() = MakeFrame(1, 0, 3, 0, 1, 2, "abc");                    // CHANNEL_UNSPECIFIED
  *frames->Add() = MakeFrame(1, 1, kMaxFrameBytes + 1, 0, 1, 3, "abc");   // over the limit
  *frames->Add() = MakeFrame(1, 1, 3, 0, 0, 4, "abc");                    // zero chunks
  *frames->Add() = MakeFrame(1, 1, 3, 5, 2, 5, "abc");                    // index >= count
  *frames->Add() = MakeFrame(1, 1, 10, 0, 1, 6, "abc");                   // size mismatch
  *frames->Add() = MakeFrame(1, 1, 6, 1, 2, 7, "abc");                    // chunk 1 without 0
  *frames->Add() = MakeFrame(1, 1, 4000000000u, 0, 1000000000u, 8, "x");  // huge claims
  constexpr int kBad = 8;
  ASSERT_TRUE(g.Write(bad));

  // Seeded random headers (bounded count): none may crash or be delivered half-made.
  std::mt19937 rng(20261130);
  StreamMessage random;
  for (int i = 0; i < 300; ++i) {
    std::string payload(rng() % 64, 'r');
    *random.mutable_frames()->add_frames() =
        MakeFrame(rng() % 4, static_cast<int>(rng() % 7), rng() % 128, rng() % 4, rng() % 4,
                  rng() % 8, std::move(payload));
  }
  ASSERT_TRUE(g.Write(random));
  ASSERT_TRUE(Eventually(
      [&] { return a_->t().Stats().frames_received >= before.frames_received + kBad + 300; }));
  const TransportStats after = a_->t().Stats();
  EXPECT_GE(after.frames_refused, before.frames_refused + kBad);
  // Each refusal is charged to the authenticated peer that sent it.
  EXPECT_EQ(a_->RefusedFrom(g_), after.frames_refused);
  EXPECT_TRUE(a_->Connected(g_)) << "refused frames alone do not end the stream";
  ExpectHonestTraffic("1");

  // Bytes that are not a StreamMessage: A ends the stream and reports G down.
  ASSERT_TRUE(g.WriteBytes(std::string("\xff\xff\xff\xff\x0f garbage", 14)));
  ASSERT_TRUE(Eventually([&] { return !a_->Connected(g_); })) << "A kept the garbage stream";
  g.Finish();
  ExpectHonestTraffic("2");
  EXPECT_TRUE(a_->Connected(b_->t().self()));
}

TEST_F(GarbagePeerTest, MalformedFirstMessagesAreRefusedWithAReasonAndCounted) {
  const uint64_t refused0 = a_->t().Stats().handshakes_refused;
  {
    GarbagePeer g(a_->t().port());
    ASSERT_TRUE(g.WriteBytes(std::string("\xff\xff\xff\xff\x0f garbage", 14)));
    grpc::Status s = g.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("no handshake"));
  }
  EXPECT_TRUE(Eventually([&] { return a_->t().Stats().handshakes_refused == refused0 + 1; }));
  {
    GarbagePeer g(a_->t().port());
    StreamMessage m;
    m.mutable_client_hello()->set_public_key(KeyFromByte('g').public_key().bytes());
    m.mutable_client_hello()->set_node_id(g_);
    m.mutable_client_hello()->set_expected_peer_id(a_->t().self());
    m.mutable_client_hello()->set_nonce("short");
    ASSERT_TRUE(g.Write(m));
    grpc::Status s = g.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(s.error_message(), HasSubstr("malformed handshake: nonce must be 32 bytes, got 5"));
  }
  EXPECT_TRUE(Eventually([&] { return a_->t().Stats().handshakes_refused == refused0 + 2; }));
  EXPECT_FALSE(a_->Connected(g_));
  EXPECT_EQ(a_->GotFrom(g_), 0u);
  ExpectHonestTraffic("3");
}

TEST(ClientHelloShapeTest, NamesTheFieldThatIsWrong) {
  const base::PrivateKey key = KeyFromByte('k');
  node::p2p::ClientHello h;
  h.set_public_key(key.public_key().bytes());
  h.set_node_id(NodeIdFromPublicKey(key.public_key().bytes()));
  h.set_expected_peer_id(std::string(32, 'a'));
  h.set_nonce(NewHandshakeNonce());
  EXPECT_TRUE(CheckClientHelloShape(h).ok());
  node::p2p::ClientHello bad = h;
  bad.set_public_key("");
  EXPECT_THAT(CheckClientHelloShape(bad).message(),
              HasSubstr("public_key must be 32 bytes, got 0"));
  bad = h;
  bad.set_node_id(std::string(1 << 20, 'a'));
  EXPECT_EQ(CheckClientHelloShape(bad).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(CheckClientHelloShape(bad).message(), HasSubstr("node_id must be 32 lowercase hex"));
  bad = h;
  bad.set_expected_peer_id(std::string(32, 'Z'));
  EXPECT_THAT(CheckClientHelloShape(bad).message(), HasSubstr("expected_peer_id"));
}

}  // namespace
}  // namespace p2p
