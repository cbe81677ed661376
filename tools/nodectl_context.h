// The parts of nodectl every subcommand shares: the global flags, the Context a subcommand runs
// with (validated global options, output streams, the admin and client stubs), the Command table
// entry, usage errors and the loop that reads a server stream.
//
// Internal to nodectl_lib (tools/nodectl_commands.cc, tools/nodectl_client_commands.cc). A
// Context is used by one thread; the functions are thread-safe.
//
//   int RunX(Context& ctx, const ParsedFlags& f) {
//     return ctx.Unary(&AdminService::Stub::GetNodeStatus, {}, [&](const auto& r) { ... });
//   }
#ifndef TOOLS_NODECTL_CONTEXT_H_
#define TOOLS_NODECTL_CONTEXT_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "tools/nodectl_canceller.h"
#include "tools/nodectl_commands.h"
#include "tools/nodectl_flags.h"
#include "tools/nodectl_format.h"

namespace nodectl {

using node::admin::AdminService;
using node::client::ClientService;

inline constexpr char kDefaultAdmin[] = "127.0.0.1:50052";
inline constexpr char kDefaultClient[] = "127.0.0.1:50051";
inline constexpr uint64_t kDefaultTimeoutMs = 10000;

// Flags every subcommand accepts (--admin, --client, --token-file, --tls-ca, --json,
// --timeout-ms).
const std::vector<FlagSpec>& GlobalFlags();

struct Command;

// One line of UnaryEach's --json output; `response_json` is used when `status` is OK.
std::string EachJson(const std::string& address, const grpc::Status& status,
                     const std::string& response_json);

// Everything a subcommand needs: validated global options, streams, and the admin and client
// stubs (each made on first use, so a usage error never opens a channel).
class Context {
 public:
  Context(const Command& command, const NodectlIo& io) : command_(command), io_(io) {}

  const Command& command() const { return command_; }
  std::ostream& out() const { return *io_.out; }
  std::ostream& err() const { return *io_.err; }
  bool json() const { return json_; }

  absl::Status Configure(const ParsedFlags& f);
  AdminService::Stub& Stub();
  ClientService::Stub& ClientStub();
  // A stub for another admin address, with the same credentials (commands given --admins).
  std::unique_ptr<AdminService::Stub> StubFor(const std::string& address) const;
  // The admin token for each of `n` --admins addresses: from --token-files F1,F2,... (one file
  // per address, in order; an empty entry means none) or else --token-file's for all.
  absl::StatusOr<std::vector<std::string>> AdminTokens(const ParsedFlags& f, size_t n) const;
  // Sets the admin token metadata (admin calls only: the client port needs none and must not
  // see it) and, if `with_deadline`, the deadline.
  void Prepare(grpc::ClientContext* context, bool with_deadline, bool admin = true) const;
  CallCanceller* canceller() const { return io_.canceller; }
  // Raises the call deadline to at least `ms` unless --timeout-ms was given (commands whose call
  // may wait for a drain or a ledger to open).
  void AtLeastTimeoutMs(uint64_t ms) {
    if (!timeout_given_) timeout_ms_ = std::max(timeout_ms_, ms);
  }

  int RpcError(const grpc::Status& status) const {
    err() << "nodectl: " << StatusCodeName(status.error_code()) << ": " << status.error_message()
          << "\n";
    return kExitRpcError;
  }

