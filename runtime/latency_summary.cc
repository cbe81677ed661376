#include "runtime/latency_summary.h"

namespace runtime {

node::admin::LatencySummary LatencySummaryOf(const flowctl::HistogramSnapshot& h) {
  node::admin::LatencySummary s;
  s.set_count(h.count);
  if (h.count > 0) {
    s.set_p50_us(static_cast<double>(h.Percentile(0.5)) / 1e3);
    s.set_p99_us(static_cast<double>(h.Percentile(0.99)) / 1e3);
    s.set_max_us(static_cast<double>(h.max) / 1e3);
  }
  return s;
}

}  // namespace runtime
