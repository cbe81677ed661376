// WorkerPool: N threads (the node's CPU budget) that run serial units of work ("tasks", e.g. the
// lanes of every partition's Dispatcher) in weighted fair order, and account the CPU each uses.
//
// Model. Tasks belong to groups (one group per Dispatcher, i.e. per partition). A group has a CPU
// share (set by the arbiter), a task has an integer weight (its lane weight). A task is either
// idle (no work), queued, or running on exactly one worker: a task never runs on two workers at
// once, so its work is serial. A worker runs a task for one bounded quantum (at most max_batch
// items, and no new item once max_quantum has passed), charges it the CPU time it used, and puts it
// back if it still has work.
//
// Order: virtual-time (stride) scheduling. Each task has a pass; after a quantum that used c ns,
// pass += c / effective_weight, where
//   effective_weight = group share * task weight / (sum of weights of the group's active tasks)
// ("active" = queued or running). Normalizing by the group's *active* weight makes a group's CPU
// split follow its share whether one or all of its lanes are busy, and inside a group lanes split
// by weight. A free worker always takes the queued task with the smallest pass. A task that wakes
// up from idle starts at max(its pass, global virtual time) (the pass of the latest pick), so
// sleeping earns no credit, and a task that used a lot of CPU cannot shed its debt by going idle.
// Over time, while tasks stay busy, CPU time per task is proportional to effective weight (up to
// one quantum per task), except that a task can never use more than one thread.
//
// CPU accounting uses the worker thread's CPU clock by default (so preemption by other processes
// on a loaded machine is not charged), or wall time on Options::clock (deterministic tests).
//
// Hard CPU limits (SetGroupCpuLimit): a group may be held to `cores` of CPU even while every
// other group is idle (the arbiter's hard ceilings; the shares above are work-conserving and lend
// idle CPU). The group has a budget in CPU nanoseconds that refills at `cores` per nanosecond of
// Options::clock time up to a burst of cores x kLimitBurst, and every quantum is charged to it
// after it ran (a quantum is never cut short). When the budget is no longer positive the group is
// throttled: its queued tasks leave the run queue for the group's parked list, and any of its
// tasks that finishes a quantum or is woken is parked too, until the budget is positive again;
// then they re-enter at max(pass, virtual time), so waiting at the limit earns no credit. Over any
// interval t the group is charged at most cores x t + burst + one quantum per worker. Idle workers
// sleep until the earliest refill when only parked work remains; nothing polls.
//
// Idle workers sleep on a CondVar; nothing polls. Wake() is lock-free unless the task goes from
// idle to queued (then it takes the pool lock once).
//
// Thread-safety: every method is thread-safe. Tasks' RunQuantum() is called on worker threads with
// no pool lock held, so it may call Wake() and any other pool method except RemoveTask() of its own
// task (checked) and Stop()/SetThreads() (would wait for itself).
//
//   flowctl::WorkerPool pool({.threads = 2});
//   CHECK(pool.Start().ok());
//   WorkerPool::Group* group = pool.AddGroup("partition-1", /*share=*/1.0);
//   WorkerPool::Task* task = pool.AddTask(group, &my_schedulable, /*weight=*/4);
//   pool.Wake(task);        // after giving my_schedulable work
//   ...
//   pool.RemoveTask(task);  // waits for a running quantum to end
//   pool.RemoveGroup(group);
#ifndef FLOWCTL_WORKER_POOL_H_
#define FLOWCTL_WORKER_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flowctl/clock.h"

namespace flowctl {

// A serial unit of work. Implemented by Dispatcher lanes (and test doubles).
class Schedulable {
 public:
  virtual ~Schedulable() = default;

  // Runs one quantum: at most `max_items` items, starting no new item once `max_nanos` have passed
  // since the call began. Returns true if work remains (the pool queues the task again), false if
  // it found none. Called by one worker at a time, with no pool lock held.
  // Contract with Wake(): after adding work that RunQuantum could have missed (e.g. pushing into
  // an empty queue), the producer calls WorkerPool::Wake(task); RunQuantum returns false only
  // after observing "no work" in a way ordered with that producer (e.g. under the queue's lock).
  virtual bool RunQuantum(int max_items, int64_t max_nanos) = 0;
};

class WorkerPool {
 public:
  enum class CpuClock {
    kThreadCpu,  // CLOCK_THREAD_CPUTIME_ID of the worker: CPU actually used, robust under load
    kWall,       // Options::clock time across the quantum: deterministic with a fake clock
  };

