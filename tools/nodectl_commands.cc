#include "tools/nodectl_commands.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "flowctl/status_macros.h"
#include "proto/admin.grpc.pb.h"
#include "tools/nodectl_client_commands.h"
#include "tools/nodectl_context.h"
#include "tools/nodectl_flags.h"
#include "tools/nodectl_format.h"
#include "tools/nodectl_requests.h"

namespace nodectl {
namespace {

// --- subcommands -----------------------------------------------------------------------------

// The least deadline of a live partition call unless --timeout-ms says otherwise: it may wait
// behind another one, for a ledger to open or a partition to close.
constexpr uint64_t kLivePartitionTimeoutMs = 60000;

// "<name> (<id>): STATE at height H" for a live partition command's answer.
std::string PartitionLine(const node::admin::PartitionStatus& s) {
  std::string line = absl::StrCat("partition ", s.name(), " (", s.id(), "): ", s.consensus_state());
  if (s.consensus_state() != "STOPPED") absl::StrAppend(&line, " at height ", s.height());
  return line + "\n";
}

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
  absl::StatusOr<uint64_t> count = CountFlag(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  if (!count.ok()) return UsageError(ctx.command(), count.status(), ctx.err());

  grpc::ClientContext context;
  ctx.Prepare(&context, /*with_deadline=*/false);  // a watch runs until --count or Ctrl-C
  if (ctx.canceller() != nullptr && !ctx.canceller()->Attach(&context)) return kExitOk;
  std::unique_ptr<grpc::ClientReader<node::admin::FlowStats>> reader =
      ctx.Stub().WatchFlowStats(&context, *req);
  return ReadStream<node::admin::FlowStats>(ctx, context, *reader, *count,
                                            [&](const node::admin::FlowStats& stats, uint64_t n) {
                                              if (ctx.json()) {
                                                ctx.out() << ToJson(stats, /*pretty=*/false);
                                                return;
                                              }
                                              if (n > 1) ctx.out() << std::string(72, '-') << "\n";
                                              PrintFlowStats(stats, ctx.out());
                                            });
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
        ctx.out() << "updated";
        if (req->cpu_workers() > 0) ctx.out() << "; worker threads: " << r.cpu_workers();
        if (req->has_consensus_blocks_per_second()) {
          ctx.out() << "; block budget: " << r.consensus_blocks_per_second() << " blocks/s";
        }
        if (req->ledger_write_buffer_bytes() > 0) {
          ctx.out() << "; ledger write buffers: " << r.ledger_write_buffer_bytes() << " bytes, "
                    << r.ledger_write_buffer_per_partition_bytes() << " per partition";
        }
        ctx.out() << "\n";
        PrintShares(r.effective(), ctx.out());
      });
}

// A live partition call on --admin, or on each of --admins, with a deadline of at least
// `timeout_ms`.
template <typename Request, typename Response>
int RunOnAdmins(Context& ctx, const ParsedFlags& f, const Request& req, uint64_t timeout_ms,
                grpc::Status (AdminService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                           Response*),
                const std::function<void(const Response&)>& print) {
  absl::StatusOr<std::vector<std::string>> admins = AdminList(f);
  if (!admins.ok()) return UsageError(ctx.command(), admins.status(), ctx.err());
  absl::StatusOr<std::vector<std::string>> tokens = ctx.AdminTokens(f, admins->size());
  if (!tokens.ok()) return UsageError(ctx.command(), tokens.status(), ctx.err());
  ctx.AtLeastTimeoutMs(timeout_ms);
  return ctx.UnaryEach(*admins, *tokens, method, req, print);
}

int RunCreatePartition(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::CreatePartitionRequest> req = BuildCreatePartitionRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return RunOnAdmins<node::admin::CreatePartitionRequest, node::admin::CreatePartitionResponse>(
      ctx, f, *req, kLivePartitionTimeoutMs, &AdminService::Stub::CreatePartition,
      [&](const node::admin::CreatePartitionResponse& r) {
        ctx.out() << "created " << PartitionLine(r.status());
      });
}

int RunStopPartition(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::StopPartitionRequest> req = BuildStopPartitionRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  // The node drains for up to drain_ms (default 5 s), then waits up to 30 s for the close.
  return RunOnAdmins<node::admin::StopPartitionRequest, node::admin::StopPartitionResponse>(
      ctx, f, *req, (req->drain_ms() == 0 ? 5000 : req->drain_ms()) + kLivePartitionTimeoutMs,
      &AdminService::Stub::StopPartition,
      [&](const node::admin::StopPartitionResponse& r) { ctx.out() << PartitionLine(r.status()); });
}

