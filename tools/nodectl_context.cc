#include "tools/nodectl_context.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "flowctl/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "tools/channel_credentials.h"

namespace nodectl {
namespace {

absl::StatusOr<std::string> ReadToken(absl::string_view flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(buf.str()));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
  return token;
}

}  // namespace

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
    timeout_given_ = true;
  }
  json_ = f.Has("json");
  const std::string* ca = f.Last("tls-ca");
  ASSIGN_OR_RETURN(credentials_, tools::ClientCredentials("--tls-ca", ca == nullptr ? "" : *ca));
  if (const std::string* path = f.Last("token-file")) {
    ASSIGN_OR_RETURN(token_, ReadToken("--token-file", *path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Context::AdminTokens(const ParsedFlags& f,
                                                              size_t n) const {
  const std::string* list = f.Last("token-files");
  if (list == nullptr) return std::vector<std::string>(n, token_);
  std::vector<std::string> files = absl::StrSplit(*list, ',');
  if (files.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-files: give one file per --admins "
                     "address (",
                     n, "), got ", files.size()));
  }
  std::vector<std::string> tokens;
  for (const std::string& file : files) {
    if (file.empty()) {
      tokens.push_back("");
      continue;
    }
    ASSIGN_OR_RETURN(std::string token, ReadToken("--token-files", file));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AdminService::Stub& Context::Stub() {
  if (stub_ == nullptr) {
    // Plaintext unless --tls-ca was given (Configure, which runs first, set credentials_).
    stub_ = AdminService::NewStub(grpc::CreateChannel(admin_, credentials_));
  }
  return *stub_;
}

std::unique_ptr<AdminService::Stub> Context::StubFor(const std::string& address) const {
  return AdminService::NewStub(grpc::CreateChannel(address, credentials_));
}

std::string EachJson(const std::string& address, const grpc::Status& status,
                     const std::string& response_json) {
  // The address and message are JSON-escaped through a protobuf Struct-free path: a Value.
  auto quoted = [](const std::string& text) {
    google::protobuf::Value v;
    v.set_string_value(text);
    std::string out;
    if (!google::protobuf::util::MessageToJsonString(v, &out).ok()) return std::string("\"\"");
    return out;
  };
  if (status.ok()) {
    return absl::StrCat("{\"admin\":", quoted(address), ",\"ok\":true,\"response\":",
                        absl::StripTrailingAsciiWhitespace(response_json), "}\n");
  }
  return absl::StrCat("{\"admin\":", quoted(address),
                      ",\"ok\":false,\"code\":", quoted(StatusCodeName(status.error_code())),
                      ",\"message\":", quoted(status.error_message()), "}\n");
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
