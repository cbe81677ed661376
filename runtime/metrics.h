// MetricsServer: the node's Prometheus endpoint. Owns a prometheus::Registry and an HTTP
// prometheus::Exposer serving GET /metrics on a configurable host:port, plus typed helpers to
// create labelled counters and gauges and to register "pull at scrape time" collectors that
// export figures the node already keeps (e.g. flowctl::Histogram snapshots from GetFlowStats)
// without double bookkeeping.
//
// Thread-safety: every method is thread-safe. Counter()/Gauge() return references that stay valid
// for the server's lifetime; prometheus::Counter/Gauge are themselves thread-safe. Collector
// callbacks run on the exposer's HTTP threads during a scrape, so they must be thread-safe and
// must outlive the server (or be safe to call until it is destroyed).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> metrics, MetricsServer::Start("127.0.0.1:0"));
//   metrics->Counter("node_admitted_total", "Admitted requests.",
//                    {{"partition", "hot"}, {"stage", "rate"}}).Increment();
//   metrics->AddCollector([&] { return std::vector{HistogramFamily(...)}; });
#ifndef RUNTIME_METRICS_H_
#define RUNTIME_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/histogram.h"
#include "prometheus/client_metric.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace runtime {

// Returns one histogram sample built from `snapshot` with the given fixed, strictly increasing
// bucket upper bounds (in recorded units, e.g. nanoseconds); a final +Inf bucket is always
// added. Bounds and the sum are multiplied by `unit_scale` on export (1e-9 exports nanoseconds as
// seconds, the Prometheus convention). Each cumulative count is snapshot.CountAtOrBelow(bound),
// which is exact when a bound is a flowctl::Histogram bucket upper bound (any value < 32, or any
// 2^k - 1) and otherwise counts only buckets whose upper bound is <= bound (rounds down).
prometheus::ClientMetric HistogramMetricFromSnapshot(const flowctl::HistogramSnapshot& snapshot,
                                                     const std::vector<int64_t>& bounds,
                                                     const prometheus::Labels& labels,
                                                     double unit_scale = 1.0);

// A histogram family with the given samples (see HistogramMetricFromSnapshot).
prometheus::MetricFamily HistogramFamily(std::string name, std::string help,
                                         std::vector<prometheus::ClientMetric> samples);

// A gauge family with one sample per entry of `values` (labels -> value).
prometheus::MetricFamily GaugeFamily(
    std::string name, std::string help,
    const std::vector<std::pair<prometheus::Labels, double>>& values);

class MetricsServer {
 public:
  // Called at every scrape; returns the families to expose at that moment.
  using CollectFn = std::function<std::vector<prometheus::MetricFamily>()>;

  // Binds `address` ("host:port"; port 0 picks a free port) and starts serving /metrics.
  // Returns Unavailable naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address);

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  // Stops the HTTP server; in-flight scrapes finish first.
  ~MetricsServer();

  // The port actually bound (useful with port 0).
  int port() const { return port_; }
  const std::string& address() const { return address_; }

  // Returns the counter / gauge `name` with `labels`, creating the family and the series on first
  // use (later calls with the same name and labels return the same object; `help` of the first
  // call wins). REQUIRES: `name` and the label names are valid Prometheus names and `name` is not
  // used by a metric of another kind (programming errors: CHECK-fails, as the library would throw).
  prometheus::Counter& Counter(const std::string& name, const std::string& help,
                               const prometheus::Labels& labels = {});
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const prometheus::Labels& labels = {});

  // Adds a collector called at each scrape. Collectors run one at a time under an internal lock
  // (so scrapes are serialized); a collector must not call AddCollector. Family names it returns
  // must not clash with names used by Counter()/Gauge().
  void AddCollector(CollectFn fn);

 private:
  class CallbackCollectable;

  MetricsServer(std::string address, std::unique_ptr<prometheus::Exposer> exposer, int port);

  // Constant after construction.
  const std::string address_;
  const int port_;
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::shared_ptr<CallbackCollectable> callbacks_;

  absl::Mutex mu_;
  // Families created by Counter()/Gauge(), owned by registry_; kept to reject kind clashes
  // before the library would throw.
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges_ ABSL_GUARDED_BY(mu_);

  // Declared last so it is destroyed first: no scrape can run against destroyed members.
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace runtime

#endif  // RUNTIME_METRICS_H_
