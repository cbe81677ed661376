#include "runtime/admin_service.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/client_service.h"  // ToGrpcStatus
#include "runtime/node.h"
#include "runtime/partition.h"
#include "runtime/raw_call.h"

namespace runtime {

bool ConstantTimeEquals(absl::string_view supplied, absl::string_view expected) {
  // Always walks all of `expected`; a length mismatch is folded into the result, not returned
  // early.
  unsigned char diff = supplied.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char got = i < supplied.size() ? static_cast<unsigned char>(supplied[i]) : 0;
    diff |= got ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

AdminServiceImpl::AdminServiceImpl(Node* node, std::string token)
    : node_(node),
      expected_authorization_(token.empty() ? std::string() : absl::StrCat("Bearer ", token)) {}

AdminServiceImpl::~AdminServiceImpl() { Shutdown(); }

void AdminServiceImpl::Shutdown() {
  if (!shutdown_called_.exchange(true)) shutdown_.Notify();
  {
    absl::MutexLock lock(&ops_mu_);
    ops_closed_ = true;
  }
  if (ops_thread_.joinable()) ops_thread_.join();
}

void AdminServiceImpl::RunOps() {
  for (;;) {
    Op op;
    {
      absl::MutexLock lock(&ops_mu_);
      ops_mu_.Await(absl::Condition(
          +[](AdminServiceImpl* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->ops_mu_) {
            return self->ops_closed_ || !self->ops_.empty();
          },
          this));
      if (ops_.empty()) return;  // closed
      op = std::move(ops_.front());
      ops_.pop_front();
      if (ops_closed_) {
        op.refuse();
        continue;
      }
    }
    op.run();
  }
}

grpc::Status AdminServiceImpl::Authorize(const grpc::ServerContextBase* context) const {
  if (expected_authorization_.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  absl::string_view supplied;
  if (it != metadata.end()) supplied = absl::string_view(it->second.data(), it->second.size());
  if (ConstantTimeEquals(supplied, expected_authorization_)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid admin token");
}

grpc::Status AdminServiceImpl::HandleGetNodeStatus(grpc::ServerContextBase*,
                                                   const node::admin::GetNodeStatusRequest*,
                                                   node::admin::NodeStatus* response) {
  *response = node_->Status();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleListPartitions(grpc::ServerContextBase*,
                                                    const node::admin::ListPartitionsRequest*,
                                                    node::admin::ListPartitionsResponse* response) {
  *response = node_->ListPartitions();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleListPeers(grpc::ServerContextBase*,
                                               const node::admin::ListPeersRequest*,
                                               node::admin::ListPeersResponse* response) {
  *response = node_->Peers();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleGetFlowStats(grpc::ServerContextBase*,
                                                  const node::admin::GetFlowStatsRequest* request,
                                                  node::admin::FlowStats* response) {
  absl::StatusOr<node::admin::FlowStats> stats = node_->FlowStats(request->partition());
  if (!stats.ok()) return ToGrpcStatus(stats.status());
  *response = *std::move(stats);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::WatchFlowStats(grpc::ServerContext* context,
                                              const node::admin::WatchFlowStatsRequest* request,
                                              grpc::ServerWriter<node::admin::FlowStats>* writer) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  uint32_t interval_ms = request->interval_ms();
  if (interval_ms == 0) interval_ms = kDefaultWatchIntervalMs;
  if (interval_ms < kMinWatchIntervalMs || interval_ms > kMaxWatchIntervalMs) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("interval_ms: must be in ", kMinWatchIntervalMs, "..",
                                     kMaxWatchIntervalMs, ", got ", interval_ms));
  }
  const absl::Duration interval = absl::Milliseconds(interval_ms);
  // Bounded by the client (cancel), the server (Shutdown) and a failed write; the wait between
  // updates wakes at once on Shutdown.
  while (!shutdown_.HasBeenNotified() && !context->IsCancelled()) {
    absl::StatusOr<node::admin::FlowStats> stats = node_->FlowStats(request->partition());
    if (!stats.ok()) return ToGrpcStatus(stats.status());  // e.g. NOT_FOUND on the first one
    if (!writer->Write(*stats)) break;                     // the client went away
    if (shutdown_.WaitForNotificationWithTimeout(interval)) break;
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleUpdatePartitionFlow(
    grpc::ServerContextBase*, const node::admin::UpdatePartitionFlowRequest* request,
    node::admin::UpdatePartitionFlowResponse* response) {
  absl::StatusOr<std::shared_ptr<Partition>> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  absl::StatusOr<node::config::PartitionConfig> effective = (*partition)->UpdateFlow(*request);
  if (!effective.ok()) return ToGrpcStatus(effective.status());
  *response->mutable_effective() = *std::move(effective);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleUpdateEgress(grpc::ServerContextBase*,
                                                  const node::admin::UpdateEgressRequest* request,
                                                  node::admin::UpdateEgressResponse* response) {
  absl::StatusOr<node::admin::EgressStats> egress = node_->UpdateEgress(*request);
  if (!egress.ok()) return ToGrpcStatus(egress.status());
  *response->mutable_egress() = *std::move(egress);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleUpdateArbiter(grpc::ServerContextBase*,
                                                   const node::admin::UpdateArbiterRequest* request,
                                                   node::admin::UpdateArbiterResponse* response) {
  absl::StatusOr<std::vector<node::config::PartitionConfig>> effective =
      node_->UpdateArbiter(*request);
  if (!effective.ok()) return ToGrpcStatus(effective.status());
  for (node::config::PartitionConfig& config : *effective) {
    *response->add_effective() = std::move(config);
  }
  response->set_cpu_workers(static_cast<uint32_t>(node_->cpu_workers()));
  response->set_consensus_blocks_per_second(node_->consensus_blocks_per_second_ceiling());
  const node::admin::LedgerMemoryStatus lm = node_->LedgerMemory();
  response->set_ledger_write_buffer_bytes(lm.write_buffer_budget_bytes());
  response->set_ledger_write_buffer_per_partition_bytes(lm.write_buffer_per_partition_bytes());
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandlePausePartition(
    grpc::ServerContextBase*, const node::admin::PausePartitionRequest* request,
    node::admin::PausePartitionResponse*) {
  absl::StatusOr<std::shared_ptr<Partition>> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  (*partition)->Pause();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleResumePartition(
    grpc::ServerContextBase*, const node::admin::ResumePartitionRequest* request,
    node::admin::ResumePartitionResponse*) {
  absl::StatusOr<std::shared_ptr<Partition>> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  (*partition)->Resume();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleCreatePartition(
    grpc::ServerContextBase*, const node::admin::CreatePartitionRequest* request,
    node::admin::CreatePartitionResponse* response) {
  if (!request->has_config()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "config: required (a partitions { ... } block of the config file)");
  }
  absl::StatusOr<node::admin::CreatePartitionResponse> created =
      node_->CreatePartition(request->config());
  if (!created.ok()) return ToGrpcStatus(created.status());
  *response = *std::move(created);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleStopPartition(grpc::ServerContextBase*,
                                                   const node::admin::StopPartitionRequest* request,
                                                   node::admin::StopPartitionResponse* response) {
  if (request->drain_ms() > kMaxStopDrainMs) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("drain_ms: must be <= ", kMaxStopDrainMs, ", got ", request->drain_ms()));
  }
  const uint32_t drain_ms = request->drain_ms() == 0 ? kDefaultStopDrainMs : request->drain_ms();
  absl::StatusOr<node::admin::PartitionStatus> status =
      node_->StopPartition(request->partition(), absl::Milliseconds(drain_ms));
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response->mutable_status() = *std::move(status);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleStartPartition(
    grpc::ServerContextBase*, const node::admin::StartPartitionRequest* request,
    node::admin::StartPartitionResponse* response) {
  absl::StatusOr<node::admin::PartitionStatus> status = node_->StartPartition(request->partition());
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response->mutable_status() = *std::move(status);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::HandleRemovePartition(
    grpc::ServerContextBase*, const node::admin::RemovePartitionRequest* request,
    node::admin::RemovePartitionResponse* response) {
  absl::StatusOr<node::admin::RemovePartitionResponse> removed =
      node_->RemovePartition(request->partition(), request->delete_data());
  if (!removed.ok()) return ToGrpcStatus(removed.status());
  *response = *std::move(removed);
  return grpc::Status::OK;
}

template <typename Request, typename Response>
bool AdminServiceImpl::Admit(const grpc::CallbackServerContext* context,
                             const grpc::ByteBuffer* raw_request,
                             RawCall<Request, Response>* call) const {
  // The token first: a caller without it learns nothing, not even how its body parses.
  if (grpc::Status s = Authorize(context); !s.ok()) {
    call->Reply(s);
    return false;
  }
  return call->Parse(raw_request);
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminServiceImpl::ServeSlow(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request,
    grpc::ByteBuffer* raw_response,
    grpc::Status (AdminServiceImpl::*handler)(grpc::ServerContextBase*, const Request*,
                                              Response*)) {
  auto* call = new RawCall<Request, Response>(raw_response);
  if (!Admit(context, raw_request, call)) return call;
  absl::MutexLock lock(&ops_mu_);
  if (ops_closed_) {
    call->Reply(grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
    return call;
  }
  ops_.push_back({.run =
                      [this, call, context, handler] {
                        // A caller that gave up while the call waited its turn (e.g. behind a
                        // long drain) gets no change it no longer expects; its retry runs.
                        if (context->IsCancelled()) {
                          call->Reply(grpc::Status(grpc::StatusCode::CANCELLED,
                                                   "the caller gave up before the call ran; "
                                                   "nothing was done"));
                          return;
                        }
                        call->Reply((this->*handler)(context, &call->request, &call->response));
                      },
                  .refuse =
                      [call] {
                        call->Reply(
                            grpc::Status(grpc::StatusCode::UNAVAILABLE, "node is shutting down"));
                      }});
  if (!ops_thread_.joinable()) ops_thread_ = std::thread([this] { RunOps(); });
  return call;
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminServiceImpl::Serve(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request,
    grpc::ByteBuffer* raw_response,
    grpc::Status (AdminServiceImpl::*handler)(grpc::ServerContextBase*, const Request*,
                                              Response*)) {
  auto* call = new RawCall<Request, Response>(raw_response);
  if (!Admit(context, raw_request, call)) return call;
  call->Reply((this->*handler)(context, &call->request, &call->response));
  return call;
}

// Raw callback methods (runtime/raw_call.h): authorize, parse, run the typed handler inline.
grpc::ServerUnaryReactor* AdminServiceImpl::GetNodeStatus(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleGetNodeStatus);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListPartitions(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleListPartitions);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListPeers(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleListPeers);
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetFlowStats(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleGetFlowStats);
}

grpc::ServerUnaryReactor* AdminServiceImpl::UpdatePartitionFlow(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleUpdatePartitionFlow);
}

grpc::ServerUnaryReactor* AdminServiceImpl::UpdateEgress(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleUpdateEgress);
}

grpc::ServerUnaryReactor* AdminServiceImpl::UpdateArbiter(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleUpdateArbiter);
}

grpc::ServerUnaryReactor* AdminServiceImpl::PausePartition(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandlePausePartition);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ResumePartition(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return Serve(context, request, response, &AdminServiceImpl::HandleResumePartition);
}

grpc::ServerUnaryReactor* AdminServiceImpl::CreatePartition(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return ServeSlow(context, request, response, &AdminServiceImpl::HandleCreatePartition);
}

grpc::ServerUnaryReactor* AdminServiceImpl::StopPartition(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return ServeSlow(context, request, response, &AdminServiceImpl::HandleStopPartition);
}

grpc::ServerUnaryReactor* AdminServiceImpl::StartPartition(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return ServeSlow(context, request, response, &AdminServiceImpl::HandleStartPartition);
}

grpc::ServerUnaryReactor* AdminServiceImpl::RemovePartition(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return ServeSlow(context, request, response, &AdminServiceImpl::HandleRemovePartition);
}

}  // namespace runtime
