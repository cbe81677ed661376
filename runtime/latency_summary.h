// LatencySummaryOf: the admin API's LatencySummary (count, p50, p99, max and sum in
// microseconds, cumulative counts at kLatencyBucketBoundsUs) of a flowctl histogram of
// nanoseconds. Used by every stats path that reports a latency (partition lanes, commits and
// stage decisions, egress channels); the bucket counts become Prometheus histograms
// (runtime/node_metrics.h).
//
// Pure and thread-safe.
//
//   *lane->mutable_queueing_delay() = LatencySummaryOf(stats.queueing_delay);
#ifndef RUNTIME_LATENCY_SUMMARY_H_
#define RUNTIME_LATENCY_SUMMARY_H_

#include <cstdint>
#include <span>

#include "flowctl/histogram.h"
#include "proto/admin.pb.h"

namespace runtime {

// The fixed bucket bounds of every exported latency, microseconds: 100 us to 60 s, 1-2.5-5 steps.
inline constexpr int64_t kLatencyBucketBoundsUs[] = {
    100,     250,     500,     1'000,     2'500,     5'000,     10'000,     25'000,     50'000,
    100'000, 250'000, 500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000, 30'000'000, 60'000'000};
// For what takes microseconds, not milliseconds (an interceptor stage's decision): 1 us to 100 ms.
inline constexpr int64_t kFastBucketBoundsUs[] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1'000, 2'500, 5'000, 10'000, 25'000, 50'000, 100'000};

// Percentiles are 0 when the histogram is empty. Bucket counts at `bounds_us`.
node::admin::LatencySummary LatencySummaryOf(
    const flowctl::HistogramSnapshot& nanos,
    std::span<const int64_t> bounds_us = kLatencyBucketBoundsUs);

}  // namespace runtime

#endif  // RUNTIME_LATENCY_SUMMARY_H_
