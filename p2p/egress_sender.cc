#include "p2p/egress_sender.h"

#include <utility>

#include "absl/time/time.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace p2p {

EgressSender::EgressSender(EgressScheduler* scheduler, Sink sink)
    : scheduler_(scheduler), sink_(std::move(sink)) {
  scheduler_->SetWakeup([this] { Kick(); });
}

EgressSender::~EgressSender() {
  Stop();
  scheduler_->SetWakeup(nullptr);
}

void EgressSender::Start() {
  CHECK(thread_ == nullptr) << "EgressSender started twice";
  running_.store(true);
  thread_ = std::make_unique<std::thread>([this] {
    flowctl::NameThisThread("egress");
    Loop();
  });
}

void EgressSender::Stop() {
  running_.store(false);
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_ != nullptr) {
    thread_->join();
    thread_.reset();
  }
}

void EgressSender::Kick() {
  absl::MutexLock l(&mu_);
  kicked_ = true;
}

void EgressSender::AwaitIdleForTesting() { absl::MutexLock l(&mu_, absl::Condition(&idle_)); }

void EgressSender::Release() {
  if (!running_.load()) return;  // before Start the thread takes them; after Stop they stay
  const int64_t wait = Drain(kReleaseBurst, /*inline_release=*/true);
  // Held frames (cap, blocked peer: a timed wait) or a burst cut short: the thread goes on.
  if (wait != kBusy && wait != EgressScheduler::kNever) Kick();
}

int64_t EgressSender::Drain(int limit, bool inline_release) {
  // The flags are sequentially consistent: a thread that fails to take the turn has set
  // `pending_` before, and the holder reads `pending_` after giving the turn back, so one of them
  // delivers what was queued.
  pending_.store(true);
  int64_t wait = EgressScheduler::kNever;
  // A releasing thread takes a few turns at most (a flood from other threads must not keep it);
  // the sender's thread takes them until nothing is pending.
  for (int turns = 0; pending_.load(); ++turns) {
    if (inline_release && turns == 4) return 0;  // the caller kicks the thread
    bool expected = false;
    if (!draining_.compare_exchange_strong(expected, true)) return kBusy;
    pending_.store(false);
    int delivered = 0;
    for (;;) {
      DequeueResult r = scheduler_->Dequeue();
      if (!r.frame) {
        wait = r.wait_nanos;
        break;
      }
      sink_(std::move(*r.frame));
      if (++delivered == limit) {
        wait = 0;
        break;
      }
    }
    if (inline_release) released_inline_.fetch_add(delivered, std::memory_order_relaxed);
    draining_.store(false);
    if (wait == 0) return 0;
  }
  return wait;
}

void EgressSender::Loop() {
  for (;;) {
    // Bounded turn, so a stop request is seen even under a flood at unlimited cap.
    int64_t wait = Drain(4096, /*inline_release=*/false);
    // Another thread is delivering: it hands over (Kick) whatever it leaves waiting.
    if (wait == kBusy) wait = EgressScheduler::kNever;
    absl::MutexLock l(&mu_);
    if (stop_) return;
    if (wait == 0) continue;  // the turn ended with frames still ready
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kicked_ || stop_; };
    idle_ = true;
    if (wait == EgressScheduler::kNever) {
      mu_.Await(absl::Condition(&woken));
    } else {
      mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Nanoseconds(wait));
    }
    idle_ = false;
    kicked_ = false;
    if (stop_) return;
  }
}

}  // namespace p2p
