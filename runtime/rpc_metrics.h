// RpcMetrics: handling time and outcome of every call on the node's gRPC servers (client and
// admin), recorded by a server interceptor, exported as
//   noded_rpc_duration_seconds{service,method}       histogram (runtime/latency_summary.h buckets)
//   noded_rpc_handled_total{service,method,code}     counter, one series per status code seen
// The duration runs from the call's arrival (the interceptor is created) to the moment its status
// is sent: for a unary call its whole handling, waits for commit included; for a stream its
// lifetime. Only the methods given at construction get their own series, and only on the server
// of their service; any other call (an UNIMPLEMENTED method, an admin method on the client port,
// reflection) counts as service="other", method="other", so a client cannot grow the label set.
//
// Thread-safety: Record and Collect are thread-safe and lock-free (the method table is fixed at
// construction). The interceptor factory must not outlive this object.
//
//   RpcMetrics rpc(RpcMetrics::MethodsOf({pool->FindServiceByName("node.client.ClientService")}));
//   builder.experimental().SetInterceptorCreators(
//       rpc.NewInterceptorCreators("node.client.ClientService"));
//   metrics->AddCollector([&rpc] { return rpc.Collect(); });
#ifndef RUNTIME_RPC_METRICS_H_
#define RUNTIME_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flowctl/histogram.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "prometheus/metric_family.h"

namespace runtime {

class RpcMetrics {
 public:
  // gRPC method paths ("/node.client.ClientService/SubmitTx") of every method of `services`
  // (null entries are skipped).
  static std::vector<std::string> MethodsOf(
      const std::vector<const google::protobuf::ServiceDescriptor*>& services);

  explicit RpcMetrics(const std::vector<std::string>& methods);
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // One finished call of `method` (a gRPC method path) on the server of `service` that took
  // `nanos`.
  void Record(std::string_view service, const std::string& method, grpc::StatusCode code,
              int64_t nanos);

  // The two families (see the file comment); methods never called have no series.
  std::vector<prometheus::MetricFamily> Collect() const;

  // For ServerBuilder::experimental().SetInterceptorCreators of the server that serves `service`
  // ("node.client.ClientService"): one factory whose interceptors time each call on the
  // monotonic clock and record it when its status is sent.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  NewInterceptorCreators(std::string_view service);

 private:
  static constexpr int kCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED

  struct Series {
    std::string service;
    std::string method;
    flowctl::Histogram nanos;
    std::array<std::atomic<uint64_t>, kCodes> codes{};
  };

  friend class RpcMetricsInterceptor;
  friend class RpcMetricsInterceptorFactory;
  // The series of `method` (a path, may be null) on the server of `service`, else other_.
  Series* Find(std::string_view service, const char* method);
  void RecordTo(Series* series, grpc::StatusCode code, int64_t nanos);

  // Fixed after construction: lookups need no lock.
  absl::flat_hash_map<std::string, std::unique_ptr<Series>> by_path_;
  std::vector<const Series*> ordered_;  // by_path_ in construction order, then other_
  Series other_;
};

}  // namespace runtime

#endif  // RUNTIME_RPC_METRICS_H_
