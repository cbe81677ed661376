// ClientService.WatchCommits and GetValue end to end against a real one-node runtime::Node on
// loopback: every block once and in order across the ledger -> live hand-over, resuming after a
// disconnect, a client that stops reading cut with RESOURCE_EXHAUSTED and its resume height while
// the node keeps committing, the watcher limit, server shutdown, and bad input.
//
// Partitions (one per concern, so the tests do not see each other's blocks): "hot" default
// limits; "steady" small buffers (4 blocks, 64 KiB); "cold" at most 2 watchers.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "proto/client.grpc.pb.h"
#include "runtime/grpc_servers.h"
#include "runtime/node.h"
#include "runtime/partition.h"
#include "tests/runtime/grpc_test_node.h"

namespace runtime::grpc_test {
namespace {

using ::node::client::WatchCommitsRequest;
using ::node::client::WatchCommitsResponse;
using ::testing::HasSubstr;

// One open WatchCommits call.
struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<WatchCommitsResponse>> reader;

  // Reads `n` messages (fewer if the stream ends).
  std::vector<WatchCommitsResponse> Read(int n) {
    std::vector<WatchCommitsResponse> out;
    WatchCommitsResponse m;
    while (static_cast<int>(out.size()) < n && reader->Read(&m)) out.push_back(m);
    return out;
  }
  // Reads to the end and returns the status; the messages read go to *rest.
  grpc::Status Finish(std::vector<WatchCommitsResponse>* rest = nullptr) {
    WatchCommitsResponse m;
    while (reader->Read(&m)) {
      if (rest != nullptr) rest->push_back(m);
    }
    return reader->Finish();
  }
  grpc::Status Cancel() {
    ctx.TryCancel();
    return Finish();
  }
};

std::vector<uint64_t> Heights(const std::vector<WatchCommitsResponse>& messages) {
  std::vector<uint64_t> h;
  for (const auto& m : messages) h.push_back(m.height());
  return h;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t h = from; h <= to; ++h) out.push_back(h);
  return out;
}

class WatchCommitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir("grpc_watch_commits_test"));
    node::config::NodeConfig config = OneNodeConfig(*dir_);
    for (auto& p : *config.mutable_partitions()) {
      if (p.name() == "steady") {
        p.mutable_watch()->set_max_buffered_blocks(4);
        p.mutable_watch()->set_max_buffered_bytes(64 << 10);
      }
      if (p.name() == "cold") p.mutable_watch()->set_max_watchers(2);
    }
    NodeOptions options;
    options.serve_metrics = false;
    absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(config, options);
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE((*node)->Start().ok());
    node_ = node->release();
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", node_->client_port()), grpc::InsecureChannelCredentials()));
  }
  static void TearDownTestSuite() {
    if (node_ != nullptr) node_->Stop(absl::Seconds(2));
    delete node_;
    node_ = nullptr;
    delete channel_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(node_, nullptr); }

  std::unique_ptr<node::client::ClientService::Stub> Client() {
    return node::client::ClientService::NewStub(*channel_);
  }

  static uint32_t Id(const std::string& partition) {
    return (*node_->FindPartition(partition))->id();
  }

  // Submits a Put from account `seed` and waits for its commit; returns the block height.
  uint64_t CommitPut(const std::string& partition, char seed, uint64_t nonce,
                     size_t value_bytes = 1) {
    absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(std::string(32, seed));
    node::chain::Transaction tx;
    tx.set_partition(Id(partition));
    tx.set_nonce(nonce);
    tx.mutable_put()->set_key(absl::StrCat("key-", std::string(1, seed), "-", nonce));
    tx.mutable_put()->set_value(std::string(value_bytes, 'v'));
    node::client::SubmitTxRequest req;
    *req.mutable_partition() = Ref(partition);
    req.set_signed_tx(base::SignTx(std::move(tx), *key));
    req.set_wait_for_commit(true);
    req.set_wait_timeout_ms(15000);
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::SubmitTxResponse resp;
    grpc::Status st = Client()->SubmitTx(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.receipt().status(), node::chain::Receipt::SUCCESS);
    return resp.receipt().block_height();
  }

  uint64_t Tip(const std::string& partition) {
    return (*node_->FindPartition(partition))->height();
  }

  node::admin::PartitionFlowStats Stats(const std::string& partition) {
    return (*node_->FindPartition(partition))->FlowStats();
  }

  std::unique_ptr<Stream> Watch(const std::string& partition, uint64_t from, bool receipts = false,
                                bool txs = false,
                                const std::shared_ptr<grpc::Channel>& channel = nullptr) {
    auto stream = std::make_unique<Stream>();
    WithDeadline(&stream->ctx, absl::Seconds(60));
    WatchCommitsRequest req;
    *req.mutable_partition() = Ref(partition);
    req.set_from_height(from);
    req.set_include_receipts(receipts);
    req.set_include_txs(txs);
    auto stub = node::client::ClientService::NewStub(channel ? channel : *channel_);
    stream->reader = stub->WatchCommits(&stream->ctx, req);
    return stream;
  }

  node::client::GetBlockResponse Block(const std::string& partition, uint64_t height) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetBlockRequest req;
    *req.mutable_partition() = Ref(partition);
    req.set_height(height);
    node::client::GetBlockResponse resp;
    EXPECT_TRUE(Client()->GetBlock(&ctx, req, &resp).ok());
    return resp;
  }

  grpc::Status GetValue(const std::string& partition, const std::string& key, uint64_t height,
                        node::client::GetValueResponse* resp) {
    grpc::ClientContext ctx;
    WithDeadline(&ctx);
    node::client::GetValueRequest req;
    *req.mutable_partition() = Ref(partition);
    req.set_key(key);
    req.set_height(height);
    return Client()->GetValue(&ctx, req, resp);
  }

  // Waits until `done` holds (a server-side effect of a call the client already finished).
  static bool Eventually(const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  static inline std::string* dir_ = nullptr;
  static inline Node* node_ = nullptr;
  static inline std::shared_ptr<grpc::Channel>* channel_ = nullptr;
};

