#include "tools/nodectl_requests.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "flowctl/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace nodectl {
namespace {

constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
// Lane and arbiter weights are relative; anything above this is surely a typo.
constexpr double kMaxWeight = 1e6;

absl::Status Invalid(absl::string_view msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<std::string> RequiredPartition(const ParsedFlags& f) {
  const std::string* p = f.Last("partition");
  if (p == nullptr) return Invalid("--partition: required");
  if (p->empty()) return Invalid("--partition: must not be empty");
  return *p;
}

class CollectFirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty())
      first_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status ParseLaneWeights(const std::string& text, node::config::LaneConfig* lanes) {
  static constexpr absl::string_view kKeys[] = {"consensus", "sync", "tx_forward", "bulk",
                                                "client"};
  ASSIGN_OR_RETURN(auto kv, ParseKeyValues("--lane-weights", text, kKeys));
  for (const auto& [key, value] : kv) {
    ASSIGN_OR_RETURN(double w, ParseDouble(absl::StrCat("--lane-weights ", key), value, 0,
                                           kMaxWeight, /*min_exclusive=*/true));
    if (key == "consensus") lanes->set_consensus(w);
    if (key == "sync") lanes->set_sync(w);
    if (key == "tx_forward") lanes->set_tx_forward(w);
    if (key == "bulk") lanes->set_bulk(w);
    if (key == "client") lanes->set_client(w);
  }
  return absl::OkStatus();
}

// "off", "on" (the node's default targets) or lane=TARGET_MS[/MAX_WEIGHT],... (on, with these
// targets; lanes not named get their defaults).
absl::Status ParseAdaptiveLanes(const std::string& text, node::config::AdaptiveLaneWeights* a) {
  a->set_enabled(text != "off");
  if (text == "on" || text == "off") return absl::OkStatus();
  static constexpr absl::string_view kKeys[] = {"consensus", "sync", "tx_forward", "bulk",
                                                "client"};
  ASSIGN_OR_RETURN(auto kv, ParseKeyValues("--adaptive-lanes", text, kKeys));
  for (const auto& [key, value] : kv) {
    const std::string what = absl::StrCat("--adaptive-lanes ", key);
    const std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('/', 1));
    node::config::LaneDelayTarget t;
    ASSIGN_OR_RETURN(double target, ParseDouble(what, parts[0], 0, 60000));
    t.set_target_p99_ms(target);
    if (parts.size() > 1) {
      ASSIGN_OR_RETURN(double max_weight, ParseDouble(what + " max weight", parts[1], 0, kMaxWeight,
                                                      /*min_exclusive=*/true));
      t.set_max_weight(max_weight);
    }
    if (key == "consensus") *a->mutable_consensus() = t;
    if (key == "sync") *a->mutable_sync() = t;
    if (key == "tx_forward") *a->mutable_tx_forward() = t;
    if (key == "bulk") *a->mutable_bulk() = t;
    if (key == "client") *a->mutable_client() = t;
  }
  return absl::OkStatus();
}

absl::Status ParseBudget(const std::string& text, node::config::DispatcherConfig* d) {
  static constexpr absl::string_view kKeys[] = {"messages", "bytes"};
  ASSIGN_OR_RETURN(auto kv, ParseKeyValues("--budget", text, kKeys));
  if (auto it = kv.find("messages"); it != kv.end()) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--budget messages", it->second, 1, kMaxU32));
    d->set_budget_messages(static_cast<uint32_t>(v));
  }
  if (auto it = kv.find("bytes"); it != kv.end()) {
    ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--budget bytes", it->second, 1, kMaxU64));
    d->set_budget_bytes(v);
  }
  return absl::OkStatus();
}

