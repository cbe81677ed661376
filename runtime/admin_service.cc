#include "runtime/admin_service.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/client_service.h"  // ToGrpcStatus
#include "runtime/node.h"
#include "runtime/partition.h"

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

void AdminServiceImpl::Shutdown() {
  if (!shutdown_called_.exchange(true)) shutdown_.Notify();
}

grpc::Status AdminServiceImpl::Authorize(const grpc::ServerContext* context) const {
  if (expected_authorization_.empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  absl::string_view supplied;
  if (it != metadata.end()) supplied = absl::string_view(it->second.data(), it->second.size());
  if (ConstantTimeEquals(supplied, expected_authorization_)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid admin token");
}

grpc::Status AdminServiceImpl::GetNodeStatus(grpc::ServerContext* context,
                                             const node::admin::GetNodeStatusRequest*,
                                             node::admin::NodeStatus* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  *response = node_->Status();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListPartitions(grpc::ServerContext* context,
                                              const node::admin::ListPartitionsRequest*,
                                              node::admin::ListPartitionsResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  for (const Partition* partition : node_->partitions()) {
    *response->add_partitions() = partition->Status();
    *response->add_configs() = partition->config();
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ListPeers(grpc::ServerContext* context,
                                         const node::admin::ListPeersRequest*,
                                         node::admin::ListPeersResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  *response = node_->Peers();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::GetFlowStats(grpc::ServerContext* context,
                                            const node::admin::GetFlowStatsRequest* request,
                                            node::admin::FlowStats* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
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

grpc::Status AdminServiceImpl::UpdatePartitionFlow(
    grpc::ServerContext* context, const node::admin::UpdatePartitionFlowRequest* request,
    node::admin::UpdatePartitionFlowResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::StatusOr<Partition*> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  absl::StatusOr<node::config::PartitionConfig> effective = (*partition)->UpdateFlow(*request);
  if (!effective.ok()) return ToGrpcStatus(effective.status());
  *response->mutable_effective() = *std::move(effective);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::UpdateEgress(grpc::ServerContext* context,
                                            const node::admin::UpdateEgressRequest* request,
                                            node::admin::UpdateEgressResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::StatusOr<node::admin::EgressStats> egress = node_->UpdateEgress(*request);
  if (!egress.ok()) return ToGrpcStatus(egress.status());
  *response->mutable_egress() = *std::move(egress);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::UpdateArbiter(grpc::ServerContext* context,
                                             const node::admin::UpdateArbiterRequest* request,
                                             node::admin::UpdateArbiterResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::StatusOr<std::vector<node::config::PartitionConfig>> effective =
      node_->UpdateArbiter(*request);
  if (!effective.ok()) return ToGrpcStatus(effective.status());
  for (node::config::PartitionConfig& config : *effective) {
    *response->add_effective() = std::move(config);
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::PausePartition(grpc::ServerContext* context,
                                              const node::admin::PausePartitionRequest* request,
                                              node::admin::PausePartitionResponse*) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::StatusOr<Partition*> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  (*partition)->Pause();
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::ResumePartition(grpc::ServerContext* context,
                                               const node::admin::ResumePartitionRequest* request,
                                               node::admin::ResumePartitionResponse*) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::StatusOr<Partition*> partition = node_->FindPartition(request->partition());
  if (!partition.ok()) return ToGrpcStatus(partition.status());
  (*partition)->Resume();
  return grpc::Status::OK;
}

}  // namespace runtime