TEST_F(WatchCommitsTest, EveryBlockOnceInOrderAcrossTheHandOver) {
  for (uint64_t n = 1; n <= 3; ++n) CommitPut("hot", 'a', n);
  // Each put waits for its commit before the next: one block each, nothing else commits on "hot".
  const uint64_t last = Tip("hot") + 12;
  std::unique_ptr<Stream> stream = Watch("hot", 1, /*receipts=*/true);
  // Blocks keep committing while the stream reads the ledger, so the hand-over to live blocks
  // happens at some height in the middle, whichever it is.
  std::thread writer([&] {
    for (uint64_t n = 4; n <= 15; ++n) CommitPut("hot", 'a', n);
  });
  std::vector<WatchCommitsResponse> got;
  WatchCommitsResponse m;
  while ((got.empty() || got.back().height() < last) && stream->reader->Read(&m)) {
    got.push_back(m);
  }
  writer.join();
  ASSERT_EQ(Tip("hot"), last);
  ASSERT_EQ(Heights(got), Range(1, last));
  int puts = 0;
  for (const WatchCommitsResponse& b : got) {
    EXPECT_EQ(b.block_hash(), Block("hot", b.height()).block_hash()) << b.height();
    EXPECT_EQ(b.block().header().height(), b.height());
    EXPECT_EQ(b.block().txs_size(), 0);
    ASSERT_EQ(b.receipts_size(), b.block().tx_hashes_size());
    for (int i = 0; i < b.receipts_size(); ++i) {
      EXPECT_EQ(b.receipts(i).tx_hash(), b.block().tx_hashes(i));
      EXPECT_EQ(b.receipts(i).block_height(), b.height());
      EXPECT_EQ(b.receipts(i).status(), node::chain::Receipt::SUCCESS);
      ++puts;
    }
  }
  EXPECT_EQ(puts, 15);
  EXPECT_EQ(stream->Cancel().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(WatchCommitsTest, ResumeAfterADisconnectFromTheLastHeightSeen) {
  const uint64_t tip = Tip("hot");
  std::unique_ptr<Stream> first = Watch("hot", tip + 1, false, /*txs=*/true);
  CommitPut("hot", 'b', 1);
  CommitPut("hot", 'b', 2);
  std::vector<WatchCommitsResponse> seen = first->Read(2);
  ASSERT_EQ(Heights(seen), Range(tip + 1, tip + 2));
  EXPECT_GT(seen[0].block().txs_size(), 0);
  EXPECT_EQ(first->Cancel().error_code(), grpc::StatusCode::CANCELLED);

  CommitPut("hot", 'b', 3);
  const uint64_t h4 = CommitPut("hot", 'b', 4);
  std::unique_ptr<Stream> second = Watch("hot", seen.back().height() + 1);
  std::vector<WatchCommitsResponse> rest = second->Read(static_cast<int>(h4 - tip - 2));
  EXPECT_EQ(Heights(rest), Range(tip + 3, h4));
  second->Cancel();
}

// A client that stops reading: once its blocks fill the flow-control windows and its buffer
// (4 blocks on "steady"), the node cuts it and commits on. When the client reads again it gets
// what was already on its way, then RESOURCE_EXHAUSTED naming the height to resume from.
TEST_F(WatchCommitsTest, ASlowClientIsCutWithItsResumeHeightAndCommitsGoOn) {
  // A small receive window, so that a few blocks fill it.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto small_window = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", node_->client_port()),
                                                grpc::InsecureChannelCredentials(), args);
  const uint64_t start = Tip("steady") + 1;
  std::unique_ptr<Stream> slow = Watch("steady", start, false, /*txs=*/true, small_window);
  uint64_t nonce = 0;
  for (int i = 0; i < 400 && Stats("steady").commit_watchers_cut_slow() == 0; ++i) {
    CommitPut("steady", 'c', ++nonce, 8 << 10);
  }
  ASSERT_EQ(Stats("steady").commit_watchers_cut_slow(), 1u);
  // The node went on committing, and goes on.
  const uint64_t before = Tip("steady");
  EXPECT_GT(CommitPut("steady", 'c', ++nonce), before);

  std::vector<WatchCommitsResponse> got;
  grpc::Status st = slow->Finish(&got);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(Heights(got), Range(start, got.back().height()));
  const uint64_t resume = got.back().height() + 1;
  EXPECT_THAT(st.error_message(), HasSubstr("too slowly"));
  EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("resume from height ", resume)));
  EXPECT_EQ(Trailer(slow->ctx, "resume-height"), absl::StrCat(resume));

  std::unique_ptr<Stream> again = Watch("steady", resume);
  std::vector<WatchCommitsResponse> next = again->Read(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].height(), resume);
  EXPECT_EQ(next[0].block_hash(), Block("steady", resume).block_hash());
  again->Cancel();
  EXPECT_TRUE(Eventually([&] { return Stats("steady").commit_watchers() == 0; }));
}

TEST_F(WatchCommitsTest, AtMostMaxWatchersStreamsPerPartition) {
  CommitPut("cold", 'd', 1);
  std::unique_ptr<Stream> a = Watch("cold", 1);
  std::unique_ptr<Stream> b = Watch("cold", 1);
  ASSERT_EQ(a->Read(1).size(), 1u);
  ASSERT_EQ(b->Read(1).size(), 1u);
  EXPECT_EQ(Stats("cold").commit_watchers(), 2u);

  std::unique_ptr<Stream> c = Watch("cold", 1);
  grpc::Status st = c->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("watch.max_watchers"));

  // A cancelled stream frees its slot once the server is done with it.
  a->Cancel();
  ASSERT_TRUE(Eventually([&] { return Stats("cold").commit_watchers() == 1; }));
  std::unique_ptr<Stream> d = Watch("cold", 1);
  EXPECT_EQ(d->Read(1).size(), 1u);
  b->Cancel();
  d->Cancel();
  EXPECT_TRUE(Eventually([&] { return Stats("cold").commit_watchers() == 0; }));
}