  struct Options {
    int threads = 1;                                       // >= 1, changeable with SetThreads()
    int max_batch = 64;                                    // items per quantum, >= 1
    absl::Duration max_quantum = absl::Microseconds(500);  // time per quantum, > 0
    CpuClock cpu_clock = CpuClock::kThreadCpu;
    const Clock* clock = Clock::Real();  // for kWall; must outlive the pool
  };

  // A CPU-share group (one per Dispatcher). Opaque handle, owned by the pool; valid until
  // RemoveGroup().
  class Group;
  // One schedulable unit (one lane). Opaque handle, owned by the pool; valid until RemoveTask().
  class Task;

  // Usage snapshot of one group, for the arbiter and the admin API.
  struct GroupStats {
    std::string name;
    double share = 0;
    int64_t cpu_nanos = 0;        // total CPU charged to the group's tasks since AddGroup
    int64_t quanta = 0;           // quanta run (items per quantum shows how well work batches)
    int active_tasks = 0;         // queued, parked at the group's CPU limit, or running now
    double cpu_limit_cores = 0;   // the hard limit in force; 0 = none
    int64_t throttles = 0;        // times the group was throttled at its limit
    int64_t throttled_nanos = 0;  // total clock time spent throttled (the current spell included)
  };

  // Burst of a hard CPU limit: a group may run cores x kLimitBurst of CPU at once after idling.
  static constexpr absl::Duration kLimitBurst = absl::Milliseconds(20);
  // Shortest sleep of an idle worker waiting for a throttled group's refill.
  static constexpr absl::Duration kMinRefillWait = absl::Microseconds(100);

  // REQUIRES: ValidateOptions(options).ok().
  explicit WorkerPool(Options options);
  // Stops the pool. REQUIRES: every task and group has been removed (destroy Dispatchers first).
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  static absl::Status ValidateOptions(const Options& options);

  // Starts the workers. Tasks may be added and woken before Start; they run once it is called.
  // FailedPrecondition if already started (start-once).
  absl::Status Start();

  // Stops and joins every worker. Does not drain: each worker finishes the quantum it is running
  // and exits; work still queued stays in its tasks (a Dispatcher's Stop() discards and counts
  // it). Tasks can still be added, woken and removed afterwards; they just never run. Idempotent.
  // REQUIRES: not called from a worker thread.
  void Stop();

  // Changes the number of workers live (>= 1). Growing starts threads at once; shrinking lets the
  // surplus workers finish their current quantum and joins them (so it may wait for a slow
  // handler). Before Start() it only sets the count. REQUIRES: not called from a worker thread.
  absl::Status SetThreads(int threads);
  int threads() const;

  // Runs queued quanta on the calling thread, in the order the workers would take them, until the
  // run queue is empty or `max_quanta` have run; returns how many ran. For deterministic tests and
  // simulations that drive a whole node from one thread (with CpuClock::kWall on a fake clock the
  // order depends only on what was queued). REQUIRES: the pool was never started.
  int RunQueuedForTest(int max_quanta);

  // Groups. `share` > 0 (finite); InvalidArgument otherwise (AddGroup: CHECK).
  Group* AddGroup(std::string name, double share);
  absl::Status SetGroupShare(Group* group, double share);
  // Holds the group to `cores` of CPU (see "Hard CPU limits" above); 0 removes the limit and
  // releases its parked tasks at once. A new limit starts with a full burst; a changed one keeps
  // the budget earned so far (clipped to the new burst). InvalidArgument for a negative or
  // non-finite value.
  absl::Status SetGroupCpuLimit(Group* group, double cores);
  // Per-group figures of one group; the same as its GetGroupStats() entry.
  GroupStats GroupStatsOf(const Group* group) const;
  // Deletes the group and its tasks. REQUIRES: RemoveTask() was called on each of its tasks.
  void RemoveGroup(Group* group);

  // Tasks. `weight` >= 1; `schedulable` must outlive RemoveTask(). A new task is idle.
  Task* AddTask(Group* group, Schedulable* schedulable, int weight);
  absl::Status SetTaskWeight(Task* task, int weight);
  // Unqueues the task for good and waits for its running quantum (if any) to finish. The handle
  // stays readable (TaskCpuNanos) until RemoveGroup() deletes it, so stats readers need not race
  // with removal. REQUIRES: no Wake(task) is running or will run; not called from this task's own
  // RunQuantum.
  void RemoveTask(Task* task);

  // Marks the task as having work: queues it if idle, or makes sure it runs again if it is queued
  // or running. Lock-free except on the idle -> queued transition. Thread-safe.
  void Wake(Task* task);

