// Per-peer refusal counts: the class, and a node on the in-memory network that a misbehaving
// peer (a second hub node holding a replica's key) sends one message of each bad kind.
#include "runtime/peer_refusals.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "proto/partition.pb.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "tests/mocks/fake_clock.h"
#include "tests/runtime/in_memory_node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

TEST(PeerRefusalsTest, CountsPerPeerAndReasonAndIgnoresUnknownPeers) {
  PeerRefusals r({"aa", "bb"});
  r.Count("aa", PeerRefusals::kBadSignature);
  r.Count("aa", PeerRefusals::kBadSignature, 4);
  r.Count("bb", PeerRefusals::kMalformed);
  r.Count("zz", PeerRefusals::kMalformed);  // not a configured peer: ignored
  EXPECT_EQ(r.count("aa", PeerRefusals::kBadSignature), 5u);
  EXPECT_EQ(r.count("aa", PeerRefusals::kMalformed), 0u);
  EXPECT_EQ(r.count("bb", PeerRefusals::kMalformed), 1u);
  EXPECT_EQ(r.count("zz", PeerRefusals::kMalformed), 0u);
  EXPECT_STREQ(PeerRefusals::ReasonName(PeerRefusals::kUnknownPartition), "unknown_partition");
  EXPECT_STREQ(PeerRefusals::ReasonName(PeerRefusals::kBadTx), "bad_tx");
}

std::string Wire(const node::partition::PartitionMessage& m) { return m.SerializeAsString(); }

