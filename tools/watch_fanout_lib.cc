#include "tools/watch_fanout_lib.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_callback.h"
#include "proto/client.grpc.pb.h"
#include "tools/channel_credentials.h"

namespace watch_fanout {
namespace {

using node::client::ClientService;
using node::client::WatchCommitsRequest;
using node::client::WatchCommitsResponse;

constexpr int kMaxStreams = 100'000;
constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
constexpr absl::Duration kDoneGrace = absl::Seconds(10);

absl::Status ParseInt(absl::string_view flag, const std::string& value, int lo, int hi, int* out) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected an integer in ", lo, "..", hi, ", got '", value, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

// Where every stream reports each block it receives. Thread-safe.
class ArrivalRecorder {
 public:
  void Record(uint64_t height, int64_t header_timestamp_ms, int64_t now_us) {
    if (header_timestamp_ms == 0) {
      no_timestamp_.fetch_add(1, std::memory_order_relaxed);
    } else {
      lag_.Record(now_us - header_timestamp_ms * 1000);
    }
    int64_t first_us = now_us;
    {
      absl::MutexLock l(&mu_);
      auto [it, inserted] = first_arrival_us_.emplace(height, now_us);
      // Another thread may have stamped this height later than us yet inserted it first.
      if (!inserted) first_us = it->second = std::min(it->second, now_us);
      // Bounded: forget the oldest heights. A stream more than kHeightsKept blocks behind the
      // others (the node cuts far sooner by default) would see its spread counted as 0.
      while (first_arrival_us_.size() > kHeightsKept)
        first_arrival_us_.erase(first_arrival_us_.begin());
    }
    spread_.Record(now_us - first_us);
  }

  DelayHistogram::Summary Lag() const { return lag_.Summarize(); }
  DelayHistogram::Summary Spread() const { return spread_.Summarize(); }
  uint64_t BlocksWithoutTimestamp() const { return no_timestamp_.load(); }

 private:
  static constexpr size_t kHeightsKept = 65'536;

  DelayHistogram lag_;
  DelayHistogram spread_;
  std::atomic<uint64_t> no_timestamp_{0};
  absl::Mutex mu_;
  std::map<uint64_t, int64_t> first_arrival_us_ ABSL_GUARDED_BY(mu_);
};

// Counts the streams whose OnDone has run, so the main thread can wait for "all done" (or a
// deadline) without polling. Its mutex also orders each stream's writes before the main thread's
// reads of them. Thread-safe.
class DoneTracker {
 public:
  explicit DoneTracker(int total) : total_(total) {}

  void MarkDone() {
    absl::MutexLock l(&mu_);
    ++done_;
  }

  // Returns true once every stream is done, false if `deadline` passes first.
  bool AwaitAllDone(absl::Time deadline) {
    absl::MutexLock l(&mu_);
    return mu_.AwaitWithDeadline(absl::Condition(this, &DoneTracker::AllDone), deadline);
  }

 private:
  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= total_; }

  const int total_;
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

// One WatchCommits stream. Its reactions run on gRPC's threads, one at a time; the results are
// read by the main thread only after DoneTracker reports the stream done.
class Watch final : public grpc::ClientReadReactor<WatchCommitsResponse> {
 public:
  Watch(ArrivalRecorder* arrivals, DoneTracker* done, const std::atomic<bool>* cancelling)
      : arrivals_(arrivals), done_(done), cancelling_(cancelling) {}

  void Start(ClientService::Stub* stub, const WatchCommitsRequest& request) {
    request_ = request;
    stub->async()->WatchCommits(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  // Thread-safe; harmless once the stream has ended.
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    const int64_t now_us = absl::ToUnixMicros(absl::Now());
    ++responses_;
    bytes_ += response_.ByteSizeLong();
    if (first_height_ == 0) first_height_ = response_.height();
    last_height_ = response_.height();
    arrivals_->Record(response_.height(), response_.block().header().timestamp_ms(), now_us);
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    status_ = status;
    // Our own cancel at the end of the run ends every stream still open with CANCELLED; any
    // other end (or a CANCELLED before we cancelled) is an early end.
    ended_early_ = !(cancelling_->load() && status.error_code() == grpc::StatusCode::CANCELLED);
    const auto& trailers = context_.GetServerTrailingMetadata();
    if (auto it = trailers.find("resume-height"); it != trailers.end()) {
      uint64_t h = 0;
      if (absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &h)) {
        resume_height_ = h;
      }
    }
    done_->MarkDone();  // last: the main thread may read this object from here on
  }

