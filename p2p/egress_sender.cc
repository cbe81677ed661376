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
  thread_ = std::make_unique<std::thread>([this] {
    flowctl::NameThisThread("egress");
    Loop();
  });
}

void EgressSender::Stop() {
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

void EgressSender::Loop() {
  for (;;) {
    DequeueResult r;
    // Bounded burst, so a stop request is seen even under a flood at unlimited cap.
    for (int i = 0; i < 4096; ++i) {
      r = scheduler_->Dequeue();
      if (!r.frame) break;
      sink_(std::move(*r.frame));
      r.frame.reset();
      r.wait_nanos = 0;
    }
    absl::MutexLock l(&mu_);
    if (stop_) return;
    if (r.wait_nanos == 0) continue;  // the burst ended with frames still ready
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kicked_ || stop_; };
    if (r.wait_nanos == EgressScheduler::kNever) {
      mu_.Await(absl::Condition(&woken));
    } else {
      mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Nanoseconds(r.wait_nanos));
    }
    kicked_ = false;
    if (stop_) return;
  }
}

}  // namespace p2p
