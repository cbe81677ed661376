// TLS for the node's ports: checking the PEM files of config.tls and turning them into
// gRPC credentials.
//
//   client / admin ports  server-side TLS only (clients show no certificate; the admin port still
//                         wants its bearer token)
//   p2p                   mutual TLS: the server requires and verifies a client certificate
//                         issued by ca_file, the dialer verifies the server's against ca_file.
//                         The Ed25519 handshake (p2p/handshake.h) still authenticates the node
//                         ids inside; TLS adds confidentiality and keeps strangers off the port.
//
// Stateless free functions; thread-safe.
//
//   std::vector<ConfigProblem> problems = ValidateTlsConfig(config.tls());   // in validation
//   ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsMaterial(config.tls()));
//   builder.AddListeningPort(addr, TlsServerCredentials(tls, /*require_client_cert=*/false));
#ifndef RUNTIME_TLS_H_
#define RUNTIME_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "proto/config.pb.h"
#include "runtime/config.h"

namespace runtime {

// The contents of the files named in a TlsConfig.
struct TlsMaterial {
  std::string cert_chain_pem;
  std::string private_key_pem;
  std::string ca_pem;  // empty when ca_file is not set
};

// True when any port has TLS on.
bool TlsEnabled(const node::config::TlsConfig& tls);

// Problems with `tls` (paths under "tls."): a switch on without cert_file/key_file (or p2p
// without ca_file), a file that cannot be read, holds no PEM certificate / private key, or a key
// that does not match the certificate. Reads the files. Empty when every switch is off.
std::vector<ConfigProblem> ValidateTlsConfig(const node::config::TlsConfig& tls);

// Reads the files (after ValidateTlsConfig). InvalidArgument naming the field when one cannot be
// read or fails the checks above.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const node::config::TlsConfig& tls);

// Server credentials for one port. With `require_client_cert`, a client must show a certificate
// issued by tls.ca_pem (REQUIRES: ca_pem not empty).
std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const TlsMaterial& tls,
                                                              bool require_client_cert);

// Channel credentials of a p2p dialer: checks the server against ca_pem and shows this node's
// certificate (mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> TlsPeerChannelCredentials(const TlsMaterial& tls);

}  // namespace runtime

#endif  // RUNTIME_TLS_H_
