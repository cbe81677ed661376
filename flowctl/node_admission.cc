#include "flowctl/node_admission.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace flowctl {

bool AdmissionShedder::Admit() {
  const int64_t f = fraction_.load(std::memory_order_relaxed);
  if (f >= kScale) return true;
  // floor((k + 1) f) > floor(k f), in fixed point: the integer part of the running credit moved.
  const uint64_t k = calls_.fetch_add(1, std::memory_order_relaxed);
  const auto credit = [f](uint64_t n) { return (static_cast<unsigned __int128>(n) * f) / kScale; };
  if (credit(k + 1) > credit(k)) return true;
  refused_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void AdmissionShedder::SetFraction(double fraction) {
  const double f = std::clamp(std::isnan(fraction) ? 1.0 : fraction, 0.0, 1.0);
  fraction_.store(static_cast<int64_t>(std::llround(f * kScale)), std::memory_order_relaxed);
}

double AdmissionShedder::fraction() const {
  return static_cast<double>(fraction_.load(std::memory_order_relaxed)) / kScale;
}

absl::Status NodeAdmission::ValidateConfig(const Config& config) {
  if (config.consensus_delay_target <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("consensus_delay_target must be > 0");
  }
  if (!(config.cpu_busy_fraction > 0 && config.cpu_busy_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_busy_fraction must be in (0, 1], got ", config.cpu_busy_fraction));
  }
  if (!(config.min_admit_fraction > 0 && config.min_admit_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_admit_fraction must be in (0, 1], got ", config.min_admit_fraction));
  }
  if (config.exit_ticks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("exit_ticks must be >= 1, got ", config.exit_ticks));
  }
  return absl::OkStatus();
}

NodeAdmission::NodeAdmission(Config config) : config_(config) {
  CHECK(ValidateConfig(config_).ok()) << ValidateConfig(config_);
}

std::vector<double> NodeAdmission::Update(int64_t cpu_capacity_nanos,
                                          absl::Span<const PartitionLoad> loads) {
  const int64_t target = absl::ToInt64Nanoseconds(config_.consensus_delay_target);
  int64_t used = 0;
  bool backlogged = false;
  const PartitionLoad* latest = nullptr;  // the latest consensus lane
  for (const PartitionLoad& l : loads) {
    used += l.cpu_nanos;
    backlogged |= l.backlogged;
    if (latest == nullptr || l.consensus_delay_nanos > latest->consensus_delay_nanos) latest = &l;
  }
  const bool late = latest != nullptr && latest->consensus_delay_nanos > target;
  const bool saturated = backlogged && cpu_capacity_nanos > 0 &&
                         static_cast<double>(used) >=
                             config_.cpu_busy_fraction * static_cast<double>(cpu_capacity_nanos);
  const bool calm =
      !late && !saturated && (latest == nullptr || 2 * latest->consensus_delay_nanos <= target);

  // Forget partitions that are gone; new ones start fully admitted.
  absl::flat_hash_map<uint32_t, double> next;
  for (const PartitionLoad& l : loads) {
    auto it = fraction_.find(l.id);
    next[l.id] = it != fraction_.end() ? it->second : 1.0;
  }
  fraction_ = std::move(next);

  if (!stats_.congested && (late || saturated)) {
    stats_.congested = true;
    ++stats_.episodes;
    calm_ticks_ = 0;
    stats_.trigger =
        late ? absl::StrCat("consensus lane of partition ", latest->id, " late: ",
                            absl::FormatDuration(absl::Nanoseconds(latest->consensus_delay_nanos)),
                            " > ", absl::FormatDuration(config_.consensus_delay_target))
             : absl::StrCat("worker CPU ",
                            std::llround(100.0 * static_cast<double>(used) /
                                         static_cast<double>(cpu_capacity_nanos)),
                            "% used with work queued");
    LOG(WARNING) << "node admission: congestion episode " << stats_.episodes << " ("
                 << stats_.trigger << "): shedding client admission by CPU entitlement";
  }

  // Calm for exit_ticks in a row: stop cutting and refill; the episode ends once every fraction
  // is back to kExitAdmitFraction. A signal on the way back resumes the cuts.
  bool refilling = false;
  if (stats_.congested) {
    ++stats_.congested_ticks;
    calm_ticks_ = calm ? calm_ticks_ + 1 : 0;
    refilling = calm_ticks_ >= config_.exit_ticks;
  }

  std::vector<double> out;
  out.reserve(loads.size());
  stats_.partitions.clear();
  bool all_refilled = true;
  for (const PartitionLoad& l : loads) {
    double& f = fraction_[l.id];
    const double over =
        l.entitlement_nanos > 0 ? static_cast<double>(l.cpu_nanos) / l.entitlement_nanos : 0;
    if (stats_.congested && !refilling) {
      if (over > 1 && !calm) {  // cut only while a signal is present
        f *= std::max(kMaxCut, 1 / over);
      } else {
        f += kGrowStep;
      }
    } else {
      f += kRefillStep;
    }
    f = std::clamp(f, config_.min_admit_fraction, 1.0);
    all_refilled &= f >= kExitAdmitFraction;
    out.push_back(f);
    stats_.partitions.push_back({.id = l.id,
                                 .admit_fraction = f,
                                 .cpu_over_entitlement = over,
                                 .consensus_delay_nanos = l.consensus_delay_nanos});
  }
  if (refilling && all_refilled) {
    stats_.congested = false;
    LOG(INFO) << "node admission: congestion episode " << stats_.episodes << " over after "
              << calm_ticks_ << " calm ticks";
  }
  return out;
}

}  // namespace flowctl
