#include "flowctl/memory_pressure.h"

#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "flowctl/proc_files.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

std::optional<uint64_t> ReadUint(const std::string& path) {
  std::optional<std::string> text = ReadSmallFile(path);
  if (!text) return std::nullopt;
  uint64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return std::nullopt;
  return v;
}

// The value of `key` in a memory.stat file ("key value" lines), or 0.
uint64_t StatField(const std::string& path, absl::string_view key) {
  std::optional<std::string> text = ReadSmallFile(path);
  if (!text) return 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) continue;
    uint64_t v = 0;
    return absl::SimpleAtoi(line, &v) ? v : 0;
  }
  return 0;
}

std::string FormatGiB(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
}

}  // namespace

ProcMemorySource::ProcMemorySource(std::string proc, std::string cgroup_root)
    : proc_(std::move(proc)), cgroup_root_(std::move(cgroup_root)) {
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) page_size_ = page;
  FindCgroup();
}

void ProcMemorySource::FindCgroup() {
  std::optional<std::string> cgroups = ReadSmallFile(proc_ + "/self/cgroup");
  if (cgroups && *cgroups == cgroups_text_) return;  // unchanged
  cgroups_text_ = cgroups.value_or("");
  cgroup_dir_.clear();
  cgroup_version_ = 0;
  const std::string& cgroup_root = cgroup_root_;
  if (!cgroups) return;
  std::string v1_path;
  std::string v2_path;
  bool have_v2 = false;
  for (absl::string_view line : absl::StrSplit(*cgroups, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      v2_path = std::string(parts[2]);
      have_v2 = true;
    }
    for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
      if (c == "memory") v1_path = std::string(parts[2]);
    }
  }
  std::error_code ec;
  // In a container the group's path is often outside the mounted subtree (the mount's root is
  // the group itself): the mount point is then the group.
  if (have_v2) {
    for (const std::string& mount : {cgroup_root, cgroup_root + "/unified"}) {
      for (const std::string& dir : {mount + (v2_path == "/" ? "" : v2_path), mount}) {
        if (std::filesystem::exists(dir + "/memory.current", ec)) {
          cgroup_dir_ = dir;
          cgroup_version_ = 2;
          return;
        }
      }
    }
  }
  if (!v1_path.empty()) {
    const std::string mount = cgroup_root + "/memory";
    for (const std::string& dir : {mount + (v1_path == "/" ? "" : v1_path), mount}) {
      if (std::filesystem::exists(dir + "/memory.usage_in_bytes", ec)) {
        cgroup_dir_ = dir;
        cgroup_version_ = 1;
        return;
      }
    }
  }
}

std::string ProcMemorySource::Describe() const {
  if (cgroup_version_ == 0) return "rss " + proc_ + "/self/statm (no memory cgroup found)";
  return absl::StrCat("rss ", proc_, "/self/statm, cgroup v", cgroup_version_, " ", cgroup_dir_);
}

absl::StatusOr<MemorySample> ProcMemorySource::Sample() {
  FindCgroup();  // the process may have been moved to another group since
  MemorySample s;
  std::optional<std::string> statm = ReadSmallFile(proc_ + "/self/statm");
  std::vector<absl::string_view> fields;
  if (statm) fields = absl::StrSplit(*statm, ' ', absl::SkipEmpty());
  uint64_t resident_pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &resident_pages)) {
    return absl::UnavailableError(
        absl::StrCat("memory pressure: cannot read ", proc_, "/self/statm"));
  }
  s.rss_bytes = resident_pages * static_cast<uint64_t>(page_size_);
  s.cgroup_version = cgroup_version_;
  std::optional<std::string> psi;
  if (cgroup_version_ == 2) {
    s.cgroup_current_bytes = ReadUint(cgroup_dir_ + "/memory.current");
    s.cgroup_inactive_file_bytes = StatField(cgroup_dir_ + "/memory.stat", "inactive_file");
    // "max" (no limit) does not parse as a number: no max. A limit set on an ancestor (a
    // systemd slice's MemoryMax) binds too: the lowest one up to the mount counts.
    for (std::filesystem::path dir = cgroup_dir_;; dir = dir.parent_path()) {
      std::optional<uint64_t> max = ReadUint(dir.string() + "/memory.max");
      if (max && (!s.cgroup_max_bytes || *max < *s.cgroup_max_bytes)) s.cgroup_max_bytes = max;
      if (!std::filesystem::exists(dir.parent_path() / "memory.max") || dir == dir.parent_path()) {
        break;
      }
    }
    psi = ReadSmallFile(cgroup_dir_ + "/memory.pressure");
  } else if (cgroup_version_ == 1) {
    s.cgroup_current_bytes = ReadUint(cgroup_dir_ + "/memory.usage_in_bytes");
    s.cgroup_inactive_file_bytes = StatField(cgroup_dir_ + "/memory.stat", "total_inactive_file");
    std::optional<uint64_t> limit = ReadUint(cgroup_dir_ + "/memory.limit_in_bytes");
    // An ancestor's limit binds too (memory.stat's hierarchical_memory_limit is the lowest).
    const uint64_t hierarchical =
        StatField(cgroup_dir_ + "/memory.stat", "hierarchical_memory_limit");
    if (hierarchical > 0 && (!limit || hierarchical < *limit)) limit = hierarchical;
    if (limit && *limit < kCgroupV1NoLimit) s.cgroup_max_bytes = limit;
  }
  if (!psi) psi = ReadSmallFile(proc_ + "/pressure/memory");
  if (psi) s.psi_some_avg10 = ParsePsiSomeAvg10(*psi);
  return s;
}

