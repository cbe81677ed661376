#include "p2p/egress_sender.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace p2p {
namespace {

// Real clock: the sender sleeps on the scheduler's wait times and wakes on Enqueue.
TEST(EgressSenderTest, PacesAtTheCapLetsConsensusCutInAndStopsPromptly) {
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e5;  // 1 KiB chunks, ~10 ms each
  EgressScheduler sched(opt, flowctl::Clock::Real());
  absl::Mutex mu;
  std::vector<EgressFrame> out;
  EgressSender sender(&sched, [&](EgressFrame f) {
    absl::MutexLock l(&mu);
    out.push_back(std::move(f));
  });
  sender.Start();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::BULK, std::string(20 * 1024, 'x')).ok());
  {
    absl::MutexLock l(&mu);
    auto first = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !out.empty(); };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&first), absl::Seconds(10)));
  }
  ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::CONSENSUS, std::string("vote")).ok());
  absl::MutexLock l(&mu);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return out.size() == 21; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
  // The whole thing took at least (bytes - burst) / cap.
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(150));
  // The vote went out between two chunks of the bulk message, not after it.
  int vote_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].channel == node::p2p::CONSENSUS) vote_at = static_cast<int>(i);
  }
  EXPECT_GT(vote_at, 0);
  EXPECT_LT(vote_at, 20);
  // Stop interrupts a pacing wait: at 1 byte/s the next 1 KiB chunk is due in about 17 minutes
  // (if Stop waited for it, the test would hang until ctest's timeout and fail).
  ASSERT_TRUE(sched.SetCap(1).ok());
  ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::BULK, std::string(4 * 1024, 'y')).ok());
  mu.Unlock();
  sender.Stop();
  mu.Lock();
  EXPECT_LT(out.size(), 21u + 4u) << "the paced message cannot have gone out whole";
}

// Records delivered frames and the thread that delivered each.
class Recorder {
 public:
  EgressSender::Sink sink() {
    return [this](EgressFrame f) {
      absl::MutexLock l(&mu_);
      frames_.push_back(std::move(f));
      threads_.push_back(std::this_thread::get_id());
    };
  }
  // Waits (bounded) until `n` frames have been delivered.
  bool AwaitCount(size_t n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return frames_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }
  std::vector<EgressFrame> frames() {
    absl::MutexLock l(&mu_);
    return frames_;
  }
  std::vector<std::thread::id> threads() {
    absl::MutexLock l(&mu_);
    return threads_;
  }

 private:
  absl::Mutex mu_;
  std::vector<EgressFrame> frames_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

// With no cap, a quietly queued frame goes out on the thread that releases it: the sender's
// thread is never woken for it.
TEST(EgressSenderTest, ReleaseHandsFramesOnFromTheSendingThread) {
  EgressScheduler sched(EgressOptions{}, flowctl::Clock::Real());
  Recorder rec;
  EgressSender sender(&sched, rec.sink());
  // Before Start a release leaves the frame queued (the thread takes it once started).
  ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::CONSENSUS, "early", /*wake=*/false).ok());
  sender.Release();
  EXPECT_EQ(sender.released_inline(), 0u);
  EXPECT_TRUE(rec.frames().empty());
  sender.Start();
  ASSERT_TRUE(rec.AwaitCount(1));
  EXPECT_NE(rec.threads()[0], std::this_thread::get_id()) << "the sender's thread took it";

  sender.AwaitIdleForTesting();  // from here on nothing wakes the thread
  constexpr int kFrames = 100;
  for (int i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::CONSENSUS, absl::StrCat(i), /*wake=*/false).ok());
    sender.Release();
  }
  // Delivered before each Release returned.
  ASSERT_EQ(rec.frames().size(), 1u + kFrames);
  const std::vector<EgressFrame> frames = rec.frames();
  const std::vector<std::thread::id> threads = rec.threads();
  for (int i = 0; i < kFrames; ++i) EXPECT_EQ(*frames[1 + i].data, absl::StrCat(i));
  for (int i = 1; i <= kFrames; ++i) EXPECT_EQ(threads[i], std::this_thread::get_id());
  EXPECT_EQ(sender.released_inline(), static_cast<uint64_t>(kFrames));
  sender.Stop();
  // After Stop a release leaves the frame queued.
  ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::CONSENSUS, "late", /*wake=*/false).ok());
  sender.Release();
  EXPECT_EQ(rec.frames().size(), 1u + kFrames);
}

