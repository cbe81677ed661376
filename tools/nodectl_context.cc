#include "tools/nodectl_context.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flowctl/status_macros.h"
#include "grpcpp/create_channel.h"
#include "tools/channel_credentials.h"

namespace nodectl {

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* const kFlags = new std::vector<FlagSpec>{
      {"admin", "HOST:PORT", "the node's admin API address (default 127.0.0.1:50052)"},
      {"client", "HOST:PORT",
       "the node's client API address, for watch-commits and get-value (default 127.0.0.1:50051)"},
      {"token-file", "FILE", "send 'authorization: Bearer <token>' with the token in FILE"},
      {"tls-ca", "FILE",
       "dial the port the command uses with TLS, trusting the PEM CA certificates in FILE"},
      {"json", "", "print the response as JSON (protobuf JSON mapping, proto field names)"},
      {"timeout-ms", "N",
       "deadline of each call in ms, 1..3600000 (default 10000; not for the watch commands)"},
  };
  return *kFlags;
}

absl::Status Context::Configure(const ParsedFlags& f) {
  if (const std::string* a = f.Last("admin")) {
    if (a->empty()) return absl::InvalidArgumentError("--admin: must not be empty");
    admin_ = *a;
  }
  if (const std::string* c = f.Last("client")) {
    if (c->empty()) return absl::InvalidArgumentError("--client: must not be empty");
    client_ = *c;
  }
  if (const std::string* t = f.Last("timeout-ms")) {
    ASSIGN_OR_RETURN(timeout_ms_, ParseUint("--timeout-ms", *t, 1, 3600000));
  }
  json_ = f.Has("json");
  const std::string* ca = f.Last("tls-ca");
  ASSIGN_OR_RETURN(credentials_, tools::ClientCredentials("--tls-ca", ca == nullptr ? "" : *ca));
  if (const std::string* path = f.Last("token-file")) {
    std::ifstream in(*path);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read '", *path, "'"));
    }
    std::stringstream buf;
    buf << in.rdbuf();
    token_ = std::string(absl::StripAsciiWhitespace(buf.str()));
    if (token_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: '", *path, "' is empty"));
    }
  }
  return absl::OkStatus();
}

AdminService::Stub& Context::Stub() {
  if (stub_ == nullptr) {
    // Plaintext unless --tls-ca was given (Configure, which runs first, set credentials_).
    stub_ = AdminService::NewStub(grpc::CreateChannel(admin_, credentials_));
  }
  return *stub_;
}

ClientService::Stub& Context::ClientStub() {
  if (client_stub_ == nullptr) {
    client_stub_ = ClientService::NewStub(grpc::CreateChannel(client_, credentials_));
  }
  return *client_stub_;
}

void Context::Prepare(grpc::ClientContext* context, bool with_deadline, bool admin) const {
  if (admin && !token_.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
  if (with_deadline) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(timeout_ms_));
  }
}

void PrintUsageLine(const Command& c, std::ostream& out) {
  out << "usage: nodectl [global flags] " << c.name << (c.synopsis.empty() ? "" : " ") << c.synopsis
      << "\n";
}

void PrintCommandHelp(const Command& c, std::ostream& out) {
  PrintUsageLine(c, out);
  out << "\n" << c.summary << "\n";
  if (!c.details.empty()) out << "\n" << c.details;
  if (!c.flags.empty()) out << "\nflags:\n" << FormatFlagHelp(c.flags);
  out << "\nglobal flags:\n" << FormatFlagHelp(GlobalFlags());
}

int UsageError(const Command& c, const absl::Status& status, std::ostream& err) {
  err << "nodectl " << c.name << ": " << status.message() << "\n";
  PrintUsageLine(c, err);
  err << "Run 'nodectl " << c.name << " --help' for details.\n";
  return kExitUsage;
}

absl::StatusOr<uint64_t> CountFlag(const ParsedFlags& f) {
  if (!f.Has("count")) return 0;
  return ParseUint("--count", *f.Last("count"), 1, UINT32_MAX);
}

}  // namespace nodectl