  // Runs one unary admin call and prints the response as JSON or with `print`.
  template <typename Request, typename Response>
  int Unary(grpc::Status (AdminService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                       Response*),
            const Request& request, const std::function<void(const Response&)>& print) {
    return UnaryOn(Stub(), method, request, print, /*admin=*/true);
  }
  // The same call on each admin address of `admins` (--admins), in order, with the admin token
  // `tokens[i]` (AdminTokens), going on after a failure: one line per address, "ADDRESS: " and what
  // `print` writes, or the error (with
  // --json, one JSON object per address: {"admin", "ok", "response" or "code" and "message"}).
  // kExitOk only when every call succeeded. An empty list: Unary on --admin.
  template <typename Request, typename Response>
  int UnaryEach(const std::vector<std::string>& admins, const std::vector<std::string>& tokens,
                grpc::Status (AdminService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                           Response*),
                const Request& request, const std::function<void(const Response&)>& print) {
    if (admins.empty()) return Unary(method, request, print);
    int failed = 0;
    for (size_t i = 0; i < admins.size(); ++i) {
      const std::string& address = admins[i];
      std::unique_ptr<AdminService::Stub> stub = StubFor(address);
      grpc::ClientContext context;
      Prepare(&context, /*with_deadline=*/true, /*admin=*/false);
      if (!tokens[i].empty()) context.AddMetadata("authorization", "Bearer " + tokens[i]);
      if (canceller() != nullptr && !canceller()->Attach(&context)) return kExitRpcError;
      Response response;
      grpc::Status status = ((*stub).*method)(&context, request, &response);
      if (canceller() != nullptr) canceller()->Detach();
      failed += status.ok() ? 0 : 1;
      if (json_) {
        out() << EachJson(address, status, ToJson(response, /*pretty=*/false));
      } else if (status.ok()) {
        out() << address << ": ";
        print(response);
      } else {
        out() << address << ": " << StatusCodeName(status.error_code()) << ": "
              << status.error_message() << "\n";
      }
    }
    if (failed > 0) {
      err() << "nodectl: " << failed << " of " << admins.size() << " nodes failed\n";
      return kExitRpcError;
    }
    return kExitOk;
  }
  // The same on any stub (the client API's get-value).
  template <typename StubT, typename Request, typename Response>
  int UnaryOn(StubT& stub,
              grpc::Status (StubT::*method)(grpc::ClientContext*, const Request&, Response*),
              const Request& request, const std::function<void(const Response&)>& print,
              bool admin) {
    grpc::ClientContext context;
    Prepare(&context, /*with_deadline=*/true, admin);
    if (canceller() != nullptr && !canceller()->Attach(&context)) {
      return RpcError(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    Response response;
    grpc::Status status = (stub.*method)(&context, request, &response);
    if (canceller() != nullptr) canceller()->Detach();
    if (!status.ok()) return RpcError(status);
    if (json_) {
      out() << ToJson(response, /*pretty=*/true);
    } else {
      print(response);
    }
    return kExitOk;
  }

 private:
  const Command& command_;
  const NodectlIo& io_;
  std::string admin_ = kDefaultAdmin;
  std::string client_ = kDefaultClient;
  std::string token_;
  uint64_t timeout_ms_ = kDefaultTimeoutMs;
  bool timeout_given_ = false;
  bool json_ = false;
  std::shared_ptr<grpc::ChannelCredentials>
      credentials_;  // set by Configure: --tls-ca or plaintext
  std::unique_ptr<AdminService::Stub> stub_;
  std::unique_ptr<ClientService::Stub> client_stub_;
};

using RunFn = std::function<int(Context&, const ParsedFlags&)>;

struct Command {
  // Default initializers keep -Wmissing-field-initializers quiet for the designated
  // initializers in Commands(), where most commands leave most fields out.
  std::string name = {};
  std::string synopsis = {};  // after "nodectl [global flags] <name>"
  std::string summary = {};   // one line for the command list
  std::string details = {};   // extra --help text
  std::vector<FlagSpec> flags = {};
  int positionals = 0;  // exact number of positional arguments
  RunFn run = {};
};

// "usage: nodectl [global flags] NAME SYNOPSIS".
void PrintUsageLine(const Command& c, std::ostream& out);
void PrintCommandHelp(const Command& c, std::ostream& out);
// Prints the problem and the usage line on `err`; returns kExitUsage.
int UsageError(const Command& c, const absl::Status& status, std::ostream& err);

// --count N (1..2^32-1); absent: 0, until the stream ends or Ctrl-C.
absl::StatusOr<uint64_t> CountFlag(const ParsedFlags& f);

// Reads a server stream started on `context` (attached to the canceller by the caller) until
// `count` messages (0 = no limit), the end of the stream or Ctrl-C, printing each with `print`.
// Ending it by --count or Ctrl-C is success.
template <typename Response>
int ReadStream(Context& ctx, grpc::ClientContext& context, grpc::ClientReader<Response>& reader,
               uint64_t count, const std::function<void(const Response&, uint64_t)>& print) {
  Response message;
  uint64_t received = 0;
  while ((count == 0 || received < count) && reader.Read(&message)) {
    ++received;
    print(message, received);
    ctx.out().flush();
  }
  bool done_by_us = count != 0 && received >= count;
  if (done_by_us) context.TryCancel();
  grpc::Status status = reader.Finish();
  bool interrupted = ctx.canceller() != nullptr && ctx.canceller()->cancelled();
  if (ctx.canceller() != nullptr) ctx.canceller()->Detach();
  if (status.ok() || done_by_us || interrupted) return kExitOk;
  return ctx.RpcError(status);
}

}  // namespace nodectl

#endif  // TOOLS_NODECTL_CONTEXT_H_
