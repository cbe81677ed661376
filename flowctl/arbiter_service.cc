#include "flowctl/arbiter_service.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

// The fraction of each capacity a consumer may have: its ceiling (0 = the whole), at least its
// guarantee.
double CeilingFraction(const node::config::ShareConfig& share) {
  return std::max(share.guarantee_fraction(),
                  share.ceiling_fraction() == 0 ? 1 : share.ceiling_fraction());
}

// One consumer of one resource from its ShareConfig, for a capacity in the resource's unit.
ArbiterConsumer ConsumerOf(const node::config::ShareConfig& share, double capacity, double demand) {
  ArbiterConsumer c;
  c.weight = share.weight();
  c.guarantee = share.guarantee_fraction() * capacity;
  c.ceiling = CeilingFraction(share) * capacity;
  c.demand = demand;
  return c;
}

// Demand for bytes held (memory, disk): the whole limit while the consumer holds at least
// kMemoryBusyFraction of its last share, else room to grow from what it holds, at least
// kMemoryIdleFloorFraction of `floor_base`.
double HeldDemand(double held, double limit, std::optional<double> last_share, double floor_base) {
  if (held >= ArbiterService::kMemoryBusyFraction * last_share.value_or(limit)) return limit;
  return std::min(limit, std::max(ArbiterService::kMemoryIdleHeadroom * held,
                                  ArbiterService::kMemoryIdleFloorFraction * floor_base));
}

// The same consumers, each taking whatever it is given: their entitlements.
std::vector<ArbiterConsumer> Backlogged(std::vector<ArbiterConsumer> consumers) {
  for (ArbiterConsumer& c : consumers) c.demand = kUnboundedDemand;
  return consumers;
}

// `unit` converts the resource's unit to its display unit (CPU: ns per tick -> cores).
ResourceShareStats ShareStats(const ArbiterConsumer& c, double share, double usage, double unit) {
  ResourceShareStats s;
  s.weight = c.weight;
  s.guarantee = c.guarantee / unit;
  s.ceiling = c.ceiling / unit;
  s.demand = std::isinf(c.demand) ? kUnboundedDemand : c.demand / unit;
  s.share = share / unit;
  s.usage = usage / unit;
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArbiterService>> ArbiterService::Create(Options options,
                                                                       EgressAccounting* egress) {
  if (options.tick <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tick: must be > 0, got ", absl::FormatDuration(options.tick)));
  }
  if (!options.cpu_workers) return absl::InvalidArgumentError("cpu_workers: required");
  if (options.memory_bytes == 0) return absl::InvalidArgumentError("memory_bytes: must be > 0");
  if (options.clock == nullptr) return absl::InvalidArgumentError("clock: required");
  return std::unique_ptr<ArbiterService>(new ArbiterService(std::move(options), egress));
}

ArbiterService::ArbiterService(Options options, EgressAccounting* egress)
    : options_(std::move(options)), egress_(egress) {}

ArbiterService::~ArbiterService() { Stop(); }

absl::Status ArbiterService::AddConsumer(ResourceConsumer* consumer) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::FailedPreconditionError("arbiter stopped");
  for (const Member& m : members_) {
    if (m.consumer->id() == consumer->id()) {
      return absl::AlreadyExistsError(
          absl::StrCat("arbiter: consumer id ", consumer->id(), " is in use"));
    }
  }
  members_.push_back({.consumer = consumer});
  return absl::OkStatus();
}

absl::Status ArbiterService::RemoveConsumer(uint32_t id) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(members_.begin(), members_.end(),
                         [id](const Member& m) { return m.consumer->id() == id; });
  if (it == members_.end()) {
    return absl::NotFoundError(absl::StrCat("arbiter: unknown consumer id ", id));
  }
  // A partition created later with the same id must not inherit its egress limit.
  if (it->egress_limit != 0 && egress_ != nullptr) {
    absl::Status s = egress_->SetPartitionRateLimit(id, 0);
    if (!s.ok()) LOG(WARNING) << "arbiter: egress limit of removed consumer " << id << ": " << s;
  }
  members_.erase(it);
  return absl::OkStatus();
}

absl::Status ArbiterService::Start() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopped_) {
      return absl::FailedPreconditionError("arbiter: Start may be called once, before Stop");
    }
    started_ = true;
    TickLocked();
  }
  thread_ = std::thread([this] {
    NameThisThread("arbiter");
    Loop();
  });
  return absl::OkStatus();
}

void ArbiterService::Stop() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ArbiterService::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped_), options_.tick)) return;
      TickLocked();
    }
    if (options_.after_tick_unlocked) options_.after_tick_unlocked();
  }
}

void ArbiterService::Tick() {
  {
    absl::MutexLock lock(&mu_);
    TickLocked();
  }
  if (options_.after_tick_unlocked) options_.after_tick_unlocked();
}