// --read-hold off | max_wait_ms=N[,max_waiting=N]: the whole ReadHoldConfig (keys left out: 0,
// the node's default).
absl::Status ParseReadHold(const std::string& text, node::config::ReadHoldConfig* hold) {
  hold->Clear();
  if (text == "off") return absl::OkStatus();
  static constexpr absl::string_view kKeys[] = {"max_wait_ms", "max_waiting"};
  ASSIGN_OR_RETURN(auto kv, ParseKeyValues("--read-hold", text, kKeys));
  if (auto it = kv.find("max_wait_ms"); it != kv.end()) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--read-hold max_wait_ms", it->second, 1, 60000));
    hold->set_max_wait_ms(static_cast<uint32_t>(v));
  }
  if (auto it = kv.find("max_waiting"); it != kv.end()) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--read-hold max_waiting", it->second, 0, 1000000));
    hold->set_max_waiting(static_cast<uint32_t>(v));
  }
  if (hold->max_wait_ms() == 0) {
    return Invalid("--read-hold: give max_wait_ms=N (1..60000), or 'off' to refuse at once");
  }
  return absl::OkStatus();
}

absl::Status ParsePool(const std::string& text, node::config::PoolConfig* pool) {
  static constexpr absl::string_view kKeys[] = {"max_txs",
                                                "max_bytes",
                                                "max_per_sender",
                                                "forward_reserve_fraction",
                                                "high_water_fraction",
                                                "ttl_seconds",
                                                "max_tx_bytes"};
  ASSIGN_OR_RETURN(auto kv, ParseKeyValues("--pool", text, kKeys));
  for (const auto& [key, value] : kv) {
    std::string what = absl::StrCat("--pool ", key);
    if (key == "max_bytes") {
      ASSIGN_OR_RETURN(uint64_t v, ParseBytes(what, value, 1, kMaxU64));
      pool->set_max_bytes(v);
    } else if (key == "max_tx_bytes") {
      ASSIGN_OR_RETURN(uint64_t v, ParseBytes(what, value, 1, kMaxU32));
      pool->set_max_tx_bytes(static_cast<uint32_t>(v));
    } else if (key == "forward_reserve_fraction") {
      ASSIGN_OR_RETURN(double v, ParseDouble(what, value, 0, 0.5));
      pool->set_forward_reserve_fraction(v);
    } else if (key == "high_water_fraction") {
      ASSIGN_OR_RETURN(double v, ParseDouble(what, value, 0, 1, /*min_exclusive=*/true));
      pool->set_high_water_fraction(v);
    } else {
      ASSIGN_OR_RETURN(uint64_t v, ParseUint(what, value, 1, kMaxU32));
      uint32_t u = static_cast<uint32_t>(v);
      if (key == "max_txs") pool->set_max_txs(u);
      if (key == "max_per_sender") pool->set_max_per_sender(u);
      if (key == "ttl_seconds") pool->set_ttl_seconds(u);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<node::admin::WatchFlowStatsRequest> BuildWatchRequest(const ParsedFlags& f) {
  node::admin::WatchFlowStatsRequest req;
  if (const std::string* p = f.Last("partition")) req.set_partition(*p);
  if (const std::string* ms = f.Last("interval-ms")) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--interval-ms", *ms, 100, 60000));
    req.set_interval_ms(static_cast<uint32_t>(v));
  }
  return req;
}

namespace {

// The client API names a partition by id or name: a number is taken as the id.
absl::StatusOr<node::client::PartitionRef> PartitionRefFlag(const ParsedFlags& f) {
  ASSIGN_OR_RETURN(std::string p, RequiredPartition(f));
  node::client::PartitionRef ref;
  uint32_t id = 0;
  if (absl::SimpleAtoi(p, &id) && id > 0) {
    ref.set_id(id);
  } else {
    ref.set_name(p);
  }
  return ref;
}

}  // namespace

absl::StatusOr<node::client::WatchCommitsRequest> BuildWatchCommitsRequest(const ParsedFlags& f) {
  node::client::WatchCommitsRequest req;
  ASSIGN_OR_RETURN(*req.mutable_partition(), PartitionRefFlag(f));
  if (const std::string* from = f.Last("from")) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--from", *from, 0, kMaxU64));
    req.set_from_height(v);
  }
  req.set_include_receipts(f.Has("receipts"));
  req.set_include_txs(f.Has("txs"));
  return req;
}

absl::StatusOr<node::client::GetValueRequest> BuildGetValueRequest(const ParsedFlags& f) {
  node::client::GetValueRequest req;
  ASSIGN_OR_RETURN(*req.mutable_partition(), PartitionRefFlag(f));
  const std::string& key = f.positional[0];
  if (key.size() > 256) {
    return Invalid(absl::StrCat("KEY: must be at most 256 bytes, got ", key.size()));
  }
  req.set_key(key);
  if (const std::string* h = f.Last("height")) {
    ASSIGN_OR_RETURN(uint64_t v, ParseUint("--height", *h, 0, kMaxU64));
    req.set_height(v);
  }
  return req;
}

namespace {

// `spec` is the text itself when it holds '{' or ':', else a file to read.
absl::StatusOr<std::string> TextOrFile(absl::string_view what, const std::string& spec,
                                       absl::string_view message_name) {
  if (absl::StrContains(spec, '{') || absl::StrContains(spec, ':')) return spec;
  std::ifstream in(spec);
  if (!in) {
    return Invalid(absl::StrCat(what, ": cannot read file '", spec, "' (give a file, or the ",
                                message_name, " itself)"));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace

absl::StatusOr<node::admin::CreatePartitionRequest> BuildCreatePartitionRequest(
    const ParsedFlags& f) {
  const std::string* spec = f.Last("config");
  if (spec == nullptr) return Invalid("--config: required");
  ASSIGN_OR_RETURN(std::string text, TextOrFile("--config", *spec, "text-format PartitionConfig"));
  node::admin::CreatePartitionRequest req;
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, req.mutable_config())) {
    return Invalid(
        absl::StrCat("--config: ", errors.first().empty() ? "parse error" : errors.first()));
  }
  if (req.config().id() == 0) return Invalid("--config: id: required (>= 1)");
  if (req.config().name().empty()) return Invalid("--config: name: required");
  return req;
}

absl::StatusOr<node::admin::StopPartitionRequest> BuildStopPartitionRequest(const ParsedFlags& f) {
  node::admin::StopPartitionRequest req;
  req.set_partition(f.positional.at(0));
  if (const std::string* d = f.Last("drain-ms")) {
    ASSIGN_OR_RETURN(uint64_t ms, ParseUint("--drain-ms", *d, 1, 60000));
    req.set_drain_ms(static_cast<uint32_t>(ms));
  }
  return req;
}

absl::StatusOr<node::admin::RemovePartitionRequest> BuildRemovePartitionRequest(
    const ParsedFlags& f) {
  node::admin::RemovePartitionRequest req;
  req.set_partition(f.positional.at(0));
  req.set_delete_data(f.Has("delete-data"));
  return req;
}

absl::StatusOr<std::vector<std::string>> AdminList(const ParsedFlags& f) {
  std::vector<std::string> out;
  const std::string* list = f.Last("admins");
  if (list == nullptr) return out;
  for (absl::string_view a : absl::StrSplit(*list, ',')) {
    const std::string address(absl::StripAsciiWhitespace(a));
    if (address.empty()) return Invalid("--admins: an empty address in the list");
    if (std::find(out.begin(), out.end(), address) != out.end()) {
      return Invalid(absl::StrCat("--admins: ", address, " is listed twice"));
    }
    out.push_back(address);
  }
  return out;
}

absl::StatusOr<node::flowctl::StageChainConfig> ParseStageChain(absl::string_view what,
                                                                const std::string& spec) {
  ASSIGN_OR_RETURN(std::string text, TextOrFile(what, spec, "text-format StageChainConfig"));
  node::flowctl::StageChainConfig chain;
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &chain)) {
    return Invalid(
        absl::StrCat(what, ": ", errors.first().empty() ? "parse error" : errors.first()));
  }
  for (int i = 0; i < chain.stages_size(); ++i) {
    if (chain.stages(i).kind_case() == node::flowctl::StageConfig::KIND_NOT_SET) {
      return Invalid(absl::StrCat(what, ": stages[", i,
                                  "]: exactly one kind (concurrency, rate, gate) is required"));
    }
  }
  return chain;
}