  uint64_t responses() const { return responses_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t first_height() const { return first_height_; }
  uint64_t last_height() const { return last_height_; }
  const grpc::Status& status() const { return status_; }
  bool ended_early() const { return ended_early_; }
  const std::optional<uint64_t>& resume_height() const { return resume_height_; }

 private:
  ArrivalRecorder* const arrivals_;
  DoneTracker* const done_;
  const std::atomic<bool>* const cancelling_;

  grpc::ClientContext context_;
  WatchCommitsRequest request_;
  WatchCommitsResponse response_;

  uint64_t responses_ = 0;
  uint64_t bytes_ = 0;
  uint64_t first_height_ = 0;  // 0 = none (height 0, genesis, is never streamed)
  uint64_t last_height_ = 0;
  grpc::Status status_;
  bool ended_early_ = false;
  std::optional<uint64_t> resume_height_;
};

Report Summarize(const std::vector<std::unique_ptr<Watch>>& watches,
                 const ArrivalRecorder& arrivals) {
  Report r;
  r.streams = static_cast<int>(watches.size());
  r.responses_min = watches.empty() ? 0 : watches.front()->responses();
  for (const auto& w : watches) {
    if (w->responses() > 0) ++r.opened_ok;
    r.responses_total += w->responses();
    r.responses_min = std::min(r.responses_min, w->responses());
    r.responses_max = std::max(r.responses_max, w->responses());
    r.bytes_total += w->bytes();
    if (w->first_height() != 0) {
      r.first_height =
          r.first_height == 0 ? w->first_height() : std::min(r.first_height, w->first_height());
    }
    r.last_height = std::max(r.last_height, w->last_height());
    if (!w->ended_early()) {
      ++r.alive_at_end;
      continue;
    }
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(w->status().error_code()));
    EarlyEnd& e = r.ended_early[code];
    if (e.count++ == 0) e.first_message = w->status().error_message();
    if (w->responses() > 0) ++e.after_responses;
    if (w->resume_height()) ++e.with_resume_height;
  }
  r.lag = arrivals.Lag();
  r.spread = arrivals.Spread();
  r.blocks_without_timestamp = arrivals.BlocksWithoutTimestamp();
  return r;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

const char kUsage[] =
    "usage: watch_fanout --target HOST:PORT --partition NAME --duration-s S [flags]\n"
    "  --target HOST:PORT         the node's client API (required)\n"
    "  --partition NAME           partition to watch (required)\n"
    "  --duration-s S             seconds to keep the streams open, > 0 (required)\n"
    "  --streams N                WatchCommits streams to open, 1..100000 (default 64)\n"
    "  --streams-per-channel N    streams per channel/TCP connection, 1..100000 (default 100)\n"
    "  --include-txs              ask for the serialized transactions (default false)\n"
    "  --include-receipts         ask for the receipts (default false)\n"
    "  --json                     print one JSON object instead of text\n"
    "  --tls-ca FILE              dial with TLS, trusting the CA certificates in FILE\n";

absl::StatusOr<Options> ParseFlags(const std::vector<std::string>& args) {
  Options o;
  bool have_duration = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    bool* boolean = name == "--include-txs"        ? &o.include_txs
                    : name == "--include-receipts" ? &o.include_receipts
                    : name == "--json"             ? &o.json
                                                   : nullptr;
    if (boolean != nullptr) {
      if (!value) {
        *boolean = true;
      } else if (!absl::SimpleAtob(*value, boolean)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": expected true or false, got '", *value, "'"));
      }
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(name + ": missing value");
      value = args[++i];
    }
    absl::Status s = absl::OkStatus();
    if (name == "--target") {
      o.target = *value;
    } else if (name == "--partition") {
      o.partition = *value;
    } else if (name == "--tls-ca") {
      o.tls_ca = *value;
    } else if (name == "--streams") {
      s = ParseInt(name, *value, 1, kMaxStreams, &o.streams);
    } else if (name == "--streams-per-channel") {
      s = ParseInt(name, *value, 1, kMaxStreams, &o.streams_per_channel);
    } else if (name == "--duration-s") {
      if (!absl::SimpleAtod(*value, &o.duration_s) || !std::isfinite(o.duration_s) ||
          o.duration_s <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": expected a number of seconds > 0, got '", *value, "'"));
      }
      have_duration = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
    }
    if (!s.ok()) return s;
  }
  if (o.target.empty()) return absl::InvalidArgumentError("--target: required (HOST:PORT)");
  if (o.partition.empty()) return absl::InvalidArgumentError("--partition: required");
  if (!have_duration) return absl::InvalidArgumentError("--duration-s: required");
  return o;
}

