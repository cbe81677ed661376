// Optional TLS on the client, admin and p2p ports, with certificates this test makes
// with the openssl CLI (tests/runtime/tls_test_certs.h):
//   - config: a TLS switch without files, an unreadable file, a key that is not the
//     certificate's: each is a config error naming the field and the line;
//   - one node with TLS on the client and admin ports: a TLS client call succeeds; a plaintext
//     client and a client trusting another CA get UNAVAILABLE;
//   - four nodes with mutual TLS between peers (and TLS on the client port) connect, commit the
//     same blocks, and the p2p port refuses a plaintext dialer.
// Waits poll with a bound (real threads and sockets); nothing sleeps to order events.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "proto/p2p.grpc.pb.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "runtime/tls.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/runtime/tls_test_certs.h"

namespace runtime {
namespace {

using ::runtime::testing::ConnectPeers;
using ::runtime::testing::kPortNotYetKnown;
using ::runtime::testing::MakeTestCerts;
using ::runtime::testing::SignedPut;
using ::runtime::testing::TestCerts;
using ::runtime::testing::TestKey;
using ::runtime::testing::WaitFor;
using ::testing::HasSubstr;

NodeOptions NoMetrics() {
  NodeOptions o;
  o.serve_metrics = false;
  return o;
}

std::shared_ptr<grpc::ChannelCredentials> TrustingCa(const std::string& ca_pem) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem;
  return grpc::SslCredentials(o);
}

grpc::Status ChainStatus(int port, std::shared_ptr<grpc::ChannelCredentials> creds) {
  auto stub = node::client::ClientService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), std::move(creds)));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  node::client::GetChainStatusRequest req;
  req.mutable_partition()->set_name("alpha");
  node::client::GetChainStatusResponse resp;
  return stub->GetChainStatus(&ctx, req, &resp);
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(::testing::TempDir() + "/tls_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(*root_);
    certs_ = new TestCerts(MakeTestCerts(*root_ + "/certs"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete certs_;
    delete root_;
  }

  // A node config with TLS files set (switches off) and one partition "alpha".
  static node::config::NodeConfig BaseConfig(const std::string& dir) {
    node::config::NodeConfig c;
    c.set_data_dir(dir + "/data");
    c.set_key_file(dir + "/node.key");
    c.set_client_listen("127.0.0.1:0");
    c.set_admin_listen("127.0.0.1:0");
    c.set_metrics_listen("");
    c.mutable_resources()->set_cpu_workers(1);
    auto* tls = c.mutable_tls();
    tls->set_cert_file(certs_->node_cert_file);
    tls->set_key_file(certs_->node_key_file);
    tls->set_ca_file(certs_->ca_file);
    auto* p = c.add_partitions();
    p->set_id(1);
    p->set_name("alpha");
    p->mutable_consensus()->set_batch_timeout_ms(5);
    p->mutable_consensus()->set_view_change_timeout_ms(3000);
    return c;
  }

  static std::string* root_;
  static TestCerts* certs_;
};

std::string* TlsTest::root_ = nullptr;
TestCerts* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, ConfigErrorsNameTheFieldAndLine) {
  const std::string text = absl::StrCat(
      "partitions { id: 1 name: \"a\" }\n"  // line 1
      "tls {\n"                             // line 2
      "  client: true\n"                    // line 3
      "  cert_file: \"",
      *root_,
      "/missing.crt\"\n"  // line 4
      "}\n");
  absl::StatusOr<node::config::NodeConfig> c = ParseConfig(text, "t.conf", false);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("t.conf:4: tls.cert_file: cannot read "));
  EXPECT_THAT(c.status().message(), HasSubstr("missing.crt"));
  EXPECT_THAT(c.status().message(),
              HasSubstr("t.conf:2: tls.key_file: is required when TLS is on (client)"));

  // p2p needs the CA; a key that is not the certificate's is refused.
  node::config::TlsConfig tls;
  tls.set_p2p(true);
  tls.set_cert_file(certs_->node_cert_file);
  tls.set_key_file(certs_->dir + "/ca.key");
  std::vector<ConfigProblem> problems = ValidateTlsConfig(tls);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].path, "tls.key_file");
  EXPECT_THAT(problems[0].message, HasSubstr("is not the key of the certificate"));
  EXPECT_EQ(problems[1].path, "tls.ca_file");

  // A file with no PEM in it.
  tls.set_key_file(certs_->node_key_file);
  tls.set_ca_file(certs_->dir + "/ext.cnf");
  problems = ValidateTlsConfig(tls);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "tls.ca_file");
  EXPECT_THAT(problems[0].message, HasSubstr("holds no PEM certificate"));

  // Not a regular file (a config naming /dev/zero must not read forever).
  tls.set_ca_file("/dev/zero");
  problems = ValidateTlsConfig(tls);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].path, "tls.ca_file");
  EXPECT_THAT(problems[0].message, HasSubstr("/dev/zero is not a regular file"));

  // Switches off: the files are not even looked at.
  node::config::TlsConfig off;
  off.set_cert_file("/nonexistent");
  EXPECT_TRUE(ValidateTlsConfig(off).empty());
}

