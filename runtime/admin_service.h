// AdminServiceImpl: node.admin.AdminService (proto/admin.proto) on top of a runtime::Node.
//
// Every admin call is a quick read or a validated update of in-memory settings, answered inline,
// except the live partition calls (CreatePartition, StopPartition, StartPartition,
// RemovePartition), which open or drain a partition: they run one at a time, in arrival order, on
// the service's own thread, so no gRPC thread waits for a ledger to open or lanes to drain.
// The unary methods are raw callback methods that parse their own request (runtime/raw_call.h):
// an undecodable body gets INVALID_ARGUMENT "request does not parse as ..." (after the token
// check). WatchFlowStats is synchronous. WatchFlowStats holds its handler thread between
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
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/admin.grpc.pb.h"
#include "runtime/raw_call.h"

namespace runtime {

class Node;

// WatchFlowStats interval bounds and default, in milliseconds (proto/admin.proto).
inline constexpr uint32_t kMinWatchIntervalMs = 100;
inline constexpr uint32_t kMaxWatchIntervalMs = 60000;
inline constexpr uint32_t kDefaultWatchIntervalMs = 1000;
// StopPartition's drain_ms: 0 means the default; larger than the maximum is refused.
inline constexpr uint32_t kDefaultStopDrainMs = 5000;
inline constexpr uint32_t kMaxStopDrainMs = 60000;

// True when `supplied` equals `expected`; runs in time that depends only on expected's length.
bool ConstantTimeEquals(absl::string_view supplied, absl::string_view expected);

// The unary AdminService methods as raw (ByteBuffer) callback methods; WatchFlowStats stays
// synchronous.
using RawAdminServiceBase = node::admin::AdminService::WithRawCallbackMethod_GetNodeStatus<
    node::admin::AdminService::WithRawCallbackMethod_ListPartitions<
        node::admin::AdminService::WithRawCallbackMethod_ListPeers<
            node::admin::AdminService::WithRawCallbackMethod_GetFlowStats<
                node::admin::AdminService::WithRawCallbackMethod_UpdatePartitionFlow<
                    node::admin::AdminService::WithRawCallbackMethod_UpdateEgress<
                        node::admin::AdminService::WithRawCallbackMethod_UpdateArbiter<
                            node::admin::AdminService::WithRawCallbackMethod_PausePartition<
                                node::admin::AdminService::WithRawCallbackMethod_ResumePartition<
                                    node::admin::AdminService::WithRawCallbackMethod_CreatePartition<
                                        node::admin::AdminService::
                                            WithRawCallbackMethod_StopPartition<
                                                node::admin::AdminService::
                                                    WithRawCallbackMethod_StartPartition<
                                                        node::admin::AdminService::
                                                            WithRawCallbackMethod_RemovePartition<
                                                                node::admin::AdminService::
                                                                    Service>>>>>>>>>>>>>;

class AdminServiceImpl final : public RawAdminServiceBase {
 public:
  // `node` outlives the service. `token` "" = no auth.
  AdminServiceImpl(Node* node, std::string token);
  ~AdminServiceImpl() override;  // Shutdown()

  // Ends open WatchFlowStats streams (with OK) and refuses new ones; waits for the live partition
  // call that is running to finish, answers those still queued UNAVAILABLE and refuses new ones.
  // Idempotent.
  void Shutdown();

