#include "flowctl/quota_drain.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace flowctl {

double QuotaDrain::BurstFor(double rate, absl::Duration tick) {
  if (std::isinf(rate) || rate <= 0) return 0;
  // Two ticks' worth: pumping once per tick leaves up to one record's tokens over, which a
  // one-tick burst would clip every tick (~half a record per tick lost to the cap).
  return 2 * rate * absl::ToDoubleSeconds(tick);
}

absl::Status QuotaDrain::ValidateOptions(const QuotaDrainOptions& o) {
  if (o.tick <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("quota drain: tick must be > 0");
  }
  if (o.max_records_per_pump == 0) {
    return absl::InvalidArgumentError("quota drain: max_records_per_pump must be > 0");
  }
  if (o.idle_wait <= absl::ZeroDuration() || o.error_backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("quota drain: idle_wait must be > 0, error_backoff >= 0");
  }
  if (o.clock == nullptr) return absl::InvalidArgumentError("quota drain: clock must be set");
  return TokenBucket::ValidateParams(o.rate_bytes_per_sec, BurstFor(o.rate_bytes_per_sec, o.tick));
}

QuotaDrain::QuotaDrain(SpillFifo* fifo, Sink sink, QuotaDrainOptions options)
    : fifo_(fifo),
      sink_(std::move(sink)),
      options_(options),
      bucket_(options.rate_bytes_per_sec, BurstFor(options.rate_bytes_per_sec, options.tick),
              options.clock) {
  const absl::Status valid = ValidateOptions(options);
  CHECK(valid.ok()) << valid;
}

QuotaDrain::~QuotaDrain() { Stop(); }

absl::StatusOr<QuotaDrain::PumpResult> QuotaDrain::PumpOnce(int64_t now_nanos) {
  absl::MutexLock pump(&pump_mu_);
  PumpResult result;
  absl::Status error;
  uint64_t sink_errors = 0;
  while (result.records < options_.max_records_per_pump) {
    absl::StatusOr<const SpillFifo::Record*> front = fifo_->Front();
    if (!front.ok()) {
      error = front.status();
      break;
    }
    if (*front == nullptr) break;
    const SpillFifo::Record& record = **front;
    const double size = static_cast<double>(record.data.size());
    if (!bucket_.TryAcquireAt(size, now_nanos)) {
      result.waiting_bytes = std::max<uint64_t>(record.data.size(), 1);
      break;
    }
    if (absl::Status s = sink_(record); !s.ok()) {
      ++sink_errors;
      error = std::move(s);
      break;
    }
    const uint64_t bytes = record.data.size();  // before Pop invalidates `record`
    if (absl::Status s = fifo_->Pop(); !s.ok()) {
      error = std::move(s);
      break;
    }
    ++result.records;
    result.bytes += bytes;
  }
  // Records consumed earlier may have become safe since (a commit moved the persist limit):
  // free their segment now rather than at the next Pop, which a full disk budget may hold off.
  if (absl::Status s = fifo_->PersistIfReclaimable(); !s.ok() && error.ok()) error = std::move(s);
  absl::MutexLock l(&mu_);
  stats_.records += result.records;
  stats_.bytes += result.bytes;
  stats_.sink_errors += sink_errors;
  if (!error.ok()) {
    stats_.last_error = error;
    return error;
  }
  return result;
}

absl::Status QuotaDrain::Start() {
  absl::MutexLock life(&lifecycle_mu_);
  {
    absl::MutexLock l(&mu_);
    if (started_) return absl::FailedPreconditionError("quota drain: already started");
    started_ = true;
    stop_ = false;
  }
  thread_ = std::thread([this] {
    NameThisThread("drain");
    Loop();
  });
  return absl::OkStatus();
}

void QuotaDrain::Stop() {
  absl::MutexLock life(&lifecycle_mu_);
  {
    absl::MutexLock l(&mu_);
    if (!started_) return;
    stop_ = true;
    WakeLocked();
  }
  thread_.join();
  absl::MutexLock l(&mu_);
  started_ = false;
}

void QuotaDrain::WakeLocked() {
  wake_ = true;
  fifo_->WakeConsumer();  // FIFO's mu_ is a leaf lock; no cycle with ours
}

absl::Status QuotaDrain::SetRate(double rate_bytes_per_sec) {
  if (absl::Status s =
          bucket_.SetRate(rate_bytes_per_sec, BurstFor(rate_bytes_per_sec, options_.tick));
      !s.ok()) {
    return s;
  }
  absl::MutexLock l(&mu_);
  WakeLocked();
  return absl::OkStatus();
}

QuotaDrainStats QuotaDrain::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

void QuotaDrain::Loop() {
  while (true) {
    absl::Duration wait;
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      wake_ = false;  // wakes from here on are seen by the waits below
    }
    absl::StatusOr<PumpResult> r = PumpOnce(options_.clock->NowNanos());
    if (r.ok() && r->records >= options_.max_records_per_pump) continue;
    if (r.ok() && r->waiting_bytes == 0) {
      // Empty: sleep until a producer appends, or Stop/SetRate wakes the FIFO's consumer.
      fifo_->WaitForRecords(options_.idle_wait);
      continue;
    }
    if (!r.ok()) {
      wait = options_.error_backoff;
    } else {
      // Throttled: sleep exactly until the bucket holds the front record's bytes.
      const int64_t nanos = bucket_.NanosUntil(static_cast<double>(r->waiting_bytes));
      wait = nanos == TokenBucket::kNever ? options_.idle_wait
                                          : std::min(absl::Nanoseconds(nanos), options_.idle_wait);
    }
    absl::MutexLock l(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || wake_; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
  }
}

}  // namespace flowctl
