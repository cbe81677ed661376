#include "tools/loadgen_flags.h"

#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "flowctl/status_macros.h"

namespace loadgen {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", message));
}

absl::StatusOr<int64_t> ParseInt(absl::string_view flag, const std::string& text, int64_t min,
                                 int64_t max) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
    return Bad(flag,
               absl::StrCat("must be an integer in [", min, ", ", max, "], got '", text, "'"));
  }
  return v;
}

absl::StatusOr<std::vector<std::string>> ParseAddresses(absl::string_view flag,
                                                        const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view a : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    size_t colon = a.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(a.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return Bad(flag, absl::StrCat("not host:port: '", a, "'"));
    }
    out.emplace_back(a);
  }
  if (out.empty()) return Bad(flag, "no address given");
  return out;
}

const std::set<std::string>& BoolFlags() {
  static const std::set<std::string> k = {"quiet", "help", "honour-retry-after"};
  return k;
}
const std::set<std::string>& ValueFlags() {
  static const std::set<std::string> k = {"targets",        "admin",          "admin-token-file",
                                          "duration",       "drain",          "scenario",
                                          "tx-bytes",       "senders",        "batch-ms",
                                          "seed",           "presign",        "max-in-flight",
                                          "rpc-timeout-ms", "poll-ms",        "out",
                                          "expect",         "tls-ca",         "route",
                                          "commits",        "reads-in-flight"};
  return k;
}

}  // namespace

