#include "flowctl/block_budget.h"

#include <cmath>

#include "glog/logging.h"

namespace flowctl {

BlockBudget::BlockBudget(uint32_t blocks_per_second) : blocks_per_second_(blocks_per_second) {}

void BlockBudget::SetBlocksPerSecond(uint32_t blocks_per_second) {
  absl::MutexLock lock(&mu_);
  blocks_per_second_ = blocks_per_second;
}

uint32_t BlockBudget::blocks_per_second() const {
  absl::MutexLock lock(&mu_);
  return blocks_per_second_;
}

void BlockBudget::SetWeight(uint32_t partition, double weight) {
  CHECK(weight > 0) << "BlockBudget::SetWeight: weight " << weight;
  absl::MutexLock lock(&mu_);
  entries_[partition].weight = weight;
}

void BlockBudget::Remove(uint32_t partition) {
  absl::MutexLock lock(&mu_);
  entries_.erase(partition);
}

int64_t BlockBudget::PartialBatchIntervalNanos(uint32_t partition, int64_t now_nanos,
                                               int64_t max_nanos) {
  absl::MutexLock lock(&mu_);
  Entry& self = entries_[partition];
  // 0 means "never seen"; a clock at 0 still counts as seen.
  self.active_at = now_nanos != 0 ? now_nanos : 1;
  if (blocks_per_second_ == 0) {
    self.last_interval = 0;
    return 0;
  }
  double others = 0;  // the other partitions with work
  for (const auto& [id, e] : entries_) {
    if (id != partition && Active(e, self.active_at)) others += e.weight;
  }
  const double nanos = others / (self.weight * blocks_per_second_) * 1e9;
  self.last_interval = nanos >= static_cast<double>(max_nanos)
                           ? max_nanos
                           : static_cast<int64_t>(std::llround(nanos));
  return self.last_interval;
}

int64_t BlockBudget::LastIntervalNanos(uint32_t partition) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(partition);
  return it == entries_.end() || blocks_per_second_ == 0 ? 0 : it->second.last_interval;
}

uint32_t BlockBudget::ActivePartitions(int64_t now_nanos) const {
  absl::MutexLock lock(&mu_);
  uint32_t n = 0;
  for (const auto& [id, e] : entries_) n += Active(e, now_nanos) ? 1 : 0;
  return n;
}

}  // namespace flowctl
