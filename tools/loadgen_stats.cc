#include "tools/loadgen_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loadgen {

const char* ReasonName(int reason) {
  static constexpr const char* kNames[kNumReasons] = {"rate",        "pool",    "in_flight",
                                                      "unavailable", "invalid", "other"};
  return reason >= 0 && reason < kNumReasons ? kNames[reason] : "other";
}

Reason ClassifyRejection(int code, absl::string_view message, absl::string_view rejected_by) {
  // grpc::StatusCode values.
  constexpr int kCodeInvalidArgument = 3, kCodeResourceExhausted = 8, kCodeFailedPrecondition = 9,
                kCodeUnavailable = 14, kCodeOutOfRange = 11, kCodeUnauthenticated = 16;
  if (code == kCodeUnavailable) return kUnavailable;
  // The stage name first (exact), then words of the message: "rejected by rate: ...",
  // "pool full", "sender quota", "too many requests in flight (concurrency)".
  const std::string text = absl::AsciiStrToLower(absl::StrCat(rejected_by, " ", message));
  if (absl::StrContains(text, "concurren") || absl::StrContains(text, "in flight") ||
      absl::StrContains(text, "in-flight") || absl::StrContains(text, "in_flight")) {
    return kInFlight;
  }
  if (absl::StrContains(text, "pool") || absl::StrContains(text, "quota")) return kPool;
  if (absl::StrContains(text, "rate")) return kRate;
  if (absl::StrContains(text, "not normal") || absl::StrContains(text, "view change") ||
      absl::StrContains(text, "paused") || absl::StrContains(text, "recovering")) {
    return kUnavailable;
  }
  if (code == kCodeInvalidArgument || code == kCodeOutOfRange || code == kCodeUnauthenticated ||
      (code == kCodeFailedPrecondition && !absl::StrContains(text, "nonce gap"))) {
    return kInvalid;
  }
  if (code == kCodeResourceExhausted) return kRate;  // an unnamed limit; rate is the common one
  return kOther;
}

bool ShouldReoffer(int code, absl::string_view message) {
  switch (code) {
    case 1:   // CANCELLED
    case 2:   // UNKNOWN
    case 4:   // DEADLINE_EXCEEDED (it may have been admitted: a re-send answers "duplicate")
    case 8:   // RESOURCE_EXHAUSTED
    case 10:  // ABORTED
    case 13:  // INTERNAL
    case 14:  // UNAVAILABLE
      return true;
    case 9:  // FAILED_PRECONDITION: only a nonce gap heals (once the lower nonces land)
      return absl::StrContains(message, "nonce gap");
    default:
      return false;
  }
}

double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  size_t index = rank == 0 ? 0 : rank - 1;
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

uint64_t SecondStats::rejected_total() const {
  uint64_t n = 0;
  for (uint64_t r : rejected) n += r;
  return n;
}

HintCounts& HintCounts::operator+=(const HintCounts& other) {
  hinted_rejections += other.hinted_rejections;
  hint_ms_sum += other.hint_ms_sum;
  reoffers_after_hint += other.reoffers_after_hint;
  accepted_after_hint += other.accepted_after_hint;
  reoffers_before_hint += other.reoffers_before_hint;
  accepted_before_hint += other.accepted_before_hint;
  return *this;
}

bool HintCounts::empty() const {
  return hinted_rejections == 0 && hint_ms_sum == 0 && reoffers_after_hint == 0 &&
         accepted_after_hint == 0 && reoffers_before_hint == 0 && accepted_before_hint == 0;
}

double HintCounts::mean_hint_ms() const {
  return hinted_rejections > 0
             ? static_cast<double>(hint_ms_sum) / static_cast<double>(hinted_rejections)
             : 0;
}

std::optional<double> HintCounts::accuracy() const {
  if (reoffers_after_hint == 0) return std::nullopt;
  return static_cast<double>(accepted_after_hint) / static_cast<double>(reoffers_after_hint);
}