TEST(PeerRefusalsNodeTest, AMisbehavingPeerIsNamedWithWhatItSent) {
  const std::string dir = ::testing::TempDir() + "/peer_refusals_test_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const base::PrivateKey key = testing::TestKey('n');
  const base::PrivateKey bad_key = testing::TestKey('b');
  ASSERT_TRUE(key.WritePemFile(dir + "/node.key").ok());
  const p2p::NodeId id = p2p::NodeIdFromPublicKey(key.public_key().bytes());
  const p2p::NodeId bad = p2p::NodeIdFromPublicKey(bad_key.public_key().bytes());
  // Four replicas (n = 3f+1): this node, the bad one, and two that stay silent. Replica indices
  // are the ids' sorted positions.
  std::vector<base::PrivateKey> peer_keys = {bad_key, testing::TestKey('c'), testing::TestKey('d')};
  std::vector<p2p::NodeId> ids = {id};
  for (const base::PrivateKey& k : peer_keys) {
    ids.push_back(p2p::NodeIdFromPublicKey(k.public_key().bytes()));
  }
  std::sort(ids.begin(), ids.end());
  const auto index_of = [&](const p2p::NodeId& x) {
    return static_cast<uint32_t>(std::find(ids.begin(), ids.end(), x) - ids.begin());
  };
  const uint32_t bad_index = index_of(bad);
  const uint32_t own_index = index_of(id);

  tests::FakeClock clock;
  p2p::InMemoryHub hub(&clock);
  std::unique_ptr<p2p::InMemoryNetwork> net = hub.AddNode(id);
  std::unique_ptr<p2p::InMemoryNetwork> peer = hub.AddNode(bad);
  std::unique_ptr<p2p::InMemoryNetwork> silent1 =
      hub.AddNode(p2p::NodeIdFromPublicKey(peer_keys[1].public_key().bytes()));
  std::unique_ptr<p2p::InMemoryNetwork> silent2 =
      hub.AddNode(p2p::NodeIdFromPublicKey(peer_keys[2].public_key().bytes()));

  node::config::NodeConfig config = testing::InMemoryNodeConfig(dir);
  for (const base::PrivateKey& k : peer_keys) {
    auto* pc = config.add_peers();
    pc->set_public_key_hex(absl::BytesToHexString(k.public_key().bytes()));
    pc->set_address(testing::kPortNotYetKnown);
  }
  absl::StatusOr<std::unique_ptr<Node>> created =
      testing::CreateInMemoryNode(config, net.get(), &clock);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Node> n = *std::move(created);
  const absl::Status started = n->Start();
  ASSERT_TRUE(started.ok()) << started;

  // 1. Two messages for a partition the node does not run.
  ASSERT_TRUE(peer->Send(id, 99, node::p2p::CONSENSUS, "x").ok());
  ASSERT_TRUE(peer->Send(id, 98, node::p2p::SYNC, "y").ok());
  // 2. Bytes that are no PartitionMessage.
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::CONSENSUS, std::string("\xff\xff\xff", 3)).ok());
  // 3. A prepare under its own index with a signature that is not one, and one claiming to come
  //    from the node itself (the connection says otherwise).
  node::partition::PartitionMessage vote;
  vote.mutable_consensus()->set_sender(bad_index);
  vote.mutable_consensus()->set_signature(std::string(64, '\0'));
  vote.mutable_consensus()->mutable_prepare()->set_view(0);
  vote.mutable_consensus()->mutable_prepare()->set_seq(1);
  vote.mutable_consensus()->mutable_prepare()->set_digest(std::string(32, 'd'));
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::CONSENSUS, Wire(vote)).ok());
  vote.mutable_consensus()->set_sender(own_index);
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::CONSENSUS, Wire(vote)).ok());
  // 4. A consensus message on the tx-forwarding channel, which carries tx batches only.
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::TX_FORWARD, Wire(vote)).ok());
  // 5. A forwarded batch: one good tx, two whose signatures were tampered with.
  node::partition::PartitionMessage batch;
  batch.mutable_txs()->add_signed_txs(testing::SignedPut(1, 'a', 1));
  for (uint64_t nonce : {1, 2}) {
    std::string tampered = testing::SignedPut(1, 'c', nonce);
    tampered.back() = static_cast<char>(tampered.back() ^ 1);  // the signature's last byte
    batch.mutable_txs()->add_signed_txs(std::move(tampered));
  }
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::TX_FORWARD, Wire(batch)).ok());
  // 6. A node-wide admission cut just above 1 (malformed; exactly 1 is not), and a valid one on
  //    TX_FORWARD.
  node::partition::PartitionMessage cut;
  cut.mutable_admission()->set_admit_ppm(1'000'001);
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::CONSENSUS, Wire(cut)).ok());
  cut.mutable_admission()->set_admit_ppm(1'000'000);
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::CONSENSUS, Wire(cut)).ok());
  cut.mutable_admission()->set_admit_ppm(500'000);
  ASSERT_TRUE(peer->Send(id, 1, node::p2p::TX_FORWARD, Wire(cut)).ok());
  hub.DeliverAll();

  const auto refused = [&](const p2p::NodeId& who) {
    const node::admin::ListPeersResponse peers = n->Peers();
    for (const node::admin::PeerInfo& info : peers.peers()) {
      if (info.node_id() == who) return info.refused();
    }
    return node::admin::PeerRefusals();
  };
  const auto total = [&] {
    const node::admin::PeerRefusals r = refused(bad);
    return r.unknown_partition() + r.malformed() + r.wrong_channel() + r.bad_signature() +
           r.bad_tx();
  };
  // The lanes run on the worker; the poll only bounds the wait.
  EXPECT_TRUE(testing::WaitFor([&] { return total() >= 10; })) << refused(bad).DebugString();
  const node::admin::PeerRefusals r = refused(bad);
  ASSERT_EQ(n->Peers().peers_size(), 3);
  EXPECT_EQ(r.unknown_partition(), 2u);
  EXPECT_EQ(r.malformed(), 2u);
  EXPECT_EQ(r.bad_signature(), 2u);
  EXPECT_EQ(r.wrong_channel(), 2u);
  EXPECT_EQ(r.bad_tx(), 2u);
  // The silent peers are charged with nothing.
  for (const base::PrivateKey& k : {peer_keys[1], peer_keys[2]}) {
    const node::admin::PeerRefusals other =
        refused(p2p::NodeIdFromPublicKey(k.public_key().bytes()));
    EXPECT_EQ(other.ByteSizeLong(), 0u) << other.DebugString();
  }
  // The partition's own totals agree.
  absl::StatusOr<node::admin::FlowStats> flow = n->FlowStats("one");
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow->partitions(0).peer_refused_bad_signature(), 2u);
  EXPECT_EQ(flow->partitions(0).peer_refused_bad_tx(), 2u);

  n->Stop(absl::ZeroDuration());
  n.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace runtime
