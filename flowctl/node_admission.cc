#include "flowctl/node_admission.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "flowctl/arbiter.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// An entitlement a share can be divided by (a weight for AllocateFairShares): finite and positive.
bool IsEntitlement(double nanos) { return nanos > 0 && std::isfinite(nanos); }

}  // namespace

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
  if (config.exit_calm < absl::ZeroDuration() || config.exit_calm == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("exit_calm must be >= 0 and finite, got ",
                                                   absl::FormatDuration(config.exit_calm)));
  }
  if (!(config.cpu_pressure_percent >= 0 && config.cpu_pressure_percent <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat("cpu_pressure_percent must be in [0, 100], got ",
                                                   config.cpu_pressure_percent));
  }
  if (!(config.measured_share_slack >= 1 && config.measured_share_slack <= 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("measured_share_slack must be in [1, 16], got ", config.measured_share_slack));
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

std::vector<double> NodeAdmission::Update(int64_t elapsed_nanos, int64_t cpu_capacity_nanos,
                                          absl::Span<const PartitionLoad> loads,
                                          std::optional<double> cpu_pressure) {
  const int64_t target = absl::ToInt64Nanoseconds(config_.consensus_delay_target);
  const double elapsed = static_cast<double>(std::max<int64_t>(elapsed_nanos, 1));
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

  // Forget partitions that are gone; new ones start fully admitted, their first tick a baseline
  // (CPU 0), their average starting at the second. The rest move their average toward this
  // tick's CPU.
  const double alpha = -std::expm1(-elapsed / absl::ToDoubleNanoseconds(kUsageWindow));
  absl::flat_hash_map<uint32_t, Track> next;
  double total_rate = 0;
  // A sign held for kContendingHold (or `length`): the time left of it, restarted by the sign.
  const auto hold = [elapsed_nanos](bool sign, int64_t left,
                                    absl::Duration length = kContendingHold) {
    return sign ? absl::ToInt64Nanoseconds(length)
                : std::max<int64_t>(0, left - std::max<int64_t>(elapsed_nanos, 0));
  };
  for (const PartitionLoad& l : loads) {
    const double rate = static_cast<double>(l.cpu_nanos) / elapsed;
    auto it = tracks_.find(l.id);
    Track t;
    if (it != tracks_.end()) {
      t = it->second;
      t.cpu_rate = t.sampled ? t.cpu_rate + alpha * (rate - t.cpu_rate) : rate;
      t.sampled = true;
    } else {
      t.height = l.height;
      t.busy_left_nanos = absl::ToInt64Nanoseconds(kIdleHold);  // idle only after kIdleHold
    }
    // Signs of work of any size (see "Allocation"): work queued, a pooled tx (one waiting behind
    // a nonce gap too), a new block, or CPU against its own entitlement (a sign that does not
    // depend on what the others use).
    const bool entitled = IsEntitlement(l.entitlement_nanos);
    t.busy_left_nanos =
        hold(l.backlogged || l.pool_fill > 0 || l.height != t.height ||
                 (entitled ? t.cpu_rate * elapsed >= kActiveShare * l.entitlement_nanos
                           : t.cpu_rate > 0),
             t.busy_left_nanos, kIdleHold);
    t.height = l.height;
    // Signs of contention (see "Contending partitions"), held for kContendingHold; the fraction
    // is the one the last tick set.
    t.contend_left_nanos =
        hold(l.refusing || t.fraction < 1 || l.pool_fill >= kContendingPoolFill ||
                 l.client_backlog_nanos >= absl::ToInt64Nanoseconds(kContendingBacklog),
             t.contend_left_nanos);
    // Short of CPU (its consensus lane late), held the same way.
    t.short_left_nanos = hold(l.consensus_delay_nanos > target, t.short_left_nanos);
    total_rate += t.cpu_rate;
    next[l.id] = t;
  }
  tracks_ = std::move(next);

  // The measured allocation, while the CPU is contended: the partitions' smoothed CPU, divided by
  // entitlement (weight, guarantee and ceiling) among the active ones.
  const bool measured =
      config_.measured_shares && (!cpu_pressure || *cpu_pressure >= config_.cpu_pressure_percent);
  stats_.cpu_pressure = cpu_pressure;
  stats_.measured_allocation = measured;
  const double active_floor =
      loads.empty() ? 0 : kActiveShare * total_rate / static_cast<double>(loads.size());
  double active_weight = 0;
  // What idle partitions lend (finite, positive entitlements only; see "Allocation").
  double entitled_idle = 0;
  // Per partition (in `loads` order): active, and contending (see the file comment).
  std::vector<bool> active(loads.size()), contending(loads.size());
  for (size_t i = 0; i < loads.size(); ++i) {
    const PartitionLoad& l = loads[i];
    const Track& t = tracks_[l.id];
    // Idle: it lends, and neither borrows nor counts among the active, whatever the others use.
    if (t.busy_left_nanos == 0) {
      if (IsEntitlement(l.entitlement_nanos)) entitled_idle += l.entitlement_nanos;
      continue;
    }
    active[i] = l.backlogged || t.cpu_rate >= active_floor;
    if (!active[i]) continue;
    active_weight += l.entitlement_nanos;
    contending[i] = t.contend_left_nanos > 0;
  }
  // The loan: the active partitions' entitlements and the idle ones' together (at most the pool),
  // water-filled among the active ones by entitlement and demand, each up to its hard CPU limit;
  // a partition never gets less than its own entitlement.
  std::vector<double> borrowed(loads.size(), 0);
  if (entitled_idle > 0) {
    std::vector<ArbiterConsumer> consumers;
    std::vector<size_t> index;
    double pot = entitled_idle;
    for (size_t i = 0; i < loads.size(); ++i) {
      const double e = loads[i].entitlement_nanos;
      if (!active[i] || !IsEntitlement(e)) continue;
      pot += e;
      const double limit = loads[i].cpu_limit_cores * elapsed;
      // One with work queued or contending wants all it can get; the others, what they use with
      // headroom (never less than their own entitlement), so that the loan goes where it is used.
      const double demand =
          loads[i].backlogged || contending[i]
              ? kUnboundedDemand
              : std::max(e, kLoanHeadroom * tracks_[loads[i].id].cpu_rate * elapsed);
      consumers.push_back(
          {.weight = e, .ceiling = limit > 0 ? std::max(limit, e) : kNoCeiling, .demand = demand});
      index.push_back(i);
    }
    const double entitled_active = pot - entitled_idle;
    pot = std::min(pot, std::max(static_cast<double>(cpu_capacity_nanos), entitled_active));
    absl::StatusOr<std::vector<double>> fair = AllocateFairShares(pot, consumers);
    if (!fair.ok()) {
      LOG_EVERY_N(WARNING, 100) << "node admission: idle share not lent: " << fair.status();
    } else {
      for (size_t k = 0; k < index.size(); ++k) borrowed[index[k]] = (*fair)[k] / elapsed;
    }
  }
  // The contenders' division of what they use together (see "Contending partitions"): weighted
  // water-filling, in which one neither cut nor short of CPU wants what it uses and the rest
  // want more. Each is held to the water level times its weight: those that want more get what
  // the filling gives them, those that want what they use no less than that (and are cut if they
  // use more). With no contender held by the level (every one has what it uses) nobody is.
  std::vector<double> contended(loads.size(), std::numeric_limits<double>::infinity());
  if (measured) {
    std::vector<ArbiterConsumer> consumers;
    std::vector<size_t> index;
    double capacity = 0;  // what the contenders divided used together
    for (size_t i = 0; i < loads.size(); ++i) {
      // A contender without an entitlement has no weight to divide by: it is left out, with its
      // CPU, and held by its entitlement alone.
      const double weight = loads[i].entitlement_nanos;
      if (!contending[i] || !IsEntitlement(weight)) continue;
      const Track& t = tracks_[loads[i].id];
      capacity += std::max(0.0, t.cpu_rate);
      const bool wants_what_it_uses = t.fraction >= 1 && t.short_left_nanos == 0;
      consumers.push_back(
          {.weight = weight,
           .demand = wants_what_it_uses ? std::max(0.0, t.cpu_rate) : kUnboundedDemand});
      index.push_back(i);
    }
    // With fewer than two to divide, a contender is a lone one, held by the slack alone.
    absl::StatusOr<std::vector<double>> fair = std::vector<double>();
    if (index.size() >= 2) fair = AllocateFairShares(capacity, consumers);
    if (!fair.ok()) {
      LOG_EVERY_N(WARNING, 100) << "node admission: contenders not divided: " << fair.status();
    } else if (index.size() >= 2) {
      double level = -1;  // per unit of weight; < 0: no contender held by it
      for (size_t k = 0; k < index.size(); ++k) {
        const ArbiterConsumer& c = consumers[k];
        if (c.demand == kUnboundedDemand || (*fair)[k] < c.demand * (1 - kLevelTolerance)) {
          level = std::max(level, (*fair)[k] / c.weight);
        }
      }
      if (level >= 0) {
        for (size_t k = 0; k < index.size(); ++k) contended[index[k]] = level * consumers[k].weight;
      }
    }
  }

  if (!stats_.congested && (late || saturated)) {
    stats_.congested = true;
    ++stats_.episodes;
    calm_ticks_ = 0;
    calm_nanos_ = 0;
    stats_.trigger =
        late ? absl::StrCat("consensus lane of partition ", latest->id, " late: ",
                            absl::FormatDuration(absl::Nanoseconds(latest->consensus_delay_nanos)),
                            " > ", absl::FormatDuration(config_.consensus_delay_target))
             : absl::StrCat("worker CPU ",
                            std::llround(100.0 * static_cast<double>(used) /
                                         static_cast<double>(cpu_capacity_nanos)),
                            "% used with work queued");
    LOG(WARNING) << "node admission: congestion episode " << stats_.episodes << " ("
                 << stats_.trigger << "): shedding client admission by CPU share";
  }

  // Calm for exit_ticks in a row and exit_calm: stop cutting and refill; the episode ends once
  // every fraction is back to kExitAdmitFraction. A signal on the way back resumes the cuts.
  bool refilling = false;
  if (stats_.congested) {
    ++stats_.congested_ticks;
    calm_ticks_ = calm ? calm_ticks_ + 1 : 0;
    calm_nanos_ = calm ? calm_nanos_ + std::max<int64_t>(elapsed_nanos, 0) : 0;
    refilling = calm_ticks_ >= config_.exit_ticks &&
                calm_nanos_ >= absl::ToInt64Nanoseconds(config_.exit_calm);
  }

  // Steps per kStepPeriod of elapsed time, and corrections (see "Shedding").
  const double steps = elapsed / absl::ToDoubleNanoseconds(kStepPeriod);
  const double corrections =
      kCorrectionsPerWindow * elapsed / absl::ToDoubleNanoseconds(kUsageWindow);
  std::vector<double> out;
  out.reserve(loads.size());
  stats_.partitions.clear();
  bool all_refilled = true;
  for (size_t i = 0; i < loads.size(); ++i) {
    const PartitionLoad& l = loads[i];
    Track& t = tracks_[l.id];
    const double entitled_rate = l.entitlement_nanos / elapsed;
    double allocation = entitled_rate;
    allocation = std::max(allocation, borrowed[i]);  // with its loan
    if (measured && active[i] && active_weight > 0) {
      allocation = std::min(allocation, config_.measured_share_slack * total_rate *
                                            l.entitlement_nanos / active_weight);
      if (contending[i]) allocation = std::min(allocation, contended[i]);
    }
    const double over = allocation > 0 ? t.cpu_rate / allocation : 0;
    double& f = t.fraction;
    if (stats_.congested && !refilling) {
      // The measured correction (1 / over), kCorrectionsPerWindow times per kUsageWindow (the
      // time the smoothed CPU takes to show a change of fraction): applied whole on every 100-ms
      // step, it was applied again and again before the average moved, and the fraction swung
      // between the floor and well over the allocation (see the file comment).
      if (over > 1 + kLevelTolerance) {
        f *= std::max(std::pow(kMaxCut, steps), std::pow(1 / over, corrections));
      } else if (over > 0) {
        f = std::min(f * std::pow(std::max(1.0, 1 / over), corrections), f + kGrowStep * steps);
      } else {
        f += kGrowStep * steps;
      }
    } else {
      f += kRefillStep * steps;
    }
    f = std::clamp(f, config_.min_admit_fraction, 1.0);
    all_refilled &= f >= kExitAdmitFraction;
    out.push_back(f);
    stats_.partitions.push_back({.id = l.id,
                                 .admit_fraction = f,
                                 .cpu_over_entitlement = over,
                                 .consensus_delay_nanos = l.consensus_delay_nanos,
                                 .cpu_cores = t.cpu_rate,
                                 .allocation_cores = allocation,
                                 .contending = contending[i]});
  }
  if (refilling && all_refilled) {
    stats_.congested = false;
    LOG(INFO) << "node admission: congestion episode " << stats_.episodes << " over after "
              << calm_ticks_ << " calm ticks ("
              << absl::FormatDuration(absl::Nanoseconds(calm_nanos_)) << ")";
  }
  return out;
}

}  // namespace flowctl