std::string FormatJson(const Options& o, const Report& r) {
  const uint64_t blocks = r.last_height == 0 ? 0 : r.last_height - r.first_height + 1;
  auto ms = [](const DelayHistogram::Summary& d, double v) {
    return d.samples == 0 ? std::string("null") : absl::StrFormat("%.1f", v);
  };
  std::string ended, detail;
  for (const auto& [code, e] : r.ended_early) {
    const char* sep = ended.empty() ? "" : ", ";
    absl::StrAppend(&ended, sep, JsonString(code), ": ", e.count);
    absl::StrAppend(&detail, sep, JsonString(code), ": {\"after_responses\": ", e.after_responses,
                    ", \"with_resume_height\": ", e.with_resume_height,
                    ", \"first_message\": ", JsonString(e.first_message), "}");
  }
  return absl::StrCat(
      "{\"target\": ", JsonString(o.target), ", \"partition\": ", JsonString(o.partition),
      ", \"streams\": ", r.streams, ", \"channels\": ", r.channels,
      ", \"include_txs\": ", o.include_txs ? "true" : "false",
      ", \"include_receipts\": ", o.include_receipts ? "true" : "false",
      ", \"opened_ok\": ", r.opened_ok, ", \"alive_at_end\": ", r.alive_at_end,
      ", \"responses_total\": ", r.responses_total,
      ", \"responses_per_stream_min\": ", r.responses_min,
      ", \"responses_per_stream_max\": ", r.responses_max, ", \"bytes_total\": ", r.bytes_total,
      ", \"blocks_seen\": ", blocks, ", \"first_height\": ", r.first_height,
      ", \"last_height\": ", r.last_height, ", \"spread_samples\": ", r.spread.samples,
      ", \"spread_ms_p50\": ", ms(r.spread, r.spread.p50_ms),
      ", \"spread_ms_p99\": ", ms(r.spread, r.spread.p99_ms),
      ", \"spread_ms_max\": ", ms(r.spread, r.spread.max_ms), ", \"lag_samples\": ", r.lag.samples,
      ", \"lag_ms_p50\": ", ms(r.lag, r.lag.p50_ms), ", \"lag_ms_p99\": ", ms(r.lag, r.lag.p99_ms),
      ", \"lag_ms_max\": ", ms(r.lag, r.lag.max_ms), ", \"lag_negative\": ", r.lag.negative,
      ", \"blocks_without_timestamp\": ", r.blocks_without_timestamp, ", \"ended_early\": {", ended,
      "}, \"ended_early_detail\": {", detail, "}",
      absl::StrFormat(", \"duration_s\": %.3f}", r.duration_s));
}

