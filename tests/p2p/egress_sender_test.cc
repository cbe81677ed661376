#include "p2p/egress_sender.h"

#include <string>
#include <vector>

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

}  // namespace
}  // namespace p2p