absl::StatusOr<Options> ParseLoadgenFlags(const std::vector<std::string>& args, bool* help) {
  *help = false;
  std::multimap<std::string, std::string> flags;
  std::vector<std::string> order;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return Options{};
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (every option is a --flag)"));
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (BoolFlags().count(name)) {
      if (inline_value) return Bad(name, "takes no value");
      value = "true";
    } else if (ValueFlags().count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) return Bad(name, "missing value");
        value = args[++i];
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (name != "expect" && name != "scenario" && flags.count(name)) {
      return Bad(name, "given more than once");
    }
    flags.emplace(name, value);
  }
  auto get = [&](const char* name) -> const std::string* {
    auto it = flags.find(name);
    return it == flags.end() ? nullptr : &it->second;
  };

  Options o;
  if (const std::string* v = get("targets")) {
    ASSIGN_OR_RETURN(o.targets, ParseAddresses("targets", *v));
  } else {
    return Bad("targets", "required (client ports, e.g. 127.0.0.1:50051,127.0.0.1:50061)");
  }
  if (const std::string* v = get("admin")) {
    ASSIGN_OR_RETURN(o.admins, ParseAddresses("admin", *v));
  }
  if (const std::string* v = get("admin-token-file")) {
    o.admin_token_files = absl::StrSplit(*v, ',', absl::SkipWhitespace());
    if (o.admins.empty()) return Bad("admin-token-file", "needs --admin");
    if (o.admin_token_files.size() != 1 && o.admin_token_files.size() != o.admins.size()) {
      return Bad("admin-token-file",
                 absl::StrCat("give one file or one per --admin address (", o.admins.size(),
                              "), got ", o.admin_token_files.size()));
    }
  }
  if (const std::string* v = get("tls-ca")) {
    if (v->empty()) return Bad("tls-ca", "must name a PEM file");
    o.tls_ca_file = *v;
  }
  if (const std::string* v = get("duration")) {
    ASSIGN_OR_RETURN(o.duration_s, ParseSeconds("--duration", *v));
    if (o.duration_s < 1 || o.duration_s > 86400) {
      return Bad("duration", absl::StrCat("must be in [1s, 24h], got '", *v, "'"));
    }
  }
  if (const std::string* v = get("drain")) {
    ASSIGN_OR_RETURN(o.drain_s, ParseSeconds("--drain", *v));
    if (o.drain_s > 600) return Bad("drain", "must be <= 600s");
  }
  if (const std::string* v = get("tx-bytes")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("tx-bytes", *v, 64, 65536));
    o.tx_bytes = static_cast<uint64_t>(n);
  }
  if (const std::string* v = get("senders")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("senders", *v, 1, 100000));
    o.senders = static_cast<int>(n);
  }
  if (const std::string* v = get("batch-ms")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("batch-ms", *v, 1, 1000));
    o.batch_ms = static_cast<int>(n);
  }
  if (const std::string* v = get("route")) {
    if (*v != "sender" && *v != "spread") {
      return Bad("route", absl::StrCat("must be sender or spread, got '", *v, "'"));
    }
    o.route_by_sender = *v == "sender";
  }
  if (const std::string* v = get("seed")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("seed", *v, 0, INT64_MAX));
    o.seed = static_cast<uint64_t>(n);
  }
  if (const std::string* v = get("presign")) {
    ASSIGN_OR_RETURN(o.presign, ParseInt("presign", *v, 0, 100000000));
  }
  if (const std::string* v = get("reads-in-flight")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("reads-in-flight", *v, 1, 10000000));
    o.reads_in_flight = static_cast<int>(n);
  }
  if (const std::string* v = get("max-in-flight")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("max-in-flight", *v, 1, 100000));
    o.max_in_flight = static_cast<int>(n);
  }
  if (const std::string* v = get("rpc-timeout-ms")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("rpc-timeout-ms", *v, 10, 600000));
    o.rpc_timeout_ms = static_cast<int>(n);
  }
  if (const std::string* v = get("poll-ms")) {
    ASSIGN_OR_RETURN(int64_t n, ParseInt("poll-ms", *v, 10, 10000));
    o.poll_ms = static_cast<int>(n);
  }
  if (const std::string* v = get("commits")) {
    if (*v != "poll" && *v != "watch")
      return Bad("commits", "must be poll or watch, got '" + *v + "'");
    o.watch_commits = *v == "watch";
  }
  if (const std::string* v = get("out")) {
    if (v->empty()) return Bad("out", "empty directory name");
    o.out_dir = *v;
  }
  o.quiet = get("quiet") != nullptr;
  o.honour_retry_after = get("honour-retry-after") != nullptr;
  std::vector<std::string> scenarios;
  for (auto [it, end] = flags.equal_range("scenario"); it != end; ++it)
    scenarios.push_back(it->second);
  if (scenarios.empty()) {
    return Bad("scenario", "required, e.g. \"hot:rate=20000;steady:rate=200\"");
  }
  o.scenario = absl::StrJoin(scenarios, ";");
  ASSIGN_OR_RETURN(o.loads, ParseScenario(o.scenario, o.tx_bytes, o.duration_s));
  std::set<std::string> names;
  for (const PartitionLoad& l : o.loads) names.insert(l.name);
  for (auto [it, end] = flags.equal_range("expect"); it != end; ++it) {
    ASSIGN_OR_RETURN(Expectation e, ParseExpectation(it->second));
    for (const MetricRef* ref : {&e.lhs, &e.rhs_ref}) {
      if (!ref->partition.empty() && names.count(ref->partition) == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--expect '", e.text, "': partition '",
                                                       ref->partition, "' is not in --scenario"));
      }
    }
    if ((e.lhs.metric == "view_changes" || e.rhs_ref.metric == "view_changes") &&
        o.admins.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--expect '", e.text, "': view_changes needs --admin"));
    }
    o.expectations.push_back(std::move(e));
  }
  return o;
}