void ApplyMemoryPressureDefaults(node::config::MemoryPressureConfig* c) {
  if (c->psi_full_scale_percent() == 0) c->set_psi_full_scale_percent(40);
  if (c->shrink_pools_at() == 0) c->set_shrink_pools_at(0.80);
  if (c->drop_forwarded_at() == 0) c->set_drop_forwarded_at(0.90);
  if (c->refuse_clients_at() == 0) c->set_refuse_clients_at(0.95);
  if (c->min_pool_scale() == 0) c->set_min_pool_scale(0.25);
  if (c->hysteresis() == 0) c->set_hysteresis(0.05);
}

uint64_t CgroupWorkingSet(const MemorySample& s) {
  const uint64_t current = s.cgroup_current_bytes.value_or(0);
  return current - std::min(current, s.cgroup_inactive_file_bytes);
}

double PoolScaleAt(double pressure, double shrink_at, double min_scale) {
  if (pressure <= shrink_at) return 1;
  if (pressure >= 1 || shrink_at >= 1) return min_scale;
  return 1 - (1 - min_scale) * (pressure - shrink_at) / (1 - shrink_at);
}

double MemoryPressure::pressure_scale() const {
  return PoolScaleAt(pressure(), config_.shrink_pools_at(), config_.min_pool_scale());
}

void ReleaseFreeHeap() {
  using Release = void (*)();
  static const Release tcmalloc_release =
      reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  if (tcmalloc_release != nullptr) {
    tcmalloc_release();
  } else {
    malloc_trim(0);
  }
}

MemoryPressure::MemoryPressure(const node::config::MemoryPressureConfig& config,
                               std::unique_ptr<MemorySource> source,
                               std::function<void()> release_heap)
    : config_(config), source_(std::move(source)), release_heap_(std::move(release_heap)) {
  absl::MutexLock lock(&mu_);
  stats_.source = source_->Describe();
}

absl::Status MemoryPressure::Update() {
  absl::StatusOr<MemorySample> sample = source_->Sample();
  bool release = false;
  absl::Status s = UpdateWith(sample, &release);
  // Outside the lock: a heap trim scans the heap, and refused writes read the message under it.
  if (release) release_heap_();
  return s;
}

