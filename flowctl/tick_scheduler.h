// TickScheduler: one node-level timer for many components (every partition's ticks), so the number
// of threads does not grow with the number of partitions.
//
// A component registers a callback and asks to be called at a time (ScheduleAt). The scheduler
// calls it once when that time has come: on its own thread after Start(), or from RunDue(now) on
// the caller's thread (tests drive it with a FakeClock and never start the thread). A callback must
// be quick and must not block; the partition's only offers a tick job to its own dispatcher lane,
// so the tick itself runs on the shared worker pool under the partition's CPU share.
//
// Thread-safety: every method is thread-safe. Callbacks run with no scheduler lock held, one at a
// time, and may call ScheduleAt (also for their own id) but not Unregister of their own id or Stop.
//
//   flowctl::TickScheduler scheduler(clock);
//   TickScheduler::Id id = scheduler.Register([&](int64_t now) { OfferTick(); });
//   scheduler.ScheduleAt(id, clock->NowNanos() + 5'000'000);
//   scheduler.ScheduleBy(id, timer_deadline);  // earlier of the two
//   CHECK(scheduler.Start().ok());  // or, in a test: scheduler.RunDue(fake_clock.NowNanos());
//   ...
//   scheduler.Unregister(id);  // the callback is not running and never runs again
#ifndef FLOWCTL_TICK_SCHEDULER_H_
#define FLOWCTL_TICK_SCHEDULER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"

namespace flowctl {

class TickScheduler {
 public:
  using Id = int64_t;
  using Callback = absl::AnyInvocable<void(int64_t now_nanos)>;

  // `clock` must outlive the scheduler.
  explicit TickScheduler(const Clock* clock);
  ~TickScheduler();  // Stop()
  TickScheduler(const TickScheduler&) = delete;
  TickScheduler& operator=(const TickScheduler&) = delete;

  // Starts the timer thread. FailedPrecondition when called twice (start-once).
  absl::Status Start();
  // Joins the thread; callbacks not yet due are never called. Idempotent.
  void Stop();

  // A new id with nothing scheduled.
  Id Register(Callback callback);
  // Calls the callback of `id` once at `when_nanos` (clock time), replacing any pending time (a
  // component's latest word on when it next needs time wins). Unknown ids are ignored (e.g. a
  // component that unregistered meanwhile).
  void ScheduleAt(Id id, int64_t when_nanos);
  // Calls the callback of `id` no later than `when_nanos`: the earlier of `when_nanos` and any
  // pending time (for deadlines that arrive from several places). Unknown ids are ignored.
  void ScheduleBy(Id id, int64_t when_nanos);
  // After it returns the callback of `id` is not running and is never called again.
  // REQUIRES: not called from that callback.
  void Unregister(Id id);

  // Runs, on this thread, every callback due at `now_nanos`, earliest first (ties: lower id
  // first), including ones that a callback schedules at or before `now_nanos`. Returns how many
  // ran. REQUIRES: the thread was never started.
  int RunDue(int64_t now_nanos);
  // The earliest scheduled time, if any.
  std::optional<int64_t> NextDue() const;

 private:
  struct Entry {
    Callback callback;
    int64_t due = -1;  // -1: nothing scheduled
  };

  // Takes the earliest entry due at `now` off the queue and marks it running; false if none.
  void ScheduleLocked(Id id, int64_t when_nanos, bool earlier_only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PopDueLocked(int64_t now, Id* id, Callback** callback) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls a popped callback with mu_ released, then marks nothing running.
  void RunPoppedLocked(Callback* callback, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  const Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_cv_;  // a new earliest time, an unregistration, or Stop
  // Node-based: a running callback is called through a pointer into its entry.
  absl::node_hash_map<Id, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<int64_t, Id>> queue_ ABSL_GUARDED_BY(mu_);  // (due, id)
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  Id running_ ABSL_GUARDED_BY(mu_) = 0;  // id whose callback runs now, 0 = none
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flowctl

#endif  // FLOWCTL_TICK_SCHEDULER_H_
