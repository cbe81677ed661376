// AdminServiceImpl: node.admin.AdminService (proto/admin.proto) on top of a runtime::Node.
//
// Synchronous gRPC API: every admin call is a quick read or a validated update of in-memory
// settings, so a blocking handler is simplest. WatchFlowStats holds its handler thread between
// updates; it ends when the client cancels (noticed at the next update), when the interval
// elapses after Shutdown() was called (at once: Shutdown wakes it), or on a failed write.
//
// Auth: with a non-empty token every call must carry metadata "authorization: Bearer <token>",
// else UNAUTHENTICATED "missing or invalid admin token". The comparison takes the same time
// whatever the supplied value, so the token cannot be guessed byte by byte from timings.
//
// Errors of the node pass through with their code and message: NOT_FOUND for unknown
// partitions, INVALID_ARGUMENT naming the field for refused updates.
//
// Thread-safety: all methods are thread-safe.
//
//   AdminServiceImpl service(node, "s3cret");
//   builder.RegisterService(&service);
//   ...
//   service.Shutdown();  // before server->Shutdown(): ends open watches
#ifndef RUNTIME_ADMIN_SERVICE_H_
#define RUNTIME_ADMIN_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/admin.grpc.pb.h"

namespace runtime {

class Node;

// WatchFlowStats interval bounds and default, in milliseconds (proto/admin.proto).
inline constexpr uint32_t kMinWatchIntervalMs = 100;
inline constexpr uint32_t kMaxWatchIntervalMs = 60000;
inline constexpr uint32_t kDefaultWatchIntervalMs = 1000;

// True when `supplied` equals `expected`; runs in time that depends only on expected's length.
bool ConstantTimeEquals(absl::string_view supplied, absl::string_view expected);

class AdminServiceImpl final : public node::admin::AdminService::Service {
 public:
  // `node` outlives the service. `token` "" = no auth.
  AdminServiceImpl(Node* node, std::string token);

  // Ends open WatchFlowStats streams (with OK) and refuses new ones. Idempotent.
  void Shutdown();

  grpc::Status GetNodeStatus(grpc::ServerContext* context,
                             const node::admin::GetNodeStatusRequest* request,
                             node::admin::NodeStatus* response) override;
  grpc::Status ListPartitions(grpc::ServerContext* context,
                              const node::admin::ListPartitionsRequest* request,
                              node::admin::ListPartitionsResponse* response) override;
  grpc::Status ListPeers(grpc::ServerContext* context, const node::admin::ListPeersRequest* request,
                         node::admin::ListPeersResponse* response) override;
  grpc::Status GetFlowStats(grpc::ServerContext* context,
                            const node::admin::GetFlowStatsRequest* request,
                            node::admin::FlowStats* response) override;
  grpc::Status WatchFlowStats(grpc::ServerContext* context,
                              const node::admin::WatchFlowStatsRequest* request,
                              grpc::ServerWriter<node::admin::FlowStats>* writer) override;
  grpc::Status UpdatePartitionFlow(grpc::ServerContext* context,
                                   const node::admin::UpdatePartitionFlowRequest* request,
                                   node::admin::UpdatePartitionFlowResponse* response) override;
  grpc::Status UpdateEgress(grpc::ServerContext* context,
                            const node::admin::UpdateEgressRequest* request,
                            node::admin::UpdateEgressResponse* response) override;
  grpc::Status UpdateArbiter(grpc::ServerContext* context,
                             const node::admin::UpdateArbiterRequest* request,
                             node::admin::UpdateArbiterResponse* response) override;
  grpc::Status PausePartition(grpc::ServerContext* context,
                              const node::admin::PausePartitionRequest* request,
                              node::admin::PausePartitionResponse* response) override;
  grpc::Status ResumePartition(grpc::ServerContext* context,
                               const node::admin::ResumePartitionRequest* request,
                               node::admin::ResumePartitionResponse* response) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext* context) const;

  Node* const node_;
  const std::string expected_authorization_;  // "Bearer <token>", or "" when no token
  std::atomic<bool> shutdown_called_{false};
  absl::Notification shutdown_;
};

}  // namespace runtime

#endif  // RUNTIME_ADMIN_SERVICE_H_
