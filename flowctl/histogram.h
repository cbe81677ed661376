// Histogram: a lock-free log-linear histogram of non-negative int64 values (latencies in
// nanoseconds, sizes in bytes), for queueing-delay and latency statistics on hot paths.
//
// Values below 16 get one bucket each; above that every power of two is split into 16 equal
// buckets, so a reported percentile is within 1/16 (6.25%) of the true value. Record() is a few
// relaxed atomic adds and may be called from any thread; Snapshot() may run concurrently with
// Record() and sees each recorded value or not (counts are not torn).
//
//   flowctl::Histogram delay;
//   delay.Record(now - enqueued_at);
//   flowctl::HistogramSnapshot s = delay.Snapshot();
//   LOG(INFO) << "p99 " << s.Percentile(0.99) << " ns over " << s.count << " samples";
#ifndef FLOWCTL_HISTOGRAM_H_
#define FLOWCTL_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace flowctl {

// A point-in-time copy of a Histogram. Plain data: not thread-safe, cheap to pass around.
struct HistogramSnapshot {
  uint64_t count = 0;
  int64_t sum = 0;
  int64_t max = 0;
  std::vector<uint64_t> buckets;  // per bucket index, see Histogram::BucketUpperBound

  // The value at quantile q in [0, 1] (upper bound of the bucket holding it, clipped to max);
  // 0 when empty.
  int64_t Percentile(double q) const;
  double Mean() const { return count == 0 ? 0 : static_cast<double>(sum) / count; }
  // Number of recorded values <= bound (exact at bucket bounds, else rounds down to the bucket
  // bound below). Used to export fixed Prometheus buckets.
  uint64_t CountAtOrBelow(int64_t bound) const;
  // Adds another snapshot's counts into this one.
  void Merge(const HistogramSnapshot& other);
  // The values recorded after `earlier` (an older snapshot of the same histogram): this minus
  // earlier, bucket by bucket. Its count is built from the buckets, so a snapshot taken while
  // values were being recorded never gives a negative or inconsistent window.
  HistogramSnapshot Since(const HistogramSnapshot& earlier) const;
};

class Histogram {
 public:
  static constexpr int kSubBucketBits = 4;
  static constexpr int kSubBuckets = 1 << kSubBucketBits;  // 16
  // 16 linear buckets, then 16 per power of two from 2^4 to 2^62.
  static constexpr int kNumBuckets = kSubBuckets + (63 - kSubBucketBits) * kSubBuckets;

  Histogram() = default;
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Records one value; negative values count as 0. Thread-safe, lock-free.
  void Record(int64_t value);
  // Thread-safe.
  HistogramSnapshot Snapshot() const;
  // The count and sum of every value recorded so far, without the buckets (cheap). Thread-safe;
  // the two may disagree by a value being recorded.
  struct Totals {
    uint64_t count = 0;
    int64_t sum = 0;
  };
  Totals GetTotals() const {
    return {count_.load(std::memory_order_relaxed), sum_.load(std::memory_order_relaxed)};
  }
  // Zeroes every count. Thread-safe, but values recorded during Reset may be partly kept.
  void Reset();

  static int BucketIndex(int64_t value);
  // The largest value that falls into bucket `index`.
  static int64_t BucketUpperBound(int index);

 private:
  std::array<std::atomic<uint64_t>, kNumBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_{0};
  std::atomic<int64_t> max_{0};
};

}  // namespace flowctl

#endif  // FLOWCTL_HISTOGRAM_H_
