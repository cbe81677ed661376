#include "runtime/read_hold.h"

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace runtime {
namespace {

constexpr int64_t kMs = 1'000'000;

// A "chain" of one token bucket on the fake clock: one token every `interval`, none banked.
struct FakeChain {
  const tests::FakeClock* clock;
  int64_t interval;
  int64_t next_token;
  int tries = 0;
  // Admits when a token is due; otherwise the time until it is.
  bool TryAdmit(int64_t* retry_after) {
    ++tries;
    const int64_t now = clock->NowNanos();
    if (now >= next_token) {
      next_token = now + interval;
      return true;
    }
    *retry_after = next_token - now;
    return false;
  }
};

// Records what happened to each read, by name.
struct Log {
  std::vector<std::string> answered;
  std::vector<std::string> expired;
  std::vector<std::string> shut_down;
  std::vector<std::string> partition_stopped;
  std::vector<std::string> cancelled;
  std::set<std::string> cancel;     // the reads whose calls the test cancelled
  std::function<void()> on_answer;  // runs as a read is answered
};

class TestRead final : public HeldRead {
 public:
  TestRead(std::string name, FakeChain* chain, Log* log, std::function<void()> during_try = nullptr)
      : name_(std::move(name)), chain_(chain), log_(log), during_try_(std::move(during_try)) {}
  TryResult TryAdmit(int64_t /*now_ns*/, int64_t* retry_after_ns) override {
    if (during_try_) during_try_();
    return chain_->TryAdmit(retry_after_ns) ? TryResult::kAdmitted : TryResult::kWait;
  }
  void Answer() override {
    log_->answered.push_back(name_);
    if (log_->on_answer) log_->on_answer();
  }
  void GiveUp(GiveUpReason reason) override {
    switch (reason) {
      case GiveUpReason::kWaitOver:
        log_->expired.push_back(name_);
        break;
      case GiveUpReason::kShutdown:
        log_->shut_down.push_back(name_);
        break;
      case GiveUpReason::kPartitionStopped:
        log_->partition_stopped.push_back(name_);
        break;
      case GiveUpReason::kCancelled:
        log_->cancelled.push_back(name_);
        break;
    }
  }
  bool Cancelled() const override { return log_->cancel.contains(name_); }

 private:
  const std::string name_;
  FakeChain* const chain_;
  Log* const log_;
  std::function<void()> during_try_;
};

class ReadHoldTest : public ::testing::Test {
 protected:
  bool Hold(const std::string& name, uint64_t queue, int64_t retry_after, int64_t max_wait,
            size_t max_waiting, FakeChain* chain, const void* owner = kOwner,
            std::function<void()> during_try = nullptr, const std::string& client = "c") {
    std::unique_ptr<HeldRead> read =
        std::make_unique<TestRead>(name, chain, &log_, std::move(during_try));
    const bool held = hold_.Hold(owner, queue, client, read, retry_after, max_wait, max_waiting) ==
                      ReadHold::HoldResult::kHeld;
    EXPECT_EQ(read == nullptr, held) << "a refused read stays with the caller";
    return held;
  }

  static constexpr const void* kOwner = nullptr;
  tests::FakeClock clock_;
  // Before hold_: its destructor gives up the reads still held, which write to the log.
  Log log_;
  ReadHold hold_{&clock_};
};

// Reads wait in arrival order and are answered one per token, each when its token is due; only
// the head is tried, so a queue of many costs one try per token, not one per waiting read.
TEST_F(ReadHoldTest, AnswersInArrivalOrderOnePerTokenTryingOnlyTheHead) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Hold("r" + std::to_string(i), 1, 10 * kMs, 1000 * kMs, 100, &chain));
  }
  EXPECT_TRUE(hold_.Waiting(1));
  EXPECT_FALSE(hold_.Waiting(2));
  EXPECT_EQ(hold_.RunDue(), clock_.NowNanos() + 10 * kMs);  // nothing due yet
  EXPECT_EQ(chain.tries, 0);
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(10));
    hold_.RunDue();
    ASSERT_EQ(log_.answered.size(), static_cast<size_t>(i + 1));
  }
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"r0", "r1", "r2", "r3", "r4"}));
  // Five tokens, five answers, and one refused try after each but the last.
  EXPECT_EQ(chain.tries, 9);
  EXPECT_FALSE(hold_.Waiting(1));
  EXPECT_EQ(hold_.RunDue(), INT64_MAX);
  const ReadHoldCounters c = hold_.Counters(1);
  EXPECT_EQ(c.held, 5u);
  EXPECT_EQ(c.answered, 5u);
  EXPECT_EQ(c.expired, 0u);
  EXPECT_EQ(c.waiting, 0u);
}

