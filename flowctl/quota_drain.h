// QuotaDrain: the flow controller of lossless mode. Moves records from a SpillFifo to a sink at
// no more than a byte rate.
//
// Each pump takes the FIFO's front record, asks the token bucket for its size in bytes, hands it
// to the sink and pops it only when the sink returns OK: a failing sink leaves the record at the
// front (delivered again on the next pump), and the tokens it took are not refunded, so retries
// of a failing sink are rate-limited too. The bucket's burst is 2 x rate x `tick` (small ticks;
// two so that pumping once a tick loses no refill to the cap), so over any interval t at most
// rate * t + max(2 * rate * tick, largest record) bytes leave.
//
// Two ways to drive it: PumpOnce(now) from a test or an existing loop (deterministic with a
// FakeClock), or Start() for a background thread that sleeps on conditions, never blind: on the
// FIFO becoming non-empty (SpillFifo::WaitForRecords), on the bucket refilling (a timed wait for
// exactly the time the front record needs), or on SetRate/Stop. Use one or the other.
//
// Thread-safety: all methods are thread-safe; PumpOnce calls are serialized. The drain is the
// FIFO's one consumer: nothing else may call Front/Pop while it runs. The sink runs on the
// pumping thread with no drain lock held except the pump serialization.
//
//   flowctl::QuotaDrain drain(fifo.get(), [&](const flowctl::SpillFifo::Record& r) {
//     return egress.Send(r.data);
//   }, {.rate_bytes_per_sec = 50e6});
//   RETURN_IF_ERROR(drain.Start());
//   ...
//   drain.SetRate(20e6);   // live
#ifndef FLOWCTL_QUOTA_DRAIN_H_
#define FLOWCTL_QUOTA_DRAIN_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/token_bucket.h"

namespace flowctl {

struct QuotaDrainOptions {
  double rate_bytes_per_sec = 0;                // 0 = paused, TokenBucket::kUnlimited = no cap
  absl::Duration tick = absl::Milliseconds(1);  // burst = 2 x rate x tick
  size_t max_records_per_pump = 1024;           // bounds one PumpOnce call
  absl::Duration idle_wait = absl::Milliseconds(100);     // thread: longest single wait
  absl::Duration error_backoff = absl::Milliseconds(10);  // thread: pause after a sink error
  const Clock* clock = Clock::Real();
};

struct QuotaDrainStats {
  uint64_t records = 0;      // delivered and popped
  uint64_t bytes = 0;        // payload bytes delivered
  uint64_t sink_errors = 0;  // sink calls that failed (record kept)
  absl::Status last_error;   // of the sink or the FIFO
};

class QuotaDrain {
 public:
  using Sink = std::function<absl::Status(const SpillFifo::Record&)>;

  struct PumpResult {
    size_t records = 0;  // moved by this call
    uint64_t bytes = 0;
    uint64_t waiting_bytes = 0;  // size of the front record that lacked tokens; 0 = FIFO empty
  };

  // REQUIRES: ValidateOptions(options).ok(); fifo and clock outlive the drain.
  QuotaDrain(SpillFifo* fifo, Sink sink, QuotaDrainOptions options);
  ~QuotaDrain();  // Stop()

  QuotaDrain(const QuotaDrain&) = delete;
  QuotaDrain& operator=(const QuotaDrain&) = delete;

  static absl::Status ValidateOptions(const QuotaDrainOptions& options);

  // Moves records while tokens allow at time `now_nanos`. Returns the first FIFO or sink error
  // (what was moved before it stays moved).
  absl::StatusOr<PumpResult> PumpOnce(int64_t now_nanos);
  absl::StatusOr<PumpResult> PumpOnce() { return PumpOnce(options_.clock->NowNanos()); }

  // Starts the background thread. FailedPrecondition if already started.
  absl::Status Start();
  // Stops and joins the background thread; idempotent.
  void Stop();

  // Changes the rate live (burst follows as 2 x rate x tick); wakes the thread.
  absl::Status SetRate(double rate_bytes_per_sec);
  double rate() const { return bucket_.rate(); }

  QuotaDrainStats stats() const;

 private:
  static double BurstFor(double rate, absl::Duration tick);
  void Loop();
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  SpillFifo* const fifo_;
  const Sink sink_;
  const QuotaDrainOptions options_;

  TokenBucket bucket_;   // thread-safe itself
  absl::Mutex pump_mu_;  // serializes PumpOnce (and so the FIFO consumer side)

  mutable absl::Mutex mu_;
  QuotaDrainStats stats_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // touched only by Start/Stop, serialized by lifecycle_mu_
  absl::Mutex lifecycle_mu_;
};

}  // namespace flowctl

#endif  // FLOWCTL_QUOTA_DRAIN_H_
