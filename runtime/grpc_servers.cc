#include "runtime/grpc_servers.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "flowctl/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "runtime/admin_service.h"
#include "runtime/client_service.h"
#include "runtime/tls.h"

namespace runtime {
namespace {

// Answers every method a server does not serve (e.g. an AdminService call on the client port)
// with UNIMPLEMENTED naming the method and the port, where gRPC alone gives an empty message.
// One per server (gRPC registers a generic service with one server only).
class UnknownMethodService final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethodService(std::string api) : api_(std::move(api)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::Status status) { Finish(std::move(status)); }
      void OnDone() override { delete this; }
    };
    return new Reactor(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                     absl::StrCat("unknown method ", ctx->method(), " on the ", api_, " port")));
  }

 private:
  const std::string api_;
};

// Builds and starts one server for `service` on `address`; fills *port with the bound port.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const std::string& api, const std::string& address,
    std::shared_ptr<grpc::ServerCredentials> credentials, grpc::Service* service,
    grpc::CallbackGenericService* unknown, int max_receive_bytes, RpcMetrics* rpc_metrics,
    std::string_view service_name, uint32_t max_streams, int* port) {
  if (address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(api, " API: listen address is empty"));
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, std::move(credentials), port);
  builder.RegisterService(service);
  builder.RegisterCallbackGenericService(unknown);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  builder.experimental().SetInterceptorCreators(rpc_metrics->NewInterceptorCreators(service_name));
  // gRPC sets SO_REUSEPORT by default, so a second node on the same port would bind "fine" and
  // silently share the traffic; refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (max_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(max_streams));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    if (server != nullptr) server->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot serve the ", api, " API on '", address,
                                               "' (address in use or not bindable)"));
  }
  return server;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServers>> GrpcServers::Start(
    Node* node, const node::config::NodeConfig& config, std::string admin_token) {
  // Once per process: every ServerBuilder made afterwards adds the reflection service.
  static absl::once_flag reflection_once;
  absl::call_once(reflection_once,
                  [] { grpc::reflection::InitProtoReflectionServerBuilderPlugin(); });

  std::unique_ptr<GrpcServers> servers(new GrpcServers());
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  servers->rpc_metrics_ = std::make_unique<RpcMetrics>(RpcMetrics::MethodsOf(
      {pool->FindServiceByName(node::client::ClientService::service_full_name()),
       pool->FindServiceByName(node::admin::AdminService::service_full_name())}));
  servers->client_service_ = std::make_unique<ClientServiceImpl>(node);
  servers->admin_service_ = std::make_unique<AdminServiceImpl>(node, std::move(admin_token));
  servers->client_unknown_methods_ = std::make_unique<UnknownMethodService>("client");
  servers->admin_unknown_methods_ = std::make_unique<UnknownMethodService>("admin");

  // TLS: server-side only on these ports; clients show no certificate.
  std::shared_ptr<grpc::ServerCredentials> client_credentials = grpc::InsecureServerCredentials();
  std::shared_ptr<grpc::ServerCredentials> admin_credentials = grpc::InsecureServerCredentials();
  if (config.tls().client() || config.tls().admin()) {
    ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsMaterial(config.tls()));
    if (config.tls().client()) client_credentials = TlsServerCredentials(tls, false);
    if (config.tls().admin()) admin_credentials = TlsServerCredentials(tls, false);
  }

  absl::StatusOr<std::unique_ptr<grpc::Server>> client =
      StartServer("client", config.client_listen(), std::move(client_credentials),
                  servers->client_service_.get(), servers->client_unknown_methods_.get(),
                  kClientMaxReceiveBytes, servers->rpc_metrics_.get(),
                  node::client::ClientService::service_full_name(), config.client_max_streams(),
                  &servers->client_port_);
  if (!client.ok()) return client.status();
  servers->client_server_ = *std::move(client);

  absl::StatusOr<std::unique_ptr<grpc::Server>> admin = StartServer(
      "admin", config.admin_listen(), std::move(admin_credentials), servers->admin_service_.get(),
      servers->admin_unknown_methods_.get(), kAdminMaxReceiveBytes, servers->rpc_metrics_.get(),
      node::admin::AdminService::service_full_name(), /*max_streams=*/0, &servers->admin_port_);
  if (!admin.ok()) {
    servers->Shutdown(absl::ZeroDuration());
    return admin.status();
  }
  servers->admin_server_ = *std::move(admin);
  return servers;
}

GrpcServers::~GrpcServers() { Shutdown(absl::ZeroDuration()); }

void GrpcServers::Shutdown(absl::Duration drain) {
  absl::MutexLock l(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const absl::Time deadline = absl::Now() + drain;
  const auto chrono_deadline = absl::ToChronoTime(deadline);

  admin_service_->Shutdown();       // open watches end now instead of at their next interval
  client_service_->EndWatches();    // commit streams end now, with the height to resume from
  client_service_->EndHeldReads();  // reads waiting for their read chain are answered now
  // grpc::Server::Shutdown blocks until every callback call has finished, and a client call
  // waiting for a partition finishes only when we cancel it; so shut the client server down on
  // a helper thread and cancel the waits here once the drain time is up.
  // gRPC's own deadline comes a little later so that waits are ended by CancelPending (with
  // "server shutting down") rather than by gRPC's generic "Cancelling all calls".
  const auto client_deadline = absl::ToChronoTime(deadline + absl::Milliseconds(100));
  std::thread client_stop;
  if (client_server_ != nullptr) {
    client_stop =
        std::thread([this, client_deadline] { client_server_->Shutdown(client_deadline); });
  }
  if (admin_server_ != nullptr) admin_server_->Shutdown(chrono_deadline);
  client_service_->WaitIdle(deadline);
  client_service_->CancelPending();
  if (client_stop.joinable()) client_stop.join();
  if (client_server_ != nullptr) client_server_->Wait();
  if (admin_server_ != nullptr) admin_server_->Wait();
}

}  // namespace runtime