TEST_F(WatchCommitsTest, ServerShutdownEndsStreamsWithTheirResumeHeight) {
  node::config::NodeConfig config = node_->config();
  config.set_client_listen("127.0.0.1:0");
  config.set_admin_listen("127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<GrpcServers>> servers = GrpcServers::Start(node_, config, kToken);
  ASSERT_TRUE(servers.ok()) << servers.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*servers)->client_port()),
                                     grpc::InsecureChannelCredentials());
  const uint64_t h = CommitPut("hot", 'e', 1);
  std::unique_ptr<Stream> stream = Watch("hot", h, false, false, channel);
  ASSERT_EQ(stream->Read(1).size(), 1u);  // caught up: it waits for the next block

  const absl::Time start = absl::Now();
  (*servers)->Shutdown(absl::Seconds(5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));  // ended at once, not at the drain deadline
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("resume from height ", h + 1)));
  EXPECT_EQ(Trailer(stream->ctx, "resume-height"), absl::StrCat(h + 1));
  // The node's own server still streams.
  std::unique_ptr<Stream> other = Watch("hot", h);
  EXPECT_EQ(other->Read(1).size(), 1u);
  other->Cancel();
}

TEST_F(WatchCommitsTest, BadWatchRequests) {
  {
    std::unique_ptr<Stream> s = Watch("nope", 0);
    grpc::Status st = s->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(st.error_message(), HasSubstr("unknown partition"));
  }
  {
    std::unique_ptr<Stream> s = Watch("", 0);
    EXPECT_EQ(s->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    const uint64_t tip = Tip("hot");
    std::unique_ptr<Stream> s = Watch("hot", tip + 100);
    grpc::Status st = s->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
    EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("from_height ", tip + 100,
                                                           " is beyond the tip of partition hot")));
  }
}

TEST_F(WatchCommitsTest, GetValueLatestOlderMissingAndBeyondTheTip) {
  const uint64_t h = CommitPut("hot", 'f', 1, 5);  // key "key-f-1" = "vvvvv"
  node::client::GetValueResponse resp;
  grpc::Status st = GetValue("hot", "key-f-1", 0, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.found());
  EXPECT_EQ(resp.value(), "vvvvv");
  EXPECT_GE(resp.height(), h);

  resp.Clear();
  ASSERT_TRUE(GetValue("hot", "never-written", 0, &resp).ok());
  EXPECT_FALSE(resp.found());
  EXPECT_EQ(resp.value(), "");
  EXPECT_GE(resp.height(), h);

  const uint64_t tip = Tip("hot");
  st = GetValue("hot", "key-f-1", tip + 1, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(st.error_message(),
              HasSubstr(absl::StrCat("height ", tip + 1, " is beyond the tip of partition hot")));
  // Older heights: the key did not exist before its block, and does from it on.
  const uint64_t later = CommitPut("hot", 'g', 1);
  ASSERT_GT(later, h);
  resp.Clear();
  ASSERT_TRUE(GetValue("hot", "key-g-1", h, &resp).ok());
  EXPECT_FALSE(resp.found()) << "key-g-1 was written after height " << h;
  EXPECT_EQ(resp.height(), h);
  resp.Clear();
  ASSERT_TRUE(GetValue("hot", "key-f-1", h, &resp).ok());
  EXPECT_TRUE(resp.found());
  EXPECT_EQ(resp.value(), "vvvvv");
  if (h > 1) {
    resp.Clear();
    ASSERT_TRUE(GetValue("hot", "key-f-1", h - 1, &resp).ok());
    EXPECT_FALSE(resp.found()) << "key-f-1 was written at height " << h;
  }

  EXPECT_EQ(GetValue("hot", "", 0, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = GetValue("hot", std::string(257, 'k'), 0, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("key: must be at most 256 bytes, got 257"));
  EXPECT_EQ(GetValue("nope", "k", 0, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace runtime::grpc_test
