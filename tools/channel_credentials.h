// ClientCredentials: the gRPC channel credentials a tool (nodectl, loadgen) dials a node with.
//
// With no CA file: plaintext (the node's default, loopback ports). With one: TLS, trusting the
// PEM certificates in that file (e.g. the cluster CA that `tools/localnet up --tls` writes to
// D/tls/ca.crt); the node's certificate must name the host dialed (localnet's carry 127.0.0.1
// and localhost). Errors name `flag`: InvalidArgument when the file cannot be read, is empty or
// holds no PEM certificate.
//
//   ASSIGN_OR_RETURN(auto creds, tools::ClientCredentials("--tls-ca", options.tls_ca_file));
//   auto stub = Service::NewStub(grpc::CreateChannel(address, creds));
#ifndef TOOLS_CHANNEL_CREDENTIALS_H_
#define TOOLS_CHANNEL_CREDENTIALS_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tools {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    absl::string_view flag, const std::string& ca_file);

}  // namespace tools

#endif  // TOOLS_CHANNEL_CREDENTIALS_H_
