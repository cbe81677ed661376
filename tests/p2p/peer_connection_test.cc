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

// The stream under test: records what the connection writes and completes each write on the
// calling thread (stricter than gRPC 1.51, which completes on its own threads, and allowed by the
// API), unless `Block()` holds completions until `Release()` runs them,
// as a write the peer does not take would. Checks that no write starts while one is in flight.
class FakeStream final : public LinkStream {
 public:
  void Attach(PeerConnection* conn) { conn_ = conn; }

  bool StartWrite(const StreamMessage* m) override {
    {
      absl::MutexLock l(&mu_);
      EXPECT_FALSE(in_flight_) << "a write started while one was in flight";
      if (ending_) return false;
      in_flight_ = true;
      ++entered_;
      written_.push_back(*m);
      if (blocked_) return true;
    }
    Complete(true);
    return true;
  }
  void Cancel() override {
    absl::MutexLock l(&mu_);
    ++cancels_;
  }

  void Block() {
    absl::MutexLock l(&mu_);
    blocked_ = true;
  }
  // Unblocks and completes the write in flight, if any, with `ok`.
  void Release(bool ok = true) {
    bool pending = false;
    {
      absl::MutexLock l(&mu_);
      blocked_ = false;
      pending = in_flight_;
    }
    if (pending) Complete(ok);
  }
  // From now on StartWrite refuses, as a stream that is ending does.
  void End() {
    absl::MutexLock l(&mu_);
    ending_ = true;
  }
  int entered() {
    absl::MutexLock l(&mu_);
    return entered_;
  }
  int cancels() {
    absl::MutexLock l(&mu_);
    return cancels_;
  }
  std::vector<StreamMessage> written() {
    absl::MutexLock l(&mu_);
    return written_;
  }

 private:
  void Complete(bool ok) {
    {
      absl::MutexLock l(&mu_);
      in_flight_ = false;
    }
    conn_->OnWriteDone(ok);
  }

  PeerConnection* conn_ = nullptr;
  absl::Mutex mu_;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  int cancels_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<StreamMessage> written_ ABSL_GUARDED_BY(mu_);
};

class PeerConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stream_ = std::make_shared<FakeStream>();
    conn_ = std::make_unique<PeerConnection>("peer", stream_, 1 << 20, 64 << 10, 1 << 20, &writes_,
                                             &clock_);
    stream_->Attach(conn_.get());
    limits_.write_ns = 2000 * kMs;
    limits_.write_bytes_per_ns = 1000.0 / 1e9;  // 1,000 bytes/s
    limits_.ping_timeout_ns = 5000 * kMs;
  }
  void TearDown() override {
    conn_->Close();
    stream_->Release();
  }

  EgressFrame Frame(size_t bytes, char fill = 'x') {
    EgressFrame f;
    f.peer = "peer";
    f.partition = 1;
    f.channel = node::p2p::CONSENSUS;
    f.data = std::make_shared<const std::string>(bytes, fill);
    f.length = bytes;
    f.message_length = static_cast<uint32_t>(bytes);
    f.chunk_count = 1;
    return f;
  }

  tests::FakeClock clock_;
  std::shared_ptr<FakeStream> stream_;
  std::atomic<uint64_t> writes_{0};
  LinkStallLimits limits_;
  std::unique_ptr<PeerConnection> conn_;
};

TEST_F(PeerConnectionTest, APingRidesTheNextMessageAndItsAnswerTimesTheRoundTrip) {
  const int64_t t0 = clock_.NowNanos();
  conn_->MaybePing(t0, 1000 * kMs);
  ASSERT_TRUE(Eventually([&] { return stream_->written().size() == 1; }));
  const StreamMessage first = stream_->written()[0];
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
  ASSERT_TRUE(Eventually([&] { return stream_->written().size() == 2; }));
  const uint64_t second = stream_->written()[1].frames().ping();
  EXPECT_GT(second, id);
  // Unanswered: within the timeout nothing, past it the link is stalled.
  EXPECT_EQ(conn_->StallReason(t0 + 6000 * kMs, limits_), "");
  EXPECT_THAT(conn_->StallReason(t0 + 6001 * kMs, limits_), HasSubstr("ping unanswered"));
}

