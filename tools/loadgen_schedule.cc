#include "tools/loadgen_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "flowctl/status_macros.h"

namespace loadgen {
namespace {

// floor() of a cumulative count, tolerant of the rounding in rate * time (100 * 0.29 is
// 28.999999999999996): an offer due "exactly now" counts as due.
uint64_t WholeOffers(double cumulative) {
  if (cumulative <= 0) return 0;
  return static_cast<uint64_t>(std::floor(cumulative + 1e-6));
}

absl::Status Bad(absl::string_view what, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
}

}  // namespace

const char* PatternName(PatternKind kind) {
  switch (kind) {
    case PatternKind::kConstant:
      return "constant";
    case PatternKind::kStep:
      return "step";
    case PatternKind::kRamp:
      return "ramp";
    case PatternKind::kBurst:
      return "burst";
  }
  return "?";
}

double Schedule::Cumulative(double t_s) const {
  const PartitionLoad& l = load_;
  const double a = l.start_s;
  const double b = l.stop_s;
  if (b <= a) return 0;
  const double t = std::clamp(t_s, a, b);
  const double u = t - a;  // active time so far
  switch (l.kind) {
    case PatternKind::kConstant:
      return l.rate * u;
    case PatternKind::kStep: {
      const double before = std::max(0.0, std::min(t, l.at_s) - a);
      const double after = std::max(0.0, t - std::max(a, l.at_s));
      return l.rate * before + l.rate2 * after;
    }
    case PatternKind::kRamp: {
      const double len = b - a;
      return l.rate * u + (l.rate2 - l.rate) * u * u / (2 * len);
    }
    case PatternKind::kBurst: {
      if (l.peak <= 0 || l.rate <= 0) return 0;
      const double on = l.period_s * l.rate / l.peak;
      const double periods = std::floor(u / l.period_s);
      const double rem = u - periods * l.period_s;
      return periods * l.rate * l.period_s + l.peak * std::min(rem, on);
    }
  }
  return 0;
}

uint64_t Schedule::OffersBefore(double t_s) const { return WholeOffers(Cumulative(t_s)); }

uint64_t Schedule::OffersBetween(double t0_s, double t1_s) const {
  if (t1_s <= t0_s) return 0;
  return OffersBefore(t1_s) - OffersBefore(t0_s);
}

double ReadsBefore(const PartitionLoad& load, double t_s) {
  if (load.reads <= 0 || load.reads_stop_s <= load.reads_start_s) return 0;
  return load.reads * (std::clamp(t_s, load.reads_start_s, load.reads_stop_s) - load.reads_start_s);
}

double Schedule::MaxRate() const {
  switch (load_.kind) {
    case PatternKind::kConstant:
      return load_.rate;
    case PatternKind::kStep:
    case PatternKind::kRamp:
      return std::max(load_.rate, load_.rate2);
    case PatternKind::kBurst:
      return load_.peak;
  }
  return 0;
}

absl::StatusOr<double> ParseSeconds(absl::string_view what, absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  double v = 0;
  if (absl::SimpleAtod(t, &v)) {
    if (!std::isfinite(v) || v < 0) return Bad(what, absl::StrCat("must be >= 0, got ", t));
    return v;
  }
  absl::Duration d;
  if (!absl::ParseDuration(t, &d) || d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return Bad(what, absl::StrCat("not a duration '", text, "' (e.g. 60s, 500ms, 2m)"));
  }
  return absl::ToDoubleSeconds(d);
}

absl::StatusOr<double> ParseRate(absl::string_view what, absl::string_view text,
                                 uint64_t tx_bytes) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t n = 0;
  while (n < t.size() && (absl::ascii_isdigit(static_cast<unsigned char>(t[n])) || t[n] == '.')) {
    ++n;
  }
  double v = 0;
  if (n == 0 || !absl::SimpleAtod(t.substr(0, n), &v) || !std::isfinite(v)) {
    return Bad(what, absl::StrCat("not a rate '", text, "' (e.g. 2000, 2000/s, 5MB/s)"));
  }
  absl::string_view unit = t.substr(n);
  static const std::map<std::string, double, std::less<>> kByteUnits = {
      {"B/s", 1},        {"KB/s", 1e3},        {"MB/s", 1e6},          {"GB/s", 1e9},
      {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0}};
  if (unit.empty() || unit == "/s" || unit == "tx/s") return v;
  auto it = kByteUnits.find(unit);
  if (it == kByteUnits.end()) {
    return Bad(what, absl::StrCat("unknown rate unit '", unit, "' in '", text,
                                  "' (use /s, tx/s, B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s)"));
  }
  if (tx_bytes == 0) return Bad(what, "a byte rate needs a tx size > 0");
  return v * it->second / static_cast<double>(tx_bytes);
}

