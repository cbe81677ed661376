// A transaction the chain refused for a nonce gap (REJECTED: a view change can put it in a block
// before its predecessor) is not settled. Forwarded again once its nonce is next, a replica must
// verify and pool it, or only the replica its client reached would ever hold it (and that
// replica's request timer would force view change after view change); while pooled, GetTx
// answers PENDING, not the old refusal.
//
// One node of four on the in-memory network, its ledger seeded with the refusal before it starts;
// a peer (whose key the test holds) forwards the tx; the other two stay silent, so nothing commits.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "base/transaction.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "partitions/commit_pipeline.h"
#include "partitions/executor.h"
#include "partitions/ledger.h"
#include "proto/partition.pb.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "tests/mocks/fake_clock.h"
#include "tests/partitions/chain_test_util.h"
#include "tests/runtime/in_memory_node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

partitions::TxPtr Decoded(const std::string& signed_bytes) {
  absl::StatusOr<base::DecodedTx> tx =
      base::DecodeSignedTx(signed_bytes, base::TxLimits{.partition = 1});
  CHECK(tx.ok()) << tx.status();
  return std::make_shared<const base::DecodedTx>(*std::move(tx));
}

TEST(RefusedTxTest, ATxRefusedForANonceGapIsPooledAgainWhenForwardedAndReadsPending) {
  const std::string dir = ::testing::TempDir() + "/refused_tx_test_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string first = testing::SignedPut(1, 'a', 1);
  const std::string second = testing::SignedPut(1, 'a', 2);
  const partitions::TxPtr second_tx = Decoded(second);
  {
    // Height 1 refuses `second` (its nonce is not next), height 2 commits `first`.
    absl::StatusOr<partitions::Chain> chain = partitions::OpenChain(
        dir + "/data/partition-1/ledger", 1, node::chain::GenesisConfig(), {});
    ASSERT_TRUE(chain.ok()) << chain.status();
    const partitions::ConsensusMetaWrites meta = {
        {partitions::kChainDigestKey, std::string(32, 'c')}};
    ASSERT_TRUE(chaintest::CommitTxs(*chain, {second_tx}, meta).ok());
    ASSERT_TRUE(chaintest::CommitTxs(*chain, {Decoded(first)}, meta).ok());
    absl::StatusOr<node::chain::Receipt> refused = chain->ledger->GetReceipt(second_tx->hash);
    ASSERT_TRUE(refused.ok()) << refused.status();
    ASSERT_EQ(refused->status(), node::chain::Receipt::REJECTED);
  }

  const base::PrivateKey key = testing::TestKey('n');
  ASSERT_TRUE(key.WritePemFile(dir + "/node.key").ok());
  const p2p::NodeId id = p2p::NodeIdFromPublicKey(key.public_key().bytes());
  const std::vector<base::PrivateKey> peer_keys = {testing::TestKey('b'), testing::TestKey('c'),
                                                   testing::TestKey('d')};
  tests::FakeClock clock;
  p2p::InMemoryHub hub(&clock);
  std::unique_ptr<p2p::InMemoryNetwork> net = hub.AddNode(id);
  std::vector<std::unique_ptr<p2p::InMemoryNetwork>> peers;
  node::config::NodeConfig config = testing::InMemoryNodeConfig(dir);
  for (const base::PrivateKey& k : peer_keys) {
    peers.push_back(hub.AddNode(p2p::NodeIdFromPublicKey(k.public_key().bytes())));
    auto* pc = config.add_peers();
    pc->set_public_key_hex(absl::BytesToHexString(k.public_key().bytes()));
    pc->set_address(testing::kPortNotYetKnown);
  }
  absl::StatusOr<std::unique_ptr<Node>> created =
      testing::CreateInMemoryNode(config, net.get(), &clock);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Node> n = *std::move(created);
  ASSERT_TRUE(n->Start().ok());
  absl::StatusOr<std::shared_ptr<Partition>> part = n->FindPartition("one");
  ASSERT_TRUE(part.ok()) << part.status();

  absl::StatusOr<node::client::GetTxResponse> got = (*part)->GetTx(second_tx->hash);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), node::client::GetTxResponse::COMMITTED);
  EXPECT_EQ(got->receipt().status(), node::chain::Receipt::REJECTED);

  node::partition::PartitionMessage batch;
  batch.mutable_txs()->add_signed_txs(second);
  ASSERT_TRUE(peers[0]->Send(id, 1, node::p2p::TX_FORWARD, batch.SerializeAsString()).ok());
  hub.DeliverAll();
  // The tx_forward lane runs on the worker; the poll only bounds the wait.
  EXPECT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<node::client::GetTxResponse> now = (*part)->GetTx(second_tx->hash);
    return now.ok() && now->state() == node::client::GetTxResponse::PENDING;
  })) << "GetTx never answered PENDING: the forwarded tx was not pooled again, or the old refusal "
         "answered";
  got = (*part)->GetTx(second_tx->hash);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), node::client::GetTxResponse::PENDING);
  EXPECT_EQ(got->signed_tx(), second);
  absl::StatusOr<node::admin::FlowStats> flow = n->FlowStats("one");
  ASSERT_TRUE(flow.ok()) << flow.status();
  EXPECT_EQ(flow->partitions(0).peer_refused_bad_tx(), 0u);

  n->Stop(absl::ZeroDuration());
  n.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace runtime