int RunStartPartition(Context& ctx, const ParsedFlags& f) {
  node::admin::StartPartitionRequest req;
  req.set_partition(f.positional[0]);
  return RunOnAdmins<node::admin::StartPartitionRequest, node::admin::StartPartitionResponse>(
      ctx, f, req, kLivePartitionTimeoutMs, &AdminService::Stub::StartPartition,
      [&](const node::admin::StartPartitionResponse& r) {
        ctx.out() << PartitionLine(r.status());
      });
}

int RunRemovePartition(Context& ctx, const ParsedFlags& f) {
  absl::StatusOr<node::admin::RemovePartitionRequest> req = BuildRemovePartitionRequest(f);
  if (!req.ok()) return UsageError(ctx.command(), req.status(), ctx.err());
  return RunOnAdmins<node::admin::RemovePartitionRequest, node::admin::RemovePartitionResponse>(
      ctx, f, *req, kLivePartitionTimeoutMs, &AdminService::Stub::RemovePartition,
      [&](const node::admin::RemovePartitionResponse& r) {
        ctx.out() << "partition " << req->partition() << " removed; data "
                  << (r.data_deleted() ? "deleted: " : "kept in ") << r.data_dir() << "\n";
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
      {.name = "watch-commits",
       .synopsis = "--partition P [--from H] [--count N] [--receipts] [--txs]",
       .summary = "Committed blocks as they commit (client API), one line each.",
       .details =
           "Talks to the client port (--client). Each line: height, the first 12 hex digits of\n"
           "the block hash, the tx count and, with --receipts, the count of each receipt status.\n"
           "--from H starts at height H (blocks already committed come first, then new ones);\n"
           "0, the default, starts at the next block. With --json, one WatchCommitsResponse per\n"
           "line (--txs adds the tx bodies there). The node ends a stream that reads too slowly\n"
           "with RESOURCE_EXHAUSTED and the height to resume from (--from). Ctrl-C ends it with\n"
           "exit 0.\n",
       .flags = {{"partition", "P", "the partition (name or id); required"},
                 {"from", "H", "first height (default 0: the next block to commit)"},
                 {"count", "N", "stop after N blocks (default: until Ctrl-C)"},
                 {"receipts", "", "ask for receipts and show their statuses"},
                 {"txs", "", "ask for the tx bodies (shown with --json only)"}},
       .run = RunWatchCommits},
      {.name = "get-value",
       .synopsis = "--partition P [--height H] KEY",
       .summary = "The value of KEY in a partition's key/value store (client API).",
       .details = "Talks to the client port (--client). KEY is taken byte for byte (1..256).\n"
                  "--height 0, the default, reads the latest committed state.\n",
       .flags = {{"partition", "P", "the partition (name or id); required"},
                 {"height", "H", "height of the state to read (default 0: the latest)"}},
       .positionals = 1,
       .run = RunGetValue},
      {.name = "update-flow",
       .synopsis = "--partition P [--interceptor FILE|TEXT] [--read-interceptor FILE|TEXT] "
                   "[--read-hold off|max_wait_ms=N[,max_waiting=N]] [--lane-weights K=V,...] "
                   "[--budget K=V,...] [--adaptive-lanes SPEC] "
                   "[--pool K=V,...] [--drain-rate BYTES_PER_S] [--disk-budget SIZE|none]",
       .summary = "Replace a partition's interceptor or read chain, lane weights, budget, pool "
                  "limits or (lossless) drain rate and disk budget.",
       .details =
           "--interceptor takes a text-format node.flowctl.StageChainConfig, from a file or "
           "inline:\n"
           "  --interceptor 'stages { concurrency { max_in_flight: 512 } }\n"
           "                 stages { rate { rate_per_second: 1000 burst: 100 } }'\n"
           "It replaces the whole chain; --read-interceptor does the same for the chain reads\n"
           "pass (GetTx, GetAccount, GetBlock, GetChainStatus, GetValue, WatchCommits).\n"
           "--read-hold makes unary reads the read chain refuses for now wait for it (up to\n"
           "max_wait_ms, at most max_waiting per partition) instead of refusing them at once;\n"
           "off refuses at once again.\n"
           "Lane, budget and pool keys left out are sent as 0, which\n"
           "the node reads as \"keep the current value\". Byte values take B, KiB, MiB, GiB, KB,\n"
           "MB, GB. The node validates the whole update and applies all of it or nothing.\n"
           "Pool keys: max_txs, max_bytes, max_per_sender, forward_reserve_fraction (0..0.5),\n"
           "high_water_fraction (0..1], ttl_seconds, max_tx_bytes.\n"
           "--adaptive-lanes: off, on (consensus lane target 5 ms), or per-lane p99 queueing-\n"
           "delay targets in ms with an optional weight ceiling, e.g. consensus=5/64,client=50\n"
           "(turns adaptation on; replaces the whole adaptive block; lanes left out get their\n"
           "defaults, 0 = that lane's weight stays fixed).\n",
       .flags = {{"partition", "P", "the partition (by name); required"},
                 {"interceptor", "FILE|TEXT", "new interceptor chain (StageChainConfig text)"},
                 {"read-interceptor", "FILE|TEXT", "new read chain (StageChainConfig text)"},
                 {"read-hold", "off|max_wait_ms=N[,max_waiting=N]",
                  "reads refused for now wait for the read chain (ReadHoldConfig)"},
                 {"lane-weights", "K=V,...",
                  "consensus=, sync=, tx_forward=, bulk=, client= (each > 0)"},
                 {"budget", "K=V,...", "dispatcher budget: messages=N, bytes=SIZE"},
                 {"adaptive-lanes", "off|on|LANE=MS[/MAX],...",
                  "adaptive lane weights: queueing-delay targets per lane"},
                 {"pool", "K=V,...", "pool limits, e.g. max_txs=50000,max_bytes=64MiB"},
                 {"drain-rate", "BYTES_PER_S", "lossless: the FIFO's drain rate (> 0)"},
                 {"disk-budget", "SIZE|none",
                  "lossless: the spill files' disk budget (>= two segments), or none"}},
       .run = RunUpdateFlow},
      {.name = "update-egress",
       .synopsis = "[--cap BYTES_PER_S|unlimited] [--floor BYTES_PER_S]",
       .summary = "Change the global egress cap and/or the tx-forwarding floor live.",
       .details = "Rates take B, KiB, MiB, GiB, KB, MB, GB (per second), e.g. --cap 50MB.\n",
       .flags = {{"cap", "BYTES_PER_S|unlimited", "egress cap for all peers (> 0, or unlimited)"},
                 {"floor", "BYTES_PER_S", "floor of the derived tx-forwarding rate (> 0)"}},
       .run = RunUpdateEgress},
      {.name = "update-arbiter",
       .synopsis = "[--partition P --weight W [--guarantee F] [--ceiling F [--hard]] ...] "
                   "[--cpu-workers N] [--blocks-per-second N] [--ledger-write-buffers BYTES]",
       .summary = "Change partitions' arbiter weights, guarantees and ceilings, the worker "
                  "count and the block budget, live.",
       .details =
           "Each --partition starts an entry; the --weight/--guarantee/--ceiling after it apply\n"
           "to it. A left-out --guarantee is sent as 0 (none), --ceiling as 0 (whole capacity).\n"
           "--hard makes the entry's ceiling a hard limit for CPU and egress too (held even\n"
           "while the rest of the node is idle; needs --ceiling below 1); a left-out --hard is\n"
           "sent as false (the whole share is replaced).\n"
           "--cpu-workers resizes the worker pool (the CPU the arbiter divides), with or without\n"
           "entries.\n"
           "--blocks-per-second sets the node's block budget (consensus instances per second,\n"
           "divided among the partitions with work; 0 = none), with or without entries.\n"
           "--ledger-write-buffers sets the memtable bytes of all partitions' ledgers together\n"
           "(at least 4MiB; divided among the running partitions), e.g. 256MiB.\n",
       .flags = {{"partition", "P", "partition (by name); starts an entry", true},
                 {"weight", "W", "relative weight, > 0; required per entry", true},
                 {"guarantee", "F", "guaranteed fraction of each resource, 0..1", true},
                 {"ceiling", "F", "fraction never exceeded, (0, 1]", true},
                 {"hard", "", "the ceiling is a hard CPU and egress limit", true},
                 {"cpu-workers", "N", "worker-pool threads, 1..1024"},
                 {"blocks-per-second", "N", "the node's block budget, 0..100000 (0 = none)"},
                 {"ledger-write-buffers", "BYTES", "memtables of all ledgers, >= 4MiB"}},
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
      {.name = "create-partition",
       .synopsis = "--config FILE|TEXT [--admins HOST:PORT,...]",
       .summary = "Create a partition live (every node of the cluster must create it).",
       .details =
           "--config is the body of a config file's partitions { ... } block, from a file or as\n"
           "text, e.g. --config 'id: 7 name: \"orders\" share { weight: 2 }'. The node applies\n"
           "defaults, validates it as the config it would leave, opens <data_dir>/partition-ID\n"
           "(reopening data a remove-partition kept) and starts it; the arbiter re-divides at\n"
           "once. The change is recorded under the data directory, so a restart keeps it.\n"
           "Consensus needs 2f+1 nodes running the partition: create it on every node, e.g.\n"
           "--admins 10.0.0.1:50052,10.0.0.2:50052,10.0.0.3:50052,10.0.0.4:50052.\n",
       .flags = {{"config", "FILE|TEXT", "the PartitionConfig (text format); required"},
                 {"admins", "HOST:PORT,...",
                  "apply to each of these admin addresses in turn (every node of the cluster), "
                  "instead of --admin"},
                 {"token-files", "FILE,...",
                  "with --admins: one admin token file per address, in order (else --token-file)"}},
       .run = RunCreatePartition},
      {.name = "stop-partition",
       .synopsis = "PARTITION [--drain-ms N] [--admins HOST:PORT,...]",
       .summary = "Stop a partition live: drain, close its stores; it stays listed as STOPPED.",
       .details =
           "A stopped partition refuses clients (UNAVAILABLE) and no longer votes; stopping\n"
           "it on more than f nodes halts its consensus until they start it again.\n",
       .flags = {{"drain-ms", "N", "how long the lanes may drain, 1..60000 (default 5000)"},
                 {"admins", "HOST:PORT,...",
                  "apply to each of these admin addresses in turn (every node of the cluster), "
                  "instead of --admin"},
                 {"token-files", "FILE,...",
                  "with --admins: one admin token file per address, in order (else --token-file)"}},
       .positionals = 1,
       .run = RunStopPartition},
      {.name = "start-partition",
       .synopsis = "PARTITION [--admins HOST:PORT,...]",
       .summary = "Start a stopped partition; it catches up with the others by block sync.",
       .flags = {{"admins", "HOST:PORT,...",
                  "apply to each of these admin addresses in turn (every node of the cluster), "
                  "instead of --admin"},
                 {"token-files", "FILE,...",
                  "with --admins: one admin token file per address, in order (else --token-file)"}},
       .positionals = 1,
       .run = RunStartPartition},
      {.name = "remove-partition",
       .synopsis = "PARTITION [--delete-data] [--admins HOST:PORT,...]",
       .summary = "Forget a stopped partition (its data is kept unless --delete-data).",
       .details = "A running partition is refused: stop it first. Kept data is reopened by a\n"
                  "later create-partition with the same id.\n",
       .flags = {{"delete-data", "", "also delete <data_dir>/partition-ID"},
                 {"admins", "HOST:PORT,...",
                  "apply to each of these admin addresses in turn (every node of the cluster), "
                  "instead of --admin"},
                 {"token-files", "FILE,...",
                  "with --admins: one admin token file per address, in order (else --token-file)"}},
       .positionals = 1,
       .run = RunRemovePartition},
  };
  return *kCommands;
}

void PrintTopHelp(std::ostream& out) {
  out << "usage: nodectl [global flags] COMMAND [flags]\n\n"
         "Watch and steer a running noded through its admin API (and follow its commits through\n"
         "the client API: watch-commits, get-value).\n\ncommands:\n";
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
    // The positional is the synopsis' last word ("PARTITION", "KEY").
    const std::string& synopsis = command->synopsis;
    const std::string positional = synopsis.substr(synopsis.rfind(' ') + 1);
    return UsageError(*command, absl::InvalidArgumentError(absl::StrCat(positional, ": empty")),
                      *io.err);
  }
  Context ctx(*command, io);
  if (absl::Status s = ctx.Configure(*flags); !s.ok()) return UsageError(*command, s, *io.err);
  return command->run(ctx, *flags);
}

}  // namespace nodectl
