// ClientAdmission: refusals before any decode, verification on the client lane, the pool, the
// tracker and the forwarder, and exactly one answer per request whatever happens to its job.
// One thread drives everything: the worker pool is never started (RunQueuedForTest).
#include "partitions/client_admission.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/dispatcher.h"
#include "flowctl/stage_registry.h"
#include "flowctl/worker_pool.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/mocks/recording_network.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

constexpr uint32_t kPartition = 0;

class ClientAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override { Build("stages { name: 'in_flight' concurrency { max_in_flight: 8 } }"); }

  void Build(const std::string& interceptor_text, int64_t lane_messages = 100) {
    admission_.reset();
    dispatcher_.reset();
    pool_.reset();
    chain_ = Chain();  // closes the ledger before it is opened afresh
    dir_ = chaintest::FreshDir("client_admission");
    absl::StatusOr<Chain> chain = OpenChain(dir_, kPartition, node::chain::GenesisConfig());
    ASSERT_TRUE(chain.ok()) << chain.status();
    chain_ = *std::move(chain);
    pool_ = chaintest::PoolOver(chain_, &clock_, pool_limits_);
    node::flowctl::StageChainConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(interceptor_text, &config));
    absl::StatusOr<std::shared_ptr<const flowctl::ChainFactory>> factory = registry_.Build(config);
    ASSERT_TRUE(factory.ok()) << factory.status();
    interceptor_ = std::make_unique<flowctl::StageChainHolder>(
        (*factory)->Create(flowctl::StageContext{.partition = kPartition, .clock = &clock_}));
    flowctl::Dispatcher::Options d;
    d.name = "test";
    d.clock = &clock_;
    d.budget = {.max_messages = lane_messages, .max_bytes = 64 << 20};
    d.lanes.push_back(
        {.name = "client",
         .weight = 1,
         .handler = [this](flowctl::Message m) { admission_->HandleJob(std::move(m)); },
         .reserved_messages = 0});
    absl::StatusOr<std::unique_ptr<flowctl::Dispatcher>> dispatcher =
        flowctl::Dispatcher::Create(&workers_, std::move(d));
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = *std::move(dispatcher);
    admission_ = std::make_unique<ClientAdmission>(
        ClientAdmission::Deps{.partition = kPartition,
                              .name = "test",
                              .clock = admission_clock_,
                              .interceptor = interceptor_.get(),
                              .dispatcher = dispatcher_.get(),
                              .client_lane = 0,
                              .pool = pool_.get(),
                              .tracker = &tracker_,
                              .forwarder = &forwarder_,
                              .waiters = &waiters_,
                              .ledger = chain_.ledger.get(),
                              .tx_limits = {.partition = kPartition},
                              .consensus_state = [] { return std::string("NORMAL"); },
                              .request_tick = [this] { ++ticks_; },
                              .pool_retry_after = pool_hint_,
                              .client_lane_retry_after = lane_hint_});
  }

  void TearDown() override {
    admission_.reset();
    dispatcher_.reset();
    pool_.reset();
    chain_ = Chain();
    std::filesystem::remove_all(dir_);
  }

  std::string SignedPut(uint64_t nonce) {
    return chaintest::Put(keys_[0], nonce, absl::StrCat("k", nonce), "v", kPartition)->signed_bytes;
  }

  // Submits one tx; the answer lands in `out` whenever it comes.
  void Submit(std::string bytes, std::vector<SubmitResult>* out,
              absl::Status gate = absl::OkStatus()) {
    admission_->Submit(
        {std::move(bytes)}, {}, gate, /*single=*/true,
        [out](SubmitResult r) { out->push_back(std::move(r)); }, nullptr);
  }

  tests::FakeClock clock_{1'000'000'000};
  const flowctl::Clock* admission_clock_ = &clock_;  // the admission's own clock
  std::vector<base::PrivateKey> keys_ = chaintest::Keys(1);
  std::string dir_;
  Chain chain_;
  std::unique_ptr<TxPool> pool_;
  TxTracker tracker_{TxTrackerPolicy{}};
  tests::RecordingNetwork net_{"a", {"b", "c", "d"}};
  PeerSender sender_{&net_, kPartition, {"a", "b", "c", "d"}, 0};
  Forwarder forwarder_{&sender_, &clock_, {.hold_nanos = 1'000'000}};
  CommitWaiters waiters_;
  flowctl::StageRegistry registry_;
  std::unique_ptr<flowctl::StageChainHolder> interceptor_;
  flowctl::WorkerPool workers_{
      {.cpu_clock = flowctl::WorkerPool::CpuClock::kWall, .clock = &clock_}};
  std::unique_ptr<flowctl::Dispatcher> dispatcher_;
  std::unique_ptr<ClientAdmission> admission_;
  int ticks_ = 0;
  // The partition's measured hints (Deps); null: the fixed ones. Set before Build.
  std::function<absl::Duration(uint64_t*)> pool_hint_;
  std::function<absl::Duration()> lane_hint_;
  TxPoolLimits pool_limits_;  // set before Build
};

