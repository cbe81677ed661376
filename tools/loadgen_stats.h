// Per-second counters and latency samples of one partition's load, and their summaries.
//
// The generator, the RPC callbacks and the commit poller record into a PartitionStats (each
// method takes the run second the event belongs to); the reporter reads Snapshot()s. Offers,
// acceptances and rejections are booked in the second of the *offer*, so a row adds up
// (offered = accepted + rejected + client_dropped + held once responses are in); commits and
// their latencies in the second the commit was observed. `held` offers were due while every
// sender that could send them was waiting out a retry-after hint (--honour-retry-after; see
// loadgen_txs.h); without that flag it stays 0.
//
// Retry-after hints (HintCounts, booked in the second of the offer that was answered), in both
// modes, so a run without --honour-retry-after is the baseline: each rejection carrying a hint
// (TxResult.retry_after_ms, or the "retry-after-ms" trailer of a failed RPC) counts as hinted
// with its hint; when that tx is re-offered and answered, the re-offer counts as after the hint
// (sent >= hint after the rejection's answer) or before it, and as accepted or not. So
// accepted_after_hint / reoffers_after_hint says how well the hints predicted acceptance.
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
//   stats.AddHints(3, {.hinted_rejections = 2, .hint_ms_sum = 100});
//   Totals t = Summarize(stats.Snapshot(), {.from_s = 0, .to_s = 60});
#ifndef TOOLS_LOADGEN_STATS_H_
#define TOOLS_LOADGEN_STATS_H_

#include <array>
#include <cstdint>
#include <optional>
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

// Retry-after hints given and how re-offers around them fared (see file comment).
struct HintCounts {
  uint64_t hinted_rejections = 0;     // rejections carrying a hint > 0
  uint64_t hint_ms_sum = 0;           // sum of those hints
  uint64_t reoffers_after_hint = 0;   // re-offers of a hinted tx sent >= its hint later
  uint64_t accepted_after_hint = 0;   // ... of which accepted
  uint64_t reoffers_before_hint = 0;  // re-offers of a hinted tx sent sooner
  uint64_t accepted_before_hint = 0;  // ... of which accepted

  HintCounts& operator+=(const HintCounts& other);
  bool empty() const;
  double mean_hint_ms() const;  // 0 without hints
  // accepted_after_hint / reoffers_after_hint; nullopt without such re-offers.
  std::optional<double> accuracy() const;
};

// Reads (scenario key `reads`): GetAccount calls, booked in the second they were sent.
struct ReadCounts {
  uint64_t offered = 0;
  uint64_t ok = 0;
  uint64_t rejected = 0;             // RESOURCE_EXHAUSTED / UNAVAILABLE: the read chain said no
  uint64_t failed = 0;               // any other error
  uint64_t client_dropped = 0;       // over 512 reads in flight per target: never sent
  std::vector<double> latencies_ms;  // of the ok ones
};

struct SecondStats {
  ReadCounts reads;
  uint64_t offered = 0;
  uint64_t accepted = 0;
  std::array<uint64_t, kNumReasons> rejected = {};
  uint64_t client_dropped = 0;
  uint64_t held = 0;  // due while their senders waited out a retry-after hint
  uint64_t committed = 0;
  HintCounts hints;
  std::vector<double> latencies_ms;

  uint64_t rejected_total() const;
};

class PartitionStats {
 public:
  void AddOffered(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddAccepted(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddRejected(int second, Reason reason, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddClientDropped(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddHeld(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddHints(int second, const HintCounts& counts) ABSL_LOCKS_EXCLUDED(mu_);
  void AddCommit(int second, double latency_ms) ABSL_LOCKS_EXCLUDED(mu_);
  void AddReadsOffered(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  void AddReadsDropped(int second, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // One answered read: ok (with its latency), refused by the node's read chain, or failed.
  enum class ReadOutcome { kOk, kRejected, kFailed };
  void AddRead(int second, ReadOutcome outcome, double latency_ms) ABSL_LOCKS_EXCLUDED(mu_);
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
  uint64_t held = 0;
  uint64_t committed = 0;
  HintCounts hints;
  uint64_t reads_offered = 0;
  uint64_t reads_ok = 0;
  uint64_t reads_rejected = 0;
  uint64_t reads_failed = 0;
  uint64_t reads_client_dropped = 0;
  double read_p50_ms = 0;
  double read_p99_ms = 0;
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
