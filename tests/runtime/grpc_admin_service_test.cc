// The admin API end to end against a real one-node runtime::Node (tests/runtime/grpc_test_node.h):
// token auth, flow / arbiter / egress updates (good and refused), stats and watch, the client port
// refusing admin methods, reflection on both ports, bind errors and watch-ending shutdown.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "runtime/client_service.h"
#include "runtime/grpc_servers.h"
#include "runtime/node.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(GrpcServicesTest, BadFlowUpdatesAreRefusedWhole) {
  auto admin = Admin();
  auto expect_invalid = [&](const node::admin::UpdatePartitionFlowRequest& req,
                            const std::string& field) {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse resp;
    grpc::Status st = admin->UpdatePartitionFlow(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(st.error_message(), HasSubstr(field));
  };
  node::admin::UpdatePartitionFlowRequest negative_rate;
  negative_rate.set_partition("hot");
  negative_rate.mutable_interceptor()->add_stages()->mutable_rate()->set_rate_per_second(-1);
  expect_invalid(negative_rate, "rate_per_second");

  node::admin::UpdatePartitionFlowRequest no_kind;
  no_kind.set_partition("hot");
  no_kind.mutable_interceptor()->add_stages()->set_name("mystery");
  expect_invalid(no_kind, "stages[0]");

  node::admin::UpdatePartitionFlowRequest bad_weight;
  bad_weight.set_partition("hot");
  bad_weight.mutable_dispatcher()->mutable_lane_weights()->set_consensus(-1);
  expect_invalid(bad_weight, "consensus");

  // Nothing changed: the default chain of "hot" still has its four stages.
  grpc::ClientContext ctx;
  WithToken(&ctx);
  node::admin::ListPartitionsResponse list;
  ASSERT_TRUE(admin->ListPartitions(&ctx, {}, &list).ok());
  ASSERT_EQ(list.configs_size(), 3);
  EXPECT_EQ(list.configs(0).name(), "hot");
  EXPECT_EQ(list.configs(0).interceptor().stages_size(), 4);
  EXPECT_EQ(list.partitions(0).name(), "hot");

  grpc::ClientContext ctx2;
  WithToken(&ctx2);
  node::admin::UpdatePartitionFlowRequest unknown;
  unknown.set_partition("nope");
  node::admin::UpdatePartitionFlowResponse resp;
  EXPECT_EQ(admin->UpdatePartitionFlow(&ctx2, unknown, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServicesTest, ArbiterAndEgressUpdates) {
  auto admin = Admin();
  {
    node::admin::UpdateArbiterRequest req;
    auto* e = req.add_entries();
    e->set_partition("hot");
    e->mutable_share()->set_weight(1);
    e->mutable_share()->set_guarantee_fraction(0.5);
    e->mutable_share()->set_ceiling_fraction(0.2);
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateArbiterResponse resp;
    grpc::Status st = admin->UpdateArbiter(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("ceiling"));
  }
  {
    node::admin::UpdateArbiterRequest req;
    auto* e = req.add_entries();
    e->set_partition("hot");
    e->mutable_share()->set_weight(3);
    e->mutable_share()->set_guarantee_fraction(0.1);
    e->mutable_share()->set_ceiling_fraction(0.9);
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateArbiterResponse resp;
    grpc::Status st = admin->UpdateArbiter(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_GE(resp.effective_size(), 1);
    EXPECT_EQ(resp.effective(0).share().weight(), 3);
  }
  {
    node::admin::UpdateEgressRequest req;
    req.set_set_cap(true);
    req.set_cap_bytes_per_second(10'000'000);
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdateEgressResponse resp;
    grpc::Status st = admin->UpdateEgress(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.egress().cap_bytes_per_second(), 10'000'000);
  }
}

TEST_F(GrpcServicesTest, AdminTokenIsEnforced) {
  auto admin = Admin();
  node::admin::NodeStatus status;
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    grpc::Status st = admin->GetNodeStatus(&ctx, {}, &status);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(st.error_message(), "missing or invalid admin token");
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx, "wrong");
    EXPECT_EQ(admin->GetNodeStatus(&ctx, {}, &status).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx, std::string(kToken) + "x");
    EXPECT_EQ(admin->GetNodeStatus(&ctx, {}, &status).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::ClientContext ctx;
  WithToken(&ctx);
  grpc::Status st = admin->GetNodeStatus(&ctx, {}, &status);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(status.version(), kNodeVersion);
  EXPECT_EQ(status.partitions_size(), 3);
  EXPECT_FALSE(status.node_id().empty());

  grpc::ClientContext ctx2;
  WithToken(&ctx2);
  node::admin::ListPeersResponse peers;
  EXPECT_TRUE(admin->ListPeers(&ctx2, {}, &peers).ok());
  EXPECT_EQ(peers.peers_size(), 0);
}

TEST_F(GrpcServicesTest, ClientPortRefusesAdminMethods) {
  auto on_client_port = node::admin::AdminService::NewStub(*client_channel_);
  grpc::ClientContext ctx;
  WithToken(&ctx);
  node::admin::NodeStatus status;
  EXPECT_EQ(on_client_port->GetNodeStatus(&ctx, {}, &status).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(GrpcServicesTest, FlowStatsAndWatch) {
  auto admin = Admin();
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::GetFlowStatsRequest req;
    req.set_partition("hot");
    node::admin::FlowStats stats;
    ASSERT_TRUE(admin->GetFlowStats(&ctx, req, &stats).ok());
    ASSERT_EQ(stats.partitions_size(), 1);
    EXPECT_EQ(stats.partitions(0).name(), "hot");
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::WatchFlowStatsRequest req;
    req.set_interval_ms(50);
    auto reader = admin->WatchFlowStats(&ctx, req);
    node::admin::FlowStats stats;
    EXPECT_FALSE(reader->Read(&stats));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  grpc::ClientContext ctx;
  WithToken(&ctx);
  node::admin::WatchFlowStatsRequest req;
  req.set_interval_ms(100);
  auto reader = admin->WatchFlowStats(&ctx, req);
  node::admin::FlowStats stats;
  int updates = 0;
  while (updates < 2 && reader->Read(&stats)) ++updates;
  EXPECT_EQ(updates, 2);
  EXPECT_EQ(stats.partitions_size(), 3);
  ctx.TryCancel();
  while (reader->Read(&stats)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// Calls ServerReflection.ServerReflectionInfo with list_services through raw bytes (the
// reflection protos are not installed as headers) and returns the raw response.
std::string ListServicesRaw(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                   grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  grpc::ClientContext ctx;
  WithDeadline(&ctx);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(), method, &ctx));
  // ServerReflectionRequest{list_services (field 7) = ""}.
  grpc::Slice slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer request(&slice, 1);
  std::string out;
  if (stream->Write(request)) {
    stream->WritesDone();
    grpc::ByteBuffer response;
    if (stream->Read(&response)) {
      std::vector<grpc::Slice> slices;
      (void)response.Dump(&slices);
      for (const grpc::Slice& s : slices)
        out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  (void)stream->Finish();
  return out;
}

TEST_F(GrpcServicesTest, ReflectionListsEachPortsService) {
  const std::string client = ListServicesRaw(*client_channel_);
  EXPECT_THAT(client, HasSubstr("node.client.ClientService"));
  EXPECT_THAT(client, Not(HasSubstr("node.admin.AdminService")));
  const std::string admin = ListServicesRaw(*admin_channel_);
  EXPECT_THAT(admin, HasSubstr("node.admin.AdminService"));
  EXPECT_THAT(admin, Not(HasSubstr("node.client.ClientService")));
}

TEST_F(GrpcServicesTest, ExtraServersBindErrorsAndShutdownEndsWatches) {
  node::config::NodeConfig config = node_->config();
  // The node's own client port is taken.
  config.set_client_listen(absl::StrCat("127.0.0.1:", node_->client_port()));
  config.set_admin_listen("127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<GrpcServers>> clash = GrpcServers::Start(node_, config, kToken);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(clash.status().message(), HasSubstr(config.client_listen()));

  config.set_client_listen("127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = GrpcServers::Start(node_, config, kToken);
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_GT((*servers)->admin_port(), 0);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*servers)->admin_port()),
                                     grpc::InsecureChannelCredentials());
  auto admin = node::admin::AdminService::NewStub(channel);
  grpc::ClientContext ctx;
  WithToken(&ctx);
  node::admin::WatchFlowStatsRequest req;
  req.set_interval_ms(60000);
  auto reader = admin->WatchFlowStats(&ctx, req);
  node::admin::FlowStats stats;
  ASSERT_TRUE(reader->Read(&stats));  // the first update comes at once

  const absl::Time start = absl::Now();
  (*servers)->Shutdown(absl::Seconds(2));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the 60 s interval
  EXPECT_FALSE(reader->Read(&stats));
  (void)reader->Finish();
}

}  // namespace
}  // namespace runtime::grpc_test