TEST_F(ClientAdmissionTest, AnAdmittedTxIsVerifiedOnTheLaneThenPooledTrackedAndForwarded) {
  std::vector<SubmitResult> got;
  const std::string bytes = SignedPut(1);
  Submit(bytes, &got);
  EXPECT_TRUE(got.empty());  // waits for the lane: no verification on the caller's thread
  EXPECT_GT(workers_.RunQueuedForTest(100), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].status.ok()) << got[0].status;
  ASSERT_NE(pool_->Get(got[0].tx_hash), nullptr);
  EXPECT_EQ(tracker_.Get(got[0].tx_hash).admitted_nanos, 1'000'000'000);
  EXPECT_EQ(ticks_, 1);
  forwarder_.Flush(false);
  ASSERT_EQ(net_.log().size(), 1u);
  EXPECT_EQ(net_.log()[0].channel, p2p::Channel::TX_FORWARD);
}

TEST_F(ClientAdmissionTest, AStageRefusesBeforeAnythingIsDecoded) {
  Build("stages { name: 'closed' rate { rate_per_second: 0 } }");
  std::vector<SubmitResult> got;
  Submit("not a transaction at all", &got);  // refused on its size alone: no decode error
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kResourceExhausted) << got[0].status;
  EXPECT_EQ(got[0].rejected_by, "closed");
  EXPECT_EQ(got[0].retry_after, absl::Seconds(1));
  EXPECT_EQ(workers_.RunQueuedForTest(100), 0);
}

// A clock that moves on by `step` at every reading.
class SteppingClock final : public flowctl::Clock {
 public:
  explicit SteppingClock(int64_t step) : step_(step) {}
  int64_t NowNanos() const override { return now_.fetch_add(step_) + step_; }

