#include "flowctl/dispatcher.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {

namespace {

// A FIFO of messages on a power-of-two ring that keeps its storage between bursts: a std::deque
// frees and reallocates its blocks as a lane fills and drains, and those page faults cost more
// than the rest of the hot path together. The storage is released when the lane drains and the
// ring is much larger than the lane's current capacity.
class MessageRing {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t storage() const { return slots_.size(); }

  void push_back(Message message) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(message);
    ++size_;
  }
  void push_front(Message message) {
    if (size_ == slots_.size()) Grow();
    head_ = (head_ - 1) & (slots_.size() - 1);
    slots_[head_] = std::move(message);
    ++size_;
  }
  // REQUIRES: !empty().
  const Message& front() const { return slots_[head_]; }
  // REQUIRES: !empty().
  Message pop_front() {
    Message message = std::move(slots_[head_]);
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return message;
  }
  void clear() {
    slots_.clear();
    slots_.shrink_to_fit();
    head_ = 0;
    size_ = 0;
  }

 private:
  void Grow() {
    std::vector<Message> bigger(std::max<size_t>(16, slots_.size() * 2));
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<Message> slots_;  // size 0 or a power of two
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace

// One lane: a bounded FIFO plus its handler, run by the pool as one task.
//
// depth_messages_/depth_bytes_ count messages from admission until their handler returns (the
// queue plus the batch a worker is running), so capacity bounds both together, and "depth == 0"
// means every admitted message has been handled. The pool's wake contract (see
// Schedulable::RunQuantum) holds because Offer wakes the task exactly when it admits into a lane
// whose depth is 0, and RunQuantum reports "no more work" only when, under mu_, it brings depth to
// 0 with an empty queue.
class Dispatcher::Lane final : public Schedulable {
 public:
  Lane(WorkerPool* pool, const Clock* clock, std::string name, Handler handler)
      : pool_(pool), clock_(clock), name_(std::move(name)), handler_(std::move(handler)) {}

  const std::string& name() const { return name_; }

  // Constant between Create() and Stop(); read under the dispatcher's config_mu_ or by Offer
  // (which only calls Wake while admission is open, i.e. before Stop removes the task).
  WorkerPool::Task* task = nullptr;
  int64_t final_cpu_nanos = 0;  // CPU at Stop(), guarded by the dispatcher's config_mu_

  OfferResult Offer(Message message) {
    const int64_t bytes = static_cast<int64_t>(message.payload.size());
    absl::MutexLock lock(&mu_);
    ++offered_;
    if (stopped_) {
      ++dropped_stopped_;
      return OfferResult::kStopped;
    }
    if (depth_messages_ >= capacity_messages_) {
      ++dropped_full_;
      return OfferResult::kLaneFull;
    }
    if (depth_bytes_ + bytes > capacity_bytes_) {
      ++dropped_bytes_;
      return OfferResult::kLaneBytesFull;
    }
    const bool was_idle = depth_messages_ == 0;
    const int64_t enqueued = message.enqueue_nanos;
    ++depth_messages_;
    depth_bytes_ += bytes;
    queue_.push_back(std::move(message));
    // Under mu_, so Stop() (which closes admission under mu_ before removing the task) never
    // races with a Wake in flight.
    if (was_idle) {
      busy_since_nanos_ = enqueued;
      pool_->Wake(task);
    }
    return OfferResult::kAccepted;
  }

  bool RunQuantum(int max_items, int64_t max_nanos) override {
    // Only one worker runs a lane at a time, so batch_ needs no lock.
    {
      absl::MutexLock lock(&mu_);
      const size_t n = std::min(queue_.size(), static_cast<size_t>(max_items));
      for (size_t i = 0; i < n; ++i) batch_.push_back(queue_.pop_front());
    }
    size_t done = 0;
    int64_t done_bytes = 0;
    if (!batch_.empty()) {
      const int64_t start = clock_->NowNanos();
      const int64_t deadline = start + max_nanos;
      for (Message& message : batch_) {
        const int64_t now = done == 0 ? start : clock_->NowNanos();
        if (done > 0 && now >= deadline) break;
        delay_.Record(now - message.enqueue_nanos);
        done_bytes += static_cast<int64_t>(message.payload.size());
        handler_(std::move(message));
        ++done;
      }
    }
    absl::MutexLock lock(&mu_);
    // Messages the quantum had no time for go back to the front, in order.
    for (size_t i = batch_.size(); i > done; --i) queue_.push_front(std::move(batch_[i - 1]));
    batch_.clear();
    depth_messages_ -= static_cast<int64_t>(done);
    depth_bytes_ -= done_bytes;
    processed_ += static_cast<int64_t>(done);
    if (queue_.empty() && queue_.storage() > kKeepSlots &&
        static_cast<int64_t>(queue_.storage()) > 2 * capacity_messages_) {
      queue_.clear();  // the capacity was lowered: give the burst's memory back
    }
    return !queue_.empty();
  }

  void SetCapacity(int64_t messages, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    capacity_messages_ = messages;
    capacity_bytes_ = bytes;
  }

  // How long the lane has held work (queued or running) without a break at `now`; 0 when idle.
  int64_t BusyFor(int64_t now) const {
    absl::MutexLock lock(&mu_);
    return depth_messages_ == 0 ? 0 : std::max<int64_t>(0, now - busy_since_nanos_);
  }

  // How long the oldest queued message has waited at `now`; 0 when nothing is queued.
  int64_t OldestQueuedAge(int64_t now) const {
    absl::MutexLock lock(&mu_);
    return queue_.empty() ? 0 : std::max<int64_t>(0, now - queue_.front().enqueue_nanos);
  }

  HistogramSnapshot DelaySnapshot() const { return delay_.Snapshot(); }
  Histogram::Totals DelayTotals() const { return delay_.GetTotals(); }

  void CloseAdmission() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

  // REQUIRES: the task has been removed (no quantum runs).
  void DiscardQueued() {
    absl::MutexLock lock(&mu_);
    dropped_stopped_ += static_cast<int64_t>(queue_.size());
    queue_.clear();
    depth_messages_ = 0;
    depth_bytes_ = 0;
  }

  bool AwaitHandled(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithDeadline(absl::Condition(this, &Lane::HandledLocked), deadline);
  }

  void FillStats(LaneStats* s) const {
    absl::MutexLock lock(&mu_);
    s->name = name_;
    s->capacity_messages = capacity_messages_;
    s->capacity_bytes = capacity_bytes_;
    s->depth_messages = depth_messages_;
    s->depth_bytes = depth_bytes_;
    s->offered = offered_;
    s->processed = processed_;
    s->dropped_full = dropped_full_;
    s->dropped_bytes = dropped_bytes_;
    s->dropped_stopped = dropped_stopped_;
    s->queueing_delay = delay_.Snapshot();
  }

 private:
  bool HandledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return depth_messages_ == 0; }

  static constexpr size_t kKeepSlots = 1024;  // never worth releasing below this

  WorkerPool* const pool_;
  const Clock* const clock_;
  const std::string name_;
  const Handler handler_;
  Histogram delay_;             // lock-free
  std::vector<Message> batch_;  // owned by the running quantum

  mutable absl::Mutex mu_;
  MessageRing queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t capacity_messages_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t capacity_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t depth_messages_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t depth_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t offered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t processed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_full_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_stopped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t busy_since_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // when depth last rose from 0
};

namespace {

absl::Status ValidateShare(double share) {
  if (!std::isfinite(share) || share <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_share must be finite and > 0, got ", share));
  }
  return absl::OkStatus();
}

absl::Status ValidateBudget(const Dispatcher::Budget& budget) {
  if (budget.max_messages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("budget.max_messages must be >= 1, got ", budget.max_messages));
  }
  if (budget.max_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("budget.max_bytes must be >= 1, got ", budget.max_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateWeight(int weight, absl::string_view lane) {
  if (weight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes[", lane, "].weight must be >= 1, got ", weight));
  }
  return absl::OkStatus();
}

absl::Status ValidateDelayTarget(const Dispatcher::DelayTarget& target, absl::string_view lane) {
  if (target.target_nanos < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lanes[", lane, "].delay_target.target_nanos must be >= 0, got ", target.target_nanos));
  }
  if (target.max_weight < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lanes[", lane, "].delay_target.max_weight must be >= 0, got ", target.max_weight));
  }
  return absl::OkStatus();
}

// weight's share of `total`, at least 1. Doubles: the product may overflow int64.
int64_t ShareOf(int64_t total, int weight, int64_t weight_sum) {
  const double share = std::floor(static_cast<double>(total) * weight / weight_sum);
  return std::max<int64_t>(1, static_cast<int64_t>(std::min<double>(share, total)));
}

}  // namespace

absl::Status Dispatcher::ValidateOptions(const Options& options) {
  if (absl::Status s = ValidateShare(options.cpu_share); !s.ok()) return s;
  if (absl::Status s = ValidateBudget(options.budget); !s.ok()) return s;
  if (options.lanes.empty()) return absl::InvalidArgumentError("lanes must not be empty");
  if (options.clock == nullptr) return absl::InvalidArgumentError("clock must not be null");
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < options.lanes.size(); ++i) {
    const LaneConfig& lane = options.lanes[i];
    if (lane.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("lanes[", i, "].name must not be empty"));
    }
    if (!names.insert(lane.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("lanes[", i, "].name '", lane.name, "' is used by another lane"));
    }
    if (absl::Status s = ValidateWeight(lane.weight, lane.name); !s.ok()) return s;
    if (absl::Status s = ValidateDelayTarget(lane.delay_target, lane.name); !s.ok()) return s;
    if (lane.reserved_messages < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("lanes[", lane.name, "].reserved_messages must be >= 0"));
    }
    if (!lane.handler) {
      return absl::InvalidArgumentError(absl::StrCat("lanes[", lane.name, "].handler is null"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(WorkerPool* pool, Options options) {
  if (pool == nullptr) return absl::InvalidArgumentError("pool must not be null");
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  return std::unique_ptr<Dispatcher>(new Dispatcher(pool, std::move(options)));
}

Dispatcher::Dispatcher(WorkerPool* pool, Options options)
    : pool_(pool),
      name_(std::move(options.name)),
      clock_(options.clock),
      budget_(options.budget),
      cpu_share_(options.cpu_share),
      group_(pool->AddGroup(name_, options.cpu_share)) {
  absl::MutexLock lock(&config_mu_);
  for (LaneConfig& config : options.lanes) {
    lanes_.push_back(
        std::make_unique<Lane>(pool_, clock_, std::move(config.name), std::move(config.handler)));
    lanes_.back()->task = pool_->AddTask(group_, lanes_.back().get(), config.weight);
    weights_.push_back(config.weight);
    reserved_.push_back(config.reserved_messages);
    exempt_.push_back(config.exempt_from_byte_cap);
    adaptive_.push_back(
        {.target = config.delay_target, .watch = config.watch_delay, .effective = config.weight});
  }
  ApplyCapacitiesLocked();
}

Dispatcher::~Dispatcher() { Stop(); }

Dispatcher::OfferResult Dispatcher::Offer(int lane, Message message) {
  DCHECK(lane >= 0 && lane < num_lanes()) << "lane " << lane;
  message.enqueue_nanos = clock_->NowNanos();
  return lanes_[lane]->Offer(std::move(message));
}

int Dispatcher::FindLane(absl::string_view name) const {
  for (size_t i = 0; i < lanes_.size(); ++i) {
    if (lanes_[i]->name() == name) return static_cast<int>(i);
  }
  return -1;
}

void Dispatcher::ApplyCapacitiesLocked() {
  int64_t weight_sum = 0;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    if (reserved_[i] == 0) weight_sum += weights_[i];
  }
  for (size_t i = 0; i < lanes_.size(); ++i) {
    if (reserved_[i] > 0) {
      lanes_[i]->SetCapacity(reserved_[i], std::numeric_limits<int64_t>::max() / 2);
      continue;
    }
    int64_t bytes = ShareOf(budget_.max_bytes, weights_[i], weight_sum);
    if (byte_cap_ > 0 && !exempt_[i]) {
      bytes = std::min(bytes, ShareOf(byte_cap_, weights_[i], weight_sum));
    }
    lanes_[i]->SetCapacity(ShareOf(budget_.max_messages, weights_[i], weight_sum), bytes);
  }
}

absl::Status Dispatcher::SetLaneWeight(int lane, int weight) {
  if (lane < 0 || lane >= num_lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("no lane ", lane));
  }
  if (absl::Status s = ValidateWeight(weight, lanes_[lane]->name()); !s.ok()) return s;
  absl::MutexLock lock(&config_mu_);
  if (weights_[lane] == weight) return absl::OkStatus();  // an unrelated update keeps adaptation
  weights_[lane] = weight;
  SetEffectiveLocked(lane, weight);
  ApplyCapacitiesLocked();
  return absl::OkStatus();
}

absl::Status Dispatcher::SetDelayTarget(int lane, DelayTarget target) {
  if (lane < 0 || lane >= num_lanes()) {
    return absl::InvalidArgumentError(absl::StrCat("no lane ", lane));
  }
  if (absl::Status s = ValidateDelayTarget(target, lanes_[lane]->name()); !s.ok()) return s;
  absl::MutexLock lock(&config_mu_);
  Adaptive& a = adaptive_[lane];
  if (a.target.target_nanos == 0 && target.target_nanos > 0 && !a.watch) {
    // Adaptation starts now: the first window must not hold the delays of before.
    a.last_delay = lanes_[lane]->DelaySnapshot();
  }
  if (target.target_nanos == 0 && !a.watch) a.window_delay_nanos = 0;
  a.target = target;
  const int weight = target.target_nanos == 0
                         ? weights_[lane]
                         : std::clamp(a.effective, weights_[lane], MaxWeightLocked(lane));
  SetEffectiveLocked(lane, weight);
  return absl::OkStatus();
}

int Dispatcher::MaxWeightLocked(int lane) const {
  const DelayTarget& target = adaptive_[lane].target;
  const int64_t ceiling = target.max_weight > 0
                              ? target.max_weight
                              : static_cast<int64_t>(weights_[lane]) * kDefaultMaxWeightFactor;
  return static_cast<int>(
      std::clamp<int64_t>(ceiling, weights_[lane], std::numeric_limits<int>::max() / 2));
}

void Dispatcher::SetEffectiveLocked(int lane, int weight) {
  adaptive_[lane].effective = weight;
  if (stopped_) return;
  if (absl::Status s = pool_->SetTaskWeight(lanes_[lane]->task, weight); !s.ok()) {
    LOG(ERROR) << "dispatcher " << name_ << ": lane " << lanes_[lane]->name() << ": " << s;
  }
}

int Dispatcher::AdaptWeights() {
  const int64_t now = clock_->NowNanos();
  absl::MutexLock lock(&config_mu_);
  if (stopped_) return 0;
  int changed = 0;
  for (int i = 0; i < num_lanes(); ++i) {
    Adaptive& a = adaptive_[i];
    if (a.target.target_nanos == 0 && !a.watch) continue;
    HistogramSnapshot delays = lanes_[i]->DelaySnapshot();
    const HistogramSnapshot window = delays.Since(a.last_delay);
    a.last_delay = std::move(delays);
    const int64_t signal =
        std::max(window.count > 0 ? window.Percentile(0.99) : 0, lanes_[i]->OldestQueuedAge(now));
    a.window_delay_nanos = signal;
    if (a.target.target_nanos == 0) continue;  // watched only
    const int base = weights_[i];
    int next = a.effective;
    if (signal > a.target.target_nanos) {
      next = static_cast<int>(std::min<double>(std::max(next + 1.0, std::ceil(next * kRaiseFactor)),
                                               MaxWeightLocked(i)));
    } else if (static_cast<double>(signal) <= a.target.target_nanos * kLowerBelowFraction) {
      next = static_cast<int>(std::min(next - 1.0, std::floor(next * kLowerFactor)));
    }
    next = std::clamp(next, base, MaxWeightLocked(i));
    if (next == a.effective) continue;
    ++(next > a.effective ? a.raises : a.lowers);
    SetEffectiveLocked(i, next);
    ++changed;
  }
  return changed;
}

absl::Status Dispatcher::SetCpuShare(double share) {
  if (absl::Status s = ValidateShare(share); !s.ok()) return s;
  absl::MutexLock lock(&config_mu_);
  cpu_share_ = share;
  if (!stopped_) return pool_->SetGroupShare(group_, share);
  return absl::OkStatus();
}

absl::Status Dispatcher::SetBudget(Budget budget) {
  if (absl::Status s = ValidateBudget(budget); !s.ok()) return s;
  absl::MutexLock lock(&config_mu_);
  budget_ = budget;
  ApplyCapacitiesLocked();
  return absl::OkStatus();
}

absl::Status Dispatcher::SetByteCap(int64_t max_bytes) {
  if (max_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dispatcher ", name_, ": byte cap must be >= 0, got ", max_bytes));
  }
  absl::MutexLock lock(&config_mu_);
  byte_cap_ = max_bytes;
  ApplyCapacitiesLocked();
  return absl::OkStatus();
}

absl::Status Dispatcher::SetCpuLimit(double cores) {
  absl::MutexLock lock(&config_mu_);
  if (stopped_) return absl::OkStatus();
  return pool_->SetGroupCpuLimit(group_, cores);
}

Dispatcher::CpuLimitStats Dispatcher::GetCpuLimitStats() const {
  absl::ReaderMutexLock lock(&config_mu_);
  if (group_ == nullptr) return {};
  const WorkerPool::GroupStats g = pool_->GroupStatsOf(group_);
  return {.limit_cores = g.cpu_limit_cores,
          .throttles = g.throttles,
          .throttled_nanos = g.throttled_nanos};
}

double Dispatcher::cpu_share() const {
  absl::ReaderMutexLock lock(&config_mu_);
  return cpu_share_;
}

absl::Status Dispatcher::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& lane : lanes_) {
    if (!lane->AwaitHandled(deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("dispatcher ", name_, ": lane ", lane->name(), " not drained in time"));
    }
  }
  return absl::OkStatus();
}

void Dispatcher::Stop() {
  {
    absl::MutexLock lock(&config_mu_);
    if (stopped_) {
      // Another caller is stopping (or has stopped) us: return only once that is complete.
      config_mu_.Await(absl::Condition(
          +[](WorkerPool::Group** group) { return *group == nullptr; }, &group_));
      return;
    }
    stopped_ = true;  // Set* stop touching the pool
  }
  for (const auto& lane : lanes_) lane->CloseAdmission();
  // No more Wakes can come (they happen under the lane mutex, with admission open). Remove the
  // tasks without holding config_mu_: a running handler may be calling Set* or GetStats.
  for (const auto& lane : lanes_) pool_->RemoveTask(lane->task);
  for (const auto& lane : lanes_) lane->DiscardQueued();
  absl::MutexLock lock(&config_mu_);
  for (const auto& lane : lanes_) {
    lane->final_cpu_nanos = WorkerPool::TaskCpuNanos(lane->task);
    lane->task = nullptr;
  }
  pool_->RemoveGroup(group_);
  group_ = nullptr;
}

Dispatcher::LaneStats Dispatcher::GetLaneStats(int lane) const {
  CHECK(lane >= 0 && lane < num_lanes()) << "lane " << lane;
  LaneStats stats;
  {
    absl::ReaderMutexLock lock(&config_mu_);
    const Lane& l = *lanes_[lane];
    stats.weight = weights_[lane];
    const Adaptive& a = adaptive_[lane];
    stats.effective_weight = a.effective;
    stats.delay_target_nanos = a.target.target_nanos;
    stats.max_weight = a.target.target_nanos > 0 ? MaxWeightLocked(lane) : weights_[lane];
    stats.window_delay_nanos = a.window_delay_nanos;
    stats.weight_raises = a.raises;
    stats.weight_lowers = a.lowers;
    stats.cpu_nanos = l.task != nullptr ? WorkerPool::TaskCpuNanos(l.task) : l.final_cpu_nanos;
  }
  lanes_[lane]->FillStats(&stats);
  return stats;
}

std::vector<Dispatcher::LaneStats> Dispatcher::GetStats() const {
  std::vector<LaneStats> out;
  out.reserve(lanes_.size());
  for (int i = 0; i < num_lanes(); ++i) out.push_back(GetLaneStats(i));
  return out;
}

int64_t Dispatcher::LaneBusyNanos(int lane) const {
  if (lane < 0 || lane >= num_lanes()) return 0;
  return lanes_[lane]->BusyFor(clock_->NowNanos());
}

Histogram::Totals Dispatcher::QueueingTotals() const {
  Histogram::Totals total;
  for (int i = 0; i < num_lanes(); ++i) {
    if (reserved_[i] > 0) continue;
    const Histogram::Totals t = lanes_[i]->DelayTotals();
    total.count += t.count;
    total.sum += t.sum;
  }
  return total;
}

int64_t Dispatcher::CpuNanos() const {
  absl::ReaderMutexLock lock(&config_mu_);
  int64_t total = 0;
  for (const auto& lane : lanes_) {
    total += lane->task != nullptr ? WorkerPool::TaskCpuNanos(lane->task) : lane->final_cpu_nanos;
  }
  return total;
}

}  // namespace flowctl