// Frames the cap holds are left to the sender's thread, which delivers them when due.
TEST(EgressSenderTest, FramesTheCapHoldsGoOutOnTheSendersThread) {
  EgressOptions opt;
  opt.cap_bytes_per_second = 1e6;  // 1 KiB chunks, ~1 ms each past the burst
  EgressScheduler sched(opt, flowctl::Clock::Real());
  Recorder rec;
  EgressSender sender(&sched, rec.sink());
  sender.Start();
  ASSERT_TRUE(
      sched.Enqueue("b", 1, node::p2p::BULK, std::string(200 * 1024, 'x'), /*wake=*/false).ok());
  sender.Release();
  ASSERT_TRUE(rec.AwaitCount(1));
  const uint32_t chunks = rec.frames()[0].chunk_count;  // ~2 ms of the cap each
  ASSERT_GT(chunks, static_cast<uint32_t>(EgressSender::kReleaseBurst));
  ASSERT_TRUE(rec.AwaitCount(chunks));
  const std::vector<EgressFrame> frames = rec.frames();
  const std::vector<std::thread::id> threads = rec.threads();
  ASSERT_EQ(frames.size(), chunks);
  for (uint32_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].chunk_index, i);
  // The release delivered one turn at most; the burst of a 1 MB/s cap is well under 200 KiB.
  EXPECT_LE(sender.released_inline(), static_cast<uint64_t>(EgressSender::kReleaseBurst));
  EXPECT_NE(threads.back(), std::this_thread::get_id());
}

// Two threads sending and releasing at once: one releaser at a time, so each message's chunks
// and each thread's messages keep their order.
TEST(EgressSenderTest, ConcurrentReleasesKeepEveryQueuesOrder) {
  EgressScheduler sched(EgressOptions{}, flowctl::Clock::Real());
  Recorder rec;
  EgressSender sender(&sched, rec.sink());
  sender.Start();
  constexpr int kPerThread = 2000;
  auto send = [&](const std::string& tag) {
    for (int i = 0; i < kPerThread; ++i) {
      // Every tenth message has three chunks (max frame 64 KiB).
      const std::string body =
          absl::StrCat(tag, ":", i, i % 10 == 0 ? std::string(150'000, 'z') : std::string());
      ASSERT_TRUE(sched.Enqueue("b", 1, node::p2p::TX_FORWARD, body, /*wake=*/false).ok());
      sender.Release();
    }
  };
  std::thread a(send, "a");
  std::thread b(send, "b");
  a.join();
  b.join();
  const size_t chunks_per_thread = kPerThread + 2 * (kPerThread / 10);
  ASSERT_TRUE(rec.AwaitCount(2 * chunks_per_thread));
  std::map<std::string, int> next = {{"a", 0}, {"b", 0}};
  std::string message;  // the chunks of the message in progress
  for (const EgressFrame& f : rec.frames()) {
    if (f.chunk_index == 0) message.clear();
    message += std::string(f.payload());
    if (!f.last()) continue;
    const std::string tag = message.substr(0, 1);
    int n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(message.substr(2, message.find_first_of('z') - 2), &n))
        << message.substr(0, 20);
    EXPECT_EQ(n, next[tag]++) << "thread " << tag << "'s messages out of order";
  }
  EXPECT_EQ(next["a"], kPerThread);
  EXPECT_EQ(next["b"], kPerThread);
  EXPECT_GT(sender.released_inline(), 0u);
}

}  // namespace
}  // namespace p2p
