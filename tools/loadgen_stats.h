// Per-second counters and latency samples of one partition's load, and their summaries.
//
// The generator, the RPC callbacks and the commit poller record into a PartitionStats (each
// method takes the run second the event belongs to); the reporter reads Snapshot()s. Offers,
// acceptances and rejections are booked in the second of the *offer*, so a row adds up
// (offered = accepted + rejected + client_dropped once responses are in); commits and their
// latencies in the second the commit was observed.
//
// Rejection reasons are a small fixed set, classified from the gRPC code, the TxResult / status
// message and the "rejected-by" trailing metadata (the interceptor stage's name):
//   rate (token bucket), pool (pool gate, pool full, sender quota), in_flight (concurrency),
//   unavailable (consensus not NORMAL, paused, node down), invalid (bad tx), other.
//
// Thread-safety: PartitionStats is thread-safe; the free functions are pure.
//
//   PartitionStats stats;
//   stats.AddOffered(3, 100);
//   stats.AddCommit(4, /*latency_ms=*/12.5);
//   Totals t = Summarize(stats.Snapshot(), {.from_s = 0, .to_s = 60});
#ifndef TOOLS_LOADGEN_STATS_H_
#define TOOLS_LOADGEN_STATS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace loadgen {

enum Reason { kRate = 0, kPool, kInFlight, kUnavailable, kInvalid, kOther, kNumReasons };
const char* ReasonName(int reason);

// `code` is a grpc::StatusCode / google.rpc.Code value (never OK here).
Reason ClassifyRejection(int code, absl::string_view message, absl::string_view rejected_by);

// True for rejections that can succeed when the same tx is sent again (rate, pool, in-flight,
// unavailable, deadline, a nonce gap that later nonces will fill); false for those that never can
// (malformed, bad signature, replayed nonce). See loadgen_txs.h, nonce hazard.
bool ShouldReoffer(int code, absl::string_view message);

// Nearest-rank percentile (q in [0, 1]) of `values`, which it sorts. 0 for an empty vector.
double Percentile(std::vector<double>& values, double q);

struct SecondStats {
  uint64_t offered = 0;
  uint64_t accepted = 0;
  std::array<uint64_t, kNumReasons> rejected = {};
  uint64_t client_dropped = 0;
  uint64_t committed = 0;
  std::vector<double> latencies_ms;

  uint64_t rejected_total() const;
};

class PartitionStats {
 public:
  void AddOffered(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddAccepted(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddRejected(int second, Reason reason, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddClientDropped(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddCommit(int second, double latency_ms) ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps the first message seen for `reason` (shown in the summary to explain the counts).
  void NoteExample(Reason reason, absl::string_view message) ABSL_LOCKS_EXCLUDED(mu_);
  std::array<std::string, kNumReasons> Examples() const ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of every second recorded so far (index = run second).
  std::vector<SecondStats> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // One second only (empty if nothing was recorded for it).
  SecondStats Second(int second) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  SecondStats& At(int second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<SecondStats> seconds_ ABSL_GUARDED_BY(mu_);
  std::array<std::string, kNumReasons> examples_ ABSL_GUARDED_BY(mu_);
};

// Totals over run seconds [from_s, to_s) of a series; rates divide by (to_s - from_s).
struct Window {
  int from_s = 0;
  int to_s = 0;
};
struct Totals {
  uint64_t offered = 0;
  uint64_t accepted = 0;
  std::array<uint64_t, kNumReasons> rejected = {};
  uint64_t rejected_total = 0;
  uint64_t client_dropped = 0;
  uint64_t committed = 0;
  double seconds = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  double offered_rate() const { return seconds > 0 ? offered / seconds : 0; }
  double accepted_rate() const { return seconds > 0 ? accepted / seconds : 0; }
  double committed_rate() const { return seconds > 0 ? committed / seconds : 0; }
};
Totals Summarize(const std::vector<SecondStats>& series, Window window);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_STATS_H_