absl::StatusOr<node::admin::UpdatePartitionFlowRequest> BuildUpdateFlowRequest(
    const ParsedFlags& f) {
  node::admin::UpdatePartitionFlowRequest req;
  ASSIGN_OR_RETURN(*req.mutable_partition(), RequiredPartition(f));
  if (const std::string* s = f.Last("interceptor")) {
    ASSIGN_OR_RETURN(*req.mutable_interceptor(), ParseStageChain("--interceptor", *s));
  }
  if (const std::string* s = f.Last("read-interceptor")) {
    ASSIGN_OR_RETURN(*req.mutable_read_interceptor(), ParseStageChain("--read-interceptor", *s));
  }
  if (const std::string* s = f.Last("read-hold")) {
    RETURN_IF_ERROR(ParseReadHold(*s, req.mutable_read_hold()));
  }
  if (const std::string* s = f.Last("lane-weights")) {
    RETURN_IF_ERROR(ParseLaneWeights(*s, req.mutable_dispatcher()->mutable_lane_weights()));
  }
  if (const std::string* s = f.Last("budget")) {
    RETURN_IF_ERROR(ParseBudget(*s, req.mutable_dispatcher()));
  }
  if (const std::string* s = f.Last("adaptive-lanes")) {
    RETURN_IF_ERROR(ParseAdaptiveLanes(*s, req.mutable_dispatcher()->mutable_adaptive_weights()));
  }
  if (const std::string* s = f.Last("pool")) {
    RETURN_IF_ERROR(ParsePool(*s, req.mutable_pool()));
  }
  if (const std::string* s = f.Last("drain-rate")) {
    ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--drain-rate", *s, 1, kMaxU64));
    req.mutable_lossless()->set_drain_bytes_per_second(v);
  }
  if (const std::string* s = f.Last("disk-budget")) {
    req.mutable_lossless()->set_set_disk_budget(true);
    if (*s != "none") {
      ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--disk-budget", *s, 1, kMaxU64));
      req.mutable_lossless()->set_disk_budget_bytes(v);
    }
  }
  if (!req.has_interceptor() && !req.has_read_interceptor() && !req.has_read_hold() &&
      !req.has_dispatcher() && !req.has_pool() && !req.has_lossless()) {
    return Invalid(
        "nothing to update: give --interceptor, --read-interceptor, --read-hold, --lane-weights, "
        "--budget, --adaptive-lanes, --pool, --drain-rate or --disk-budget");
  }
  return req;
}