// Clients take turns: a reader with one read waiting is answered at the next admission, not
// behind another client's queue; each client's own reads stay in arrival order.
TEST_F(ReadHoldTest, ClientsTakeTurns) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Hold("f" + std::to_string(i), 1, 10 * kMs, 1000 * kMs, 100, &chain, kOwner, nullptr,
                     "flood"));
  }
  ASSERT_TRUE(Hold("q0", 1, 0, 1000 * kMs, 100, &chain, kOwner, nullptr, "quiet"));
  ASSERT_TRUE(Hold("o0", 1, 0, 1000 * kMs, 100, &chain, kOwner, nullptr, "other"));
  ASSERT_TRUE(Hold("q1", 1, 0, 1000 * kMs, 100, &chain, kOwner, nullptr, "quiet"));
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Milliseconds(10));
    hold_.RunDue();
  }
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"f0", "q0", "o0", "f1", "q1", "f2", "f3"}));
  EXPECT_EQ(hold_.Counters(1).waiting, 0u);
  EXPECT_FALSE(hold_.Waiting(1));
}

// A client whose head is refused keeps its turn: the next token is its.
TEST_F(ReadHoldTest, ARefusedHeadKeepsItsClientsTurn) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  ASSERT_TRUE(Hold("a0", 1, 5 * kMs, 1000 * kMs, 100, &chain, kOwner, nullptr, "a"));
  ASSERT_TRUE(Hold("b0", 1, 0, 1000 * kMs, 100, &chain, kOwner, nullptr, "b"));
  clock_.Advance(absl::Milliseconds(5));
  hold_.RunDue();  // a0 refused: its token is 5 ms away
  ASSERT_TRUE(log_.answered.empty());
  clock_.Advance(absl::Milliseconds(5));
  hold_.RunDue();
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"a0", "b0"}));
}

// A head is tried no sooner than its hint, and the hint of a later refusal moves the next try.
TEST_F(ReadHoldTest, TriesTheHeadWhenItsHintIsDue) {
  FakeChain chain{&clock_, 50 * kMs, clock_.NowNanos() + 30 * kMs};
  ASSERT_TRUE(Hold("a", 1, 20 * kMs, 1000 * kMs, 100, &chain));  // a stale hint: 20 ms
  clock_.Advance(absl::Milliseconds(19));
  hold_.RunDue();
  EXPECT_EQ(chain.tries, 0);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(hold_.RunDue(), clock_.NowNanos() + 10 * kMs);  // refused: the token is 10 ms away
  EXPECT_EQ(chain.tries, 1);
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, std::vector<std::string>{"a"});
}

// Beyond max_waiting a read is not taken; queues of different partitions are apart.
TEST_F(ReadHoldTest, RefusesBeyondMaxWaitingPerQueue) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  FakeChain other{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  EXPECT_TRUE(Hold("a", 1, 10 * kMs, 1000 * kMs, 2, &chain));
  EXPECT_TRUE(Hold("b", 1, 0, 1000 * kMs, 2, &chain));
  EXPECT_FALSE(Hold("c", 1, 0, 1000 * kMs, 2, &chain));
  EXPECT_TRUE(Hold("x", 2, 10 * kMs, 1000 * kMs, 2, &other));
  EXPECT_EQ(hold_.Counters(1).full, 1u);
  EXPECT_EQ(hold_.Counters(1).waiting, 2u);
  EXPECT_EQ(hold_.Totals().waiting, 3u);
  clock_.Advance(absl::Milliseconds(20));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"a", "x"}));  // one token each
}

// A read whose wait runs out is given up (its caller answers it with the refusal), the next one
// becomes the head; a read given up is never tried again.
TEST_F(ReadHoldTest, GivesUpReadsWhoseWaitRanOut) {
  FakeChain chain{&clock_, 100 * kMs, clock_.NowNanos() + 100 * kMs};
  ASSERT_TRUE(Hold("early", 1, 100 * kMs, 150 * kMs, 100, &chain));
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(Hold("late", 1, 0, 150 * kMs, 100, &chain));  // deadline at 200 ms
  clock_.Advance(absl::Milliseconds(50));                   // 100 ms: the token
  EXPECT_EQ(hold_.RunDue(), clock_.NowNanos() + 100 * kMs);
  EXPECT_EQ(log_.answered, std::vector<std::string>{"early"});
  clock_.Advance(absl::Milliseconds(100));  // 200 ms: late's deadline, and the next token
  hold_.RunDue();
  EXPECT_EQ(log_.expired, std::vector<std::string>{"late"});
  EXPECT_EQ(log_.answered.size(), 1u);
  const ReadHoldCounters c = hold_.Counters(1);
  EXPECT_EQ(c.answered, 1u);
  EXPECT_EQ(c.expired, 1u);
  EXPECT_EQ(c.waiting, 0u);
}