  // The unary methods, on raw bytes (runtime/raw_call.h): a request body that does not parse
  // gets INVALID_ARGUMENT (after the token check) instead of gRPC's bare INTERNAL.
  grpc::ServerUnaryReactor* GetNodeStatus(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListPartitions(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListPeers(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetFlowStats(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UpdatePartitionFlow(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UpdateEgress(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UpdateArbiter(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PausePartition(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ResumePartition(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CreatePartition(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* StopPartition(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* StartPartition(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* RemovePartition(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  // Streams updates; a synchronous method (it holds its thread between updates).
  grpc::Status WatchFlowStats(grpc::ServerContext* context,
                              const node::admin::WatchFlowStatsRequest* request,
                              grpc::ServerWriter<node::admin::FlowStats>* writer) override;

 private:
  // Typed handlers of the unary methods (the token is checked by Serve).
  grpc::Status HandleGetNodeStatus(grpc::ServerContextBase* context,
                                   const node::admin::GetNodeStatusRequest* request,
                                   node::admin::NodeStatus* response);
  grpc::Status HandleListPartitions(grpc::ServerContextBase* context,
                                    const node::admin::ListPartitionsRequest* request,
                                    node::admin::ListPartitionsResponse* response);
  grpc::Status HandleListPeers(grpc::ServerContextBase* context,
                               const node::admin::ListPeersRequest* request,
                               node::admin::ListPeersResponse* response);
  grpc::Status HandleGetFlowStats(grpc::ServerContextBase* context,
                                  const node::admin::GetFlowStatsRequest* request,
                                  node::admin::FlowStats* response);
  grpc::Status HandleUpdatePartitionFlow(grpc::ServerContextBase* context,
                                         const node::admin::UpdatePartitionFlowRequest* request,
                                         node::admin::UpdatePartitionFlowResponse* response);
  grpc::Status HandleUpdateEgress(grpc::ServerContextBase* context,
                                  const node::admin::UpdateEgressRequest* request,
                                  node::admin::UpdateEgressResponse* response);
  grpc::Status HandleUpdateArbiter(grpc::ServerContextBase* context,
                                   const node::admin::UpdateArbiterRequest* request,
                                   node::admin::UpdateArbiterResponse* response);
  grpc::Status HandlePausePartition(grpc::ServerContextBase* context,
                                    const node::admin::PausePartitionRequest* request,
                                    node::admin::PausePartitionResponse* response);
  grpc::Status HandleResumePartition(grpc::ServerContextBase* context,
                                     const node::admin::ResumePartitionRequest* request,
                                     node::admin::ResumePartitionResponse* response);
  grpc::Status HandleCreatePartition(grpc::ServerContextBase* context,
                                     const node::admin::CreatePartitionRequest* request,
                                     node::admin::CreatePartitionResponse* response);
  grpc::Status HandleStopPartition(grpc::ServerContextBase* context,
                                   const node::admin::StopPartitionRequest* request,
                                   node::admin::StopPartitionResponse* response);
  grpc::Status HandleStartPartition(grpc::ServerContextBase* context,
                                    const node::admin::StartPartitionRequest* request,
                                    node::admin::StartPartitionResponse* response);
  grpc::Status HandleRemovePartition(grpc::ServerContextBase* context,
                                     const node::admin::RemovePartitionRequest* request,
                                     node::admin::RemovePartitionResponse* response);

  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* raw_request,
                                  grpc::ByteBuffer* raw_response,
                                  grpc::Status (AdminServiceImpl::*handler)(
                                      grpc::ServerContextBase*, const Request*, Response*));
  // Serve, with the handler run on the live-partition thread (ops_thread_).
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeSlow(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* raw_request,
                                      grpc::ByteBuffer* raw_response,
                                      grpc::Status (AdminServiceImpl::*handler)(
                                          grpc::ServerContextBase*, const Request*, Response*));
  grpc::Status Authorize(const grpc::ServerContextBase* context) const;
  // Checks the token and parses the body; false when `call` was answered (refused).
  template <typename Request, typename Response>
  bool Admit(const grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request,
             RawCall<Request, Response>* call) const;
  void RunOps();

  // A queued live partition call: runs the handler and replies, or (shutting down) replies
  // UNAVAILABLE.
  struct Op {
    absl::AnyInvocable<void()> run;
    absl::AnyInvocable<void()> refuse;
  };

  Node* const node_;
  const std::string expected_authorization_;  // "Bearer <token>", or "" when no token
  std::atomic<bool> shutdown_called_{false};
  absl::Notification shutdown_;

  absl::Mutex ops_mu_;
  std::deque<Op> ops_ ABSL_GUARDED_BY(ops_mu_);
  bool ops_closed_ ABSL_GUARDED_BY(ops_mu_) = false;
  std::thread ops_thread_;  // started with the first live partition call; joined by Shutdown
};

}  // namespace runtime

#endif  // RUNTIME_ADMIN_SERVICE_H_