std::string LoadgenUsage() {
  return R"(usage: loadgen --targets HOST:PORT[,...] --scenario SPEC [flags]

Open-loop load per partition against noded's ClientService. Offers follow the schedule whatever
the answers (with --honour-retry-after, minus those held back by retry-after hints); txs due in
the same --batch-ms tick go out as SubmitTxBatch RPCs, one per target (--route sender) or one to
the next target (--route spread). Commits are found by polling GetChainStatus/GetBlock every
--poll-ms (--commits poll) or from WatchCommits streams (--commits watch).

  --targets A,B,...        client ports of the nodes (required)
  --scenario SPEC          partitions and their load (required; repeatable, joined with ';'):
                             NAME:key=value,...;NAME2:...   keys:
                             pattern=constant|step|ramp|burst (default constant)
                             rate=R       constant rate; step: before `at`; ramp: at start;
                                          burst: the average
                             rate2=R      step: after `at`; ramp: at stop
                             at=T         step time      peak=R, period=T   burst
                             start=T stop=T  offered 0 before start / after stop (idle phases)
                             tx_bytes=N   this partition's tx size
                             keys=unique|per_sender  a new key per tx (default; the state
                                          grows) or one key per sender (fixed-size state)
                             reads=N      also N GetAccount reads/s (a read flood beside the
                                          writes; rate=0 for reads only), over
                             reads_start=T reads_stop=T (default: the whole run)
                             read_rpc=account|block  GetAccount (default) or GetBlock of the
                                          latest block with its tx bodies
                           R: tx/s (2000, 2000/s) or bytes/s (5MB/s, 64KiB/s)
                           T: seconds (20, 20s, 500ms, 1m) since the run started
  --duration T             offer window (default 60s)
  --drain T                after it, wait up to T for outstanding commits (default 10s)
  --tx-bytes N             SignedTransaction size, 64..65536 (default 200)
  --senders N              Ed25519 sender accounts per run (default 256)
  --seed N                 derives the sender keys (default 1); the same seed continues nonces
  --presign N              txs signed per partition before the clock starts
                           (default min(total offers, 100000); more are signed on the fly)
  --batch-ms N             tick length (default 10)
  --route sender|spread    sender (default): each sender's txs go to one target (sender mod
                           targets), in nonce order, as a wallet talks to one node (for 500 ms
                           after the target answers UNAVAILABLE, to the next one); spread:
                           each tick's batch goes to the next target, so a sender's
                           consecutive nonces reach different nodes and arrive out of order
  --max-in-flight N        SubmitTxBatch RPCs per target; over it offers count as dropped
                           (default 64)
  --reads-in-flight N      reads (scenario key reads) in flight per target; over it a due read
                           is not sent (default 512). Reads go over connections of their own.
  --honour-retry-after     a tx rejected with a retry-after hint (TxResult.retry_after_ms, or
                           the retry-after-ms trailer of a failed RPC) holds its sender until
                           the answer time + the hint: nothing of it (neither that tx nor fresh
                           ones, to keep nonces in order) is offered before; offers due while all
                           senders they could come from are held count as held. Without it,
                           rejected txs go again at the next tick. Either way the summary says
                           how often a re-offer after (and before) the hint was accepted
  --rpc-timeout-ms N       deadline of each RPC (default 5000)
  --commits poll|watch     how commits are found: poll (default): GetChainStatus/GetBlock
                           every --poll-ms on the target furthest ahead; watch: a WatchCommits
                           stream per partition and target, resumed where it ended (a tx's
                           commit time is when the first target streams its block)
  --poll-ms N              commit poll interval (default 100)
  --admin A,B,...          admin ports: view changes per partition over the run
  --admin-token-file F,..  bearer token file for --admin: one for all or one per address
  --tls-ca FILE            dial --targets and --admin with TLS, trusting the PEM CA in FILE
                           (e.g. D/tls/ca.crt of `tools/localnet up --tls client`)
  --out DIR                write DIR/series.csv, DIR/summary.json (with the retry-after
                           figures), DIR/report.svg
  --expect EXPR            assertion, repeatable: [PARTITION.]METRIC[@FROM-TO] OP VALUE[UNIT]
                             METRIC: p50 p99 max_latency (ms) | committed accepted offered
                             rejected client_dropped held view_changes | committed_rate
                             accepted_rate offered_rate rejected_rate (tx/s) | hint_accuracy
                             (re-offers after a retry-after hint that were accepted, 0..1)
                             OP: < <= > >= ==   UNIT: ms s us | /s | %
                             VALUE may be [K*]METRIC[@FROM-TO] of the same run, e.g.
                             'steady.p99@30s-60s<=1.2*steady.p99@5s-25s'
                           without PARTITION it must hold for every partition
  --quiet                  no per-second lines
  -h, --help               this text

Examples:
  loadgen --targets 127.0.0.1:50051,127.0.0.1:50061 --duration 60s \
    --scenario 'hot:rate=20000;steady:rate=200' --expect 'steady.p99<200ms' --out /tmp/run
  loadgen --targets 127.0.0.1:50051 --duration 60s --tx-bytes 4096 \
    --scenario 'bulk:pattern=burst,rate=5MB/s,peak=100MB/s,period=10s'
  loadgen --targets 127.0.0.1:50051 --duration 60s --scenario 'hot:rate=20000' \
    --honour-retry-after --expect 'hot.hint_accuracy>=80%'

Exit: 0 all expectations passed; 1 an expectation failed or a target was unreachable;
2 usage error.
)";
}

}  // namespace loadgen