std::string FormatText(const Report& r) {
  const uint64_t blocks = r.last_height == 0 ? 0 : r.last_height - r.first_height + 1;
  std::string out = absl::StrFormat(
      "streams              %d on %d channel(s); %d got a block, %d open at the end\n"
      "responses            %d total, per stream min %d max %d; %d bytes total\n"
      "blocks seen          %d (heights %d..%d)\n",
      r.streams, r.channels, r.opened_ok, r.alive_at_end, r.responses_total, r.responses_min,
      r.responses_max, r.bytes_total, blocks, r.first_height, r.last_height);
  auto delays = [&](absl::string_view label, const DelayHistogram::Summary& d) {
    if (d.samples == 0) {
      absl::StrAppendFormat(&out, "%-20s -\n", label);
    } else {
      absl::StrAppendFormat(&out, "%-20s p50 %.1f p99 %.1f max %.1f (%d samples)\n", label,
                            d.p50_ms, d.p99_ms, d.max_ms, d.samples);
    }
  };
  delays("spread ms", r.spread);
  delays("lag ms", r.lag);
  if (r.blocks_without_timestamp > 0) {
    absl::StrAppendFormat(&out, "%-20s %d responses (header timestamp_ms = 0)\n", "no lag for",
                          r.blocks_without_timestamp);
  }
  if (r.ended_early.empty()) absl::StrAppend(&out, "ended early          none\n");
  for (const auto& [code, e] : r.ended_early) {
    absl::StrAppendFormat(&out,
                          "ended early          %s %d (%d after blocks, %d with resume-height; "
                          "first: \"%s\")\n",
                          code, e.count, e.after_responses, e.with_resume_height, e.first_message);
  }
  absl::StrAppendFormat(&out, "duration_s           %.3f\n", r.duration_s);
  return out;
}

absl::StatusOr<Report> Run(const Options& o) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      tools::ClientCredentials("--tls-ca", o.tls_ca);
  if (!creds.ok()) return creds.status();
  const int channel_count = (o.streams + o.streams_per_channel - 1) / o.streams_per_channel;
  std::vector<std::unique_ptr<ClientService::Stub>> stubs;
  const absl::Time connect_deadline = absl::Now() + kConnectTimeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < channel_count; ++i) {
    grpc::ChannelArguments args;
    // A local pool per channel: otherwise equal channels share one subchannel, one connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // Large blocks must not fail here with RESOURCE_EXHAUSTED, the code of the node's own cuts.
    args.SetMaxReceiveMessageSize(-1);
    channels.push_back(grpc::CreateCustomChannel(o.target, *creds, args));
    channels.back()->GetState(/*try_to_connect=*/true);
  }
  for (int i = 0; i < channel_count; ++i) {
    if (!channels[i]->WaitForConnected(absl::ToChronoTime(connect_deadline))) {
      return absl::UnavailableError(absl::StrCat("--target ", o.target, ": channel ", i,
                                                 " not connected within ",
                                                 absl::FormatDuration(kConnectTimeout)));
    }
    stubs.push_back(ClientService::NewStub(channels[i]));
  }

  WatchCommitsRequest request;
  request.mutable_partition()->set_name(o.partition);
  request.set_from_height(0);
  request.set_include_receipts(o.include_receipts);
  request.set_include_txs(o.include_txs);

  // What the streams share, on the heap: left behind with them if they do not finish.
  struct Shared {
    explicit Shared(int streams) : done(streams) {}
    ArrivalRecorder arrivals;
    DoneTracker done;
    std::atomic<bool> cancelling{false};
  };
  auto shared = std::make_unique<Shared>(o.streams);
  std::vector<std::unique_ptr<Watch>> watches;
  watches.reserve(o.streams);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < o.streams; ++i) {
    watches.push_back(
        std::make_unique<Watch>(&shared->arrivals, &shared->done, &shared->cancelling));
    watches.back()->Start(stubs[i / o.streams_per_channel].get(), request);
  }
  // The run: until the duration is over, or sooner if every stream has already ended.
  shared->done.AwaitAllDone(t0 + absl::Seconds(o.duration_s));
  const absl::Time t_end = absl::Now();
  shared->cancelling = true;
  for (auto& w : watches) w->Cancel();
  if (!shared->done.AwaitAllDone(absl::Now() + kDoneGrace)) {
    // Reactions may still run on gRPC's threads and touch the streams and what they share:
    // leave all of it (the caller is expected to exit).
    for (auto& w : watches) static_cast<void>(w.release());
    static_cast<void>(shared.release());
    return absl::DeadlineExceededError(absl::StrCat(
        "streams still not done ", absl::FormatDuration(kDoneGrace), " after cancelling them"));
  }

  Report report = Summarize(watches, shared->arrivals);
  report.channels = channel_count;
  report.duration_s = absl::ToDoubleSeconds(t_end - t0);
  return report;
}

}  // namespace watch_fanout