 private:
  const int64_t step_;
  mutable std::atomic<int64_t> now_{1'000'000'000};
};

// Each tx that reaches the interceptor's stages records how long they took to decide, admitted
// or rejected; a tx answered by the closed gate never reaches them.
TEST_F(ClientAdmissionTest, EveryStageDecisionIsTimed) {
  SteppingClock stepping(7'000);
  admission_clock_ = &stepping;
  Build("stages { name: 'once' rate { rate_per_second: 0.001 burst: 1 } }");
  std::vector<SubmitResult> got;
  Submit(SignedPut(1), &got);                                    // admitted (the burst token)
  Submit(SignedPut(2), &got);                                    // refused by the rate stage
  Submit(SignedPut(3), &got, absl::UnavailableError("paused"));  // never reaches the stages
  workers_.RunQueuedForTest(100);
  ASSERT_EQ(got.size(), 3u);  // in answer order: the refusals at once, the admitted after its job
  EXPECT_EQ(got[0].rejected_by, "once") << got[0].status;
  EXPECT_EQ(got[1].status.code(), absl::StatusCode::kUnavailable) << got[1].status;
  EXPECT_TRUE(got[2].status.ok()) << got[2].status;
  const flowctl::HistogramSnapshot decisions = admission_->decision_time();
  EXPECT_EQ(decisions.count, 2u);
  EXPECT_EQ(decisions.max, 7'000);  // one clock step between the readings around the stages
  EXPECT_EQ(decisions.sum, 14'000);
  admission_.reset();  // before `stepping` goes
}

TEST_F(ClientAdmissionTest, DefectsAndAClosedGateAnswerAtOnceWithTheirOwnCodes) {
  std::vector<SubmitResult> got;
  Submit("garbage", &got);
  Submit(SignedPut(1), &got, absl::UnavailableError("paused"));
  std::string forged = SignedPut(2);
  forged[forged.size() - 1] ^= 1;  // the signature no longer matches
  Submit(forged, &got);
  workers_.RunQueuedForTest(100);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kInvalidArgument) << got[0].status;
  EXPECT_EQ(got[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got[2].status.code(), absl::StatusCode::kUnauthenticated) << got[2].status;
  EXPECT_EQ(pool_->stats().txs, 0u);
  EXPECT_EQ(tracker_.stats().entries, 0u);
}

TEST_F(ClientAdmissionTest, AFullLaneRefusesAndAStoppedDispatcherStillAnswersOnce) {
  Build("stages { name: 'in_flight' concurrency { max_in_flight: 8 } }", /*lane_messages=*/1);
  std::vector<SubmitResult> got;
  Submit(SignedPut(1), &got);
  Submit(SignedPut(2), &got);  // the lane holds one job
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(got[0].rejected_by, "client_lane");
  EXPECT_EQ(got[0].retry_after, kFixedClientLaneRetryAfter);  // no measured hint given
  dispatcher_->Stop();  // the queued job is discarded: its destructor answers
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].status.code(), absl::StatusCode::kUnavailable) << got[1].status;
  // The in-flight permits came back: a new chain admits up to its limit again.
  EXPECT_EQ(interceptor_->Get()->Stats()[0].gauges[0].value, 0);
}

TEST_F(ClientAdmissionTest, RefusalsCarryThePartitionsMeasuredHints) {
  int lane_asked = 0;
  lane_hint_ = [&lane_asked] {
    ++lane_asked;
    return absl::Milliseconds(7);
  };
  pool_hint_ = [](uint64_t* ticket) {
    *ticket = 77;
    return absl::Milliseconds(420);
  };
  Build("stages { name: 'in_flight' concurrency { max_in_flight: 8 } }", /*lane_messages=*/1);
  std::vector<SubmitResult> got;
  Submit(SignedPut(1), &got);
  Submit(SignedPut(2), &got);  // the lane holds one job
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rejected_by, "client_lane");
  EXPECT_EQ(got[0].retry_after, absl::Milliseconds(7));
  EXPECT_EQ(lane_asked, 1);
  EXPECT_GT(workers_.RunQueuedForTest(100), 0);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_TRUE(got[1].status.ok()) << got[1].status;

  // The pool refuses (sender quota 1 with a pool of its own): its hint, not the fixed 100 ms.
  pool_limits_.max_per_sender = 1;
  Build("stages { name: 'in_flight' concurrency { max_in_flight: 8 } }", /*lane_messages=*/10);
  got.clear();
  admission_->Submit({SignedPut(1), SignedPut(2)}, {}, absl::OkStatus(), /*single=*/false, nullptr,
                     [&got](std::vector<SubmitResult> r) { got = std::move(r); });
  EXPECT_GT(workers_.RunQueuedForTest(100), 0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[1].status.code(), absl::StatusCode::kResourceExhausted) << got[1].status;
  EXPECT_EQ(got[1].rejected_by, "pool");
  EXPECT_EQ(got[1].retry_after, absl::Milliseconds(420));
  EXPECT_EQ(got[1].retry_ticket, 77u) << "the pool refusal's ticket is not passed on";
  EXPECT_EQ(got[0].retry_ticket, 0u);
}

TEST_F(ClientAdmissionTest, WaitForCommitAnswersWithTheReceiptOfTheBlock) {
  std::vector<SubmitResult> got;
  SubmitOptions options;
  options.wait_for_commit = true;
  admission_->Submit(
      {SignedPut(1)}, options, absl::OkStatus(), true,
      [&](SubmitResult r) { got.push_back(std::move(r)); }, nullptr);
  workers_.RunQueuedForTest(100);
  EXPECT_TRUE(got.empty());  // pooled, waiting for its block
  EXPECT_EQ(waiters_.size(), 1u);
  TxPtr tx = pool_->Get(pool_->SelectBatch(10, 1 << 20).at(0)->hash);
  CommitEvent e;
  e.height = 1;
  e.txs = {tx};
  node::chain::Receipt receipt;
  receipt.set_status(node::chain::Receipt::SUCCESS);
  e.receipts = {receipt};
  waiters_.OnCommit(e);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].receipt.has_value());
  EXPECT_EQ(got[0].receipt->status(), node::chain::Receipt::SUCCESS);
}