TEST_F(TlsTest, ClientAndAdminPortsServeTlsOnly) {
  const std::string dir = *root_ + "/single";
  node::config::NodeConfig c = BaseConfig(dir);
  c.mutable_tls()->set_client(true);
  c.mutable_tls()->set_admin(true);
  ApplyDefaults(&c);
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c, NoMetrics());
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());
  const int port = (*node)->client_port();

  grpc::Status ok = ChainStatus(port, TrustingCa(certs_->ca_pem));
  EXPECT_TRUE(ok.ok()) << ok.error_code() << " " << ok.error_message();

  grpc::Status plain = ChainStatus(port, grpc::InsecureChannelCredentials());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();

  grpc::Status wrong_ca = ChainStatus(port, TrustingCa(certs_->other_ca_pem));
  EXPECT_EQ(wrong_ca.error_code(), grpc::StatusCode::UNAVAILABLE) << wrong_ca.error_message();

  // The admin port too.
  for (bool tls : {true, false}) {
    auto admin = node::admin::AdminService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*node)->admin_port()),
                            tls ? TrustingCa(certs_->ca_pem) : grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    node::admin::NodeStatus status;
    grpc::Status s = admin->GetNodeStatus(&ctx, node::admin::GetNodeStatusRequest(), &status);
    if (tls) {
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(status.node_id(), (*node)->id());
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    }
  }
  (*node)->Stop(absl::Seconds(1));
}

TEST_F(TlsTest, FourNodesWithMutualTlsBetweenPeersCommit) {
  constexpr int kNodes = 4;
  std::vector<std::string> pubs;
  for (int i = 0; i < kNodes; ++i) {
    const std::string dir = absl::StrCat(*root_, "/cluster", i);
    std::filesystem::create_directories(dir);
    base::PrivateKey key = TestKey(static_cast<char>('A' + i));
    ASSERT_TRUE(key.WritePemFile(dir + "/node.key").ok());
    pubs.push_back(absl::BytesToHexString(key.public_key().bytes()));
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    node::config::NodeConfig c = BaseConfig(absl::StrCat(*root_, "/cluster", i));
    c.set_p2p_listen("127.0.0.1:0");
    c.mutable_tls()->set_p2p(true);
    c.mutable_tls()->set_client(true);
    // Every peer presents the one test certificate; check its DNS name rather than the IP.
    c.mutable_tls()->set_peer_server_name("localhost");
    for (int j = 0; j < kNodes; ++j) {
      if (j == i) continue;
      auto* peer = c.add_peers();
      peer->set_address(kPortNotYetKnown);
      peer->set_public_key_hex(pubs[j]);
    }
    ApplyDefaults(&c);
    absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c, NoMetrics());
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    nodes.push_back(*std::move(node));
  }
  ConnectPeers(nodes, pubs);
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& n : nodes) {
      node::admin::NodeStatus s = n->Status();
      if (s.peers_connected() != kNodes - 1) return false;
      for (const auto& p : s.partitions()) {
        if (p.consensus_state() != "NORMAL") return false;
      }
    }
    return true;
  })) << "the TLS cluster did not connect";

  // A tx submitted over TLS to node 2 commits on every node at the same height.
  auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", nodes[2]->client_port()), TrustingCa(certs_->ca_pem)));
  node::client::SubmitTxRequest req;
  req.mutable_partition()->set_name("alpha");
  req.set_signed_tx(SignedPut(1, 'a', 1));
  req.set_wait_for_commit(true);
  req.set_wait_timeout_ms(20000);
  node::client::SubmitTxResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status s = client->SubmitTx(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const uint64_t height = resp.receipt().block_height();
  EXPECT_GT(height, 0u);
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(WaitFor([&] {
      absl::StatusOr<std::shared_ptr<Partition>> p = nodes[i]->FindPartition("alpha");
      return p.ok() && (*p)->GetTx(resp.tx_hash()).ok() &&
             (*p)->GetTx(resp.tx_hash())->receipt().block_height() == height;
    })) << "node "
        << i;
  }

  // A plaintext dialer does not get through the p2p port (not even to the handshake).
  auto peer_stub = node::p2p::PeerService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", nodes[0]->p2p_port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext pctx;
  pctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = peer_stub->Connect(&pctx);
  node::p2p::StreamMessage m;
  m.mutable_client_hello()->set_node_id("stranger");
  stream->Write(m);
  stream->WritesDone();
  grpc::Status ps = stream->Finish();
  EXPECT_EQ(ps.error_code(), grpc::StatusCode::UNAVAILABLE) << ps.error_message();

  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) (*it)->Stop(absl::Seconds(1));
}

}  // namespace
}  // namespace runtime