// The deadline wakes a queue whose head is not due before it: RunDue reports it.
TEST_F(ReadHoldTest, NextDueIsTheEarlierOfHintAndDeadline) {
  FakeChain chain{&clock_, 1000 * kMs, clock_.NowNanos() + 80 * kMs};
  ASSERT_TRUE(Hold("a", 1, 80 * kMs, 30 * kMs, 100, &chain));
  EXPECT_EQ(hold_.RunDue(), clock_.NowNanos() + 30 * kMs);
  clock_.Advance(absl::Milliseconds(30));
  hold_.RunDue();
  EXPECT_EQ(log_.expired, std::vector<std::string>{"a"});
  EXPECT_EQ(chain.tries, 0);
}

// Stop gives up every waiting read as a shutdown and takes no more.
TEST_F(ReadHoldTest, StopGivesUpEveryWaitingRead) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  ASSERT_TRUE(Hold("a", 1, 10 * kMs, 1000 * kMs, 100, &chain));
  ASSERT_TRUE(Hold("b", 7, 10 * kMs, 1000 * kMs, 100, &chain));
  hold_.Stop();
  EXPECT_EQ(log_.shut_down, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(Hold("c", 1, 10 * kMs, 1000 * kMs, 100, &chain));
  EXPECT_EQ(hold_.Totals().waiting, 0u);
  EXPECT_EQ(hold_.Totals().expired, 2u);
}

// A read is counted as answered before it is answered: a client that reads the stats as soon as
// its answer arrives sees it.
TEST_F(ReadHoldTest, CountsAReadBeforeAnsweringIt) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  std::vector<uint64_t> seen;
  log_.on_answer = [&] { seen.push_back(hold_.Counters(1).answered); };
  ASSERT_TRUE(Hold("a", 1, 10 * kMs, 1000 * kMs, 100, &chain));
  ASSERT_TRUE(Hold("b", 1, 0, 1000 * kMs, 100, &chain));
  clock_.Advance(absl::Milliseconds(20));
  hold_.RunDue();
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
}

// One server of several stopping gives up its own reads only, and takes no more from it.
TEST_F(ReadHoldTest, EndOwnerGivesUpThatOwnersReadsOnly) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  int a = 0, b = 0;
  ASSERT_TRUE(Hold("a1", 1, 10 * kMs, 1000 * kMs, 100, &chain, &a));
  ASSERT_TRUE(Hold("b1", 1, 0, 1000 * kMs, 100, &chain, &b));
  ASSERT_TRUE(Hold("a2", 1, 0, 1000 * kMs, 100, &chain, &a));
  hold_.EndOwner(&a);
  EXPECT_EQ(log_.shut_down, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_FALSE(Hold("a3", 1, 0, 1000 * kMs, 100, &chain, &a));
  EXPECT_TRUE(Hold("b2", 1, 0, 1000 * kMs, 100, &chain, &b));
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"b1", "b2"}));
}

// A stopped partition's waiting reads are given up as such; its queue takes reads again after
// (the partition started again under its id), and other queues are untouched.
TEST_F(ReadHoldTest, EndQueueGivesUpThatPartitionsReads) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  FakeChain other{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  ASSERT_TRUE(Hold("p1", 1, 10 * kMs, 1000 * kMs, 100, &chain));
  ASSERT_TRUE(Hold("p2", 1, 0, 1000 * kMs, 100, &chain));
  ASSERT_TRUE(Hold("q1", 2, 10 * kMs, 1000 * kMs, 100, &other));
  hold_.EndQueue(1);
  EXPECT_EQ(log_.partition_stopped, (std::vector<std::string>{"p1", "p2"}));
  EXPECT_FALSE(hold_.Waiting(1));
  EXPECT_TRUE(Hold("p3", 1, 10 * kMs, 1000 * kMs, 100, &chain));
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"p3", "q1"}));
  EXPECT_EQ(hold_.Counters(1).expired, 2u);
}

// While a head is being tried the lock is free: a read held meanwhile queues behind it. A Stop
// meanwhile gives the head up (as a shutdown) once its try comes back refused (next test).
TEST_F(ReadHoldTest, HoldDuringATryQueuesBehindTheHead) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  bool once = false;
  ASSERT_TRUE(Hold("a", 1, 10 * kMs, 1000 * kMs, 100, &chain, kOwner, [&] {
    if (once) return;
    once = true;
    EXPECT_TRUE(hold_.Waiting(1));  // busy
    EXPECT_TRUE(Hold("b", 1, 0, 1000 * kMs, 100, &chain));
  }));
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();  // a admitted (b held during its try), b refused: the token is spent
  EXPECT_EQ(log_.answered, std::vector<std::string>{"a"});
  EXPECT_TRUE(hold_.Waiting(1));  // b, refused
  clock_.Advance(absl::Milliseconds(10));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"a", "b"}));
}

