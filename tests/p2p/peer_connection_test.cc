// PeerConnection's link liveness on its own: stream functions faked, time from a FakeClock.
#include "p2p/peer_connection.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/p2p/p2p_test_util.h"

namespace p2p {
namespace {

using node::p2p::StreamMessage;
using ::p2p::testing::Eventually;
using ::testing::HasSubstr;

constexpr int64_t kMs = 1'000'000;

// The far end of a stream: records what the writer writes; `Block()` makes writes wait until
// `Release()`, as a write the kernel does not take would.
class FakeStream {
 public:
  bool Write(const StreamMessage& m) {
    absl::MutexLock l(&mu_);
    ++entered_;
    mu_.Await(absl::Condition(
        +[](FakeStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->blocked_; }, this));
    written_.push_back(m);
    return true;
  }
  void Block() {
    absl::MutexLock l(&mu_);
    blocked_ = true;
  }
  void Release() {
    absl::MutexLock l(&mu_);
    blocked_ = false;
  }
  int entered() {
    absl::MutexLock l(&mu_);
    return entered_;
  }
  std::vector<StreamMessage> written() {
    absl::MutexLock l(&mu_);
    return written_;
  }

 private:
  absl::Mutex mu_;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<StreamMessage> written_ ABSL_GUARDED_BY(mu_);
};

class PeerConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    conn_ = std::make_unique<PeerConnection>(
        "peer", [this](const StreamMessage& m) { return stream_.Write(m); },
        [](StreamMessage*) { return false; }, [] {}, 1 << 20, 64 << 10, 1 << 20, &writes_, &clock_);
    conn_->StartWriter();
    limits_.write_ns = 2000 * kMs;
    limits_.write_bytes_per_ns = 1000.0 / 1e9;  // 1,000 bytes/s
    limits_.ping_timeout_ns = 5000 * kMs;
  }
  void TearDown() override {
    stream_.Release();
    conn_->Detach();
  }

  EgressFrame Frame(size_t bytes) {
    EgressFrame f;
    f.peer = "peer";
    f.partition = 1;
    f.channel = node::p2p::CONSENSUS;
    f.data = std::make_shared<const std::string>(bytes, 'x');
    f.length = bytes;
    f.message_length = static_cast<uint32_t>(bytes);
    f.chunk_count = 1;
    return f;
  }

  tests::FakeClock clock_;
  FakeStream stream_;
  std::atomic<uint64_t> writes_{0};
  LinkStallLimits limits_;
  std::unique_ptr<PeerConnection> conn_;
};

TEST_F(PeerConnectionTest, APingRidesTheNextMessageAndItsAnswerTimesTheRoundTrip) {
  const int64_t t0 = clock_.NowNanos();
  conn_->MaybePing(t0, 1000 * kMs);
  ASSERT_TRUE(Eventually([&] { return stream_.written().size() == 1; }));
  const StreamMessage first = stream_.written()[0];
  ASSERT_TRUE(first.has_frames());
  EXPECT_EQ(first.frames().frames_size(), 0);  // a ping needs no frames
  const uint64_t id = first.frames().ping();
  ASSERT_NE(id, 0u);

  conn_->OnPong(id + 1, t0 + 1 * kMs);  // not the outstanding ping: ignored
  EXPECT_EQ(conn_->last_rtt_ns(), -1);
  conn_->OnPong(id, t0 + 3 * kMs);
  EXPECT_EQ(conn_->last_rtt_ns(), 3 * kMs);
  EXPECT_EQ(conn_->StallReason(t0 + 60'000 * kMs, limits_), "");  // answered

  conn_->MaybePing(t0 + 500 * kMs, 1000 * kMs);  // the interval has not passed
  conn_->MaybePing(t0 + 1000 * kMs, 1000 * kMs);
  ASSERT_TRUE(Eventually([&] { return stream_.written().size() == 2; }));
  const uint64_t second = stream_.written()[1].frames().ping();
  EXPECT_GT(second, id);
  // Unanswered: within the timeout nothing, past it the link is stalled.
  EXPECT_EQ(conn_->StallReason(t0 + 6000 * kMs, limits_), "");
  EXPECT_THAT(conn_->StallReason(t0 + 6001 * kMs, limits_), HasSubstr("ping unanswered"));
}

TEST_F(PeerConnectionTest, APeerThatNeverAnsweredIsNotHeldToThePingTimeout) {
  const int64_t t0 = clock_.NowNanos();
  conn_->MaybePing(t0, 1000 * kMs);
  ASSERT_TRUE(Eventually([&] { return stream_.written().size() == 1; }));
  // An older node ignores the field: no pong will ever come, and that is not a stall.
  EXPECT_EQ(conn_->StallReason(t0 + 600'000 * kMs, limits_), "");
}

TEST_F(PeerConnectionTest, ThePeersPingIsAnsweredInTheNextMessage) {
  conn_->OnPing(42);
  ASSERT_TRUE(Eventually([&] { return stream_.written().size() == 1; }));
  EXPECT_EQ(stream_.written()[0].frames().pong(), 42u);
  ASSERT_TRUE(conn_->Push(Frame(10)));
  ASSERT_TRUE(Eventually([&] { return stream_.written().size() == 2; }));
  EXPECT_EQ(stream_.written()[1].frames().pong(), 0u);  // answered once
  EXPECT_EQ(stream_.written()[1].frames().frames_size(), 1);
}

TEST_F(PeerConnectionTest, AWriteBlockedPastItsAllowanceIsAStall) {
  stream_.Block();
  const int64_t t0 = clock_.NowNanos();
  ASSERT_TRUE(conn_->Push(Frame(3000)));
  ASSERT_TRUE(Eventually([&] { return stream_.entered() == 1; }));
  // 2 s plus 3,000 bytes at 1,000 bytes/s.
  EXPECT_EQ(conn_->StallReason(t0 + 5000 * kMs, limits_), "");
  EXPECT_THAT(conn_->StallReason(t0 + 5001 * kMs, limits_),
              HasSubstr("a write of 3000 bytes blocked for 5001 ms"));
  LinkStallLimits off = limits_;
  off.write_ns = 0;
  EXPECT_EQ(conn_->StallReason(t0 + 60'000 * kMs, off), "");
  // Marked stalled: closed, counted as such, and no reason given again.
  conn_->MarkStalled();
  EXPECT_TRUE(conn_->stalled());
  EXPECT_EQ(conn_->StallReason(t0 + 60'000 * kMs, limits_), "");
  EXPECT_FALSE(conn_->Push(Frame(1)));
}

TEST_F(PeerConnectionTest, DetachCanLeaveAWriterBlockedInAWriteAndJoinItLater) {
  stream_.Block();
  ASSERT_TRUE(conn_->Push(Frame(100)));
  ASSERT_TRUE(Eventually([&] { return stream_.entered() == 1; }));
  EXPECT_FALSE(conn_->Detach(absl::Milliseconds(1)));
  EXPECT_FALSE(conn_->WriterDone());
  stream_.Release();
  ASSERT_TRUE(Eventually([&] { return conn_->WriterDone(); }));
  conn_->JoinWriter();
  EXPECT_EQ(stream_.written().size(), 1u);
}

}  // namespace
}  // namespace p2p
