// watch_fanout's library (tools/watch_fanout.cc is the program): its flags, the run (N
// ClientService.WatchCommits streams held open on one node) and the run's report. What it
// measures: responses and serialized bytes per stream, how late each stream gets each block, and
// how streams ended early. Two delays, both on this machine's wall clock:
//   spread  arrival - the earliest arrival of the same height on any stream of this run: what the
//           fan-out itself adds (the node's per-watcher work and queueing, plus this client's);
//   lag     arrival - the block header's timestamp_ms (the proposer's clock; comparable when
//           client and node share a clock, e.g. a localnet). The node currently builds every
//           block with timestamp_ms = 0 (replicas must build identical blocks), so such blocks
//           are only counted (blocks_without_timestamp) and lag stays empty.
//
// Each stream is a gRPC callback reactor (no thread per stream). The streams are spread over
// ceil(N / --streams-per-channel) channels, each with its own subchannel pool and so its own TCP
// connection: N subscribers look like several clients, not all one HTTP/2 connection.
// A stream that ends before the run does (RESOURCE_EXHAUSTED: the partition's watch.max_watchers
// was full at the start, or the stream was cut as too slow; UNAVAILABLE; ...) is counted by
// status code and never reopened: the benchmark wants to see the cuts.
//
//   absl::StatusOr<watch_fanout::Options> o = watch_fanout::ParseFlags(args);
//   absl::StatusOr<watch_fanout::Report> r = watch_fanout::Run(*o);
//   std::cout << watch_fanout::FormatJson(*o, *r);
#ifndef TOOLS_WATCH_FANOUT_LIB_H_
#define TOOLS_WATCH_FANOUT_LIB_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace watch_fanout {

extern const char kUsage[];

struct Options {
  std::string target;
  std::string partition;
  int streams = 64;
  int streams_per_channel = 100;
  double duration_s = 0;
  bool include_txs = false;
  bool include_receipts = false;
  bool json = false;
  std::string tls_ca;
  bool help = false;
};

// Accepts `--name value` and `--name=value`; the bool flags take no value (or `=true|false`).
// An error names the flag.
absl::StatusOr<Options> ParseFlags(const std::vector<std::string>& args);

// Delays in 100 us buckets up to 60 s plus one overflow bucket, and the exact maximum: bounded
// memory however many blocks arrive. Thread-safe.
class DelayHistogram {
 public:
  struct Summary {
    uint64_t samples = 0;
    uint64_t negative = 0;  // arrived "before" their reference time (clock skew); counted as 0
    double p50_ms = 0;      // lower bound of the bucket holding the percentile
    double p99_ms = 0;
    double max_ms = 0;
  };

  void Record(int64_t delay_us) {
    absl::MutexLock l(&mu_);
    if (delay_us < 0) ++negative_;
    const int64_t clamped = std::max<int64_t>(delay_us, 0);
    ++counts_[std::min(clamped / kBucketUs, kBuckets)];
    max_us_ = std::max(max_us_, clamped);
    ++samples_;
  }

  Summary Summarize() const {
    absl::MutexLock l(&mu_);
    Summary s{.samples = samples_, .negative = negative_, .max_ms = max_us_ / 1e3};
    if (samples_ == 0) return s;
    s.p50_ms = PercentileUs(0.50) / 1e3;
    s.p99_ms = PercentileUs(0.99) / 1e3;
    return s;
  }

 private:
  static constexpr int64_t kBucketUs = 100;
  static constexpr int64_t kBuckets = 60 * 1'000'000 / kBucketUs;  // counts_[kBuckets]: >= 60 s

  // The delay at rank ceil(q * samples): its bucket's lower bound, or the maximum if it is in
  // the overflow bucket.
  double PercentileUs(double q) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto rank =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(samples_))));
    uint64_t seen = 0;
    for (int64_t b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) return static_cast<double>(b * kBucketUs);
    }
    return static_cast<double>(max_us_);
  }

  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_) = std::vector<uint64_t>(kBuckets + 1);
  uint64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t negative_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_us_ ABSL_GUARDED_BY(mu_) = 0;
};

// How the streams that ended early ended, by status code name.
struct EarlyEnd {
  int count = 0;
  int after_responses = 0;     // had received at least one block (a cut, not a refusal)
  int with_resume_height = 0;  // carried the "resume-height" trailer
  std::string first_message;
};

struct Report {
  int streams = 0;
  int channels = 0;
  int opened_ok = 0;
  int alive_at_end = 0;
  uint64_t responses_total = 0;
  uint64_t responses_min = 0;
  uint64_t responses_max = 0;
  uint64_t bytes_total = 0;
  uint64_t first_height = 0;
  uint64_t last_height = 0;
  DelayHistogram::Summary lag;
  DelayHistogram::Summary spread;
  uint64_t blocks_without_timestamp = 0;
  std::map<std::string, EarlyEnd> ended_early;
  double duration_s = 0;
};

// Opens o.streams streams on o.target and keeps them until o.duration_s has passed (or every
// stream has ended), then cancels them. Errors: INVALID_ARGUMENT (a bad --tls-ca), UNAVAILABLE (a
// channel did not connect within 5 s), DEADLINE_EXCEEDED (streams still running 10 s after the
// cancel; what they use is left allocated, and the caller should exit).
absl::StatusOr<Report> Run(const Options& o);

// The report as one JSON object (one line, no newline), or as text lines.
std::string FormatJson(const Options& o, const Report& r);
std::string FormatText(const Report& r);

}  // namespace watch_fanout

#endif  // TOOLS_WATCH_FANOUT_LIB_H_
