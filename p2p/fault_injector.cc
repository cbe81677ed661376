#include "p2p/fault_injector.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "glog/logging.h"

namespace p2p {
namespace {

constexpr int64_t kNanosPerMilli = 1'000'000;
constexpr int64_t kMaxDelayMs = 60'000;
// How often the release thread logs what it has done (the run's evidence in the node log).
constexpr int64_t kReportNanos = 10 * flowctl::kNanosPerSecond;

// FNV-1a: a peer's RNG seed must not depend on the standard library's std::hash.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string StatsLine(const FaultStats& s, uint64_t errors) {
  return absl::StrCat("passed ", s.passed, ", dropped ", s.dropped, ", delayed ", s.delayed,
                      ", released ", s.released, ", held ", s.held, ", release errors ", errors);
}

}  // namespace

absl::Status ValidateFaultOptions(const FaultOptions& o) {
  if (o.delay_ms < 0 || o.delay_ms > kMaxDelayMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault delay_ms: must be in [0, ", kMaxDelayMs, "], got ", o.delay_ms));
  }
  if (o.jitter_ms < 0 || o.jitter_ms > kMaxDelayMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault jitter_ms: must be in [0, ", kMaxDelayMs, "], got ", o.jitter_ms));
  }
  if (!(o.loss >= 0 && o.loss <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("fault loss: must be in [0, 1], got ", o.loss));
  }
  for (const std::string& p : o.peers) {
    if (p.empty()) return absl::InvalidArgumentError("fault peers: empty peer id");
  }
  for (Channel c : o.channels) {
    if (!IsValidChannel(c)) {
      return absl::InvalidArgumentError(absl::StrCat("fault channels: invalid channel ", c));
    }
  }
  return absl::OkStatus();
}

std::string DescribeFaultOptions(const FaultOptions& o) {
  std::vector<std::string> channels;
  for (Channel c : o.channels) channels.push_back(ChannelName(c));
  return absl::StrFormat("delay %dms + jitter 0..%dms, loss %.4g%%, seed %d, peers %s, channels %s",
                         o.delay_ms, o.jitter_ms, 100 * o.loss, o.seed,
                         o.peers.empty() ? "all" : absl::StrJoin(o.peers, ","),
                         channels.empty() ? "all" : absl::StrJoin(channels, ","));
}

absl::StatusOr<std::vector<Channel>> ParseFaultChannels(const std::string& names) {
  std::vector<Channel> out;
  for (absl::string_view piece : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    const absl::string_view name = absl::StripAsciiWhitespace(piece);
    Channel c;
    if (!node::p2p::Channel_Parse(std::string(name), &c) || !IsValidChannel(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown channel '", name, "' (want CONSENSUS, SYNC, TX_FORWARD or BULK)"));
    }
    out.push_back(c);
  }
  return out;
}

FaultInjector::FaultInjector(FaultOptions options, Deliver deliver, const flowctl::Clock* clock)
    : options_(std::move(options)), deliver_(std::move(deliver)), clock_(clock) {
  CHECK(ValidateFaultOptions(options_).ok()) << ValidateFaultOptions(options_);
}

FaultInjector::~FaultInjector() { Stop(); }

void FaultInjector::Start() {
  CHECK(!releaser_.joinable()) << "FaultInjector started twice";
  releaser_ = std::thread([this] { ReleaseLoop(); });
}

void FaultInjector::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    stats_.held = 0;
    held_.clear();
  }
  if (releaser_.joinable()) releaser_.join();
  absl::MutexLock l(&mu_);
  LOG(WARNING) << "p2p FAULT INJECTION stopped: " << StatsLine(stats_, release_errors_);
}

bool FaultInjector::Affects(const NodeId& peer, Channel channel) const {
  if (!options_.channels.empty() && std::find(options_.channels.begin(), options_.channels.end(),
                                              channel) == options_.channels.end()) {
    return false;
  }
  if (options_.peers.empty()) return true;
  for (const std::string& p : options_.peers) {
    if (absl::StartsWith(peer, p)) return true;
  }
  return false;
}

