// loadgen's command line: flags into Options, and the --help text.
//
// Flags are `--name value` or `--name=value`; boolean flags (--quiet, --honour-retry-after) take
// no value; --expect, --scenario may repeat (scenarios are joined with ';'). Every error is
// InvalidArgument naming the flag ("--duration: not a duration 'x' (e.g. 60s, 500ms, 2m)"); loadgen
// prints it with a hint and exits 2.
//
// Thread-safety: pure functions.
//
//   bool help = false;
//   ASSIGN_OR_RETURN(Options o, ParseLoadgenFlags(args, &help));
#ifndef TOOLS_LOADGEN_FLAGS_H_
#define TOOLS_LOADGEN_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/loadgen_expect.h"
#include "tools/loadgen_schedule.h"

namespace loadgen {

struct Options {
  std::vector<std::string> targets;  // client ports, host:port
  std::vector<std::string> admins;   // admin ports (view changes), may be empty
  // Files holding the bearer token for --admin: one for every address, or one per address.
  std::vector<std::string> admin_token_files;
  // PEM CA certificates to trust: dial --targets and --admin with TLS (empty: plaintext).
  std::string tls_ca_file;
  double duration_s = 60;
  double drain_s = 10;   // longest wait for outstanding commits after the run
  std::string scenario;  // as given (joined)
  std::vector<PartitionLoad> loads;
  uint64_t tx_bytes = 200;
  int senders = 256;
  int batch_ms = 10;
  // Each sender's txs go to one target (sender % targets), as a wallet talks to one node;
  // false: every batch goes to the next target whatever its senders (--route spread).
  bool route_by_sender = true;
  uint64_t seed = 1;
  int64_t presign = -1;       // per partition; -1 = min(total offers, 100000)
  int max_in_flight = 64;     // SubmitTxBatch RPCs per target
  int reads_in_flight = 512;  // reads per target (scenario key `reads`)
  int rpc_timeout_ms = 5000;
  int poll_ms = 100;
  // How commits are found: false = poll GetChainStatus/GetBlock every poll_ms on the target that
  // is furthest ahead; true = one WatchCommits stream per partition and target (a tx counts as
  // committed when the first target streams its block).
  bool watch_commits = false;
  std::string out_dir;
  std::vector<Expectation> expectations;
  bool quiet = false;  // no per-second lines
  // A tx rejected with a retry-after hint h holds its sender until answer time + h: the sender
  // offers nothing before then (loadgen_txs.h); offers due meanwhile count as held. false: hints
  // are only measured (the baseline), never waited for.
  bool honour_retry_after = false;
};

// `help` is set (and defaults returned) when -h/--help is given.
absl::StatusOr<Options> ParseLoadgenFlags(const std::vector<std::string>& args, bool* help);

std::string LoadgenUsage();

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_FLAGS_H_
