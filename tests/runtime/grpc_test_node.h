// Shared fixture of the gRPC service tests: a real one-node runtime::Node (three partitions,
// ports on 127.0.0.1:0, an admin token) started once per test binary, plus stubs and helpers.
//
// One node is shared by a suite (starting one costs a ledger per partition); tests that change a
// partition use their own: "hot" for plain submits and queries, "steady" for flow updates and
// rate limiting, "cold" for pause / resume.
//
//   TEST_F(GrpcServicesTest, X) { auto client = Client(); ... }
#ifndef TESTS_RUNTIME_GRPC_TEST_NODE_H_
#define TESTS_RUNTIME_GRPC_TEST_NODE_H_

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "runtime/client_service.h"
#include "runtime/config.h"
#include "runtime/grpc_servers.h"
#include "runtime/node.h"

namespace runtime::grpc_test {

inline constexpr char kToken[] = "s3cret-admin-token";

inline std::string TempDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline node::config::NodeConfig OneNodeConfig(const std::string& dir) {
  node::config::NodeConfig config;
  config.set_data_dir(dir + "/data");
  config.set_key_file(dir + "/node.key");
  config.set_p2p_listen("127.0.0.1:0");
  config.set_client_listen("127.0.0.1:0");
  config.set_admin_listen("127.0.0.1:0");
  config.set_metrics_listen("");
  config.set_admin_token_file(dir + "/admin.token");
  std::ofstream(dir + "/admin.token") << kToken << "\n";
  config.mutable_resources()->set_cpu_workers(2);
  const char* names[] = {"hot", "steady", "cold"};
  for (uint32_t id = 1; id <= 3; ++id) {
    auto* p = config.add_partitions();
    p->set_id(id);
    p->set_name(names[id - 1]);
    p->mutable_consensus()->set_batch_timeout_ms(5);
  }
  ApplyDefaults(&config);
  return config;
}

// A signed Put from the account of `seed_byte`.
inline std::string SignedPut(uint32_t partition, char seed_byte, uint64_t nonce,
                             const std::string& key) {
  absl::StatusOr<base::PrivateKey> priv = base::PrivateKey::FromSeed(std::string(32, seed_byte));
  CHECK(priv.ok()) << priv.status();
  node::chain::Transaction tx;
  tx.set_partition(partition);
  tx.set_nonce(nonce);
  tx.mutable_put()->set_key(key);
  tx.mutable_put()->set_value("v");
  return base::SignTx(std::move(tx), *priv);
}

inline std::string Address(char seed_byte) {
  return base::PrivateKey::FromSeed(std::string(32, seed_byte))->public_key().bytes();
}

inline node::client::PartitionRef Ref(const std::string& name) {
  node::client::PartitionRef ref;
  ref.set_name(name);
  return ref;
}

inline std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  auto it = ctx.GetServerTrailingMetadata().find(key);
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

inline void WithDeadline(grpc::ClientContext* ctx, absl::Duration d = absl::Seconds(20)) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

inline void WithToken(grpc::ClientContext* ctx, const std::string& token = kToken) {
  WithDeadline(ctx);
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

// Submits `signed_tx` to `partition` and waits for its commit (15 s at most).
inline grpc::Status SubmitForCommit(node::client::ClientService::Stub* client,
                                    const std::string& partition, std::string signed_tx) {
  node::client::SubmitTxRequest request;
  *request.mutable_partition() = Ref(partition);
  request.set_signed_tx(std::move(signed_tx));
  request.set_wait_for_commit(true);
  request.set_wait_timeout_ms(15000);
  grpc::ClientContext ctx;
  WithDeadline(&ctx);
  node::client::SubmitTxResponse response;
  return client->SubmitTx(&ctx, request, &response);
}

class GrpcServicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir("grpc_services_test"));
    NodeOptions options;
    options.serve_metrics = false;
    absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(OneNodeConfig(*dir_), options);
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    node_ = node->release();
    auto client = grpc::CreateChannel(absl::StrCat("127.0.0.1:", node_->client_port()),
                                      grpc::InsecureChannelCredentials());
    auto admin = grpc::CreateChannel(absl::StrCat("127.0.0.1:", node_->admin_port()),
                                     grpc::InsecureChannelCredentials());
    client_channel_ = new std::shared_ptr<grpc::Channel>(client);
    admin_channel_ = new std::shared_ptr<grpc::Channel>(admin);
  }
  static void TearDownTestSuite() {
    if (node_ != nullptr) node_->Stop(absl::Seconds(2));
    delete node_;
    node_ = nullptr;
    delete client_channel_;
    delete admin_channel_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(node_, nullptr); }

  std::unique_ptr<node::client::ClientService::Stub> Client() {
    return node::client::ClientService::NewStub(*client_channel_);
  }
  std::unique_ptr<node::admin::AdminService::Stub> Admin() {
    return node::admin::AdminService::NewStub(*admin_channel_);
  }

  grpc::Status Submit(const std::string& partition, std::string tx, bool wait,
                      node::client::SubmitTxResponse* response, grpc::ClientContext* ctx) {
    node::client::SubmitTxRequest request;
    *request.mutable_partition() = Ref(partition);
    request.set_signed_tx(std::move(tx));
    request.set_wait_for_commit(wait);
    request.set_wait_timeout_ms(15000);
    WithDeadline(ctx);
    return Client()->SubmitTx(ctx, request, response);
  }

  static inline std::string* dir_ = nullptr;
  static inline Node* node_ = nullptr;
  static inline std::shared_ptr<grpc::Channel>* client_channel_ = nullptr;
  static inline std::shared_ptr<grpc::Channel>* admin_channel_ = nullptr;
};

}  // namespace runtime::grpc_test

#endif  // TESTS_RUNTIME_GRPC_TEST_NODE_H_
