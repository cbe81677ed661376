#include "flowctl/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace flowctl {

int Histogram::BucketIndex(int64_t value) {
  if (value < kSubBuckets) return value < 0 ? 0 : static_cast<int>(value);
  const auto v = static_cast<uint64_t>(value);
  const int exponent = 63 - std::countl_zero(v);  // >= kSubBucketBits
  const int sub = static_cast<int>((v >> (exponent - kSubBucketBits)) & (kSubBuckets - 1));
  return kSubBuckets + (exponent - kSubBucketBits) * kSubBuckets + sub;
}

int64_t Histogram::BucketUpperBound(int index) {
  if (index < kSubBuckets) return index;
  const int exponent = (index - kSubBuckets) / kSubBuckets + kSubBucketBits;
  const int sub = (index - kSubBuckets) % kSubBuckets;
  const int shift = exponent - kSubBucketBits;
  const uint64_t lower = (static_cast<uint64_t>(kSubBuckets + sub)) << shift;
  const uint64_t upper = lower + (uint64_t{1} << shift) - 1;
  return upper > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(upper);
}

void Histogram::Record(int64_t value) {
  if (value < 0) value = 0;
  buckets_[BucketIndex(value)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  int64_t seen = max_.load(std::memory_order_relaxed);
  while (value > seen && !max_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.buckets.resize(kNumBuckets);
  uint64_t total = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    total += s.buckets[i];
  }
  // Use the bucket total as the count so percentiles are consistent with the buckets read.
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  s.max = max_.load(std::memory_order_relaxed);
  return s;
}

void Histogram::Reset() {
  for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
  count_.store(0, std::memory_order_relaxed);
  sum_.store(0, std::memory_order_relaxed);
  max_.store(0, std::memory_order_relaxed);
}

int64_t HistogramSnapshot::Percentile(double q) const {
  if (count == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const auto rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count)));
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    seen += buckets[i];
    if (seen >= rank) return std::min(Histogram::BucketUpperBound(static_cast<int>(i)), max);
  }
  return max;
}

uint64_t HistogramSnapshot::CountAtOrBelow(int64_t bound) const {
  uint64_t n = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (Histogram::BucketUpperBound(static_cast<int>(i)) > bound) break;
    n += buckets[i];
  }
  return n;
}

void HistogramSnapshot::Merge(const HistogramSnapshot& other) {
  if (buckets.size() < other.buckets.size()) buckets.resize(other.buckets.size());
  for (size_t i = 0; i < other.buckets.size(); ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
  max = std::max(max, other.max);
}

HistogramSnapshot HistogramSnapshot::Since(const HistogramSnapshot& earlier) const {
  HistogramSnapshot window;
  window.buckets.resize(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    const uint64_t before = i < earlier.buckets.size() ? earlier.buckets[i] : 0;
    window.buckets[i] = buckets[i] > before ? buckets[i] - before : 0;
    window.count += window.buckets[i];
  }
  window.sum = sum > earlier.sum ? sum - earlier.sum : 0;
  // The window's largest value: the upper bound of its highest non-empty bucket, clipped to the
  // all-time max when that max lies in the bucket (a snapshot taken while a value is recorded may
  // see its bucket before the max that follows it).
  for (size_t i = window.buckets.size(); i > 0; --i) {
    if (window.buckets[i - 1] > 0) {
      const int index = static_cast<int>(i - 1);
      const int64_t upper = Histogram::BucketUpperBound(index);
      const int64_t lower = index == 0 ? 0 : Histogram::BucketUpperBound(index - 1) + 1;
      window.max = max >= lower ? std::min(max, upper) : upper;
      break;
    }
  }
  return window;
}

}  // namespace flowctl
