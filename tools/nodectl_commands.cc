#include "tools/nodectl_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flowctl/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"
#include "tools/channel_credentials.h"
#include "tools/nodectl_flags.h"
#include "tools/nodectl_format.h"
#include "tools/nodectl_requests.h"

namespace nodectl {
namespace {

using node::admin::AdminService;

constexpr char kDefaultAdmin[] = "127.0.0.1:50052";
constexpr uint64_t kDefaultTimeoutMs = 10000;

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* const kFlags = new std::vector<FlagSpec>{
      {"admin", "HOST:PORT", "the node's admin API address (default 127.0.0.1:50052)"},
      {"token-file", "FILE", "send 'authorization: Bearer <token>' with the token in FILE"},
      {"tls-ca", "FILE", "dial the admin port with TLS, trusting the PEM CA certificates in FILE"},
      {"json", "", "print the response as JSON (protobuf JSON mapping, proto field names)"},
      {"timeout-ms", "N", "deadline of each call in ms, 1..3600000 (default 10000; not for watch)"},
  };
  return *kFlags;
}

struct Command;

// Everything a subcommand needs: validated global options, streams, and the stub (made on first
// use, so a usage error never opens a channel).
class Context {
 public:
  Context(const Command& command, const NodectlIo& io) : command_(command), io_(io) {}

  const Command& command() const { return command_; }
  std::ostream& out() const { return *io_.out; }
  std::ostream& err() const { return *io_.err; }
  bool json() const { return json_; }

  absl::Status Configure(const ParsedFlags& f);
  AdminService::Stub& Stub();
  // Sets token metadata and (if `with_deadline`) the deadline.
  void Prepare(grpc::ClientContext* context, bool with_deadline) const;
  CallCanceller* canceller() const { return io_.canceller; }

  int RpcError(const grpc::Status& status) const {
    err() << "nodectl: " << StatusCodeName(status.error_code()) << ": " << status.error_message()
          << "\n";
    return kExitRpcError;
  }

