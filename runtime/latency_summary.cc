#include "runtime/latency_summary.h"

namespace runtime {

node::admin::LatencySummary LatencySummaryOf(const flowctl::HistogramSnapshot& h,
                                             std::span<const int64_t> bounds_us) {
  node::admin::LatencySummary s;
  s.set_count(h.count);
  if (h.count > 0) {
    s.set_p50_us(static_cast<double>(h.Percentile(0.5)) / 1e3);
    s.set_p99_us(static_cast<double>(h.Percentile(0.99)) / 1e3);
    s.set_max_us(static_cast<double>(h.max) / 1e3);
  }
  s.set_sum_us(static_cast<double>(h.sum) / 1e3);
  for (const int64_t bound_us : bounds_us) {
    s.add_bucket_bounds_us(static_cast<double>(bound_us));
    s.add_bucket_counts(h.CountAtOrBelow(bound_us * 1000));
  }
  return s;
}

}  // namespace runtime
