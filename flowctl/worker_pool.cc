#include "flowctl/worker_pool.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// The task the current worker thread is running, to catch RemoveTask() from inside its own
// quantum (which would wait for itself forever).
thread_local const WorkerPool::Task* current_task = nullptr;
// The pool the current thread works for, to catch Stop()/SetThreads() from a worker.
thread_local const WorkerPool* current_pool = nullptr;

bool ValidShare(double share) { return std::isfinite(share) && share > 0; }

// The most CPU budget a group limited to `cores` may hold.
double LimitBurstNanos(double cores) {
  return cores * static_cast<double>(absl::ToInt64Nanoseconds(WorkerPool::kLimitBurst));
}

// The clock time at which a throttled group's budget (<= 0, refilled up to `budget_at`) is
// positive again. Saturates at an hour ahead (a limit of a few nanocores), where a worker just
// looks again.
int64_t RefillTime(double budget_nanos, double limit_cores, int64_t budget_at) {
  constexpr double kMaxAhead = 3600.0 * 1e9;
  return budget_at +
         static_cast<int64_t>(std::min(kMaxAhead, std::ceil(-budget_nanos / limit_cores))) + 1;
}

}  // namespace

WorkerPool::WorkerPool(Options options)
    : max_batch_(options.max_batch),
      max_quantum_nanos_(absl::ToInt64Nanoseconds(options.max_quantum)),
      cpu_clock_(options.cpu_clock),
      clock_(options.clock),
      target_threads_(options.threads) {
  const absl::Status valid = ValidateOptions(options);
  CHECK(valid.ok()) << valid;
}

WorkerPool::~WorkerPool() {
  Stop();
  absl::MutexLock lock(&mu_);
  CHECK(groups_.empty()) << "destroy every Dispatcher (remove every group) before its WorkerPool";
}

absl::Status WorkerPool::ValidateOptions(const Options& options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 1, got ", options.threads));
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be >= 1, got ", options.max_batch));
  }
  if (options.max_quantum <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("max_quantum must be > 0");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("clock must not be null");
  return absl::OkStatus();
}

absl::Status WorkerPool::Start() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  int threads;
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("WorkerPool already started");
    started_ = true;
    threads = target_threads_;
  }
  for (int i = 0; i < threads; ++i) workers_.emplace_back(&WorkerPool::WorkerLoop, this, i);
  return absl::OkStatus();
}

void WorkerPool::Stop() {
  CHECK(current_pool != this) << "WorkerPool::Stop called from one of its workers";
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    started_ = true;  // a stopped pool cannot be started
    stopping_ = true;
    work_cv_.SignalAll();
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

absl::Status WorkerPool::SetThreads(int threads) {
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 1, got ", threads));
  }
  CHECK(current_pool != this) << "WorkerPool::SetThreads called from one of its workers";
  absl::MutexLock lifecycle(&lifecycle_mu_);
  bool running;
  {
    absl::MutexLock lock(&mu_);
    target_threads_ = threads;
    running = started_ && !stopping_;
    work_cv_.SignalAll();  // surplus workers notice they must exit
  }
  if (!running) return absl::OkStatus();
  // Workers with index >= threads exit after their quantum; join them before reusing indices.
  while (static_cast<int>(workers_.size()) > threads) {
    workers_.back().join();
    workers_.pop_back();
  }
  for (int i = static_cast<int>(workers_.size()); i < threads; ++i) {
    workers_.emplace_back(&WorkerPool::WorkerLoop, this, i);
  }
  return absl::OkStatus();
}

int WorkerPool::threads() const {
  absl::MutexLock lock(&mu_);
  return target_threads_;
}

WorkerPool::Group* WorkerPool::AddGroup(std::string name, double share) {
  CHECK(ValidShare(share)) << "group share must be finite and > 0, got " << share;
  absl::MutexLock lock(&mu_);
  groups_.push_back(std::make_unique<Group>(std::move(name), share));
  return groups_.back().get();
}

absl::Status WorkerPool::SetGroupShare(Group* group, double share) {
  if (!ValidShare(share)) {
    return absl::InvalidArgumentError(absl::StrCat("share must be finite and > 0, got ", share));
  }
  absl::MutexLock lock(&mu_);
  group->share_ = share;
  return absl::OkStatus();
}

