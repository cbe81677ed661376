// Offer schedules for loadgen: how many transactions a partition is offered by time t.
//
// A schedule is a pure function of run time (seconds since the clock started): Cumulative(t) is
// the (fractional) number of offers due in [0, t), non-decreasing; the generator sends
// floor(Cumulative(now)) minus what it already sent, so it stays on schedule however late a tick
// wakes up (open loop). Patterns, all in tx/s (a rate given in bytes/s is divided by the
// partition's tx size when parsed):
//   constant  `rate` from start to stop.
//   step      `rate` until `at` (run time), then `rate2`.
//   ramp      `rate` at start to `rate2` at stop, linearly.
//   burst     average `rate`, `peak` rate, `period`: each period starts with a peak lasting
//             period * rate / peak, then nothing (so the average over a period is `rate`).
// Every pattern is offered 0 before `start` and after `stop` (idle phases), so one run can measure
// a partition with its neighbour idle and then flooded.
//
// Scenario syntax (ParseScenario): partitions separated by ';', each `name:key=value,...`:
//   hot:rate=20000,pattern=constant;steady:rate=200,start=0s
//   bulk:pattern=burst,rate=5MB/s,peak=100MB/s,period=10s,tx_bytes=4096
//   hot:pattern=step,rate=0,rate2=20000,at=20s
// Keys: pattern, rate, rate2, peak, period, at, start, stop, tx_bytes, keys, reads (reads/s),
// reads_start, reads_stop, read_rpc=account|block (a partition may be given reads only:
// rate=0,reads=5000). Rates: `N`,
// `N/s` (tx/s) or `N<B|KB|MB|GB|KiB|MiB|GiB>/s` (bytes/s). Times: `N` seconds or with a unit
// (`500ms`, `2m`).
//
// Thread-safety: Schedule is immutable after construction; all functions are pure.
//
//   ASSIGN_OR_RETURN(auto loads, ParseScenario("hot:rate=100", /*tx_bytes=*/200, 60));
//   Schedule s(loads[0]);
//   uint64_t n = s.OffersBetween(0, 1);   // 100
#ifndef TOOLS_LOADGEN_SCHEDULE_H_
#define TOOLS_LOADGEN_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loadgen {

enum class PatternKind { kConstant, kStep, kRamp, kBurst };

// One partition's load as parsed. Rates are tx/s, times are run seconds.
struct PartitionLoad {
  std::string name;
  PatternKind kind = PatternKind::kConstant;
  double rate = 0;      // constant rate; step: before `at`; ramp: at start; burst: average
  double rate2 = 0;     // step: after `at`; ramp: at stop
  double peak = 0;      // burst: peak rate
  double at_s = 0;      // step: when the rate changes
  double period_s = 1;  // burst: period
  double start_s = 0;   // offered 0 before
  double stop_s = 0;    // offered 0 after (= the run's duration unless given)
  uint64_t tx_bytes = 0;
  // keys=per_sender: each sender overwrites one key (the state stays a fixed size); default
  // keys=unique: one new key per tx (the state grows with every commit).
  bool key_per_sender = false;
  // Reads (GetAccount of one of the run's senders, round-robin over targets) at `reads` per
  // second over [reads_start_s, reads_stop_s): a read flood beside the writes. 0 = none.
  double reads = 0;
  double reads_start_s = 0;
  double reads_stop_s = 0;  // = the run's duration unless given
  // read_rpc=block: each read is GetBlock(latest, with tx bodies) instead of GetAccount.
  bool read_blocks = false;
};

// Reads due in [0, t_s) of `load` (constant rate over its read window), fractional.
double ReadsBefore(const PartitionLoad& load, double t_s);

const char* PatternName(PatternKind kind);

class Schedule {
 public:
  // REQUIRES: `load` passed ParseScenario's validation.
  explicit Schedule(const PartitionLoad& load) : load_(load) {}

  // Offers due in [0, t_s); non-decreasing in t_s, constant after stop.
  double Cumulative(double t_s) const;
  // Whole offers due in [t0_s, t1_s): floor(Cumulative(t1)) - floor(Cumulative(t0)).
  uint64_t OffersBetween(double t0_s, double t1_s) const;
  // Whole offers due in [0, t_s).
  uint64_t OffersBefore(double t_s) const;
  // The highest instantaneous rate (tx/s) of the schedule, e.g. to size buffers.
  double MaxRate() const;
  // Total offers over the whole run.
  uint64_t TotalOffers() const { return OffersBefore(load_.stop_s); }

  const PartitionLoad& load() const { return load_; }

 private:
  PartitionLoad load_;
};

// Parses a --scenario value (see the file comment). `tx_bytes` is the default tx size (used to
// convert bytes/s), `duration_s` the run's length (default stop). Errors name the partition and
// key, e.g. "--scenario hot: rate: not a rate 'x' (e.g. 2000, 2000/s, 5MB/s)".
absl::StatusOr<std::vector<PartitionLoad>> ParseScenario(absl::string_view text, uint64_t tx_bytes,
                                                         double duration_s);

// "60s", "500ms", "2m", or a plain number of seconds. Errors name `what`.
absl::StatusOr<double> ParseSeconds(absl::string_view what, absl::string_view text);

// A rate in tx/s: "2000", "2000/s", "2000tx/s", or bytes/s ("5MB/s", "64KiB/s") divided by
// `tx_bytes`. Errors name `what`.
absl::StatusOr<double> ParseRate(absl::string_view what, absl::string_view text, uint64_t tx_bytes);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_SCHEDULE_H_