FaultInjector::PeerState& FaultInjector::StateFor(const NodeId& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    it = peers_.emplace(peer, PeerState{std::mt19937_64(options_.seed ^ Fnv1a(peer)), 0}).first;
  }
  return it->second;
}

absl::Status FaultInjector::Submit(const NodeId& peer, PartitionId partition, Channel channel,
                                   std::shared_ptr<const std::string> payload) {
  if (Affects(peer, channel)) {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::OkStatus();  // the node is stopping: lost like the rest
    PeerState& ps = StateFor(peer);
    // Two draws per message whatever the settings, so a peer's loss verdicts are the same
    // sequence with or without delay.
    const uint64_t r_loss = ps.rng();
    const uint64_t r_jitter = ps.rng();
    if (options_.loss > 0 && static_cast<double>(r_loss >> 11) * 0x1.0p-53 < options_.loss) {
      ++stats_.dropped;
      return absl::OkStatus();
    }
    if (options_.delay_ms > 0 || options_.jitter_ms > 0) {
      const uint64_t jitter_span = static_cast<uint64_t>(options_.jitter_ms * kNanosPerMilli) + 1;
      const int64_t delay =
          options_.delay_ms * kNanosPerMilli +
          static_cast<int64_t>(options_.jitter_ms > 0 ? r_jitter % jitter_span : 0);
      const int64_t due = std::max(clock_->NowNanos() + delay, ps.last_due);
      ps.last_due = due;
      const std::pair<int64_t, uint64_t> key{due, next_seq_++};
      if (held_.empty() || key < held_.begin()->first) ++wake_;
      held_.emplace(key, Held{peer, partition, channel, std::move(payload)});
      ++stats_.delayed;
      stats_.held = held_.size();
      return absl::OkStatus();
    }
    ++stats_.passed;
  } else {
    absl::MutexLock l(&mu_);
    ++stats_.passed;
  }
  return deliver_(peer, partition, channel, std::move(payload));
}

size_t FaultInjector::ReleaseDue() {
  absl::MutexLock rl(&release_mu_);
  std::vector<Held> due;
  {
    absl::MutexLock l(&mu_);
    const int64_t now = clock_->NowNanos();
    while (!held_.empty() && held_.begin()->first.first <= now) {
      due.push_back(std::move(held_.begin()->second));
      held_.erase(held_.begin());
    }
    stats_.released += due.size();
    stats_.held = held_.size();
  }
  uint64_t errors = 0;
  for (Held& h : due) {
    if (!deliver_(h.peer, h.partition, h.channel, std::move(h.payload)).ok()) ++errors;
  }
  if (errors > 0) {
    absl::MutexLock l(&mu_);
    release_errors_ += errors;
  }
  return due.size();
}

int64_t FaultInjector::NextDueNanos() const {
  absl::MutexLock l(&mu_);
  return held_.empty() ? -1 : held_.begin()->first.first;
}

FaultStats FaultInjector::Stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

void FaultInjector::ReleaseLoop() {
  int64_t next_report = clock_->NowNanos() + kReportNanos;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      const int64_t now = clock_->NowNanos();
      if (now >= next_report) {
        LOG(WARNING) << "p2p FAULT INJECTION active: " << StatsLine(stats_, release_errors_);
        next_report = now + kReportNanos;
      }
      int64_t until = next_report;
      if (!held_.empty()) until = std::min(until, held_.begin()->first.first);
      if (until > now) {
        const uint64_t seen = wake_;
        auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || wake_ != seen;
        };
        // The clock is the real one here (Start is for real runs), so its nanos are real time.
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Nanoseconds(until - now));
        if (stopping_) return;
      }
    }
    ReleaseDue();
  }
}

}  // namespace p2p
