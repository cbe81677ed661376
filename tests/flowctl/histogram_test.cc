#include "flowctl/histogram.h"

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

TEST(HistogramTest, BucketsCoverEveryValueInOrder) {
  int prev_index = -1;
  for (int64_t v : {0LL, 1LL, 15LL, 16LL, 17LL, 31LL, 32LL, 1000LL, 1LL << 40, (1LL << 62) + 5}) {
    const int i = Histogram::BucketIndex(v);
    EXPECT_GE(i, prev_index);
    EXPECT_LT(i, Histogram::kNumBuckets);
    EXPECT_LE(v, Histogram::BucketUpperBound(i)) << v;
    if (i > 0) {
      EXPECT_GT(v, Histogram::BucketUpperBound(i - 1)) << v;
    }
    prev_index = i;
  }
  EXPECT_EQ(Histogram::BucketIndex(std::numeric_limits<int64_t>::max()),
            Histogram::kNumBuckets - 1);
}

TEST(HistogramTest, PercentilesWithinRelativeError) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> dist(0, 10'000'000);
  Histogram h;
  std::vector<int64_t> values;
  for (int i = 0; i < 100'000; ++i) {
    values.push_back(dist(rng));
    h.Record(values.back());
  }
  std::sort(values.begin(), values.end());
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, values.size());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double truth = values[static_cast<size_t>(q * values.size()) - 1];
    EXPECT_NEAR(s.Percentile(q), truth, truth / 16 + 1) << q;
  }
  EXPECT_EQ(s.Percentile(1.0), values.back());
  EXPECT_EQ(s.max, values.back());
}

TEST(HistogramTest, ConcurrentRecordsAreAllCounted) {
  Histogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 50'000; ++i) h.Record(i * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Snapshot().count, 200'000u);
}

TEST(HistogramTest, CountAtOrBelowAndMerge) {
  Histogram a, b;
  for (int i = 0; i < 10; ++i) a.Record(i);  // 0..9, exact buckets
  b.Record(1000);
  HistogramSnapshot s = a.Snapshot();
  EXPECT_EQ(s.CountAtOrBelow(4), 5u);
  s.Merge(b.Snapshot());
  EXPECT_EQ(s.count, 11u);
  EXPECT_EQ(s.max, 1000);
  EXPECT_EQ(s.CountAtOrBelow(100), 10u);
  a.Reset();
  EXPECT_EQ(a.Snapshot().count, 0u);
  EXPECT_EQ(a.Snapshot().Percentile(0.5), 0);
}

// Since(): only what was recorded after the earlier snapshot, with the window's own max bound.
TEST(HistogramTest, SinceIsTheWindowBetweenTwoSnapshots) {
  Histogram h;
  for (int i = 0; i < 100; ++i) h.Record(1'000'000);  // 1 ms
  const HistogramSnapshot before = h.Snapshot();
  for (int i = 0; i < 10; ++i) h.Record(1'000);  // 1 us
  const HistogramSnapshot window = h.Snapshot().Since(before);
  EXPECT_EQ(window.count, 10u);
  EXPECT_EQ(window.sum, 10'000);
  EXPECT_LE(window.Percentile(0.99), 1'070);  // not the 1 ms of the earlier values
  EXPECT_GE(window.Percentile(0.99), 1'000);
  EXPECT_EQ(h.Snapshot().Since(h.Snapshot()).count, 0u);
  EXPECT_EQ(h.Snapshot().Since(h.Snapshot()).Percentile(0.99), 0);
  EXPECT_EQ(h.Snapshot().Since(HistogramSnapshot{}).count, 110u);  // from an empty snapshot
}

// A snapshot taken while a value was being recorded may see its bucket but not yet the max that
// follows it: the window's max is then its bucket's bound, not the stale max.
TEST(HistogramTest, SinceDoesNotClipToAStaleMax) {
  HistogramSnapshot later;
  later.buckets.assign(Histogram::kNumBuckets, 0);
  later.buckets[Histogram::BucketIndex(1'000'000)] = 1;
  later.count = 1;
  later.sum = 1'000'000;
  later.max = 10;  // not updated yet
  const HistogramSnapshot window = later.Since(HistogramSnapshot{});
  EXPECT_GE(window.max, 1'000'000);
  EXPECT_GE(window.Percentile(0.99), 1'000'000);
}

}  // namespace
}  // namespace flowctl
