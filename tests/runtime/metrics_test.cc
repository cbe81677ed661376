#include "runtime/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "flowctl/histogram.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Minimal HTTP/1.0 GET over loopback. Every socket operation has a 5 s timeout so a broken
// server fails the test instead of hanging it. Returns the whole response (headers + body), or
// an empty string on error.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      // HTTP/1.0: the server closes the connection after the response. Bounded by size too.
      for (int i = 0; i < 1024; ++i) {
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        response.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return response;
}

// Each server's destruction takes about 2 s (civetweb's listener polls with a 2 s quantum before it
// notices the stop), so the tests below start as few servers as they can.
TEST(MetricsServerTest, ExposesCountersGaugesAndCollectedHistograms) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> started = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(started.ok()) << started.status();
  MetricsServer& metrics = **started;
  EXPECT_GT(metrics.port(), 0);  // the port actually bound, not the requested 0
  EXPECT_EQ(metrics.address(), "127.0.0.1:0");

  prometheus::Counter& admitted = metrics.Counter("node_admitted_total", "Admitted requests.",
                                                  {{"partition", "hot"}, {"stage", "rate"}});
  admitted.Increment(3);
  // Same name and labels: the same series.
  metrics.Counter("node_admitted_total", "ignored", {{"partition", "hot"}, {"stage", "rate"}})
      .Increment(2);
  metrics.Counter("node_admitted_total", "", {{"partition", "steady"}, {"stage", "rate"}})
      .Increment();
  metrics.Gauge("node_lane_queue_depth", "Queued messages.", {{"lane", "consensus"}}).Set(7);

  flowctl::Histogram delay;
  for (const int64_t v : {1, 2, 2, 8, 15, 100}) delay.Record(v);
  int scrapes = 0;
  metrics.AddCollector([&delay, &scrapes] {
    ++scrapes;  // Only touched by the (serialized) collector.
    return std::vector<prometheus::MetricFamily>{
        HistogramFamily("node_queue_delay", "Queueing delay.",
                        {HistogramMetricFromSnapshot(delay.Snapshot(), {2, 8, 16},
                                                     {{"partition", "hot"}, {"channel", "1"}})}),
        GaugeFamily("node_channel_credit", "Credit per channel.",
                    {{{{"channel", "1"}}, 1.5}, {{{"channel", "2"}}, 0}})};
  });

  const std::string text = HttpGet(metrics.port(), "/metrics");
  ASSERT_THAT(text, HasSubstr("200 OK"));
  EXPECT_THAT(text, HasSubstr("# TYPE node_admitted_total counter"));
  EXPECT_THAT(text, HasSubstr("# HELP node_admitted_total Admitted requests."));
  EXPECT_THAT(text, HasSubstr("node_admitted_total{partition=\"hot\",stage=\"rate\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("node_admitted_total{partition=\"steady\",stage=\"rate\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE node_lane_queue_depth gauge"));
  EXPECT_THAT(text, HasSubstr("node_lane_queue_depth{lane=\"consensus\"} 7\n"));

  EXPECT_THAT(text, HasSubstr("# TYPE node_queue_delay histogram"));
  // Labels are sorted by name (std::map): channel before partition.
  EXPECT_THAT(text,
              HasSubstr("node_queue_delay_bucket{channel=\"1\",partition=\"hot\",le=\"2\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("node_queue_delay_bucket{channel=\"1\",partition=\"hot\",le=\"8\"} 4\n"));
  EXPECT_THAT(text,
              HasSubstr("node_queue_delay_bucket{channel=\"1\",partition=\"hot\",le=\"16\"} 5\n"));
  EXPECT_THAT(
      text, HasSubstr("node_queue_delay_bucket{channel=\"1\",partition=\"hot\",le=\"+Inf\"} 6\n"));
  EXPECT_THAT(text, HasSubstr("node_queue_delay_sum{channel=\"1\",partition=\"hot\"} 128\n"));
  EXPECT_THAT(text, HasSubstr("node_queue_delay_count{channel=\"1\",partition=\"hot\"} 6\n"));
  EXPECT_THAT(text, HasSubstr("node_channel_credit{channel=\"1\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("node_channel_credit{channel=\"2\"} 0\n"));
  EXPECT_EQ(scrapes, 1);

  // Pulled at scrape time: a new value shows up in the next scrape without any re-registration.
  delay.Record(1000);
  admitted.Increment();
  const std::string again = HttpGet(metrics.port(), "/metrics");
  EXPECT_THAT(again, HasSubstr("node_queue_delay_count{channel=\"1\",partition=\"hot\"} 7\n"));
  EXPECT_THAT(again,
              HasSubstr("node_queue_delay_bucket{channel=\"1\",partition=\"hot\",le=\"16\"} 5\n"));
  EXPECT_THAT(again, HasSubstr("node_admitted_total{partition=\"hot\",stage=\"rate\"} 6\n"));
  EXPECT_THAT(again, Not(HasSubstr("node_admitted_total{partition=\"hot\",stage=\"rate\"} 5\n")));
  EXPECT_EQ(scrapes, 2);
}

TEST(MetricsServerTest, HistogramScalesUnits) {
  flowctl::Histogram h;
  h.Record(500'000'000);  // 0.5 s in nanoseconds
  h.Record(2'000'000'000);
  const prometheus::ClientMetric m = HistogramMetricFromSnapshot(
      h.Snapshot(), {536'870'911 /* 2^29 - 1 ns, a bucket bound */}, {{"stage", "rate"}}, 1e-9);
  ASSERT_EQ(m.histogram.bucket.size(), 2u);
  EXPECT_EQ(m.histogram.bucket[0].cumulative_count, 1u);
  EXPECT_DOUBLE_EQ(m.histogram.bucket[0].upper_bound, 0.536870911);
  EXPECT_EQ(m.histogram.bucket[1].cumulative_count, 2u);
  EXPECT_EQ(m.histogram.sample_count, 2u);
  EXPECT_DOUBLE_EQ(m.histogram.sample_sum, 2.5);
  ASSERT_EQ(m.label.size(), 1u);
  EXPECT_EQ(m.label[0].name, "stage");
}

TEST(MetricsServerTest, PortInUseIsUnavailableNotACrash) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Start(taken);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(taken));
  // The first server keeps serving.
  EXPECT_THAT(HttpGet((*first)->port(), "/metrics"), HasSubstr("200 OK"));
}

TEST(MetricsServerTest, MalformedAddressIsAnError) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("not-an-address:xx");
  EXPECT_FALSE(server.ok());
}

}  // namespace
}  // namespace runtime