  // Runs one unary call and prints the response as JSON or with `print`.
  template <typename Request, typename Response>
  int Unary(grpc::Status (AdminService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                       Response*),
            const Request& request, const std::function<void(const Response&)>& print) {
    grpc::ClientContext context;
    Prepare(&context, /*with_deadline=*/true);
    if (canceller() != nullptr && !canceller()->Attach(&context)) {
      return RpcError(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    Response response;
    grpc::Status status = (Stub().*method)(&context, request, &response);
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
  std::string token_;
  uint64_t timeout_ms_ = kDefaultTimeoutMs;
  bool json_ = false;
  std::shared_ptr<grpc::ChannelCredentials>
      credentials_;  // set by Configure: --tls-ca or plaintext
  std::unique_ptr<AdminService::Stub> stub_;
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

absl::Status Context::Configure(const ParsedFlags& f) {
  if (const std::string* a = f.Last("admin")) {
    if (a->empty()) return absl::InvalidArgumentError("--admin: must not be empty");
    admin_ = *a;
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

void Context::Prepare(grpc::ClientContext* context, bool with_deadline) const {
  if (!token_.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
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

// --- subcommands -----------------------------------------------------------------------------

int RunStatus(Context& ctx, const ParsedFlags&) {
  return ctx.Unary<node::admin::GetNodeStatusRequest, node::admin::NodeStatus>(
      &AdminService::Stub::GetNodeStatus, {},
      [&](const node::admin::NodeStatus& r) { PrintNodeStatus(r, ctx.out()); });
}

int RunPartitions(Context& ctx, const ParsedFlags&) {
  return ctx.Unary<node::admin::ListPartitionsRequest, node::admin::ListPartitionsResponse>(
      &AdminService::Stub::ListPartitions, {},
      [&](const node::admin::ListPartitionsResponse& r) { PrintPartitions(r, ctx.out()); });
}

int RunPeers(Context& ctx, const ParsedFlags&) {
  return ctx.Unary<node::admin::ListPeersRequest, node::admin::ListPeersResponse>(
      &AdminService::Stub::ListPeers, {},
      [&](const node::admin::ListPeersResponse& r) { PrintPeers(r, ctx.out()); });
}

int RunStats(Context& ctx, const ParsedFlags& f) {
  node::admin::GetFlowStatsRequest req;
  if (const std::string* p = f.Last("partition")) req.set_partition(*p);
  return ctx.Unary<node::admin::GetFlowStatsRequest, node::admin::FlowStats>(
      &AdminService::Stub::GetFlowStats, req,
      [&](const node::admin::FlowStats& r) { PrintFlowStats(r, ctx.out()); });
}

int RunWatch(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::WatchFlowStatsRequest> req = BuildWatchRequest(f);
  uint64_t count = 0;  // 0 = until Ctrl-C
  if (req.ok() && f.Has("count")) {
    absl::StatusOr<uint64_t> c = ParseUint("--count", *f.Last("count"), 1, UINT32_MAX);
    if (!c.ok())
      req = c.status();
    else
      count = *c;
  }
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());

  grpc::ClientContext context;
  ctx.Prepare(&context, /*with_deadline=*/false);  // a watch runs until --count or Ctrl-C
  if (ctx.canceller() != nullptr && !ctx.canceller()->Attach(&context)) return kExitOk;
  std::unique_ptr<grpc::ClientReader<node::admin::FlowStats>> reader =
      ctx.Stub().WatchFlowStats(&context, *req);
  node::admin::FlowStats stats;
  uint64_t received = 0;
  while ((count == 0 || received < count) && reader->Read(&stats)) {
    ++received;
    if (ctx.json()) {
      ctx.out() << ToJson(stats, /*pretty=*/false);
    } else {
      if (received > 1) ctx.out() << std::string(72, '-') << "\n";
      PrintFlowStats(stats, ctx.out());
    }
    ctx.out().flush();
  }
  bool done_by_us = count != 0 && received >= count;
  if (done_by_us) context.TryCancel();
  grpc::Status status = reader->Finish();
  bool interrupted = ctx.canceller() != nullptr && ctx.canceller()->cancelled();
  if (ctx.canceller() != nullptr) ctx.canceller()->Detach();
  if (status.ok() || done_by_us || interrupted) return kExitOk;
  return ctx.RpcError(status);
}

int RunUpdateFlow(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::UpdatePartitionFlowRequest> req = BuildUpdateFlowRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return ctx
      .Unary<node::admin::UpdatePartitionFlowRequest, node::admin::UpdatePartitionFlowResponse>(
          &AdminService::Stub::UpdatePartitionFlow, *req,
          [&](const node::admin::UpdatePartitionFlowResponse& r) {
            ctx.out() << "updated; effective configuration:\n";
            PrintPartitionFlowConfig(r.effective(), ctx.out());
          });
}

int RunUpdateEgress(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::UpdateEgressRequest> req = BuildUpdateEgressRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return ctx.Unary<node::admin::UpdateEgressRequest, node::admin::UpdateEgressResponse>(
      &AdminService::Stub::UpdateEgress, *req, [&](const node::admin::UpdateEgressResponse& r) {
        ctx.out() << "updated\n";
        PrintEgress(r.egress(), ctx.out());
      });
}

int RunUpdateArbiter(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::UpdateArbiterRequest> req = BuildUpdateArbiterRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return ctx.Unary<node::admin::UpdateArbiterRequest, node::admin::UpdateArbiterResponse>(
      &AdminService::Stub::UpdateArbiter, *req, [&](const node::admin::UpdateArbiterResponse& r) {
        ctx.out() << "updated\n";
        PrintShares(r.effective(), ctx.out());
      });
}

int RunPause(Context& ctx, const ParsedFlags& f) {
  node::admin::PausePartitionRequest req;
  req.set_partition(f.positional[0]);
  return ctx.Unary<node::admin::PausePartitionRequest, node::admin::PausePartitionResponse>(
      &AdminService::Stub::PausePartition, req, [&](const node::admin::PausePartitionResponse&) {
        ctx.out() << "partition " << req.partition() << " paused\n";
      });
}

int RunResume(Context& ctx, const ParsedFlags& f) {
  node::admin::ResumePartitionRequest req;
  req.set_partition(f.positional[0]);
  return ctx.Unary<node::admin::ResumePartitionRequest, node::admin::ResumePartitionResponse>(
      &AdminService::Stub::ResumePartition, req, [&](const node::admin::ResumePartitionResponse&) {
        ctx.out() << "partition " << req.partition() << " resumed\n";
      });
}

const std::vector<Command>& Commands() {
  static const auto* const kCommands = new std::vector<Command>{
      {.name = "status",
       .summary = "Node id, version, uptime, peers and each partition's consensus state.",
       .run = RunStatus},
      {.name = "partitions",
       .summary = "Each partition's state and effective flow configuration.",
       .run = RunPartitions},
      {.name = "peers",
       .summary = "Configured peers, connection state and traffic.",
       .run = RunPeers},
      {.name = "stats",
       .synopsis = "[--partition P]",
       .summary = "Every stage, lane, pool, spill, arbiter-share and egress figure.",
       .flags = {{"partition", "P", "only this partition (by name); default all"}},
       .run = RunStats},
      {.name = "watch",
       .synopsis = "[--partition P] [--interval-ms N] [--count N]",
       .summary = "Flow stats every interval, until --count updates or Ctrl-C.",
       .details = "With --json, prints one JSON object per line. Ctrl-C ends it with exit 0.\n",
       .flags = {{"partition", "P", "only this partition (by name); default all"},
                 {"interval-ms", "N", "ms between updates, 100..60000 (default: the node's, 1000)"},
                 {"count", "N", "stop after N updates (default: until Ctrl-C)"}},
       .run = RunWatch},
      {.name = "update-flow",
       .synopsis = "--partition P [--interceptor FILE|TEXT] [--lane-weights K=V,...] "
                   "[--budget K=V,...] [--pool K=V,...]",
       .summary = "Replace a partition's interceptor chain, lane weights, budget or pool limits.",
       .details =
           "--interceptor takes a text-format node.flowctl.StageChainConfig, from a file or "
           "inline:\n"
           "  --interceptor 'stages { concurrency { max_in_flight: 512 } }\n"
           "                 stages { rate { rate_per_second: 1000 burst: 100 } }'\n"
           "It replaces the whole chain. Lane, budget and pool keys left out are sent as 0, which\n"
           "the node reads as \"keep the current value\". Byte values take B, KiB, MiB, GiB, KB,\n"
           "MB, GB. The node validates the whole update and applies all of it or nothing.\n"
           "Pool keys: max_txs, max_bytes, max_per_sender, forward_reserve_fraction (0..0.5),\n"
           "high_water_fraction (0..1], ttl_seconds, max_tx_bytes.\n",
       .flags = {{"partition", "P", "the partition (by name); required"},
                 {"interceptor", "FILE|TEXT", "new interceptor chain (StageChainConfig text)"},
                 {"lane-weights", "K=V,...",
                  "consensus=, sync=, tx_forward=, bulk=, client= (each > 0)"},
                 {"budget", "K=V,...", "dispatcher budget: messages=N, bytes=SIZE"},
                 {"pool", "K=V,...", "pool limits, e.g. max_txs=50000,max_bytes=64MiB"}},
       .run = RunUpdateFlow},
      {.name = "update-egress",
       .synopsis = "[--cap BYTES_PER_S|unlimited] [--floor BYTES_PER_S]",
       .summary = "Change the global egress cap and/or the tx-forwarding floor live.",
       .details = "Rates take B, KiB, MiB, GiB, KB, MB, GB (per second), e.g. --cap 50MB.\n",
       .flags = {{"cap", "BYTES_PER_S|unlimited", "egress cap for all peers (> 0, or unlimited)"},
                 {"floor", "BYTES_PER_S", "floor of the derived tx-forwarding rate (> 0)"}},
       .run = RunUpdateEgress},
      {.name = "update-arbiter",
       .synopsis = "--partition P --weight W [--guarantee F] [--ceiling F] [--partition P2 ...]",
       .summary = "Change partitions' arbiter weights, guarantees and ceilings live.",
       .details =
           "Each --partition starts an entry; the --weight/--guarantee/--ceiling after it apply\n"
           "to it. A left-out --guarantee is sent as 0 (none), --ceiling as 0 (whole capacity).\n",
       .flags = {{"partition", "P", "partition (by name); starts an entry", true},
                 {"weight", "W", "relative weight, > 0; required per entry", true},
                 {"guarantee", "F", "guaranteed fraction of each resource, 0..1", true},
                 {"ceiling", "F", "fraction never exceeded, (0, 1]", true}},
       .run = RunUpdateArbiter},
      {.name = "pause",
       .synopsis = "PARTITION",
       .summary = "Pause a partition: it rejects client requests and stops proposing.",
       .positionals = 1,
       .run = RunPause},
      {.name = "resume",
       .synopsis = "PARTITION",
       .summary = "Resume a paused partition.",
       .positionals = 1,
       .run = RunResume},
  };
  return *kCommands;
}

void PrintTopHelp(std::ostream& out) {
  out << "usage: nodectl [global flags] COMMAND [flags]\n\n"
         "Watch and steer a running noded through its admin API.\n\ncommands:\n";
  size_t width = 0;
  for (const Command& c : Commands()) width = std::max(width, c.name.size());
  for (const Command& c : Commands()) {
    out << "  " << c.name << std::string(width - c.name.size() + 3, ' ') << c.summary << "\n";
  }
  out << "\nglobal flags:\n"
      << FormatFlagHelp(GlobalFlags())
      << "\nRun 'nodectl COMMAND --help' for a command's flags.\n"
         "Exit codes: 0 ok, 1 the call failed, 2 usage error.\n";
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// Index of the subcommand in `args` (the first positional, skipping global flags' values), or
// args.size().
size_t FindCommandIndex(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return i + 1 < args.size() ? i + 1 : args.size();
    if (a.size() < 2 || a[0] != '-') return i;
    if (a.find('=') != std::string::npos) continue;
    for (const FlagSpec& g : GlobalFlags()) {
      if (a == "--" + g.name && !g.value_name.empty()) ++i;  // skip its value
    }
  }
  return args.size();
}

}  // namespace

int RunNodectl(const std::vector<std::string>& args, const NodectlIo& io) {
  size_t index = FindCommandIndex(args);
  if (index == args.size()) {
    absl::StatusOr<ParsedFlags> f = ParseFlags(args, GlobalFlags());
    if (f.ok() && f->help) {
      PrintTopHelp(*io.out);
      return kExitOk;
    }
    *io.err << "nodectl: " << (f.ok() ? "missing command" : f.status().message()) << "\n\n";
    PrintTopHelp(*io.err);
    return kExitUsage;
  }
  std::string name = args[index];
  std::vector<std::string> rest(args.begin(), args.begin() + index);
  if (index > 0 && args[index - 1] == "--") rest.pop_back();
  rest.insert(rest.end(), args.begin() + index + 1, args.end());

  if (name == "help") {
    absl::StatusOr<ParsedFlags> f = ParseFlags(rest, GlobalFlags());
    const Command* c = nullptr;
    if (f.ok() && !f->positional.empty()) {
      c = FindCommand(f->positional[0]);
      if (c == nullptr) {
        *io.err << "nodectl: unknown command '" << f->positional[0] << "'\n\n";
        PrintTopHelp(*io.err);
        return kExitUsage;
      }
    }
    if (c != nullptr) {
      PrintCommandHelp(*c, *io.out);
    } else {
      PrintTopHelp(*io.out);
    }
    return kExitOk;
  }
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    *io.err << "nodectl: unknown command '" << name << "'\n\n";
    PrintTopHelp(*io.err);
    return kExitUsage;
  }
  std::vector<FlagSpec> specs = GlobalFlags();
  specs.insert(specs.end(), command->flags.begin(), command->flags.end());
  absl::StatusOr<ParsedFlags> flags = ParseFlags(rest, specs);
  if (!flags.ok()) return UsageError(*command, flags.status(), *io.err);
  if (flags->help) {
    PrintCommandHelp(*command, *io.out);
    return kExitOk;
  }
  if (static_cast<int>(flags->positional.size()) != command->positionals) {
    return UsageError(*command,
                      absl::InvalidArgumentError(
                          command->positionals == 0
                              ? absl::StrCat("unexpected argument '", flags->positional[0], "'")
                              : absl::StrCat("expected ", command->synopsis)),
                      *io.err);
  }
  if (command->positionals == 1 && flags->positional[0].empty()) {
    return UsageError(
        *command, absl::InvalidArgumentError(absl::StrCat(command->synopsis, ": empty")), *io.err);
  }
  Context ctx(*command, io);
  if (absl::Status s = ctx.Configure(*flags); !s.ok()) return UsageError(*command, s, *io.err);
  return command->run(ctx, *flags);
}

}  // namespace nodectl