SecondStats& PartitionStats::At(int second) {
  if (second < 0) second = 0;
  if (static_cast<size_t>(second) >= seconds_.size()) seconds_.resize(second + 1);
  return seconds_[second];
}

void PartitionStats::AddOffered(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).offered += n;
}
void PartitionStats::AddAccepted(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).accepted += n;
}
void PartitionStats::AddRejected(int second, Reason reason, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).rejected[reason] += n;
}
void PartitionStats::AddClientDropped(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).client_dropped += n;
}
void PartitionStats::AddHeld(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).held += n;
}
void PartitionStats::AddHints(int second, const HintCounts& counts) {
  absl::MutexLock l(&mu_);
  At(second).hints += counts;
}
void PartitionStats::AddReadsOffered(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).reads.offered += n;
}
void PartitionStats::AddReadsDropped(int second, uint64_t n) {
  absl::MutexLock l(&mu_);
  At(second).reads.client_dropped += n;
}
void PartitionStats::AddRead(int second, ReadOutcome outcome, double latency_ms) {
  absl::MutexLock l(&mu_);
  ReadCounts& r = At(second).reads;
  switch (outcome) {
    case ReadOutcome::kOk:
      ++r.ok;
      r.latencies_ms.push_back(latency_ms);
      break;
    case ReadOutcome::kRejected:
      ++r.rejected;
      break;
    case ReadOutcome::kFailed:
      ++r.failed;
      break;
  }
}
void PartitionStats::AddCommit(int second, double latency_ms) {
  absl::MutexLock l(&mu_);
  SecondStats& s = At(second);
  ++s.committed;
  s.latencies_ms.push_back(latency_ms);
}

void PartitionStats::NoteExample(Reason reason, absl::string_view message) {
  absl::MutexLock l(&mu_);
  if (examples_[reason].empty()) examples_[reason] = std::string(message.substr(0, 200));
}

std::array<std::string, kNumReasons> PartitionStats::Examples() const {
  absl::MutexLock l(&mu_);
  return examples_;
}

std::vector<SecondStats> PartitionStats::Snapshot() const {
  absl::MutexLock l(&mu_);
  return seconds_;
}

SecondStats PartitionStats::Second(int second) const {
  absl::MutexLock l(&mu_);
  if (second < 0 || static_cast<size_t>(second) >= seconds_.size()) return {};
  return seconds_[second];
}

Totals Summarize(const std::vector<SecondStats>& series, Window window) {
  Totals t;
  t.seconds = std::max(0, window.to_s - window.from_s);
  std::vector<double> lat;
  std::vector<double> read_lat;
  for (int s = std::max(0, window.from_s);
       s < window.to_s && static_cast<size_t>(s) < series.size(); ++s) {
    const SecondStats& x = series[s];
    t.offered += x.offered;
    t.accepted += x.accepted;
    for (int r = 0; r < kNumReasons; ++r) t.rejected[r] += x.rejected[r];
    t.client_dropped += x.client_dropped;
    t.held += x.held;
    t.committed += x.committed;
    t.hints += x.hints;
    lat.insert(lat.end(), x.latencies_ms.begin(), x.latencies_ms.end());
    t.reads_offered += x.reads.offered;
    t.reads_ok += x.reads.ok;
    t.reads_rejected += x.reads.rejected;
    t.reads_failed += x.reads.failed;
    t.reads_client_dropped += x.reads.client_dropped;
    read_lat.insert(read_lat.end(), x.reads.latencies_ms.begin(), x.reads.latencies_ms.end());
  }
  if (!read_lat.empty()) {
    t.read_p50_ms = Percentile(read_lat, 0.50);
    t.read_p99_ms = Percentile(read_lat, 0.99);
  }
  for (uint64_t r : t.rejected) t.rejected_total += r;
  if (!lat.empty()) {
    t.max_ms = *std::max_element(lat.begin(), lat.end());
    t.p50_ms = Percentile(lat, 0.50);
    t.p99_ms = Percentile(lat, 0.99);
  }
  return t;
}

}  // namespace loadgen
