#include "flowctl/block_budget.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "glog/logging.h"

namespace flowctl {

BlockBudget::BlockBudget(uint32_t blocks_per_second)
    : ceiling_(blocks_per_second), blocks_per_second_(blocks_per_second) {}

void BlockBudget::SetBlocksPerSecond(uint32_t blocks_per_second) {
  absl::MutexLock lock(&mu_);
  ceiling_ = blocks_per_second;
  blocks_per_second_ = blocks_per_second;
}

uint32_t BlockBudget::blocks_per_second() const {
  absl::MutexLock lock(&mu_);
  return blocks_per_second_;
}

uint32_t BlockBudget::ceiling() const {
  absl::MutexLock lock(&mu_);
  return ceiling_;
}

void BlockBudget::SetAdaptation(const Adaptation& adaptation) {
  CHECK(adaptation.min_blocks_per_second >= 1 && adaptation.delay_target_nanos > 0 &&
        adaptation.step_nanos > 0)
      << "BlockBudget::SetAdaptation: invalid options";
  absl::MutexLock lock(&mu_);
  adaptation_ = adaptation;
  if (!adaptation_.enabled) blocks_per_second_ = ceiling_;
}

BlockBudget::AdaptationStats BlockBudget::adaptation_stats() const {
  absl::MutexLock lock(&mu_);
  return adaptation_stats_;
}

void BlockBudget::Observe(int64_t now_nanos, absl::Span<const PartitionTick> partitions) {
  absl::MutexLock lock(&mu_);
  if (step_start_ == 0) {  // the first tick only starts a step
    step_start_ = now_nanos != 0 ? now_nanos : 1;
    return;
  }
  for (const PartitionTick& p : partitions) {
    step_blocks_ += p.blocks;
    if (p.messages == 0) continue;
    auto& [sum, count] = step_delays_[p.partition];
    sum += p.delay_sum_nanos;
    count += p.messages;
  }
  if (now_nanos - step_start_ >= adaptation_.step_nanos) StepLocked(now_nanos);
}

void BlockBudget::StepLocked(int64_t now_nanos) {
  const double seconds = static_cast<double>(now_nanos - step_start_) / 1e9;
  AdaptationStats& st = adaptation_stats_;
  st.blocks_per_second = static_cast<double>(step_blocks_) / seconds;
  // The lower median of the partitions' own mean delays over the step.
  std::vector<int64_t> means;
  means.reserve(step_delays_.size());
  uint64_t messages = 0;
  for (const auto& [id, d] : step_delays_) {
    means.push_back(d.first / static_cast<int64_t>(d.second));
    messages += d.second;
  }
  st.mean_delay_nanos = 0;
  if (!means.empty()) {
    const size_t lower_median = (means.size() - 1) / 2;
    std::nth_element(means.begin(), means.begin() + static_cast<ptrdiff_t>(lower_median),
                     means.end());
    st.mean_delay_nanos = means[lower_median];
  }
  const bool measured = messages >= kMinDelaySamples;
  step_start_ = now_nanos;
  step_delays_.clear();
  step_blocks_ = 0;
  if (!adaptation_.enabled || ceiling_ == 0) {
    blocks_per_second_ = ceiling_;
    return;
  }
  uint32_t active = 0;
  bool all_at_bound = true;  // every active partition's spacing at its caller's bound
  for (const auto& [id, e] : entries_) {
    if (!Active(e, now_nanos)) continue;
    ++active;
    all_at_bound &= e.at_bound;
  }
  const bool binding =
      active >= 2 &&
      st.blocks_per_second >= kBindingFraction * static_cast<double>(blocks_per_second_);
  const uint32_t floor = std::min(adaptation_.min_blocks_per_second, ceiling_);
  uint32_t next = blocks_per_second_;
  if (!measured || !binding || 2 * st.mean_delay_nanos <= adaptation_.delay_target_nanos) {
    next = next + std::max<uint32_t>(1, ceiling_ / 16);
  } else if (st.mean_delay_nanos > adaptation_.delay_target_nanos && !all_at_bound) {
    next = std::min(next - 1, static_cast<uint32_t>(std::floor(next * kLowerFactor)));
  }  // else held: between half the target and the target, or late with every spacing at its bound
  next = std::clamp(next, floor, ceiling_);
  if (next < blocks_per_second_) ++st.lowered;
  if (next > blocks_per_second_) ++st.raised;
  blocks_per_second_ = next;
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
    self.at_bound = false;
    return 0;
  }
  double others = 0;  // the other partitions with work
  for (const auto& [id, e] : entries_) {
    if (id != partition && Active(e, self.active_at)) others += e.weight;
  }
  const double nanos = others / (self.weight * blocks_per_second_) * 1e9;
  self.at_bound = nanos >= static_cast<double>(max_nanos);
  self.last_interval = self.at_bound ? max_nanos : static_cast<int64_t>(std::llround(nanos));
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
