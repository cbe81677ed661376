#include "runtime/metrics.h"

#include <exception>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "prometheus/check_names.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_type.h"

namespace runtime {
namespace {

void CheckNames(const std::string& name, const prometheus::Labels& labels) {
  CHECK(prometheus::CheckMetricName(name)) << "invalid metric name '" << name << "'";
  for (const auto& [label, value] : labels) {
    CHECK(prometheus::CheckLabelName(label)) << "invalid label name '" << label << "' on " << name;
  }
}

std::vector<prometheus::ClientMetric::Label> ToClientLabels(const prometheus::Labels& labels) {
  std::vector<prometheus::ClientMetric::Label> out;
  out.reserve(labels.size());
  for (const auto& [name, value] : labels) out.push_back({name, value});
  return out;
}

}  // namespace

prometheus::ClientMetric HistogramMetricFromSnapshot(const flowctl::HistogramSnapshot& snapshot,
                                                     const std::vector<int64_t>& bounds,
                                                     const prometheus::Labels& labels,
                                                     double unit_scale) {
  prometheus::ClientMetric metric;
  metric.label = ToClientLabels(labels);
  metric.histogram.sample_count = snapshot.count;
  metric.histogram.sample_sum = static_cast<double>(snapshot.sum) * unit_scale;
  metric.histogram.bucket.reserve(bounds.size() + 1);
  for (const int64_t bound : bounds) {
    metric.histogram.bucket.push_back(
        {snapshot.CountAtOrBelow(bound), static_cast<double>(bound) * unit_scale});
  }
  // The text format requires a +Inf bucket equal to _count; the library's serializer does not add
  // it for us (its own Histogram metric appends it explicitly, as we do here).
  metric.histogram.bucket.push_back({snapshot.count, std::numeric_limits<double>::infinity()});
  return metric;
}

prometheus::MetricFamily HistogramFamily(std::string name, std::string help,
                                         std::vector<prometheus::ClientMetric> samples) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Histogram;
  family.metric = std::move(samples);
  return family;
}

prometheus::MetricFamily GaugeFamily(
    std::string name, std::string help,
    const std::vector<std::pair<prometheus::Labels, double>>& values) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  family.metric.reserve(values.size());
  for (const auto& [labels, value] : values) {
    prometheus::ClientMetric metric;
    metric.label = ToClientLabels(labels);
    metric.gauge.value = value;
    family.metric.push_back(std::move(metric));
  }
  return family;
}

// Runs every registered callback at scrape time. Collect() is const in the library's interface
// and is called from the exposer's HTTP threads, hence the mutex.
class MetricsServer::CallbackCollectable : public prometheus::Collectable {
 public:
  void Add(CollectFn fn) {
    absl::MutexLock lock(&mu_);
    fns_.push_back(std::move(fn));
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    std::vector<prometheus::MetricFamily> out;
    for (const CollectFn& fn : fns_) {
      std::vector<prometheus::MetricFamily> families = fn();
      for (prometheus::MetricFamily& family : families) out.push_back(std::move(family));
    }
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<CollectFn> fns_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address) {
  std::unique_ptr<prometheus::Exposer> exposer;
  // The project forbids exceptions in its own code paths, but prometheus-cpp's Exposer (through
  // civetweb's CivetServer) reports a failed bind only by throwing. This is the single boundary
  // where we catch the library's exception and turn it into an absl::Status.
  try {
    exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("metrics: no listening port for ", address));
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(address, std::move(exposer), ports[0]));
}

MetricsServer::MetricsServer(std::string address, std::unique_ptr<prometheus::Exposer> exposer,
                             int port)
    : address_(std::move(address)),
      port_(port),
      registry_(std::make_shared<prometheus::Registry>()),
      callbacks_(std::make_shared<CallbackCollectable>()),
      exposer_(std::move(exposer)) {
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(callbacks_);
}

MetricsServer::~MetricsServer() = default;

prometheus::Counter& MetricsServer::Counter(const std::string& name, const std::string& help,
                                            const prometheus::Labels& labels) {
  CheckNames(name, labels);
  prometheus::Family<prometheus::Counter>* family;
  {
    absl::MutexLock lock(&mu_);
    CHECK(gauges_.find(name) == gauges_.end()) << name << " is already a gauge";
    auto it = counters_.find(name);
    if (it == counters_.end()) {
      family = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
      counters_.emplace(name, family);
    } else {
      family = it->second;
    }
  }
  // Family::Add is thread-safe and returns the existing series for known labels.
  return family->Add(labels);
}

prometheus::Gauge& MetricsServer::Gauge(const std::string& name, const std::string& help,
                                        const prometheus::Labels& labels) {
  CheckNames(name, labels);
  prometheus::Family<prometheus::Gauge>* family;
  {
    absl::MutexLock lock(&mu_);
    CHECK(counters_.find(name) == counters_.end()) << name << " is already a counter";
    auto it = gauges_.find(name);
    if (it == gauges_.end()) {
      family = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
      gauges_.emplace(name, family);
    } else {
      family = it->second;
    }
  }
  return family->Add(labels);
}

void MetricsServer::AddCollector(CollectFn fn) { callbacks_->Add(std::move(fn)); }

}  // namespace runtime