absl::Status WorkerPool::SetGroupCpuLimit(Group* group, double cores) {
  if (!std::isfinite(cores) || cores < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu limit must be finite and >= 0 cores, got ", cores));
  }
  absl::MutexLock lock(&mu_);
  if (cores == group->limit_cores_) return absl::OkStatus();
  const int64_t now = clock_->NowNanos();
  if (cores == 0) {
    group->limit_cores_ = 0;
    if (group->throttled_) UnthrottleLocked(group, now);
    return absl::OkStatus();
  }
  const double burst = LimitBurstNanos(cores);
  if (group->limit_cores_ == 0) {
    group->budget_nanos_ = burst;
  } else {
    RefillLocked(group, now);
    group->budget_nanos_ = std::min(group->budget_nanos_, burst);
  }
  group->budget_at_ = now;
  group->limit_cores_ = cores;
  if (group->throttled_) {
    // Its release time moved: let the workers work it out again.
    next_refill_nanos_ = std::min(next_refill_nanos_, now);
    work_cv_.SignalAll();
  }
  return absl::OkStatus();
}

void WorkerPool::RemoveGroup(Group* group) {
  absl::MutexLock lock(&mu_);
  throttled_.erase(group);
  for (const auto& task : group->tasks_) {
    CHECK(task->removed_) << "RemoveGroup: group " << group->name_ << " has a task not removed";
  }
  auto it = std::find_if(groups_.begin(), groups_.end(),
                         [group](const std::unique_ptr<Group>& g) { return g.get() == group; });
  CHECK(it != groups_.end()) << "RemoveGroup: unknown group";
  groups_.erase(it);
}

WorkerPool::Task* WorkerPool::AddTask(Group* group, Schedulable* schedulable, int weight) {
  CHECK_GE(weight, 1) << "task weight must be >= 1";
  CHECK(schedulable != nullptr);
  absl::MutexLock lock(&mu_);
  group->tasks_.push_back(std::make_unique<Task>(group, schedulable, weight));
  Task* task = group->tasks_.back().get();
  task->pass_ = virtual_time_;
  return task;
}

absl::Status WorkerPool::SetTaskWeight(Task* task, int weight) {
  if (weight < 1) {
    return absl::InvalidArgumentError(absl::StrCat("weight must be >= 1, got ", weight));
  }
  absl::MutexLock lock(&mu_);
  if (task->active_) task->group_->active_weight_ += weight - task->weight_;
  task->weight_ = weight;
  return absl::OkStatus();
}

void WorkerPool::RemoveTask(Task* task) {
  CHECK(current_task != task) << "RemoveTask called from the task's own quantum";
  absl::MutexLock lock(&mu_);
  CHECK(!task->removed_) << "RemoveTask called twice";
  task->removed_ = true;
  Group* group = task->group_;
  if (task->queued_) {
    run_queue_.erase(task->queue_key_);
    task->queued_ = false;
  }
  if (task->parked_) {
    group->parked_.erase(std::find(group->parked_.begin(), group->parked_.end(), task));
    task->parked_ = false;
  }
  while (task->running_) removed_cv_.Wait(&mu_);
  if (task->active_) {
    task->active_ = false;
    group->active_weight_ -= task->weight_;
    --group->active_tasks_;
  }
}

void WorkerPool::Wake(Task* task) {
  uint32_t state = task->state_.load(std::memory_order_acquire);
  while (true) {
    if (state == Task::kIdle) {
      if (task->state_.compare_exchange_weak(state, Task::kScheduled, std::memory_order_acq_rel)) {
        absl::MutexLock lock(&mu_);
        ActivateLocked(task);
        return;
      }
    } else if ((state & Task::kNotified) != 0) {
      return;  // it will run again anyway
    } else if (task->state_.compare_exchange_weak(state, state | Task::kNotified,
                                                  std::memory_order_acq_rel)) {
      return;  // queued or running: FinishQuantumLocked sees the flag and runs it again
    }
  }
}

int64_t WorkerPool::TaskCpuNanos(const Task* task) {
  return task->cpu_nanos_.load(std::memory_order_relaxed);
}

int64_t WorkerPool::GroupCpuNanos(const Group* group) {
  return group->cpu_nanos_.load(std::memory_order_relaxed);
}

WorkerPool::GroupStats WorkerPool::StatsLocked(const Group& g, int64_t now) const {
  return {.name = g.name_,
          .share = g.share_,
          .cpu_nanos = g.cpu_nanos_.load(std::memory_order_relaxed),
          .quanta = g.quanta_,
          .active_tasks = g.active_tasks_,
          .cpu_limit_cores = g.limit_cores_,
          .throttles = g.throttles_,
          .throttled_nanos = g.throttled_nanos_ +
                             (g.throttled_ ? std::max<int64_t>(0, now - g.throttled_since_) : 0)};
}

