// GrpcServers: the node's two gRPC servers and their services.
//
//   client server  config.client_listen  node.client.ClientService only (ClientServiceImpl,
//                                        callback API), max receive message 16 MiB
//   admin server   config.admin_listen   node.admin.AdminService only (AdminServiceImpl, token
//                                        auth), max receive message 4 MiB
// Either port serves TLS instead of plaintext when config.tls.client / config.tls.admin is on
// (runtime/tls.h; server certificate only, a plaintext client then fails with UNAVAILABLE).
// Both also serve gRPC server reflection, so grpcurl & co. can list and call them. Because each
// server registers one service, the client port answers UNIMPLEMENTED to admin methods. Every call
// on either server is timed and counted by rpc_metrics() (runtime/rpc_metrics.h).
//
// Shutdown(drain): open admin watches and client commit streams (WatchCommits, with UNAVAILABLE
// and the height to resume from) end at once; both servers stop accepting calls; in-flight
// calls may finish until `drain` has passed; client calls still waiting for a partition then (e.g.
// wait_for_commit) are finished with UNAVAILABLE "server shutting down", so Shutdown returns by
// about `drain` even when partitions are stuck.
//
// Thread-safety: client_port/admin_port are constant; Shutdown may be called from any thread,
// more than once (later calls return at once).
//
//   ASSIGN_OR_RETURN(servers_, GrpcServers::Start(this, config_, admin_token_));
//   client_port_ = servers_->client_port();
//   ...
//   servers_->Shutdown(absl::Seconds(5));
#ifndef RUNTIME_GRPC_SERVERS_H_
#define RUNTIME_GRPC_SERVERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "proto/config.pb.h"
#include "runtime/rpc_metrics.h"

namespace runtime {

class Node;
class ClientServiceImpl;
class AdminServiceImpl;

inline constexpr int kClientMaxReceiveBytes = 16 << 20;
inline constexpr int kAdminMaxReceiveBytes = 4 << 20;

class GrpcServers {
 public:
  // Binds and starts both servers. Unavailable naming the API and the address when a port
  // cannot be bound (port 0 picks a free port; see client_port()). `node` outlives this object.
  static absl::StatusOr<std::unique_ptr<GrpcServers>> Start(Node* node,
                                                            const node::config::NodeConfig& config,
                                                            std::string admin_token);
  ~GrpcServers();  // Shutdown(0) if not done
  GrpcServers(const GrpcServers&) = delete;
  GrpcServers& operator=(const GrpcServers&) = delete;

  int client_port() const { return client_port_; }
  int admin_port() const { return admin_port_; }
  const RpcMetrics& rpc_metrics() const { return *rpc_metrics_; }

  void Shutdown(absl::Duration drain);

 private:
  GrpcServers() = default;

  // Before the servers: their interceptors record into it until they are destroyed.
  std::unique_ptr<RpcMetrics> rpc_metrics_;
  std::unique_ptr<ClientServiceImpl> client_service_;
  std::unique_ptr<AdminServiceImpl> admin_service_;
  // Answer methods a port does not serve (one per server: gRPC allows no sharing); declared
  // before the servers so they outlive them.
  std::unique_ptr<grpc::CallbackGenericService> client_unknown_methods_;
  std::unique_ptr<grpc::CallbackGenericService> admin_unknown_methods_;
  std::unique_ptr<grpc::Server> client_server_;
  std::unique_ptr<grpc::Server> admin_server_;
  int client_port_ = 0;
  int admin_port_ = 0;

  absl::Mutex shutdown_mu_;  // one Shutdown at a time; later ones find it done
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace runtime

#endif  // RUNTIME_GRPC_SERVERS_H_