// A read whose call was cancelled leaves its queue at the next sweep (when a Hold finds the queue
// full, or when the queue runs; at most every kCancelSweepNanos), not when it reaches its
// client's head: it is answered as cancelled, counted as expired, and frees its place.
TEST_F(ReadHoldTest, CancelledReadsLeaveAtTheNextSweep) {
  FakeChain chain{&clock_, 1000 * kMs, clock_.NowNanos() + 1000 * kMs};  // no token for 1 s
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Hold("r" + std::to_string(i), 1, 50 * kMs, 5000 * kMs, 3, &chain));
  }
  EXPECT_FALSE(Hold("x", 1, 50 * kMs, 5000 * kMs, 3, &chain));  // full (and swept: nothing)
  log_.cancel = {"r1", "r2"};
  EXPECT_FALSE(Hold("x", 1, 50 * kMs, 5000 * kMs, 3, &chain));  // not swept again so soon
  EXPECT_TRUE(log_.cancelled.empty());
  clock_.Advance(absl::Milliseconds(100));
  // Full, so the Hold sweeps: r1 and r2 go (answered as cancelled), r3 takes a place.
  ASSERT_TRUE(Hold("r3", 1, 50 * kMs, 5000 * kMs, 3, &chain));
  EXPECT_EQ(log_.cancelled, (std::vector<std::string>{"r1", "r2"}));
  EXPECT_EQ(hold_.Counters(1).waiting, 2u);
  EXPECT_EQ(hold_.Counters(1).expired, 2u);
  ASSERT_TRUE(Hold("r4", 1, 50 * kMs, 5000 * kMs, 3, &chain));
  // Full again with r4 cancelled, but within kCancelSweepNanos of the last sweep: refused.
  log_.cancel = {"r4"};
  EXPECT_FALSE(Hold("y", 1, 50 * kMs, 5000 * kMs, 3, &chain));
  // The queue's next run, past kCancelSweepNanos, sweeps r4 (behind r0 and r3) before it tries
  // the head.
  clock_.Advance(absl::Milliseconds(100));
  hold_.RunDue();
  EXPECT_EQ(log_.cancelled, (std::vector<std::string>{"r1", "r2", "r4"}));
  EXPECT_EQ(hold_.Counters(1).waiting, 2u);
  EXPECT_TRUE(log_.answered.empty());
  // The rest are answered as tokens come.
  clock_.Advance(absl::Milliseconds(1000));
  hold_.RunDue();
  clock_.Advance(absl::Milliseconds(1000));
  hold_.RunDue();
  EXPECT_EQ(log_.answered, (std::vector<std::string>{"r0", "r3"}));
  EXPECT_EQ(hold_.Counters(1).held, 5u);
}

TEST_F(ReadHoldTest, StopDuringATryGivesTheHeadUp) {
  FakeChain chain{&clock_, 10 * kMs, clock_.NowNanos() + 10 * kMs};
  ASSERT_TRUE(Hold("a", 1, 5 * kMs, 1000 * kMs, 100, &chain, kOwner, [&] { hold_.Stop(); }));
  clock_.Advance(absl::Milliseconds(5));  // tried before its token: refused
  EXPECT_EQ(hold_.RunDue(), INT64_MAX);
  EXPECT_EQ(log_.shut_down, std::vector<std::string>{"a"});
  EXPECT_TRUE(log_.answered.empty());
  EXPECT_EQ(hold_.Counters(1).expired, 1u);
  EXPECT_EQ(hold_.Counters(1).waiting, 0u);
}

// On its own thread (real time): a held read is answered without anyone calling RunDue.
TEST(ReadHoldThreadTest, TheThreadAnswersHeldReads) {
  ReadHold hold(flowctl::Clock::Real());
  hold.Start();
  struct Once final : HeldRead {
    explicit Once(absl::Notification* done) : done(done) {}
    TryResult TryAdmit(int64_t, int64_t*) override { return TryResult::kAdmitted; }
    void Answer() override { done->Notify(); }
    void GiveUp(GiveUpReason) override {}
    absl::Notification* done;
  };
  absl::Notification done;
  std::unique_ptr<HeldRead> read = std::make_unique<Once>(&done);
  ASSERT_EQ(hold.Hold(nullptr, 1, "c", read, 2 * kMs, 60'000 * kMs, 10),
            ReadHold::HoldResult::kHeld);
  done.WaitForNotification();
  hold.Stop();
  EXPECT_EQ(hold.Counters(1).answered, 1u);
}

}  // namespace
}  // namespace runtime