TEST_F(PeerConnectionTest, APeerThatNeverAnsweredIsNotHeldToThePingTimeout) {
  const int64_t t0 = clock_.NowNanos();
  conn_->MaybePing(t0, 1000 * kMs);
  ASSERT_TRUE(Eventually([&] { return stream_->written().size() == 1; }));
  // An older node ignores the field: no pong will ever come, and that is not a stall.
  EXPECT_EQ(conn_->StallReason(t0 + 600'000 * kMs, limits_), "");
}

TEST_F(PeerConnectionTest, ThePeersPingIsAnsweredInTheNextMessage) {
  conn_->OnPing(42);
  ASSERT_TRUE(Eventually([&] { return stream_->written().size() == 1; }));
  EXPECT_EQ(stream_->written()[0].frames().pong(), 42u);
  ASSERT_TRUE(conn_->Push(Frame(10)));
  ASSERT_TRUE(Eventually([&] { return stream_->written().size() == 2; }));
  EXPECT_EQ(stream_->written()[1].frames().pong(), 0u);  // answered once
  EXPECT_EQ(stream_->written()[1].frames().frames_size(), 1);
}

TEST_F(PeerConnectionTest, AWriteBlockedPastItsAllowanceIsAStall) {
  stream_->Block();
  const int64_t t0 = clock_.NowNanos();
  ASSERT_TRUE(conn_->Push(Frame(3000)));
  ASSERT_TRUE(Eventually([&] { return stream_->entered() == 1; }));
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

// One write in flight at a time; what queues meanwhile goes out together, in order, in the
// message the completion starts.
TEST_F(PeerConnectionTest, FramesQueuedBehindAWriteInFlightGoOutTogetherWhenItCompletes) {
  stream_->Block();
  ASSERT_TRUE(conn_->Push(Frame(10, 'a')));
  EXPECT_EQ(stream_->entered(), 1);
  ASSERT_TRUE(conn_->Push(Frame(20, 'b')));
  ASSERT_TRUE(conn_->Push(Frame(30, 'c')));
  EXPECT_EQ(stream_->entered(), 1);  // behind the one in flight
  EXPECT_EQ(writes_.load(), 0u);
  stream_->Release();
  const std::vector<StreamMessage> w = stream_->written();
  ASSERT_EQ(w.size(), 2u);
  ASSERT_EQ(w[0].frames().frames_size(), 1);
  EXPECT_EQ(w[0].frames().frames(0).payload(), std::string(10, 'a'));
  ASSERT_EQ(w[1].frames().frames_size(), 2);
  EXPECT_EQ(w[1].frames().frames(0).payload(), std::string(20, 'b'));
  EXPECT_EQ(w[1].frames().frames(1).payload(), std::string(30, 'c'));
  EXPECT_EQ(writes_.load(), 2u);
  EXPECT_EQ(conn_->bytes_written(), 60u);
}

// A failed write closes the connection (cancelling the stream once); nothing more is written.
TEST_F(PeerConnectionTest, AFailedWriteClosesTheConnection) {
  stream_->Block();
  ASSERT_TRUE(conn_->Push(Frame(10)));
  ASSERT_TRUE(conn_->Push(Frame(10)));
  stream_->Release(/*ok=*/false);
  EXPECT_TRUE(conn_->closed());
  EXPECT_EQ(stream_->cancels(), 1);
  EXPECT_EQ(stream_->entered(), 1);  // the queued frame was not written
  EXPECT_FALSE(conn_->Push(Frame(10)));
  EXPECT_EQ(writes_.load(), 0u);
  conn_->Close();
  EXPECT_EQ(stream_->cancels(), 1);  // once
}

// A stream that is ending refuses the write: the connection closes instead of waiting for a
// completion that will never come.
TEST_F(PeerConnectionTest, AStreamThatRefusesAWriteClosesTheConnection) {
  stream_->End();
  EXPECT_TRUE(conn_->Push(Frame(10)));  // queued; its write was refused
  EXPECT_TRUE(conn_->closed());
  EXPECT_EQ(stream_->entered(), 0);
  EXPECT_EQ(stream_->cancels(), 1);
  EXPECT_FALSE(conn_->Push(Frame(10)));
}

// Backpressure: blocked once the queue reaches the release mark, unblocked when writes have
// drained it to half.
TEST_F(PeerConnectionTest, PressureIsSignalledAtTheMarkAndLiftedAtHalf) {
  std::vector<bool> events;
  conn_->SetPressureCallback(100, [&](bool blocked) { events.push_back(blocked); });
  stream_->Block();
  ASSERT_TRUE(conn_->Push(Frame(10)));  // taken by the write in flight at once
  ASSERT_TRUE(conn_->Push(Frame(60)));
  EXPECT_TRUE(events.empty());
  ASSERT_TRUE(conn_->Push(Frame(60)));  // 120 queued
  EXPECT_EQ(events, std::vector<bool>({true}));
  stream_->Release();  // both queued frames go in one message
  EXPECT_EQ(events, std::vector<bool>({true, false}));
}

}  // namespace
}  // namespace p2p
