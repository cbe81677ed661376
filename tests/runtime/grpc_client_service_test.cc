// The client API end to end against a real one-node runtime::Node (tests/runtime/grpc_test_node.h):
// submit + wait for commit, queries, batches, error codes, pause, rate-limit trailers, and the
// cancellation of commit waits at server shutdown.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"
#include "runtime/client_service.h"
#include "runtime/grpc_servers.h"
#include "runtime/node.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(GrpcServicesTest, SubmitWaitsForCommitAndQueriesSeeIt) {
  const std::string tx = SignedPut(1, 'a', 1, "k1");
  grpc::ClientContext ctx;
  node::client::SubmitTxResponse submitted;
  grpc::Status st = Submit("hot", tx, /*wait=*/true, &submitted, &ctx);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_EQ(submitted.tx_hash().size(), 32u);
  EXPECT_EQ(submitted.receipt().status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(submitted.receipt().tx_hash(), submitted.tx_hash());
  const uint64_t height = submitted.receipt().block_height();
  EXPECT_GE(height, 1u);

  auto client = Client();
  {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetTxRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_tx_hash(submitted.tx_hash());
    node::client::GetTxResponse resp;
    ASSERT_TRUE(client->GetTx(&c, req, &resp).ok());
    EXPECT_EQ(resp.state(), node::client::GetTxResponse::COMMITTED);
    EXPECT_EQ(resp.receipt().block_height(), height);
  }
  {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetBlockRequest req;
    req.mutable_partition()->set_id(1);
    req.set_height(height);
    req.set_include_txs(true);
    node::client::GetBlockResponse resp;
    ASSERT_TRUE(client->GetBlock(&c, req, &resp).ok());
    EXPECT_EQ(resp.block().header().height(), height);
    EXPECT_THAT(resp.block().tx_hashes(), ::testing::Contains(submitted.tx_hash()));
    EXPECT_EQ(resp.block_hash().size(), 32u);
  }
  {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetAccountRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_address(Address('a'));
    node::client::GetAccountResponse resp;
    ASSERT_TRUE(client->GetAccount(&c, req, &resp).ok());
    EXPECT_EQ(resp.account().nonce(), 1u);
    EXPECT_GE(resp.height(), height);
  }
  {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetChainStatusRequest req;
    *req.mutable_partition() = Ref("hot");
    node::client::GetChainStatusResponse resp;
    ASSERT_TRUE(client->GetChainStatus(&c, req, &resp).ok());
    EXPECT_EQ(resp.partition_id(), 1u);
    EXPECT_EQ(resp.partition_name(), "hot");
    EXPECT_GE(resp.height(), height);
    EXPECT_EQ(resp.consensus_state(), "NORMAL");
  }
}

