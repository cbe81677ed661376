// RpcMetrics: per-method duration histograms and per-code counters; unknown method names fold
// into one "other" series.
#include "runtime/rpc_metrics.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kClient[] = "node.client.ClientService";

std::string Render(const RpcMetrics& m) {
  return prometheus::TextSerializer().Serialize(m.Collect());
}

TEST(RpcMetricsTest, RecordsDurationAndCodePerMethod) {
  RpcMetrics m({"/node.client.ClientService/SubmitTx", "/node.client.ClientService/GetTx"});
  m.Record(kClient, "/node.client.ClientService/SubmitTx", grpc::StatusCode::OK,
           200'000);  // 200 us
  m.Record(kClient, "/node.client.ClientService/SubmitTx", grpc::StatusCode::OK,
           3'000'000);  // 3 ms
  m.Record(kClient, "/node.client.ClientService/SubmitTx", grpc::StatusCode::RESOURCE_EXHAUSTED,
           40'000);  // 40 us

  const std::string text = Render(m);
  const std::string labels = "method=\"SubmitTx\",service=\"node.client.ClientService\"";
  EXPECT_THAT(text, HasSubstr("# TYPE noded_rpc_duration_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_count{" + labels + "} 3"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"0.0001\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"0.00025\"} 2"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"0.005\"} 3"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"0.1\"} 3"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"60\"} 3"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_bucket{" + labels + ",le=\"+Inf\"} 3"));
  EXPECT_THAT(text, HasSubstr("# TYPE noded_rpc_handled_total counter"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_handled_total{" + labels + ",code=\"OK\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("noded_rpc_handled_total{" + labels + ",code=\"RESOURCE_EXHAUSTED\"} 1"));
  // A method never called has no series; a code never returned has none either.
  EXPECT_THAT(text, Not(HasSubstr("method=\"GetTx\"")));
  EXPECT_THAT(text, Not(HasSubstr("code=\"UNAVAILABLE\"")));
}

TEST(RpcMetricsTest, UnknownMethodsShareOneSeries) {
  RpcMetrics m({"/node.client.ClientService/SubmitTx"});
  for (int i = 0; i < 100; ++i) {
    m.Record(kClient, "/attacker.Service/Method" + std::to_string(i),
             grpc::StatusCode::UNIMPLEMENTED, 1000);
  }
  m.Record(kClient, "", grpc::StatusCode::UNIMPLEMENTED, 1000);
  // A known method, but on the server of another service (an admin call on the client port).
  m.Record("node.admin.AdminService", "/node.client.ClientService/SubmitTx",
           grpc::StatusCode::UNIMPLEMENTED, 1000);
  const std::string text = Render(m);
  EXPECT_THAT(text, HasSubstr("noded_rpc_handled_total{method=\"other\",service=\"other\","
                              "code=\"UNIMPLEMENTED\"} 102"));
  EXPECT_THAT(text, Not(HasSubstr("attacker")));
  EXPECT_THAT(text, Not(HasSubstr("SubmitTx")));
}

TEST(RpcMetricsTest, NothingRecordedExportsNothing) {
  RpcMetrics m({"/node.client.ClientService/SubmitTx"});
  EXPECT_THAT(m.Collect(), IsEmpty());
}

TEST(RpcMetricsTest, MethodsOfSkipsMissingServices) {
  EXPECT_THAT(RpcMetrics::MethodsOf({nullptr}), IsEmpty());
}

}  // namespace
}  // namespace runtime
