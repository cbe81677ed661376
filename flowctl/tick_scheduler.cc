#include "flowctl/tick_scheduler.h"

#include <algorithm>

#include "absl/time/time.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace flowctl {

TickScheduler::TickScheduler(const Clock* clock) : clock_(clock) {}

TickScheduler::~TickScheduler() { Stop(); }

absl::Status TickScheduler::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return absl::FailedPreconditionError("tick scheduler already started");
  started_ = true;
  thread_ = std::thread([this] {
    NameThisThread("tick");
    Loop();
  });
  return absl::OkStatus();
}

void TickScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

TickScheduler::Id TickScheduler::Register(Callback callback) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  entries_[id].callback = std::move(callback);
  return id;
}

void TickScheduler::ScheduleAt(Id id, int64_t when_nanos) {
  absl::MutexLock lock(&mu_);
  ScheduleLocked(id, when_nanos, /*earlier_only=*/false);
}

void TickScheduler::ScheduleBy(Id id, int64_t when_nanos) {
  absl::MutexLock lock(&mu_);
  ScheduleLocked(id, when_nanos, /*earlier_only=*/true);
}

void TickScheduler::ScheduleLocked(Id id, int64_t when_nanos, bool earlier_only) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.due >= 0 && earlier_only && e.due <= when_nanos) return;
  if (e.due >= 0) queue_.erase({e.due, id});
  e.due = when_nanos;
  const bool earliest = queue_.empty() || when_nanos < queue_.begin()->first;
  queue_.insert({when_nanos, id});
  if (earliest) changed_cv_.SignalAll();
}

void TickScheduler::Unregister(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (it->second.due >= 0) queue_.erase({it->second.due, id});
  it->second.due = -1;
  struct Running {
    const Id* running;
    Id id;
  } wait{&running_, id};
  mu_.Await(absl::Condition(
      +[](Running* w) { return *w->running != w->id; }, &wait));
  entries_.erase(id);
  changed_cv_.SignalAll();
}

bool TickScheduler::PopDueLocked(int64_t now, Id* id, Callback** callback) {
  if (queue_.empty() || queue_.begin()->first > now) return false;
  *id = queue_.begin()->second;
  queue_.erase(queue_.begin());
  Entry& e = entries_[*id];
  e.due = -1;
  running_ = *id;
  *callback = &e.callback;
  return true;
}

void TickScheduler::RunPoppedLocked(Callback* callback, int64_t now) {
  // The entry stays put while it runs: Unregister waits for running_ to change.
  mu_.Unlock();
  (*callback)(now);
  mu_.Lock();
  running_ = 0;
}

int TickScheduler::RunDue(int64_t now_nanos) {
  int ran = 0;
  absl::MutexLock lock(&mu_);
  CHECK(!started_) << "TickScheduler::RunDue with the thread started";
  Id id = 0;
  Callback* callback = nullptr;
  while (PopDueLocked(now_nanos, &id, &callback)) {
    RunPoppedLocked(callback, now_nanos);
    ++ran;
  }
  return ran;
}

std::optional<int64_t> TickScheduler::NextDue() const {
  absl::MutexLock lock(&mu_);
  if (queue_.empty()) return std::nullopt;
  return queue_.begin()->first;
}

void TickScheduler::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const int64_t now = clock_->NowNanos();
    Id id = 0;
    Callback* callback = nullptr;
    if (PopDueLocked(now, &id, &callback)) {
      RunPoppedLocked(callback, now);
      continue;
    }
    if (queue_.empty()) {
      changed_cv_.Wait(&mu_);
    } else {
      changed_cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(queue_.begin()->first - now));
    }
  }
}

}  // namespace flowctl