std::vector<WorkerPool::GroupStats> WorkerPool::GetGroupStats() const {
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&mu_);
  std::vector<GroupStats> out;
  out.reserve(groups_.size());
  for (const auto& g : groups_) out.push_back(StatsLocked(*g, now));
  return out;
}

WorkerPool::GroupStats WorkerPool::GroupStatsOf(const Group* group) const {
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&mu_);
  return StatsLocked(*group, now);
}

void WorkerPool::ActivateLocked(Task* task) {
  if (task->removed_) return;  // REQUIRES of RemoveTask violated; do not resurrect it
  task->active_ = true;
  task->group_->active_weight_ += task->weight_;
  ++task->group_->active_tasks_;
  // No credit for having slept: start at the current virtual time, but keep a pass that is
  // ahead (CPU already used is not forgiven by going idle).
  task->pass_ = std::max(task->pass_, virtual_time_);
  EnqueueLocked(task);
}

void WorkerPool::EnqueueLocked(Task* task) {
  if (task->group_->throttled_) {
    task->parked_ = true;
    task->group_->parked_.push_back(task);
    return;
  }
  task->queue_key_ = QueueKey{task->pass_, next_seq_++, task};
  run_queue_.insert(task->queue_key_);
  task->queued_ = true;
  if (idle_workers_ > 0) work_cv_.Signal();
}

void WorkerPool::FinishQuantumLocked(Task* task, int64_t used_nanos, bool more) {
  task->running_ = false;
  used_nanos = std::max<int64_t>(used_nanos, 0);
  ++task->group_->quanta_;
  task->cpu_nanos_.fetch_add(used_nanos, std::memory_order_relaxed);
  Group* group = task->group_;
  group->cpu_nanos_.fetch_add(used_nanos, std::memory_order_relaxed);
  // The task is active, so active_weight_ >= weight_ >= 1.
  const double effective_weight =
      group->share_ * task->weight_ / static_cast<double>(group->active_weight_);
  // A quantum that used no measurable time still moves the pass a little, so equal-pass tasks
  // take turns instead of one being picked forever.
  task->pass_ += std::max<double>(used_nanos, 1.0) / effective_weight;
  if (group->limit_cores_ > 0) {
    const int64_t now = clock_->NowNanos();
    RefillLocked(group, now);
    group->budget_nanos_ -= static_cast<double>(used_nanos);
    if (group->budget_nanos_ <= 0 && !group->throttled_) ThrottleLocked(group, now);
  }
  if (task->removed_) {
    removed_cv_.SignalAll();
    return;
  }
  if (!more) {
    uint32_t expected = Task::kScheduled;
    if (task->state_.compare_exchange_strong(expected, Task::kIdle, std::memory_order_acq_rel)) {
      task->active_ = false;
      group->active_weight_ -= task->weight_;
      --group->active_tasks_;
      return;
    }
    // Woken while it ran: clear the flag and run it again (the work may have arrived after
    // RunQuantum looked).
    task->state_.store(Task::kScheduled, std::memory_order_release);
  } else {
    // Any notification is covered by the requeue.
    task->state_.store(Task::kScheduled, std::memory_order_release);
  }
  EnqueueLocked(task);
}

void WorkerPool::RefillLocked(Group* group, int64_t now) {
  if (group->limit_cores_ <= 0) return;
  const double burst = LimitBurstNanos(group->limit_cores_);
  const double earned =
      group->limit_cores_ * static_cast<double>(std::max<int64_t>(0, now - group->budget_at_));
  group->budget_nanos_ = std::min(burst, group->budget_nanos_ + earned);
  group->budget_at_ = now;
}

void WorkerPool::ThrottleLocked(Group* group, int64_t now) {
  group->throttled_ = true;
  group->throttled_since_ = now;
  ++group->throttles_;
  for (const auto& task : group->tasks_) {
    if (!task->queued_) continue;
    run_queue_.erase(task->queue_key_);
    task->queued_ = false;
    task->parked_ = true;
    group->parked_.push_back(task.get());
  }
  const int64_t release = RefillTime(group->budget_nanos_, group->limit_cores_, group->budget_at_);
  const bool earlier = throttled_.empty() || release < next_refill_nanos_;
  if (earlier) next_refill_nanos_ = release;
  throttled_.insert(group);
  // Idle workers may be in an untimed wait (nothing was throttled when they slept) or in a timed
  // one for a later release: each must wake by this release.
  if (earlier && idle_workers_ > 0) work_cv_.SignalAll();
}