TEST_F(GrpcServicesTest, BatchGivesOneResultPerTx) {
  node::client::SubmitTxBatchRequest req;
  *req.mutable_partition() = Ref("hot");
  req.add_signed_txs(SignedPut(1, 'b', 1, "b1"));
  req.add_signed_txs("garbage");
  req.add_signed_txs(SignedPut(1, 'b', 2, "b2"));
  grpc::ClientContext ctx;
  WithDeadline(&ctx);
  node::client::SubmitTxBatchResponse resp;
  grpc::Status st = Client()->SubmitTxBatch(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_EQ(resp.results(0).code(), 0) << resp.results(0).message();
  EXPECT_EQ(resp.results(0).tx_hash().size(), 32u);
  EXPECT_EQ(resp.results(1).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(resp.results(2).code(), 0) << resp.results(2).message();
}

TEST_F(GrpcServicesTest, MessagesOverTheReceiveLimitAreRefused) {
  grpc::ClientContext ctx;
  node::client::SubmitTxResponse resp;
  grpc::Status st = Submit("hot", std::string(kClientMaxReceiveBytes + 1, 'x'), false, &resp, &ctx);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
}

TEST_F(GrpcServicesTest, BatchOverTheLimitIsRefusedWhole) {
  node::client::SubmitTxBatchRequest req;
  *req.mutable_partition() = Ref("hot");
  for (int i = 0; i <= kMaxBatchTxs; ++i) req.add_signed_txs("x");
  grpc::ClientContext ctx;
  WithDeadline(&ctx);
  node::client::SubmitTxBatchResponse resp;
  grpc::Status st = Client()->SubmitTxBatch(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("1000"));
}

TEST_F(GrpcServicesTest, ClientErrors) {
  node::client::SubmitTxResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("nope", SignedPut(1, 'c', 1, "k"), false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr("unknown partition"));
  }
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("", SignedPut(1, 'c', 1, "k"), false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("hot", "garbage", false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  {  // Signed for partition 2, sent to 1.
    grpc::ClientContext ctx;
    grpc::Status st = Submit("hot", SignedPut(2, 'c', 1, "k"), false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  {  // Tampered signature.
    std::string tx = SignedPut(1, 'c', 1, "k");
    tx.back() ^= 1;
    grpc::ClientContext ctx;
    grpc::Status st = Submit("hot", tx, false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  auto client = Client();
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetTxRequest req;
    *req.mutable_partition() = Ref("hot");
    node::client::GetTxResponse out;
    EXPECT_EQ(client->GetTx(&ctx, req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetTxRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_tx_hash(std::string(32, '\0'));
    node::client::GetTxResponse out;
    EXPECT_EQ(client->GetTx(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetAccountRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_address("short");
    node::client::GetAccountResponse out;
    EXPECT_EQ(client->GetAccount(&ctx, req, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetBlockRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_height(1'000'000);
    node::client::GetBlockResponse out;
    EXPECT_EQ(client->GetBlock(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

// proto/client.proto: height 0 is the latest committed block, not genesis.
TEST_F(GrpcServicesTest, GetBlockHeightZeroIsTheLatestBlock) {
  grpc::ClientContext submit_ctx;
  node::client::SubmitTxResponse submitted;
  grpc::Status st =
      Submit("hot", SignedPut(1, 'z', 1, "latest"), /*wait=*/true, &submitted, &submit_ctx);
  ASSERT_TRUE(st.ok()) << st.error_message();
  auto client = Client();
  auto chain_height = [&] {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetChainStatusRequest req;
    *req.mutable_partition() = Ref("hot");
    node::client::GetChainStatusResponse resp;
    EXPECT_TRUE(client->GetChainStatus(&c, req, &resp).ok());
    return resp.height();
  };
  auto get_block = [&](uint64_t height) {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetBlockRequest req;
    *req.mutable_partition() = Ref("hot");
    req.set_height(height);
    node::client::GetBlockResponse resp;
    grpc::Status s = client->GetBlock(&c, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  const uint64_t before = chain_height();
  const node::client::GetBlockResponse latest = get_block(0);
  const uint64_t after = chain_height();
  // Blocks may commit between the calls: the answer is the tip at some moment in between.
  EXPECT_GE(latest.block().header().height(), before);
  EXPECT_LE(latest.block().header().height(), after);
  EXPECT_GE(latest.block().header().height(), submitted.receipt().block_height());
  EXPECT_EQ(latest.block_hash(), get_block(latest.block().header().height()).block_hash());
}

TEST_F(GrpcServicesTest, PausedPartitionIsUnavailableUntilResumed) {
  auto admin = Admin();
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::PausePartitionRequest req;
    req.set_partition("cold");
    node::admin::PausePartitionResponse resp;
    ASSERT_TRUE(admin->PausePartition(&ctx, req, &resp).ok());
  }
  node::client::SubmitTxResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("cold", SignedPut(3, 'd', 1, "k"), false, &resp, &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(st.error_message(), HasSubstr("paused"));
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::ResumePartitionRequest req;
    req.set_partition("cold");
    node::admin::ResumePartitionResponse out;
    ASSERT_TRUE(admin->ResumePartition(&ctx, req, &out).ok());
  }
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("cold", SignedPut(3, 'd', 1, "k"), false, &resp, &ctx);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::PausePartitionRequest req;
    req.set_partition("nope");
    node::admin::PausePartitionResponse out;
    EXPECT_EQ(admin->PausePartition(&ctx, req, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(GrpcServicesTest, RateLimitedPartitionSaysWhoAndWhenInTrailers) {
  node::admin::UpdatePartitionFlowRequest update;
  update.set_partition("steady");
  auto* stage = update.mutable_interceptor()->add_stages();
  stage->set_name("rate");
  stage->mutable_rate()->set_rate_per_second(0.001);  // one token per 1000 s
  stage->mutable_rate()->set_burst(1);
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse resp;
    grpc::Status st = Admin()->UpdatePartitionFlow(&ctx, update, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.effective().interceptor().stages_size(), 1);
  }
  node::client::SubmitTxResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status st = Submit("steady", SignedPut(2, 'e', 1, "k"), false, &resp, &ctx);
    EXPECT_TRUE(st.ok()) << st.error_message();  // the burst token
  }
  grpc::ClientContext ctx;
  grpc::Status st = Submit("steady", SignedPut(2, 'e', 2, "k"), false, &resp, &ctx);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(Trailer(ctx, "rejected-by"), "rate");
  const std::string retry = Trailer(ctx, "retry-after-ms");
  ASSERT_FALSE(retry.empty());
  EXPECT_GT(std::stoll(retry), 900'000);  // ~1000 s
}

// Reads pass the partition's read chain, apart from the writes': closed by a live update, reads
// of that partition are refused with the stage's name and wait in the trailers (writes and other
// partitions' reads go on); reopened, they pass again. Stats count them per stage.
TEST_F(GrpcServicesTest, ReadsPassTheirOwnChainWhichChangesLive) {
  auto update_reads = [&](const std::string& partition, double rate) {
    node::admin::UpdatePartitionFlowRequest update;
    update.set_partition(partition);
    auto* stage = update.mutable_read_interceptor()->add_stages();
    stage->set_name(rate > 0 ? "cold_reads" : "read_rate");  // a fresh stage: its own counts
    if (rate > 0) {
      stage->mutable_rate()->set_rate_per_second(rate);
      stage->mutable_rate()->set_burst(2);
    } else {
      stage->mutable_rate()->set_unlimited(true);
    }
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse resp;
    grpc::Status st = Admin()->UpdatePartitionFlow(&ctx, update, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.effective().read_interceptor().stages_size(), 1);
  };
  auto status = [&](const std::string& partition, grpc::ClientContext* ctx) {
    WithDeadline(ctx);
    node::client::GetChainStatusRequest req;
    *req.mutable_partition() = Ref(partition);
    node::client::GetChainStatusResponse resp;
    return Client()->GetChainStatus(ctx, req, &resp);
  };
  update_reads("cold", 0.001);  // the burst of 2, then one token per 1000 s
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(status("cold", &ctx).ok());
  }
  {
    grpc::ClientContext ctx;
    grpc::Status st = status("cold", &ctx);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_EQ(Trailer(ctx, "rejected-by"), "cold_reads");
    const std::string retry = Trailer(ctx, "retry-after-ms");
    ASSERT_FALSE(retry.empty());
    EXPECT_GT(std::stoll(retry), 900'000);
  }
  {  // every read RPC passes it, WatchCommits when it opens
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetAccountRequest req;
    *req.mutable_partition() = Ref("cold");
    req.set_address(Address('z'));
    node::client::GetAccountResponse resp;
    EXPECT_EQ(Client()->GetAccount(&ctx, req, &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::WatchCommitsRequest req;
    *req.mutable_partition() = Ref("cold");
    auto reader = Client()->WatchCommits(&ctx, req);
    node::client::WatchCommitsResponse block;
    EXPECT_FALSE(reader->Read(&block));
    grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  }
  {  // another partition's reads and this partition's writes are not touched
    grpc::ClientContext ctx;
    EXPECT_TRUE(status("hot", &ctx).ok());
    grpc::ClientContext wctx;
    node::client::SubmitTxResponse resp;
    grpc::Status st = Submit("cold", SignedPut(3, 'r', 1, "k"), false, &resp, &wctx);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::GetFlowStatsRequest req;
    node::admin::FlowStats stats;
    ASSERT_TRUE(Admin()->GetFlowStats(&ctx, req, &stats).ok());
    bool found = false;
    for (const auto& p : stats.partitions()) {
      if (p.name() != "cold") continue;
      ASSERT_EQ(p.read_stages_size(), 1);
      EXPECT_EQ(p.read_stages(0).name(), "cold_reads");
      EXPECT_EQ(p.read_stages(0).admitted(), 2u);
      EXPECT_EQ(p.read_stages(0).rejected(), 3u);
      found = true;
    }
    EXPECT_TRUE(found);
  }
  update_reads("cold", 0);  // unlimited again
  grpc::ClientContext ctx;
  EXPECT_TRUE(status("cold", &ctx).ok());
}

// cold's read-hold counters now (zero when the stats cannot be read).
node::admin::ReadHoldStats ColdReadHold(Node* node) {
  absl::StatusOr<node::admin::FlowStats> stats = node->FlowStats("cold");
  return stats.ok() && stats->partitions_size() == 1 ? stats->partitions(0).read_hold()
                                                     : node::admin::ReadHoldStats();
}

// A GetChainStatus of cold through `client` within `deadline`.
grpc::Status ReadCold(node::client::ClientService::Stub* client, absl::Duration deadline) {
  grpc::ClientContext ctx;
  WithDeadline(&ctx, deadline);
  node::client::GetChainStatusRequest req;
  *req.mutable_partition() = Ref("cold");
  node::client::GetChainStatusResponse resp;
  return client->GetChainStatus(&ctx, req, &resp);
}

// Polls `done` every few milliseconds until it holds, for 30 s at most (a failing test gives
// up); returns its last value.
bool PollUntil(const std::function<bool()>& done) {
  for (const absl::Time give_up = absl::Now() + absl::Seconds(30);
       !done() && absl::Now() < give_up;) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  return done();
}

// Replaces cold's read chain by one rate stage `name` (burst 1; rate 0: unlimited) and its read
// hold by `max_wait_ms` / `max_waiting`.
void SetColdReads(node::admin::AdminService::Stub* admin, const std::string& name, double rate,
                  uint32_t max_wait_ms, uint32_t max_waiting) {
  node::admin::UpdatePartitionFlowRequest update;
  update.set_partition("cold");
  auto* stage = update.mutable_read_interceptor()->add_stages();
  stage->set_name(name);
  if (rate > 0) {
    stage->mutable_rate()->set_rate_per_second(rate);
    stage->mutable_rate()->set_burst(1);
  } else {
    stage->mutable_rate()->set_unlimited(true);
  }
  update.mutable_read_hold()->set_max_wait_ms(max_wait_ms);
  update.mutable_read_hold()->set_max_waiting(max_waiting);
  grpc::ClientContext ctx;
  WithToken(&ctx);
  node::admin::UpdatePartitionFlowResponse resp;
  grpc::Status st = admin->UpdatePartitionFlow(&ctx, update, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.effective().read_hold().max_wait_ms(), max_wait_ms);
}

// With read_hold on, reads the read chain refuses for now wait for it: a burst beyond the rate
// is answered in full, none refused. Beyond max_waiting, reads are refused at once by
// "read_hold"; a read whose wait runs out gets the chain's refusal. Off again, the same burst is
// refused by the chain. All live.
TEST_F(GrpcServicesTest, ReadsRefusedForNowWaitForTheChainWithReadHold) {
  auto update = [&](const std::string& stage_name, double rate, uint32_t max_wait_ms,
                    uint32_t max_waiting) {
    SetColdReads(Admin().get(), stage_name, rate, max_wait_ms, max_waiting);
  };
  struct Outcome {
    grpc::StatusCode code;
    std::string rejected_by;
    std::string message;
  };
  // `n` GetChainStatus calls of "cold" at once, each on its own thread.
  auto reads = [&](int n) {
    std::vector<Outcome> out(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        grpc::ClientContext ctx;
        WithDeadline(&ctx, absl::Seconds(60));
        node::client::GetChainStatusRequest req;
        *req.mutable_partition() = Ref("cold");
        node::client::GetChainStatusResponse resp;
        grpc::Status st = Client()->GetChainStatus(&ctx, req, &resp);
        out[i] = {st.error_code(), Trailer(ctx, "rejected-by"), st.error_message()};
      });
    }
    for (std::thread& t : threads) t.join();
    return out;
  };
  auto held = [&] {
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::GetFlowStatsRequest req;
    req.set_partition("cold");
    node::admin::FlowStats stats;
    EXPECT_TRUE(Admin()->GetFlowStats(&ctx, req, &stats).ok());
    return stats.partitions_size() == 1 ? stats.partitions(0).read_hold()
                                        : node::admin::ReadHoldStats();
  };
  auto count = [](const std::vector<Outcome>& v, grpc::StatusCode code, const std::string& by) {
    int n = 0;
    for (const Outcome& o : v) n += o.code == code && (by.empty() || o.rejected_by == by);
    return n;
  };

  // 10 reads at once against one token and 10 a second: every one answered, having waited.
  update("held_reads", 10, 30'000, 100);
  const node::admin::ReadHoldStats before = held();
  std::vector<Outcome> got = reads(10);
  EXPECT_EQ(count(got, grpc::StatusCode::OK, ""), 10);
  node::admin::ReadHoldStats after = held();
  EXPECT_GE(after.held() - before.held(), 1u);
  EXPECT_EQ(after.answered() - before.answered(), after.held() - before.held());
  EXPECT_EQ(after.expired(), before.expired());
  EXPECT_EQ(after.waiting(), 0u);

  // Off: 10 reads at once against one token and 1 a second are refused by the chain at once.
  update("refused_reads", 1, 0, 0);
  got = reads(10);
  EXPECT_GE(count(got, grpc::StatusCode::RESOURCE_EXHAUSTED, "refused_reads"), 8);
  EXPECT_EQ(held().held(), after.held());

  // One token every 2 s, waits of up to 3 s, 2 waiting at most. After the burst token: of 5
  // reads at once, 2 wait and 3 are refused at once; the first to wait is answered at its token
  // (~2 s), the second is answered too only if it came a second later (its wait runs out before
  // the next token otherwise).
  update("slow_reads", 0.5, 3'000, 2);
  ASSERT_EQ(count(reads(1), grpc::StatusCode::OK, ""), 1);
  const node::admin::ReadHoldStats before_full = held();
  got = reads(5);
  EXPECT_EQ(count(got, grpc::StatusCode::RESOURCE_EXHAUSTED, "read_hold"), 3);
  const int ok = count(got, grpc::StatusCode::OK, "");
  const int ran_out = count(got, grpc::StatusCode::RESOURCE_EXHAUSTED, "slow_reads");
  EXPECT_GE(ok, 1);
  EXPECT_EQ(ok + ran_out, 2);
  for (const Outcome& o : got) {
    if (o.rejected_by == "slow_reads") {
      EXPECT_THAT(o.message, testing::HasSubstr("max_wait_ms"));
    }
  }
  const node::admin::ReadHoldStats after_full = held();
  EXPECT_EQ(after_full.full() - before_full.full(), 3u);
  EXPECT_EQ(after_full.held() - before_full.held(), 2u);
  EXPECT_EQ(after_full.answered() - before_full.answered(), static_cast<uint64_t>(ok));
  EXPECT_EQ(after_full.expired() - before_full.expired(), static_cast<uint64_t>(ran_out));

  update("read_rate", 0, 0, 0);  // as the suite found it
}

// A second pair of servers over the suite's node, on ports of their own.
absl::StatusOr<std::unique_ptr<GrpcServers>> OwnServers(Node* node) {
  node::config::NodeConfig config = node->config();
  config.set_client_listen("127.0.0.1:0");
  config.set_admin_listen("127.0.0.1:0");
  return GrpcServers::Start(node, config, kToken);
}

// Held reads take turns by connection: a reader on its own connection is answered at one of
// the next admissions, not behind the seven reads another connection has waiting.
TEST_F(GrpcServicesTest, HeldReadsTakeTurnsByConnection) {
  SetColdReads(Admin().get(), "turn_reads", 5, 30'000, 100);  // a read every 200 ms
  auto stub = [&](bool own_connection) {
    grpc::ChannelArguments args;
    if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return node::client::ClientService::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", node_->client_port()),
                                  grpc::InsecureChannelCredentials(), args));
  };
  auto flood = stub(false);
  auto quiet = stub(true);
  absl::Mutex mu;
  std::vector<std::string> done;  // in the order the reads were answered
  auto read = [&](node::client::ClientService::Stub* client, const std::string& tag) {
    EXPECT_TRUE(ReadCold(client, absl::Seconds(60)).ok()) << tag;
    absl::MutexLock lock(&mu);
    done.push_back(tag);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back(read, flood.get(), "flood");
  // Polled until the flood's reads wait.
  ASSERT_TRUE(PollUntil([&] { return ColdReadHold(node_).waiting() >= 6; }));
  threads.emplace_back(read, quiet.get(), "quiet");
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(done.size(), 9u);
  const size_t quiet_at = std::find(done.begin(), done.end(), "quiet") - done.begin();
  EXPECT_LE(quiet_at, 4u) << "answered after " << quiet_at << " of the flood's reads";
  SetColdReads(Admin().get(), "read_rate", 0, 0, 0);
}

// client_max_streams bounds the calls one connection has open at once: with two held reads
// open, further reads on that connection wait in the client's own transport and never reach the
// node. Shutting those servers down answers their held reads and only theirs.
TEST_F(GrpcServicesTest, StreamLimitKeepsAClientsExtraCallsInItsTransport) {
  node::config::NodeConfig config = node_->config();
  config.set_client_listen("127.0.0.1:0");
  config.set_admin_listen("127.0.0.1:0");
  config.set_client_max_streams(2);
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = GrpcServers::Start(node_, config, kToken);
  ASSERT_TRUE(servers.ok()) << servers.status();
  auto update = [&](double rate, uint32_t max_wait_ms) {
    SetColdReads(Admin().get(), "limited_reads", rate, max_wait_ms, 0);
  };
  auto held = [&] { return ColdReadHold(node_); };
  auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*servers)->client_port()), grpc::InsecureChannelCredentials()));
  auto read = [&](absl::Duration deadline) { return ReadCold(client.get(), deadline); };
  update(0.05, 60'000);  // after the burst, one read every 20 s; reads wait up to 60 s
  ASSERT_TRUE(read(absl::Seconds(20)).ok());  // the burst
  const node::admin::ReadHoldStats before = held();
  std::vector<grpc::Status> open(2);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < open.size(); ++i) {
    threads.emplace_back([&, i] { open[i] = read(absl::Seconds(60)); });
  }
  // Polled until both reached the node.
  PollUntil([&] { return held().waiting() >= before.waiting() + 2; });
  ASSERT_EQ(held().waiting(), before.waiting() + 2);
  // Both streams of the connection are taken: these two never leave the client.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(read(absl::Seconds(1)).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_EQ(held().held() - before.held(), 2u);
  (*servers)->Shutdown(absl::ZeroDuration());
  for (std::thread& t : threads) t.join();
  for (const grpc::Status& s : open) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_EQ(s.error_message(), "server shutting down");
  }
  update(0, 0);
}

// Held reads whose calls were cancelled (here: their deadlines passed) leave the queue at its
// next sweep, though they wait behind a head that is not cancelled: the waiting count drops to
// that head alone while it still waits.
TEST_F(GrpcServicesTest, CancelledHeldReadsLeaveTheQueueBeforeTheirTurn) {
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = OwnServers(node_);
  ASSERT_TRUE(servers.ok()) << servers.status();
  auto held = [&] { return ColdReadHold(node_); };
  auto client = node::client::ClientService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*servers)->client_port()), grpc::InsecureChannelCredentials()));
  auto read = [&](absl::Duration deadline) { return ReadCold(client.get(), deadline); };
  SetColdReads(Admin().get(), "cancel_reads", 0.05, 60'000,
               0);                            // one read every 20 s after the burst
  ASSERT_TRUE(read(absl::Seconds(20)).ok());  // the burst
  const node::admin::ReadHoldStats before = held();
  // The head: waits for the next token, 20 s away.
  std::atomic<bool> head_done{false};
  grpc::Status head_status;
  std::thread head([&] {
    head_status = read(absl::Seconds(60));
    head_done = true;
  });
  ASSERT_TRUE(PollUntil([&] { return held().waiting() == before.waiting() + 1; }));
  // Two more behind it on the same connection, given up by their client after 1 s.
  std::vector<std::thread> behind;
  std::vector<grpc::Status> behind_status(2);
  for (size_t i = 0; i < behind_status.size(); ++i) {
    behind.emplace_back([&, i] { behind_status[i] = read(absl::Seconds(1)); });
  }
  for (std::thread& t : behind) t.join();
  for (const grpc::Status& s : behind_status) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  }
  EXPECT_EQ(held().held() - before.held(), 3u);
  // Swept: only the head waits, and it still does.
  EXPECT_TRUE(PollUntil([&] { return held().waiting() == before.waiting() + 1; }));
  EXPECT_FALSE(head_done.load()) << "the head was answered before the cancelled reads left";
  EXPECT_EQ(held().expired() - before.expired(), 2u);
  SetColdReads(Admin().get(), "cancel_reads", 0, 0, 0);  // the head is admitted
  head.join();
  EXPECT_TRUE(head_status.ok()) << head_status.error_message();
}

// Every call on the servers is timed and counted by method and status code (the server
// interceptor of runtime/rpc_metrics.h); a call to a method the port does not serve counts as
// "other".
TEST_F(GrpcServicesTest, EveryCallIsCountedByMethodAndCode) {
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = OwnServers(node_);
  ASSERT_TRUE(servers.ok()) << servers.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*servers)->client_port()),
                                     grpc::InsecureChannelCredentials());
  auto client = node::client::ClientService::NewStub(channel);
  for (const char* partition : {"no-such-partition", "no-such-partition", "hot"}) {
    grpc::ClientContext c;
    WithDeadline(&c);
    node::client::GetChainStatusRequest req;
    *req.mutable_partition() = Ref(partition);
    node::client::GetChainStatusResponse resp;
    client->GetChainStatus(&c, req, &resp);
  }
  {
    auto admin_on_client_port = node::admin::AdminService::NewStub(channel);
    grpc::ClientContext c;
    WithToken(&c);
    node::admin::NodeStatus resp;
    EXPECT_EQ(admin_on_client_port->GetNodeStatus(&c, {}, &resp).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  // The status is sent before the client sees it, so the counts are in by now.
  const std::string text =
      prometheus::TextSerializer().Serialize((*servers)->rpc_metrics().Collect());
  const std::string labels = "method=\"GetChainStatus\",service=\"node.client.ClientService\"";
  EXPECT_THAT(text, HasSubstr("noded_rpc_handled_total{" + labels + ",code=\"NOT_FOUND\"} 2"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_handled_total{" + labels + ",code=\"OK\"} 1"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_duration_seconds_count{" + labels + "} 3"));
  EXPECT_THAT(text, HasSubstr("noded_rpc_handled_total{method=\"other\",service=\"other\","
                              "code=\"UNIMPLEMENTED\"} 1"));
  (*servers)->Shutdown(absl::ZeroDuration());
}

TEST_F(GrpcServicesTest, ShutdownCancelsCommitWaitsAfterTheDrain) {
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = OwnServers(node_);
  ASSERT_TRUE(servers.ok()) << servers.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*servers)->client_port()),
                                     grpc::InsecureChannelCredentials());
  auto client = node::client::ClientService::NewStub(channel);

  // Nonce 3 of a fresh account waits in the pool for nonces 1 and 2, which never come: the
  // commit wait would last its full 60 s.
  node::client::SubmitTxRequest req;
  *req.mutable_partition() = Ref("hot");
  req.set_signed_tx(SignedPut(1, 'w', 3, "k"));
  req.set_wait_for_commit(true);
  req.set_wait_timeout_ms(60000);
  grpc::ClientContext ctx;
  WithDeadline(&ctx, absl::Seconds(30));
  node::client::SubmitTxResponse resp;
  grpc::Status st;
  absl::Notification answered;
  client->async()->SubmitTx(&ctx, &req, &resp, [&](grpc::Status s) {
    st = std::move(s);
    answered.Notify();
  });
  // Let the call reach the partition (bounded); it must still be waiting.
  EXPECT_FALSE(answered.WaitForNotificationWithTimeout(absl::Milliseconds(300)));

  const absl::Time start = absl::Now();
  (*servers)->Shutdown(absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("shutting down"));
}

// Retry reservations over gRPC: a pool refusal carries its ticket (SubmitTx's "retry-ticket"
// trailer, TxResult.retry_ticket in a batch); the same tx sent back with it after its
// retry-after is admitted past the high-water mark, where a fresh one is refused. The pool fills
// with txs behind a nonce gap, which never commit.
TEST_F(GrpcServicesTest, APoolRefusalsRetryTicketAdmitsTheTxWhenSentBackInItsWindow) {
  auto update = [&](bool on) {
    node::admin::UpdatePartitionFlowRequest req;
    req.set_partition("cold");
    auto* pool = req.mutable_pool();
    pool->set_max_txs(on ? 10 : 100000);
    pool->set_max_per_sender(on ? 10 : 1000);
    pool->set_high_water_fraction(on ? 0.5 : 0.9);  // on: 5 txs
    pool->set_retry_reserve_fraction(on ? 0.4 : 0);
    auto* gate = req.mutable_interceptor()->add_stages();
    gate->set_name("pool");
    gate->mutable_gate()->set_predicate("pool_below_high_water");
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::UpdatePartitionFlowResponse resp;
    grpc::Status st = Admin()->UpdatePartitionFlow(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  };
  update(true);
  // Nonces 2..6 of sender 't' (1 never sent): five txs that stay in the pool, at its mark.
  for (uint64_t nonce = 2; nonce <= 6; ++nonce) {
    grpc::ClientContext ctx;
    node::client::SubmitTxResponse resp;
    grpc::Status st = Submit("cold", SignedPut(3, 't', nonce, "k"), false, &resp, &ctx);
    ASSERT_TRUE(st.ok()) << nonce << ": " << st.error_message();
  }
  const std::string tx = SignedPut(3, 't', 7, "k");
  uint64_t ticket = 0;
  {
    grpc::ClientContext ctx;
    node::client::SubmitTxResponse resp;
    grpc::Status st = Submit("cold", tx, false, &resp, &ctx);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_EQ(Trailer(ctx, "rejected-by"), "pool");
    ASSERT_TRUE(absl::SimpleAtoi(Trailer(ctx, "retry-ticket"), &ticket))
        << "no retry-ticket trailer: '" << Trailer(ctx, "retry-ticket") << "'";
    EXPECT_NE(ticket, 0u);
  }
  {  // A batch's refusal carries its ticket in the result.
    node::client::SubmitTxBatchRequest req;
    *req.mutable_partition() = Ref("cold");
    req.add_signed_txs(SignedPut(3, 'u', 2, "k"));
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::SubmitTxBatchResponse resp;
    ASSERT_TRUE(Client()->SubmitTxBatch(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(resp.results(0).retry_ticket(), 0u);
    EXPECT_GT(resp.results(0).retry_after_ms(), 0u);
  }
  // Sent back with its ticket after its retry-after, as a client honouring the hint does (a
  // refusal, if the wait ran late on this shared machine, gives a new ticket and hint).
  bool admitted = false;
  int refusals = 0;
  uint64_t retry_after_ms = 100;  // the first refusal's, unmeasured: the fixed 100 ms
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!admitted && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(retry_after_ms));  // the protocol's wait, not an ordering
    node::client::SubmitTxRequest req;
    *req.mutable_partition() = Ref("cold");
    req.set_signed_tx(tx);
    req.set_retry_ticket(ticket);
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::SubmitTxResponse resp;
    grpc::Status st = Client()->SubmitTx(&ctx, req, &resp);
    if (st.ok()) {
      admitted = true;
    } else {
      ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
      ++refusals;
      ASSERT_TRUE(absl::SimpleAtoi(Trailer(ctx, "retry-ticket"), &ticket));
      ASSERT_TRUE(absl::SimpleAtoi(Trailer(ctx, "retry-after-ms"), &retry_after_ms));
    }
  }
  EXPECT_TRUE(admitted) << "the ticket never admitted the tx";
  {
    node::admin::GetFlowStatsRequest req;
    req.set_partition("cold");
    grpc::ClientContext ctx;
    WithToken(&ctx);
    node::admin::FlowStats resp;
    ASSERT_TRUE(Admin()->GetFlowStats(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.partitions_size(), 1);
    EXPECT_EQ(resp.partitions(0).retry_hints().tickets_redeemed(), 1u) << refusals;
    EXPECT_EQ(resp.partitions(0).pool().txs(), 6u);  // past its 5-tx mark
  }
  update(false);
}

}  // namespace
}  // namespace runtime::grpc_test