  // CPU charged to the task / group so far, in nanoseconds. Thread-safe, lock-free.
  static int64_t TaskCpuNanos(const Task* task);
  static int64_t GroupCpuNanos(const Group* group);
  std::vector<GroupStats> GetGroupStats() const;

 private:
  struct QueueKey {
    double pass;
    uint64_t seq;  // FIFO among equal passes, and a unique key
    Task* task;
    bool operator<(const QueueKey& o) const {
      return std::tie(pass, seq) < std::tie(o.pass, o.seq);
    }
  };

  void WorkerLoop(int index);
  // Takes the task with the smallest pass off the run queue and marks it running.
  // REQUIRES: the run queue is not empty.
  Task* PopNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ActivateLocked(Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(Task* task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishQuantumLocked(Task* task, int64_t used_nanos, bool more)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hard limits. Refill adds what `now` earned since the last refill; Throttle parks the
  // group's queued tasks; ReleaseThrottled unparks every group whose budget is positive again and
  // sets next_refill_nanos_ to the earliest time another may be.
  static void RefillLocked(Group* group, int64_t now);
  void ThrottleLocked(Group* group, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnthrottleLocked(Group* group, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseThrottledLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  GroupStats StatsLocked(const Group& group, int64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t CpuNowNanos() const;

  // Constant after construction.
  const int max_batch_;
  const int64_t max_quantum_nanos_;
  const CpuClock cpu_clock_;
  const Clock* const clock_;

  // Serializes Start/Stop/SetThreads (which join threads outside mu_).
  absl::Mutex lifecycle_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(lifecycle_mu_);

  // Scheduling state below (and the scheduling fields of every Group and Task) is protected by mu_.
  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;     // a task was queued, or workers must exit
  absl::CondVar removed_cv_;  // a task being removed stopped running
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int target_threads_ ABSL_GUARDED_BY(mu_);
  int idle_workers_ ABSL_GUARDED_BY(mu_) = 0;
  double virtual_time_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<QueueKey> run_queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  // Groups throttled at their hard limit now, and the clock time at which the first of them may
  // be released (meaningful while the set is not empty).
  std::set<Group*> throttled_ ABSL_GUARDED_BY(mu_);
  int64_t next_refill_nanos_ ABSL_GUARDED_BY(mu_) = 0;
};

class WorkerPool::Task {
 public:
  Task(Group* group, Schedulable* schedulable, int weight)
      : group_(group), schedulable_(schedulable), weight_(weight) {}

 private:
  friend class WorkerPool;
  // Wake state, lock-free: idle, or scheduled (queued or running), plus "woken while scheduled".
  static constexpr uint32_t kIdle = 0;
  static constexpr uint32_t kScheduled = 1;
  static constexpr uint32_t kNotified = 2;
  std::atomic<uint32_t> state_{kIdle};
  std::atomic<int64_t> cpu_nanos_{0};

  Group* const group_;
  Schedulable* const schedulable_;
  // Guarded by the owning pool's mu_.
  int weight_;
  double pass_ = 0;
  bool active_ = false;  // counted in group_->active_weight_
  bool queued_ = false;  // in run_queue_ under queue_key_
  bool parked_ = false;  // in group_->parked_: has work, waits for the group's CPU budget
  bool running_ = false;
  bool removed_ = false;  // RemoveTask called: never queued again
  QueueKey queue_key_{};
};

class WorkerPool::Group {
 public:
  Group(std::string name, double share) : name_(std::move(name)), share_(share) {}

 private:
  friend class WorkerPool;
  const std::string name_;
  // Guarded by the owning pool's mu_.
  double share_;
  int64_t active_weight_ = 0;  // sum of weights of queued or running tasks
  int active_tasks_ = 0;
  int64_t quanta_ = 0;
  std::atomic<int64_t> cpu_nanos_{0};
  std::vector<std::unique_ptr<Task>> tasks_;  // removed ones too, until RemoveGroup
  // Hard CPU limit (0 = none) and its budget in CPU nanoseconds, refilled up to budget_at_.
  double limit_cores_ = 0;
  double budget_nanos_ = 0;
  int64_t budget_at_ = 0;
  bool throttled_ = false;
  int64_t throttled_since_ = 0;
  int64_t throttles_ = 0;
  int64_t throttled_nanos_ = 0;  // finished spells
  std::vector<Task*> parked_;
};

}  // namespace flowctl

#endif  // FLOWCTL_WORKER_POOL_H_