absl::Status ArbiterService::UpdateShares(
    absl::Span<const std::pair<uint32_t, node::config::ShareConfig>> shares) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::FailedPreconditionError("arbiter stopped");
  std::vector<ResourceConsumer*> targets;
  for (const auto& [id, share] : shares) {
    auto it = std::find_if(members_.begin(), members_.end(),
                           [id](const Member& m) { return m.consumer->id() == id; });
    if (it == members_.end()) {
      return absl::NotFoundError(absl::StrCat("arbiter: unknown consumer id ", id));
    }
    targets.push_back(it->consumer);
  }
  for (size_t i = 0; i < shares.size(); ++i) targets[i]->SetShareConfig(shares[i].second);
  TickLocked();
  return absl::OkStatus();
}

std::vector<ConsumerShareStats> ArbiterService::Stats() const {
  absl::MutexLock lock(&mu_);
  std::vector<ConsumerShareStats> out;
  for (const Member& m : members_) {
    if (m.stats) out.push_back(*m.stats);
  }
  return out;
}

std::optional<ConsumerShareStats> ArbiterService::StatsOf(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  for (const Member& m : members_) {
    if (m.stats && m.stats->id == id) return m.stats;
  }
  return std::nullopt;
}

void ArbiterService::TickLocked() {
  if (stopped_ || members_.empty()) return;
  const int64_t now = options_.clock->NowNanos();
  const double elapsed =
      last_tick_nanos_.has_value()
          ? static_cast<double>(std::max<int64_t>(kMinElapsedNanos, now - *last_tick_nanos_))
          : static_cast<double>(kFirstTickNanos);
  last_tick_nanos_ = now;

  // 1. Measure.
  EgressUsage egress_usage;
  if (egress_ != nullptr) egress_usage = egress_->Usage();
  const double egress_capacity = egress_usage.cap_bytes_per_second < TokenBucket::kUnlimited
                                     ? egress_usage.cap_bytes_per_second
                                     : kUnlimitedEgressCapacity;
  const size_t n = members_.size();
  std::vector<ConsumerUsage> usage(n);
  for (size_t i = 0; i < n; ++i) usage[i] = members_[i].consumer->TakeUsage();
  const int workers = options_.cpu_workers();
  const double cpu_capacity = static_cast<double>(workers) * elapsed;
  const double memory_scale =
      options_.memory_scale ? std::clamp(options_.memory_scale(), 0.01, 1.0) : 1.0;
  const double memory_capacity = static_cast<double>(options_.memory_bytes) * memory_scale;

  // 2. Demand.
  std::vector<ArbiterConsumer> cpu(n), memory(n), egress(n), disk(n);
  const double disk_capacity = static_cast<double>(options_.disk_bytes);
  double disk_floors = 0;
  for (const ConsumerUsage& u : usage) disk_floors += static_cast<double>(u.disk_floor);
  std::vector<double> egress_rate(n, 0);
  std::vector<node::config::ShareConfig> shares(n);
  double weights = 0;
  for (size_t i = 0; i < n; ++i) {
    shares[i] = members_[i].consumer->share_config();
    weights += shares[i].weight();
  }
  for (size_t i = 0; i < n; ++i) {
    Member& m = members_[i];
    const node::config::ShareConfig& share = shares[i];
    cpu[i] = ConsumerOf(
        share, cpu_capacity,
        usage[i].cpu_backlogged
            ? kUnboundedDemand
            : kCpuDemandHeadroom * static_cast<double>(usage[i].cpu_nanos) + kCpuDemandSlackNanos);
    // An idle consumer's floor is a fraction of its weighted part of the capacity (or of its
    // limit, if smaller), so that however many consumers there are, idle ones lend.
    const double memory_limit = static_cast<double>(usage[i].memory_limit);
    const double fair_memory =
        weights > 0 ? memory_capacity * share.weight() / weights : memory_capacity;
    memory[i] = ConsumerOf(
        share, memory_capacity,
        std::max(HeldDemand(static_cast<double>(
                                usage[i].memory_bytes -
                                std::min(usage[i].memory_bytes, usage[i].memory_borrowed_bytes)),
                            memory_limit, m.memory_last_share, std::min(memory_limit, fair_memory)),
                 std::min(memory_limit, static_cast<double>(usage[i].memory_cache_demand))));
    if (disk_capacity > 0 && usage[i].disk_floor > 0) {
      // A consumer's own budget is its ceiling. Its floor (what it cannot work below) is
      // guaranteed, and its guarantee fraction applies to what the floors leave, so guarantees
      // never sum past the capacity (the configuration makes the floors fit).
      const double floor = static_cast<double>(usage[i].disk_floor);
      const double own = usage[i].disk_limit > 0
                             ? std::max(floor, static_cast<double>(usage[i].disk_limit))
                             : disk_capacity;
      disk[i] = ConsumerOf(share, disk_capacity,
                           std::max(floor, HeldDemand(static_cast<double>(usage[i].disk_bytes), own,
                                                      m.disk_last_share, own)));
      disk[i].guarantee =
          floor + share.guarantee_fraction() * std::max(0.0, disk_capacity - disk_floors);
      disk[i].ceiling = std::max(disk[i].guarantee, std::min(disk[i].ceiling, own));
    } else {
      disk[i] = ArbiterConsumer{.weight = share.weight(), .demand = 0};
    }
    auto sent_it = egress_usage.bytes_sent.find(m.consumer->id());
    const uint64_t sent = sent_it == egress_usage.bytes_sent.end() ? 0 : sent_it->second;
    const uint64_t prev = m.egress_bytes_last;
    m.egress_bytes_last = sent;
    egress_rate[i] = static_cast<double>(sent - std::min(sent, prev)) *
                     static_cast<double>(kNanosPerSecond) / elapsed;
    egress[i] =
        ConsumerOf(share, egress_capacity,
                   kEgressDemandHeadroom * egress_rate[i] + kEgressDemandSlackBytesPerSecond);
  }

  // 3. Allocate.
  auto cpu_shares = AllocateFairShares(cpu_capacity, cpu);
  auto cpu_entitled = AllocateFairShares(cpu_capacity, Backlogged(cpu));
  auto memory_shares = AllocateFairShares(memory_capacity, memory);
  auto egress_shares = AllocateFairShares(egress_capacity, egress);
  auto egress_entitled = AllocateFairShares(egress_capacity, Backlogged(egress));
  auto disk_shares = AllocateFairShares(disk_capacity, disk);
  for (const absl::Status& s :
       {cpu_shares.status(), cpu_entitled.status(), memory_shares.status(), egress_shares.status(),
        egress_entitled.status(), disk_shares.status()}) {
    if (!s.ok()) {
      LOG_EVERY_N(ERROR, 100) << "arbiter: tick skipped: " << s;
      return;
    }
  }

  // 4. Apply, 5. record.
  for (size_t i = 0; i < n; ++i) {
    Member& m = members_[i];
    ResourceConsumer* c = m.consumer;
    // Hard limits: the ceiling (at least the guarantee, as the allocation uses it) as a rate,
    // from the fractions (not the tick's capacity, whose elapsed time varies: the same limit must
    // compare equal from tick to tick).
    double cpu_limit = 0;
    double egress_limit = 0;
    if (shares[i].hard_ceiling()) {
      cpu_limit = CeilingFraction(shares[i]) * static_cast<double>(workers);
      if (egress_capacity < kUnlimitedEgressCapacity) egress_limit = egress[i].ceiling;
    }
    if (options_.advisory) {
      cpu_limit = 0;
      egress_limit = 0;
    } else {
      if (cpu_limit != m.cpu_limit) {
        c->ApplyCpuLimit(cpu_limit);
        m.cpu_limit = cpu_limit;
      }
      if (egress_ != nullptr && egress_limit != m.egress_limit) {
        absl::Status s = egress_->SetPartitionRateLimit(c->id(), egress_limit);
        if (s.ok()) {
          m.egress_limit = egress_limit;
        } else {
          LOG_EVERY_N(WARNING, 100) << "arbiter: egress limit: " << s;
        }
      }
    }
    ConsumerShareStats stats;
    stats.id = c->id();
    stats.name = c->name();
    stats.cpu =
        ShareStats(cpu[i], (*cpu_shares)[i], static_cast<double>(usage[i].cpu_nanos), elapsed);
    stats.cpu.limit = cpu_limit;
    stats.memory =
        ShareStats(memory[i], (*memory_shares)[i], static_cast<double>(usage[i].memory_bytes), 1);
    stats.egress = ShareStats(egress[i], (*egress_shares)[i], egress_rate[i], 1);
    stats.egress.limit = egress_limit;
    if (disk_capacity > 0 && usage[i].disk_floor > 0) {
      stats.disk =
          ShareStats(disk[i], (*disk_shares)[i], static_cast<double>(usage[i].disk_bytes), 1);
    }
    m.stats = std::move(stats);
    if (options_.advisory) continue;
    c->ApplyShare(Resource::kCpu,
                  std::max((*cpu_entitled)[i], cpu_capacity * kMinCpuWeightFraction));
    c->ApplyShare(Resource::kMemory, (*memory_shares)[i]);
    c->ApplyShare(Resource::kEgress, (*egress_entitled)[i]);
    m.memory_last_share = (*memory_shares)[i];
    if (disk_capacity > 0 && usage[i].disk_floor > 0) {
      c->ApplyShare(Resource::kDisk, (*disk_shares)[i]);
      m.disk_last_share = (*disk_shares)[i];
    }
    if (egress_ != nullptr) {
      const double weight = std::clamp((*egress_entitled)[i] / egress_capacity * kEgressWeightScale,
                                       kMinEgressWeight, kMaxEgressWeight);
      absl::Status s = egress_->SetPartitionWeight(c->id(), static_cast<uint32_t>(weight));
      if (!s.ok()) {
        LOG_EVERY_N(WARNING, 100) << "arbiter: egress weight: " << s;
      }
    }
  }
  if (options_.after_tick) {
    std::vector<ResourceConsumer*> consumers;
    consumers.reserve(n);
    for (const Member& m : members_) consumers.push_back(m.consumer);
    options_.after_tick(elapsed, cpu_capacity, consumers);
  }
}

}  // namespace flowctl