absl::StatusOr<node::admin::UpdateEgressRequest> BuildUpdateEgressRequest(const ParsedFlags& f) {
  node::admin::UpdateEgressRequest req;
  if (const std::string* cap = f.Last("cap")) {
    req.set_set_cap(true);
    if (*cap != "unlimited") {
      // 0 would mean "unlimited" on the wire; refusing it keeps a typo from lifting the cap.
      if (absl::StatusOr<uint64_t> v = ParseBytes("--cap", *cap, 0, kMaxU64); v.ok() && *v == 0) {
        return Invalid("--cap: must be > 0 bytes/s or 'unlimited', got 0");
      }
      ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--cap", *cap, 1, kMaxU64));
      req.set_cap_bytes_per_second(v);
    }
  }
  if (const std::string* floor = f.Last("floor")) {
    ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--floor", *floor, 1, kMaxU64));
    req.set_tx_forward_floor_bytes_per_second(v);
  }
  if (!req.set_cap() && req.tx_forward_floor_bytes_per_second() == 0) {
    return Invalid("nothing to update: give --cap and/or --floor");
  }
  return req;
}

absl::StatusOr<node::admin::UpdateArbiterRequest> BuildUpdateArbiterRequest(const ParsedFlags& f) {
  node::admin::UpdateArbiterRequest req;
  node::admin::UpdateArbiterRequest::Entry* entry = nullptr;
  std::set<std::string> seen_in_entry;
  std::set<std::string> partitions;
  for (const auto& [name, value] : f.flags) {
    if (name == "partition") {
      if (value.empty()) return Invalid("--partition: must not be empty");
      if (!partitions.insert(value).second) {
        return Invalid(absl::StrCat("--partition: '", value, "' given more than once"));
      }
      entry = req.add_entries();
      entry->set_partition(value);
      seen_in_entry.clear();
      continue;
    }
    if (name == "cpu-workers") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint("--cpu-workers", value, 1, 1024));
      req.set_cpu_workers(static_cast<uint32_t>(n));
      continue;
    }
    if (name == "blocks-per-second") {
      ASSIGN_OR_RETURN(uint64_t n, ParseUint("--blocks-per-second", value, 0, 100000));
      req.set_consensus_blocks_per_second(static_cast<uint32_t>(n));
      continue;
    }
    if (name == "ledger-write-buffers") {
      ASSIGN_OR_RETURN(uint64_t v, ParseBytes("--ledger-write-buffers", value, 4 << 20, kMaxU64));
      req.set_ledger_write_buffer_bytes(v);
      continue;
    }
    if (name != "weight" && name != "guarantee" && name != "ceiling" && name != "hard") continue;
    if (entry == nullptr) {
      return Invalid(absl::StrCat("--", name, ": must follow the --partition it applies to"));
    }
    if (!seen_in_entry.insert(name).second) {
      return Invalid(
          absl::StrCat("--", name, ": given twice for partition '", entry->partition(), "'"));
    }
    node::config::ShareConfig* share = entry->mutable_share();
    if (name == "weight") {
      ASSIGN_OR_RETURN(double w, ParseDouble("--weight", value, 0, kMaxWeight, true));
      share->set_weight(w);
    } else if (name == "guarantee") {
      ASSIGN_OR_RETURN(double g, ParseDouble("--guarantee", value, 0, 1));
      share->set_guarantee_fraction(g);
    } else if (name == "hard") {
      share->set_hard_ceiling(true);
    } else {
      ASSIGN_OR_RETURN(double c, ParseDouble("--ceiling", value, 0, 1, true));
      share->set_ceiling_fraction(c);
    }
  }
  if (req.entries_size() == 0 && req.cpu_workers() == 0 && !req.has_consensus_blocks_per_second() &&
      req.ledger_write_buffer_bytes() == 0) {
    return Invalid(
        "--partition: required (or --cpu-workers, --blocks-per-second or --ledger-write-buffers "
        "alone)");
  }
  for (const auto& e : req.entries()) {
    if (e.share().weight() == 0) {
      return Invalid(absl::StrCat("--weight: required for partition '", e.partition(), "'"));
    }
    const auto& s = e.share();
    if (s.hard_ceiling() && !(s.ceiling_fraction() > 0 && s.ceiling_fraction() < 1)) {
      return Invalid(
          absl::StrCat("--hard: needs a --ceiling below 1 for partition '", e.partition(), "'"));
    }
    if (s.ceiling_fraction() > 0 && s.guarantee_fraction() > s.ceiling_fraction()) {
      return Invalid(absl::StrCat("--guarantee: must be <= --ceiling (", s.ceiling_fraction(),
                                  ") for partition '", e.partition(), "', got ",
                                  s.guarantee_fraction()));
    }
  }
  return req;
}

}  // namespace nodectl