// A tx refused before (a nonce gap) and submitted again once its nonce is next waits for its new
// inclusion: its old refusal in the ledger does not answer it.
TEST_F(ClientAdmissionTest, WaitForCommitIsNotAnsweredByTheTxsEarlierRefusal) {
  TxPtr second = chaintest::Put(keys_[0], 2, "k2", "v", kPartition);
  TxPtr first = chaintest::Put(keys_[0], 1, "k1", "v", kPartition);
  ASSERT_TRUE(chaintest::CommitTxs(chain_, {second}).ok());  // height 1: REJECTED, a gap
  ASSERT_TRUE(chaintest::CommitTxs(chain_, {first}).ok());   // height 2
  ASSERT_EQ(chain_.ledger->GetReceipt(second->hash)->status(), node::chain::Receipt::REJECTED);
  std::vector<SubmitResult> got;
  SubmitOptions options;
  options.wait_for_commit = true;
  admission_->Submit(
      {second->signed_bytes}, options, absl::OkStatus(), true,
      [&](SubmitResult r) { got.push_back(std::move(r)); }, nullptr);
  workers_.RunQueuedForTest(100);
  EXPECT_TRUE(got.empty()) << "answered by the refusal at height 1";
  EXPECT_EQ(waiters_.size(), 1u);
  ASSERT_NE(pool_->Get(second->hash), nullptr);
  // The feed may publish a block after the ledger has it: the old refusal, published now, does
  // not answer either.
  CommitEvent late;
  late.height = 1;
  late.txs = {second};
  late.receipts = *chain_.ledger->GetBlockReceipts(1);
  ASSERT_EQ(late.receipts.at(0).status(), node::chain::Receipt::REJECTED);
  waiters_.OnCommit(late);
  EXPECT_TRUE(got.empty()) << "answered by the refusal at height 1, published late";
  CommitEvent e;
  e.height = 3;
  e.txs = {second};
  node::chain::Receipt receipt;
  receipt.set_status(node::chain::Receipt::SUCCESS);
  receipt.set_block_height(3);
  e.receipts = {receipt};
  waiters_.OnCommit(e);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  ASSERT_TRUE(got[0].receipt.has_value());
  EXPECT_EQ(got[0].receipt->status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(got[0].receipt->block_height(), 3u);
}

// Lossless mode: a record whose sender's nonce cannot be read (a disk error behind the executor)
// is kept for a retry, not dropped as if it were a duplicate; once the state reads again it pools.
TEST_F(ClientAdmissionTest, ADrainedRecordIsKeptWhenTheStateCannotBeRead) {
  flowctl::SpillFifoOptions o;
  o.dir = dir_ + "_fifo";
  absl::StatusOr<std::unique_ptr<flowctl::SpillFifo>> fifo = flowctl::SpillFifo::Open(o);
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  SpillCursor cursor(fifo->get(), (*fifo)->stats().persisted_seq);
  bool disk_fails = true;
  TxPool pool(TxPoolLimits{}, &clock_, [&](absl::string_view sender) -> absl::StatusOr<uint64_t> {
    if (disk_fails) return absl::InternalError("ledger read: rocksdb: IO error");
    return chain_.executor->NextNonce(sender);
  });
  ClientAdmission admission(ClientAdmission::Deps{.partition = kPartition,
                                                  .name = "lossless",
                                                  .clock = &clock_,
                                                  .interceptor = interceptor_.get(),
                                                  .dispatcher = dispatcher_.get(),
                                                  .client_lane = 0,
                                                  .pool = &pool,
                                                  .tracker = &tracker_,
                                                  .forwarder = &forwarder_,
                                                  .waiters = &waiters_,
                                                  .ledger = chain_.ledger.get(),
                                                  .spill_cursor = &cursor,
                                                  .tx_limits = {.partition = kPartition},
                                                  .consensus_state = [] { return "NORMAL"; },
                                                  .request_tick = [] {}});
  const flowctl::SpillFifo::Record record{.seq = 1, .data = SignedPut(1)};
  absl::Status s = admission.DrainSink(record);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;  // the drain keeps the record
  EXPECT_EQ(pool.stats().txs, 0u);
  disk_fails = false;
  s = admission.DrainSink(record);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(pool.stats().txs, 1u);
  std::filesystem::remove_all(o.dir);
}

}  // namespace
}  // namespace partitions