absl::Status MemoryPressure::UpdateWith(const absl::StatusOr<MemorySample>& sample, bool* release) {
  absl::MutexLock lock(&mu_);
  stats_.source = source_->Describe();  // the process may have moved to another group
  if (!sample.ok()) {
    if (stats_.error != sample.status().message()) {
      LOG(WARNING) << "memory pressure: " << sample.status();
    }
    stats_.error = std::string(sample.status().message());
    return sample.status();
  }
  stats_.error.clear();
  stats_.sample = *sample;
  stats_.sampled = true;
  double pressure = 0;
  std::string by;
  auto consider = [&](double ratio, const char* name) {
    if (ratio > pressure) {
      pressure = ratio;
      by = name;
    }
  };
  if (config_.rss_limit_bytes() > 0) {
    consider(
        static_cast<double>(sample->rss_bytes) / static_cast<double>(config_.rss_limit_bytes()),
        "rss");
  }
  if (sample->cgroup_current_bytes && sample->cgroup_max_bytes && *sample->cgroup_max_bytes > 0) {
    consider(static_cast<double>(CgroupWorkingSet(*sample)) /
                 static_cast<double>(*sample->cgroup_max_bytes),
             "cgroup");
  }
  if (!config_.ignore_psi() && sample->psi_some_avg10) {
    consider(*sample->psi_some_avg10 / config_.psi_full_scale_percent(), "psi");
  }
  if (config_.disabled()) {
    pressure = 0;
    by.clear();
  }
  // A switch turns on at its threshold and off `hysteresis` below it.
  auto next = [&](bool on, double at) {
    return on ? pressure >= at - config_.hysteresis() : pressure >= at;
  };
  const bool drop = next(stats_.drop_forwarded, config_.drop_forwarded_at());
  const bool refuse = next(stats_.refuse_clients, config_.refuse_clients_at());
  const bool no_borrowing = next(stats_.no_cache_borrowing, config_.shrink_pools_at());
  const bool switched = drop != stats_.drop_forwarded || refuse != stats_.refuse_clients;
  stats_.transitions += (drop != stats_.drop_forwarded) + (refuse != stats_.refuse_clients);
  stats_.pressure = pressure;
  stats_.driven_by = by;
  stats_.pool_scale = PoolScaleAt(pressure, config_.shrink_pools_at(), config_.min_pool_scale());
  // Never divide more than a share of a known limit, whatever memory_bytes says.
  uint64_t limit = config_.rss_limit_bytes();
  if (sample->cgroup_max_bytes && *sample->cgroup_max_bytes > 0) {
    limit = limit == 0 ? *sample->cgroup_max_bytes : std::min(limit, *sample->cgroup_max_bytes);
  }
  const uint64_t divided = divided_bytes_.load(std::memory_order_relaxed);
  if (!config_.disabled() && limit > 0 && divided > 0) {
    stats_.pool_scale =
        std::min(stats_.pool_scale,
                 kDividedShareOfLimit * static_cast<double>(limit) / static_cast<double>(divided));
  }
  stats_.drop_forwarded = drop;
  stats_.refuse_clients = refuse;
  stats_.no_cache_borrowing = no_borrowing;
  if (pressure >= config_.shrink_pools_at() && release_heap_ &&
      absl::Now() - last_release_ >= absl::Seconds(1)) {
    last_release_ = absl::Now();
    ++stats_.heap_releases;
    *release = true;
  }
  refusal_message_ = MakeRefusalMessageLocked();
  if (switched) {
    LOG(WARNING) << "memory pressure " << pressure << " (" << by << "): pool scale "
                 << stats_.pool_scale << ", forwarded txs " << (drop ? "dropped" : "accepted")
                 << ", client writes " << (refuse ? "REFUSED" : "accepted");
  }
  pressure_.store(pressure, std::memory_order_relaxed);
  pool_scale_.store(stats_.pool_scale, std::memory_order_relaxed);
  drop_forwarded_.store(drop, std::memory_order_relaxed);
  refuse_clients_.store(refuse, std::memory_order_relaxed);
  no_cache_borrowing_.store(no_borrowing, std::memory_order_relaxed);
  return absl::OkStatus();
}

std::string MemoryPressure::RefusalMessage() const {
  absl::MutexLock lock(&mu_);
  return refusal_message_;
}

std::string MemoryPressure::MakeRefusalMessageLocked() const {
  std::string what;
  const MemorySample& s = stats_.sample;
  if (stats_.driven_by == "cgroup") {
    what = absl::StrCat("cgroup: ", FormatGiB(CgroupWorkingSet(s)), " of ",
                        FormatGiB(s.cgroup_max_bytes.value_or(0)));
  } else if (stats_.driven_by == "rss") {
    what =
        absl::StrCat("rss: ", FormatGiB(s.rss_bytes), " of ", FormatGiB(config_.rss_limit_bytes()));
  } else if (stats_.driven_by == "psi") {
    what = absl::StrFormat("psi: some avg10 %.1f%%", s.psi_some_avg10.value_or(0));
  }
  return absl::StrFormat(
      "node memory pressure %.2f (%s): client writes are refused until it falls below %.2f",
      stats_.pressure, what, config_.refuse_clients_at() - config_.hysteresis());
}

MemoryPressureStats MemoryPressure::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace flowctl