absl::StatusOr<std::vector<PartitionLoad>> ParseScenario(absl::string_view text, uint64_t tx_bytes,
                                                         double duration_s) {
  std::vector<PartitionLoad> out;
  std::set<std::string> names;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    size_t colon = part.find(':');
    PartitionLoad l;
    l.name = std::string(absl::StripAsciiWhitespace(part.substr(0, colon)));
    if (l.name.empty()) {
      return Bad("--scenario",
                 absl::StrCat("missing partition name in '", part, "' (expected name:rate=...)"));
    }
    const std::string where = absl::StrCat("--scenario ", l.name);
    if (!names.insert(l.name).second) return Bad(where, "partition given more than once");
    std::map<std::string, std::string> kv;
    if (colon != absl::string_view::npos) {
      for (absl::string_view item :
           absl::StrSplit(part.substr(colon + 1), ',', absl::SkipWhitespace())) {
        std::pair<std::string, std::string> p = absl::StrSplit(item, absl::MaxSplits('=', 1));
        std::string key(absl::StripAsciiWhitespace(p.first));
        static const std::set<std::string> kKeys = {
            "pattern", "rate",     "rate2", "peak",  "period",      "at",         "start",
            "stop",    "tx_bytes", "keys",  "reads", "reads_start", "reads_stop", "read_rpc"};
        if (kKeys.count(key) == 0) {
          return Bad(where, absl::StrCat("unknown key '", key,
                                         "' (pattern, rate, rate2, peak, period, at, start, "
                                         "stop, tx_bytes, keys, reads, reads_start, "
                                         "reads_stop, read_rpc)"));
        }
        if (!kv.emplace(key, std::string(absl::StripAsciiWhitespace(p.second))).second) {
          return Bad(where, absl::StrCat(key, ": given more than once"));
        }
      }
    }
    l.tx_bytes = tx_bytes;
    if (auto it = kv.find("tx_bytes"); it != kv.end()) {
      if (!absl::SimpleAtoi(it->second, &l.tx_bytes) || l.tx_bytes < 64 || l.tx_bytes > 65536) {
        return Bad(where, absl::StrCat("tx_bytes: must be an integer in [64, 65536], got '",
                                       it->second, "'"));
      }
    }
    if (auto it = kv.find("keys"); it != kv.end()) {
      if (it->second == "per_sender") {
        l.key_per_sender = true;
      } else if (it->second != "unique") {
        return Bad(where,
                   absl::StrCat("keys: must be 'unique' or 'per_sender', got '", it->second, "'"));
      }
    }
    auto rate = [&](const char* key, double* dst) -> absl::Status {
      auto it = kv.find(key);
      if (it == kv.end()) return absl::OkStatus();
      ASSIGN_OR_RETURN(*dst, ParseRate(absl::StrCat(where, ": ", key), it->second, l.tx_bytes));
      return absl::OkStatus();
    };
    auto seconds = [&](const char* key, double* dst) -> absl::Status {
      auto it = kv.find(key);
      if (it == kv.end()) return absl::OkStatus();
      ASSIGN_OR_RETURN(*dst, ParseSeconds(absl::StrCat(where, ": ", key), it->second));
      return absl::OkStatus();
    };
    std::string pattern = kv.count("pattern") ? kv["pattern"] : "constant";
    if (pattern == "constant") {
      l.kind = PatternKind::kConstant;
    } else if (pattern == "step") {
      l.kind = PatternKind::kStep;
    } else if (pattern == "ramp") {
      l.kind = PatternKind::kRamp;
    } else if (pattern == "burst") {
      l.kind = PatternKind::kBurst;
    } else {
      return Bad(where,
                 absl::StrCat("pattern: unknown '", pattern, "' (constant, step, ramp, burst)"));
    }
    if (kv.count("rate") == 0) return Bad(where, "rate: required");
    RETURN_IF_ERROR(rate("rate", &l.rate));
    RETURN_IF_ERROR(rate("rate2", &l.rate2));
    RETURN_IF_ERROR(rate("peak", &l.peak));
    RETURN_IF_ERROR(seconds("period", &l.period_s));
    RETURN_IF_ERROR(seconds("at", &l.at_s));
    RETURN_IF_ERROR(seconds("start", &l.start_s));
    l.stop_s = duration_s;
    RETURN_IF_ERROR(seconds("stop", &l.stop_s));
    if (l.stop_s > duration_s) l.stop_s = duration_s;
    if (l.start_s > l.stop_s) {
      return Bad(where, absl::StrCat("start (", l.start_s, "s) is after stop (", l.stop_s, "s)"));
    }
    if (auto it = kv.find("reads"); it != kv.end()) {
      if (!absl::SimpleAtod(it->second, &l.reads) || !std::isfinite(l.reads) || l.reads < 0) {
        return Bad(where,
                   absl::StrCat("reads: must be a number of reads/s >= 0, got '", it->second, "'"));
      }
    }
    l.reads_stop_s = duration_s;
    RETURN_IF_ERROR(seconds("reads_start", &l.reads_start_s));
    RETURN_IF_ERROR(seconds("reads_stop", &l.reads_stop_s));
    if (l.reads_stop_s > duration_s) l.reads_stop_s = duration_s;
    if ((kv.count("reads_start") || kv.count("reads_stop") || kv.count("read_rpc")) &&
        kv.count("reads") == 0) {
      return Bad(where, "reads_start/reads_stop/read_rpc: give reads too");
    }
    if (auto it = kv.find("read_rpc"); it != kv.end()) {
      if (it->second == "block") {
        l.read_blocks = true;
      } else if (it->second != "account") {
        return Bad(where,
                   absl::StrCat("read_rpc: must be 'account' or 'block', got '", it->second, "'"));
      }
    }
    if (l.reads_start_s > l.reads_stop_s) {
      return Bad(where, absl::StrCat("reads_start (", l.reads_start_s, "s) is after reads_stop (",
                                     l.reads_stop_s, "s)"));
    }
    auto only_for = [&](const char* key, bool allowed, const char* patterns) -> absl::Status {
      if (kv.count(key) && !allowed) {
        return Bad(where, absl::StrCat(key, ": only for pattern=", patterns));
      }
      return absl::OkStatus();
    };
    const bool step = l.kind == PatternKind::kStep, ramp = l.kind == PatternKind::kRamp,
               burst = l.kind == PatternKind::kBurst;
    RETURN_IF_ERROR(only_for("rate2", step || ramp, "step|ramp"));
    RETURN_IF_ERROR(only_for("at", step, "step"));
    RETURN_IF_ERROR(only_for("peak", burst, "burst"));
    RETURN_IF_ERROR(only_for("period", burst, "burst"));
    if ((step || ramp) && kv.count("rate2") == 0) return Bad(where, "rate2: required");
    if (step && kv.count("at") == 0) return Bad(where, "at: required");
    if (burst) {
      if (kv.count("peak") == 0) return Bad(where, "peak: required");
      if (l.period_s <= 0) return Bad(where, "period: must be > 0");
      if (l.peak < l.rate) {
        return Bad(where, absl::StrCat("peak (", l.peak, " tx/s) must be >= rate (", l.rate,
                                       " tx/s, the average)"));
      }
    }
    out.push_back(std::move(l));
  }
  if (out.empty()) return Bad("--scenario", "no partition given (e.g. hot:rate=1000)");
  return out;
}

}  // namespace loadgen
