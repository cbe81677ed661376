#include "runtime/rpc_metrics.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "flowctl/clock.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"
#include "runtime/latency_summary.h"
#include "runtime/metrics.h"
#include "runtime/node_metrics.h"

namespace runtime {
namespace {

int64_t MonotonicNanos() { return flowctl::Clock::Real()->NowNanos(); }

}  // namespace

// Times one call: created when the call arrives, records when its status is sent.
class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcMetrics* metrics, RpcMetrics::Series* series)
      : metrics_(metrics), series_(series), start_nanos_(MonotonicNanos()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->RecordTo(series_, methods->GetSendStatus().error_code(),
                         MonotonicNanos() - start_nanos_);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  RpcMetrics::Series* const series_;
  const int64_t start_nanos_;
};

// Creates one interceptor per call of a server that serves `service`.
class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  RpcMetricsInterceptorFactory(RpcMetrics* metrics, std::string service)
      : metrics_(metrics), service_(std::move(service)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(metrics_, metrics_->Find(service_, info->method()));
  }

 private:
  RpcMetrics* const metrics_;
  const std::string service_;
};

std::vector<std::string> RpcMetrics::MethodsOf(
    const std::vector<const google::protobuf::ServiceDescriptor*>& services) {
  std::vector<std::string> out;
  for (const google::protobuf::ServiceDescriptor* service : services) {
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      out.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
    }
  }
  return out;
}

RpcMetrics::RpcMetrics(const std::vector<std::string>& methods) {
  other_.service = "other";
  other_.method = "other";
  for (const std::string& path : methods) {
    // "/pkg.Service/Method"
    const size_t slash = path.rfind('/');
    if (path.empty() || path[0] != '/' || slash == 0 || slash == std::string::npos) continue;
    auto series = std::make_unique<Series>();
    series->service = path.substr(1, slash - 1);
    series->method = path.substr(slash + 1);
    auto [it, inserted] = by_path_.try_emplace(path, std::move(series));
    if (inserted) ordered_.push_back(it->second.get());
  }
  ordered_.push_back(&other_);
}

RpcMetrics::Series* RpcMetrics::Find(std::string_view service, const char* method) {
  if (method == nullptr) return &other_;
  auto it = by_path_.find(absl::string_view(method));
  if (it == by_path_.end() || it->second->service != service) return &other_;
  return it->second.get();
}

void RpcMetrics::Record(std::string_view service, const std::string& method, grpc::StatusCode code,
                        int64_t nanos) {
  RecordTo(Find(service, method.c_str()), code, nanos);
}

void RpcMetrics::RecordTo(Series* series, grpc::StatusCode code, int64_t nanos) {
  series->nanos.Record(nanos);
  const int c = static_cast<int>(code);
  // A code outside gRPC's range counts as UNKNOWN.
  series->codes[c >= 0 && c < kCodes ? c : static_cast<int>(grpc::StatusCode::UNKNOWN)].fetch_add(
      1, std::memory_order_relaxed);
}

std::vector<prometheus::MetricFamily> RpcMetrics::Collect() const {
  std::vector<prometheus::ClientMetric> durations;
  prometheus::MetricFamily handled;
  handled.name = "noded_rpc_handled_total";
  handled.help = "gRPC calls the node finished, by method and status code.";
  handled.type = prometheus::MetricType::Counter;
  for (const Series* s : ordered_) {
    const flowctl::HistogramSnapshot snapshot = s->nanos.Snapshot();
    if (snapshot.count == 0) continue;
    durations.push_back(LatencyHistogramMetric(LatencySummaryOf(snapshot),
                                               {{"method", s->method}, {"service", s->service}}));
    for (int c = 0; c < kCodes; ++c) {
      const uint64_t n = s->codes[c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      prometheus::ClientMetric& m = handled.metric.emplace_back();
      m.label = {{"method", s->method},
                 {"service", s->service},
                 {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}};
      m.counter.value = static_cast<double>(n);
    }
  }
  std::vector<prometheus::MetricFamily> out;
  if (durations.empty()) return out;  // no family without samples
  out.push_back(HistogramFamily("noded_rpc_duration_seconds",
                                "Time from a gRPC call's arrival to its status, by method.",
                                std::move(durations)));
  out.push_back(std::move(handled));
  return out;
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcMetrics::NewInterceptorCreators(std::string_view service) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcMetricsInterceptorFactory>(this, std::string(service)));
  return out;
}

}  // namespace runtime
