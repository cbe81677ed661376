// LatencySummaryOf: the admin API's LatencySummary (count, p50, p99, max in microseconds) of a
// flowctl histogram of nanoseconds. Used by every stats path that reports a latency (partition
// lanes and commits, egress channels).
//
// Pure and thread-safe.
//
//   *lane->mutable_queueing_delay() = LatencySummaryOf(stats.queueing_delay);
#ifndef RUNTIME_LATENCY_SUMMARY_H_
#define RUNTIME_LATENCY_SUMMARY_H_

#include "flowctl/histogram.h"
#include "proto/admin.pb.h"

namespace runtime {

// Percentiles are 0 when the histogram is empty.
node::admin::LatencySummary LatencySummaryOf(const flowctl::HistogramSnapshot& nanos);

}  // namespace runtime

#endif  // RUNTIME_LATENCY_SUMMARY_H_
