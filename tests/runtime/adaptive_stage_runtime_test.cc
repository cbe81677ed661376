// The `adaptive` interceptor stage inside a real one-node runtime::Node: txs are admitted and
// commit, commits feed the limiter (baseline and window latency gauges appear in FlowStats), the
// limit refuses with RESOURCE_EXHAUSTED, every path gives the slot back (refused, invalid,
// duplicate, expired out of the pool, held past max_hold, waived behind a nonce gap), live updates
// apply and bad values name the field (and the config file's line).
//
// Waits poll with a bound (real threads and a real ticker); no sleep orders events.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "runtime/partition.h"
#include "tests/runtime/grpc_test_node.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

using ::runtime::grpc_test::OneNodeConfig;
using ::runtime::grpc_test::SignedPut;
using ::runtime::grpc_test::TempDir;
using ::runtime::testing::WaitFor;
using ::testing::HasSubstr;

node::flowctl::StageChainConfig Chain(const std::string& text) {
  node::flowctl::StageChainConfig chain;
  CHECK(google::protobuf::TextFormat::ParseFromString(text, &chain)) << text;
  return chain;
}

// Each test gets its own node (a fresh data dir and pools), so no test sees another's txs.
class AdaptiveRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = new std::string(TempDir("adaptive_runtime_test"));
    node::config::NodeConfig config = OneNodeConfig(*dir_);
    // hot: plain use; steady: a limit of 2; cold: a 1 s pool TTL for the expiry path; slow:
    // max_hold 300 ms and a small pool for the timeout paths. cold and slow wait 10 minutes to fill
    // a batch, so a ready tx stays unproposed.
    *config.mutable_partitions(0)->mutable_interceptor() = Chain(
        "stages { adaptive { initial_limit: 8 min_limit: 1 window_samples: 5 "
        "max_hold_ms: 2000 } }");
    *config.mutable_partitions(1)->mutable_interceptor() =
        Chain("stages { adaptive { initial_limit: 2 min_limit: 1 max_limit: 2 } }");
    node::config::PartitionConfig* slow = config.add_partitions();
    *slow = config.partitions(2);
    slow->set_id(4);
    slow->set_name("slow");
    *slow->mutable_interceptor() =
        Chain("stages { adaptive { min_limit: 1 window_ms: 10 max_hold_ms: 300 } }");
    slow->mutable_pool()->set_ttl_seconds(60);
    // One pooled tx is at half the high water: a gapped tx here is not waived.
    slow->mutable_pool()->set_max_txs(4);
    slow->mutable_pool()->set_max_per_sender(4);
    slow->mutable_pool()->set_high_water_fraction(0.5);
    slow->mutable_consensus()->set_batch_timeout_ms(600'000);
    *config.mutable_partitions(2)->mutable_interceptor() =
        Chain("stages { adaptive { min_limit: 1 window_ms: 10 max_hold_ms: 60000 } }");
    config.mutable_partitions(2)->mutable_pool()->set_ttl_seconds(1);
    config.mutable_partitions(2)->mutable_consensus()->set_batch_timeout_ms(600'000);
    ASSERT_TRUE(ValidateNodeConfig(config).empty());
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(config, NodeOptions{.serve_metrics = false});
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    node_ = node->release();
  }
  void TearDown() override {
    if (node_ != nullptr) node_->Stop(absl::Seconds(2));
    delete node_;
    node_ = nullptr;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static Partition* Part(const std::string& name) {
    absl::StatusOr<std::shared_ptr<Partition>> p = node_->FindPartition(name);
    CHECK(p.ok());
    return p->get();
  }

  // The adaptive stage's gauges of a partition, by name.
  static std::map<std::string, double> Gauges(const std::string& partition) {
    node::admin::PartitionFlowStats stats = Part(partition)->FlowStats();
    for (const auto& s : stats.stages()) {
      if (s.kind() == "adaptive") return {s.gauges().begin(), s.gauges().end()};
    }
    return {};
  }

  // Submits and returns the answer: once committed, or (wait_for_commit false) once admitted.
  static SubmitResult SubmitAndWait(const std::string& partition, std::string tx,
                                    bool wait_for_commit = true) {
    absl::Notification done;
    SubmitResult out;
    SubmitOptions options;
    options.wait_for_commit = wait_for_commit;
    options.wait_timeout = absl::Seconds(15);
    Part(partition)->Submit(std::move(tx), options, [&](SubmitResult r) {
      out = std::move(r);
      done.Notify();
    });
    CHECK(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return out;
  }

  static inline std::string* dir_ = nullptr;
  static inline Node* node_ = nullptr;
};

TEST_F(AdaptiveRuntimeTest, AdmitsCommitsAndReportsTheLimiterGauges) {
  for (uint64_t nonce = 1; nonce <= 30; ++nonce) {
    SubmitResult r = SubmitAndWait("hot", SignedPut(1, 'a', nonce, "k"));
    ASSERT_TRUE(r.status.ok()) << nonce << ": " << r.status;
    ASSERT_TRUE(r.receipt.has_value());
  }
  // Each commit released its slot with a latency sample; 30 samples closed 6 windows.
  ASSERT_TRUE(WaitFor([] { return Gauges("hot")["in_flight"] == 0; }, absl::Seconds(10)));
  std::map<std::string, double> g = Gauges("hot");
  EXPECT_GT(g["baseline_latency_ms"], 0);
  EXPECT_GT(g["window_latency_ms"], 0);
  EXPECT_GE(g["limit"], 1);
  EXPECT_EQ(g["drops"], 0);
  node::admin::PartitionFlowStats stats = Part("hot")->FlowStats();
  ASSERT_EQ(stats.stages_size(), 1);
  EXPECT_EQ(stats.stages(0).name(), "adaptive");
  EXPECT_EQ(stats.stages(0).admitted(), 30u);
  EXPECT_EQ(stats.stages(0).current(), 0);  // in_flight, as for `concurrency`
  EXPECT_EQ(stats.stages(0).limit(), g["limit"]);
  EXPECT_EQ(stats.committed_txs(), 30u);
}

TEST_F(AdaptiveRuntimeTest, TheLimitRefusesWithResourceExhaustedAndSlotsComeBack) {
  std::vector<std::string> txs;
  for (uint64_t nonce = 1; nonce <= 10; ++nonce) txs.push_back(SignedPut(2, 'b', nonce, "k"));
  absl::Notification done;
  std::vector<SubmitResult> results;
  // One call admits all ten before any is verified: two fit under the limit.
  Part("steady")->SubmitBatch(std::move(txs), {}, [&](std::vector<SubmitResult> r) {
    results = std::move(r);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  int ok = 0;
  for (const SubmitResult& r : results) {
    if (r.status.ok()) {
      ++ok;
      continue;
    }
    EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
    EXPECT_EQ(r.rejected_by, "adaptive");
    EXPECT_THAT(std::string(r.status.message()), HasSubstr("adaptive in-flight limit"));
    EXPECT_EQ(r.retry_after, absl::Milliseconds(20));
  }
  EXPECT_EQ(ok, 2);
  // The two admitted ones commit and give their slots back.
  EXPECT_TRUE(WaitFor([] { return Gauges("steady")["in_flight"] == 0; }, absl::Seconds(15)));
  EXPECT_EQ(Part("steady")->FlowStats().committed_txs(), 2u);
}

TEST_F(AdaptiveRuntimeTest, RefusedInvalidAndDuplicateTxsGiveTheirSlotsBack) {
  // Undecodable: admitted by the stage, refused by the decoder.
  SubmitResult garbage = SubmitAndWait("hot", "not a transaction");
  EXPECT_FALSE(garbage.status.ok());
  // Bad signature: decoded, refused by the signature check.
  std::string tampered = SignedPut(1, 'c', 1, "k");
  tampered.back() = static_cast<char>(tampered.back() ^ 0x01);
  EXPECT_FALSE(SubmitAndWait("hot", tampered).status.ok());
  // Duplicate of a committed tx: refused by the pool.
  const std::string tx = SignedPut(1, 'c', 1, "k");
  ASSERT_TRUE(SubmitAndWait("hot", tx).status.ok());
  EXPECT_FALSE(SubmitAndWait("hot", tx).status.ok());
  EXPECT_TRUE(WaitFor([] { return Gauges("hot")["in_flight"] == 0; }, absl::Seconds(10)));
}

TEST_F(AdaptiveRuntimeTest, ATxExpiringOutOfThePoolIsADrop) {
  // Nonce 1 of a fresh account is ready, but cold waits 10 minutes to fill a batch, so the tx
  // expires unproposed after the 1 s TTL; the ticker's sweep then releases its slot as a drop.
  const SubmitResult result = SubmitAndWait("cold", SignedPut(3, 'd', 1, "k"), false);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(Gauges("cold")["in_flight"], 1);
  EXPECT_TRUE(WaitFor([] { return Gauges("cold")["in_flight"] == 0; }, absl::Seconds(15)));
  EXPECT_EQ(Gauges("cold")["drops"], 1);
  EXPECT_EQ(Gauges("cold")["timeouts"], 0);
  EXPECT_EQ(Part("cold")->FlowStats().pool().expired(), 1u);
}

TEST_F(AdaptiveRuntimeTest, ATxHeldPastMaxHoldGivesItsSlotBackAsACensoredSample) {
  // Ready and unproposed (slow waits 10 minutes to fill a batch) with a 60 s TTL: the slot comes
  // back after max_hold (300 ms), counted as a timeout, not a drop.
  const SubmitResult result = SubmitAndWait("slow", SignedPut(4, 'f', 1, "k"), false);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(WaitFor([] { return Gauges("slow")["in_flight"] == 0; }, absl::Seconds(15)));
  EXPECT_GE(Gauges("slow")["timeouts"], 1);
  EXPECT_EQ(Gauges("slow")["drops"], 0);
  EXPECT_EQ(Gauges("slow")["waived"], 0);
  EXPECT_GE(Part("slow")->FlowStats().pool().txs(), 1u);  // still pooled
}

TEST_F(AdaptiveRuntimeTest, ATxBehindANonceGapWaitsWithoutASlot) {
  // Nonce 7 of a fresh account cannot commit until its client sends nonces 1-6; the pool keeps
  // it for 10 minutes. Its slot comes back after ~200 ms, waived (no latency sample): it waits
  // on its client, and the slot is free for the tx that fills the gap.
  const double timeouts = Gauges("hot")["timeouts"];
  const double waived = Gauges("hot")["waived"];
  const SubmitResult result = SubmitAndWait("hot", SignedPut(1, 'e', 7, "k"), false);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(WaitFor([] { return Gauges("hot")["in_flight"] == 0; }, absl::Seconds(15)));
  EXPECT_EQ(Gauges("hot")["waived"], waived + 1);
  EXPECT_EQ(Gauges("hot")["timeouts"], timeouts);
  EXPECT_EQ(Gauges("hot")["drops"], 0);
}

TEST_F(AdaptiveRuntimeTest, AGappedTxKeepsItsSlotWhenThePoolIsFilling) {
  // slow's pool (4 txs, high water 0.5) is at half its high water with one tx: gapped txs are
  // no longer waived (a pool full of them would refuse the txs that fill their gaps), so nonce 9
  // of a fresh account holds its slot until max_hold (300 ms), a timeout.
  const double timeouts = Gauges("slow")["timeouts"];
  const SubmitResult result = SubmitAndWait("slow", SignedPut(4, 'g', 9, "k"), false);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(WaitFor([] { return Gauges("slow")["in_flight"] == 0; }, absl::Seconds(15)));
  EXPECT_EQ(Gauges("slow")["timeouts"], timeouts + 1);
  EXPECT_EQ(Gauges("slow")["waived"], 0);
}

TEST_F(AdaptiveRuntimeTest, LiveUpdatesApplyAndBadValuesNameTheField) {
  node::admin::UpdatePartitionFlowRequest update;
  *update.mutable_interceptor() = Chain("stages { adaptive { min_limit: 1 max_limit: 3 } }");
  absl::StatusOr<node::config::PartitionConfig> applied = Part("hot")->UpdateFlow(update);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(Gauges("hot")["limit"], 3);

  *update.mutable_interceptor() = Chain("stages { adaptive { decrease_factor: 2 } }");
  absl::StatusOr<node::config::PartitionConfig> refused = Part("hot")->UpdateFlow(update);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("partitions[hot].interceptor.stages[0].adaptive.decrease_factor: "
                        "must be in (0, 1)"));
  EXPECT_EQ(Gauges("hot")["limit"], 3);  // nothing changed
}

TEST(AdaptiveConfigTest, ABadValueNamesTheFieldAndTheLine) {
  const std::string text =
      "partitions {\n"
      "  id: 1\n"
      "  name: \"hot\"\n"
      "  interceptor {\n"
      "    stages {\n"
      "      adaptive {\n"
      "        decrease_factor: 1.5\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n";
  absl::StatusOr<node::config::NodeConfig> config = ParseConfig(text, "node.conf", false);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("node.conf:7: partitions[hot].interceptor.stages[0].adaptive."
                        "decrease_factor: must be in (0, 1)"));
}

}  // namespace
}  // namespace runtime