void WorkerPool::UnthrottleLocked(Group* group, int64_t now) {
  group->throttled_ = false;
  group->throttled_nanos_ += std::max<int64_t>(0, now - group->throttled_since_);
  throttled_.erase(group);
  std::vector<Task*> parked;
  parked.swap(group->parked_);
  for (Task* task : parked) {
    task->parked_ = false;
    // Waiting at the limit earns no credit, as sleeping does not.
    task->pass_ = std::max(task->pass_, virtual_time_);
    EnqueueLocked(task);
  }
}

void WorkerPool::ReleaseThrottledLocked(int64_t now) {
  if (throttled_.empty() || now < next_refill_nanos_) return;
  const std::vector<Group*> throttled(throttled_.begin(), throttled_.end());
  int64_t next = 0;
  bool any = false;
  for (Group* group : throttled) {
    RefillLocked(group, now);
    if (group->budget_nanos_ > 0) {
      UnthrottleLocked(group, now);
      continue;
    }
    const int64_t release =
        RefillTime(group->budget_nanos_, group->limit_cores_, group->budget_at_);
    next = any ? std::min(next, release) : release;
    any = true;
  }
  if (any) next_refill_nanos_ = next;
}

int64_t WorkerPool::CpuNowNanos() const {
  if (cpu_clock_ == CpuClock::kWall) return clock_->NowNanos();
  return ThreadCpuNanos();
}

WorkerPool::Task* WorkerPool::PopNextLocked() {
  auto first = run_queue_.begin();
  Task* task = first->task;
  run_queue_.erase(first);
  task->queued_ = false;
  task->running_ = true;
  virtual_time_ = std::max(virtual_time_, task->pass_);
  return task;
}

int WorkerPool::RunQueuedForTest(int max_quanta) {
  absl::MutexLock lock(&mu_);
  CHECK(!started_) << "RunQueuedForTest on a started pool";
  int ran = 0;
  while (ran < max_quanta) {
    ReleaseThrottledLocked(clock_->NowNanos());
    if (run_queue_.empty()) break;
    Task* task = PopNextLocked();
    mu_.Unlock();
    current_task = task;
    const int64_t start = CpuNowNanos();
    const bool more = task->schedulable_->RunQuantum(max_batch_, max_quantum_nanos_);
    const int64_t used = CpuNowNanos() - start;
    current_task = nullptr;
    mu_.Lock();
    FinishQuantumLocked(task, used, more);
    ++ran;
  }
  return ran;
}

void WorkerPool::WorkerLoop(int index) {
  NameThisThread(absl::StrCat("worker-", index));
  current_pool = this;
  int64_t cpu_mark = CpuNowNanos();
  absl::MutexLock lock(&mu_);
  while (true) {
    while (true) {
      int64_t now = 0;
      if (!throttled_.empty()) {
        now = clock_->NowNanos();
        ReleaseThrottledLocked(now);
      }
      if (stopping_ || index >= target_threads_ || !run_queue_.empty()) break;
      ++idle_workers_;
      if (throttled_.empty()) {
        work_cv_.Wait(&mu_);
      } else {
        // Only parked work, or none: sleep until the first throttled group may run again.
        work_cv_.WaitWithTimeout(
            &mu_, std::max(kMinRefillWait, absl::Nanoseconds(next_refill_nanos_ - now)));
      }
      --idle_workers_;
    }
    if (stopping_) break;
    if (index >= target_threads_) {
      // Surplus after SetThreads shrank the pool. A Wake may have signalled this worker rather
      // than a remaining one: pass the signal on.
      if ((!run_queue_.empty() || !throttled_.empty()) && idle_workers_ > 0) {
        work_cv_.SignalAll();  // and parked work needs a worker that waits for its release
      }
      break;
    }
    Task* task = PopNextLocked();
    // More runnable work than this worker: make sure a sleeping worker takes it.
    if (!run_queue_.empty() && idle_workers_ > 0) work_cv_.Signal();

    mu_.Unlock();
    current_task = task;
    // The thread CPU clock stands still while the worker sleeps, so one reading per quantum is
    // enough: the quantum is charged from the end of the previous one (which adds the few
    // hundred ns of picking it). Wall time needs a fresh start mark.
    if (cpu_clock_ == CpuClock::kWall) cpu_mark = CpuNowNanos();
    const bool more = task->schedulable_->RunQuantum(max_batch_, max_quantum_nanos_);
    const int64_t cpu_end = CpuNowNanos();
    const int64_t used = cpu_end - cpu_mark;
    cpu_mark = cpu_end;
    current_task = nullptr;
    mu_.Lock();
    FinishQuantumLocked(task, used, more);
  }
  current_pool = nullptr;
}

}  // namespace flowctl
