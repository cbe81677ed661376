#include "runtime/config.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flowctl/memory_pressure.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/stubs/common.h"  // IsStructurallyValidUTF8
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/config_validation.h"
#include "runtime/tls.h"

namespace runtime {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::TextFormat;
using node::config::NodeConfig;
using node::config::PartitionConfig;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// Collects text-format syntax errors as "source:line:column: message".
class CollectErrors : public ::google::protobuf::io::ErrorCollector {
 public:
  explicit CollectErrors(absl::string_view source) : source_(source) {}
  void AddError(int line, ::google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, ::google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

// Appends problems found by the node-level checks below (the per-message ones are in
// runtime/config_validation.h).
class Checker {
 public:
  explicit Checker(std::vector<ConfigProblem>* out) : out_(out) {}
  void Fail(std::string path, std::string message) {
    out_->push_back({std::move(path), std::move(message)});
  }
  void Append(std::vector<ConfigProblem> more) {
    for (ConfigProblem& p : more) out_->push_back(std::move(p));
  }

 private:
  std::vector<ConfigProblem>* out_;
};

bool IsHexKey(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

void CheckAddress(Checker& check, const std::string& path, const std::string& address,
                  bool may_be_empty) {
  if (address.empty() && may_be_empty) return;
  std::string host;
  int port = 0;
  if (!ParseHostPort(address, &host, &port)) {
    check.Fail(path, absl::StrCat("must be host:port with port 0-65535, got \"", address, "\""));
  }
}

void DefaultPartition(PartitionConfig* p) {
  auto& share = *p->mutable_share();
  if (share.weight() == 0) share.set_weight(1);
  if (share.ceiling_fraction() == 0) share.set_ceiling_fraction(1);

  auto& stages = *p->mutable_interceptor()->mutable_stages();
  if (stages.empty()) {
    auto* c = stages.Add();
    c->set_name("in_flight");
    c->mutable_concurrency()->set_max_in_flight(1024);
    auto* health = stages.Add();
    health->set_name("health");
    health->mutable_gate()->set_predicate("consensus_normal");
    auto* pool = stages.Add();
    pool->set_name("pool");
    pool->mutable_gate()->set_predicate("pool_below_high_water");
    auto* rate = stages.Add();
    rate->set_name("rate");
    rate->mutable_rate()->set_unlimited(true);
  }
  auto& reads = *p->mutable_read_interceptor()->mutable_stages();
  if (reads.empty()) {
    auto* c = reads.Add();
    c->set_name("read_in_flight");
    c->mutable_concurrency()->set_max_in_flight(256);
    auto* rate = reads.Add();
    rate->set_name("read_rate");
    rate->mutable_rate()->set_unlimited(true);
  }

  auto& d = *p->mutable_dispatcher();
  if (d.budget_messages() == 0) d.set_budget_messages(65536);
  if (d.budget_bytes() == 0) d.set_budget_bytes(64 * kMiB);
  auto& w = *d.mutable_lane_weights();
  if (w.consensus() == 0) w.set_consensus(8);
  if (w.sync() == 0) w.set_sync(4);
  if (w.tx_forward() == 0) w.set_tx_forward(2);
  if (w.bulk() == 0) w.set_bulk(1);
  if (w.client() == 0) w.set_client(4);
  ApplyAdaptiveLaneDefaults(d.mutable_adaptive_weights());

  auto& pool = *p->mutable_pool();
  if (pool.max_txs() == 0) pool.set_max_txs(100000);
  if (pool.max_bytes() == 0) pool.set_max_bytes(128 * kMiB);
  if (pool.max_per_sender() == 0) pool.set_max_per_sender(1000);
  if (pool.forward_reserve_fraction() == 0) pool.set_forward_reserve_fraction(0.1);
  if (pool.high_water_fraction() == 0) pool.set_high_water_fraction(0.9);
  if (pool.ttl_seconds() == 0) pool.set_ttl_seconds(600);
  if (pool.max_tx_bytes() == 0) pool.set_max_tx_bytes(64 * kKiB);
  if (!pool.has_retry_reserve_fraction()) {
    pool.set_retry_reserve_fraction(kDefaultRetryReserveFraction);
  }

  auto& st = *p->mutable_state();
  if (st.cache_bytes() == 0) st.set_cache_bytes(64 * kMiB);
  if (st.block_cache_bytes() == 0) st.set_block_cache_bytes(32 * kMiB);

  auto& c = *p->mutable_consensus();
  if (c.batch_max_txs() == 0) c.set_batch_max_txs(500);
  if (c.batch_max_bytes() == 0) c.set_batch_max_bytes(1 * kMiB);
  if (c.batch_timeout_ms() == 0) c.set_batch_timeout_ms(50);
  if (c.checkpoint_interval() == 0) c.set_checkpoint_interval(16);
  if (c.snapshot_sync_min_blocks() == 0) c.set_snapshot_sync_min_blocks(1000);
  if (c.snapshot_serve_bytes_per_second() == 0) {
    c.set_snapshot_serve_bytes_per_second(uint64_t{64} << 20);
  }
  if (c.watermark_window() == 0) c.set_watermark_window(4 * c.checkpoint_interval());
  if (c.view_change_timeout_ms() == 0) c.set_view_change_timeout_ms(2000);
  if (!c.has_forward_interval_ms()) c.set_forward_interval_ms(20);
  if (!c.has_slow_round_log_ms()) c.set_slow_round_log_ms(1000);

  auto& l = *p->mutable_lossless();
  if (l.memory_bytes() == 0) l.set_memory_bytes(16 * kMiB);
  if (l.segment_bytes() == 0) l.set_segment_bytes(64 * kMiB);
  if (l.durability() == node::config::LosslessConfig::DURABILITY_UNSPECIFIED) {
    l.set_durability(node::config::LosslessConfig::INTERVAL);
  }
  if (l.sync_interval_ms() == 0) l.set_sync_interval_ms(10);

  auto& watch = *p->mutable_watch();
  if (watch.max_watchers() == 0) watch.set_max_watchers(64);
  if (watch.max_buffered_blocks() == 0) watch.set_max_buffered_blocks(1024);
  if (watch.max_buffered_bytes() == 0) watch.set_max_buffered_bytes(16 * kMiB);
}

// The index within repeated message field `field` of `message` named by `key`: a number, or the
// value of the element's `name` field ("partitions[hot]"). -1 when there is none.
int IndexOf(const Message& message, const FieldDescriptor* field, absl::string_view key) {
  int index = -1;
  if (absl::SimpleAtoi(key, &index)) return index;
  if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return -1;
  const ::google::protobuf::Reflection* refl = message.GetReflection();
  for (int i = 0; i < refl->FieldSize(message, field); ++i) {
    const Message& element = refl->GetRepeatedMessage(message, field, i);
    const FieldDescriptor* name = element.GetDescriptor()->FindFieldByName("name");
    if (name != nullptr && name->type() == FieldDescriptor::TYPE_STRING && !name->is_repeated() &&
        element.GetReflection()->GetString(element, name) == key) {
      return i;
    }
  }
  return -1;
}

// Walks a path such as "partitions[1].pool.max_txs" or "partitions[hot].pool.max_txs" through
// the parse tree of `message`; the line of the deepest part that was written in the text.
int LineInTree(const Message* message, const TextFormat::ParseInfoTree* tree,
               absl::string_view path) {
  int line = 0;
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size() && tree != nullptr && message != nullptr; ++i) {
    absl::string_view part = parts[i];
    int index = -1;
    absl::string_view key;
    const size_t bracket = part.find('[');
    if (bracket != absl::string_view::npos) {
      if (part.back() != ']') return line;
      key = part.substr(bracket + 1, part.size() - bracket - 2);
      part = part.substr(0, bracket);
    }
    const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(std::string(part));
    if (field == nullptr) return line;
    if (field->is_repeated()) {
      index = key.empty() ? 0 : IndexOf(*message, field, key);
      if (index < 0) return line;
    }
    const auto loc = tree->GetLocation(field, index);
    if (loc.line < 0) return line;
    line = loc.line + 1;
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return line;
    const ::google::protobuf::Reflection* refl = message->GetReflection();
    if (field->is_repeated() && index >= refl->FieldSize(*message, field)) return line;
    message = field->is_repeated() ? &refl->GetRepeatedMessage(*message, field, index)
                                   : &refl->GetMessage(*message, field);
    tree = tree->GetTreeForNested(field, index);
  }
  return line;
}

}  // namespace

// "host:port" with port in [0, 65535] (0 = pick a free port); "[::1]:port" for IPv6.
bool ParseHostPort(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  *host = std::string(address.substr(0, colon));
  return absl::SimpleAtoi(address.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
}

void ApplyDefaults(NodeConfig* config) {
  if (config->data_dir().empty()) config->set_data_dir("./data");
  if (config->key_file().empty()) config->set_key_file(config->data_dir() + "/node.key");
  if (config->p2p_listen().empty()) config->set_p2p_listen("127.0.0.1:26656");
  if (config->client_listen().empty()) config->set_client_listen("127.0.0.1:50051");
  if (config->admin_listen().empty()) config->set_admin_listen("127.0.0.1:50052");
  auto& r = *config->mutable_resources();
  if (r.cpu_workers() == 0) {
    r.set_cpu_workers(std::max(1u, std::thread::hardware_concurrency()));
  }
  if (r.memory_bytes() == 0) r.set_memory_bytes(1 * kGiB);
  if (r.tx_forward_floor_bytes_per_second() == 0) {
    r.set_tx_forward_floor_bytes_per_second(64 * kKiB);
  }
  if (r.arbiter_tick_ms() == 0) r.set_arbiter_tick_ms(100);
  if (!r.has_consensus_blocks_per_second()) {
    r.set_consensus_blocks_per_second(kDefaultConsensusBlocksPerSecond);
  }
  if (r.ledger_write_buffer_bytes() == 0) {
    r.set_ledger_write_buffer_bytes(kDefaultLedgerWriteBufferBytes);
  }
  auto& bba = *r.mutable_block_budget_adaptation();
  if (!bba.has_enabled()) bba.set_enabled(true);
  if (bba.min_blocks_per_second() == 0) bba.set_min_blocks_per_second(16);
  if (bba.queueing_delay_target_ms() == 0) bba.set_queueing_delay_target_ms(5);
  flowctl::ApplyMemoryPressureDefaults(r.mutable_memory_pressure());
  auto& na = *r.mutable_node_admission();
  // On unless the arbiter only advises (admission weighs CPU against the entitlements it applies).
  if (!na.has_enabled()) na.set_enabled(!r.arbiter_advisory());
  if (na.consensus_delay_target_ms() == 0) na.set_consensus_delay_target_ms(50);
  if (na.cpu_busy_fraction() == 0) na.set_cpu_busy_fraction(0.9);
  if (na.min_admit_fraction() == 0) na.set_min_admit_fraction(0.05);
  if (na.exit_ticks() == 0) na.set_exit_ticks(5);
  if (!na.has_measured_shares()) na.set_measured_shares(true);
  if (!na.has_exit_calm_ms()) na.set_exit_calm_ms(3000);
  // Agreement sends the cuts on the tick and lets them lapse 2 s after the last: a slower tick
  // turns it off unless the config asks for it (and then validation refuses the pair).
  if (!na.has_agree_with_peers()) na.set_agree_with_peers(r.arbiter_tick_ms() <= 500);
  if (!na.has_cpu_pressure_percent()) na.set_cpu_pressure_percent(10);
  if (!na.has_measured_share_slack()) na.set_measured_share_slack(2);
  if (config->partitions().empty()) {
    auto* hot = config->add_partitions();
    hot->set_id(1);
    hot->set_name("hot");
    auto* steady = config->add_partitions();
    steady->set_id(2);
    steady->set_name("steady");
  }
  for (auto& p : *config->mutable_partitions()) DefaultPartition(&p);
}

NodeConfig DefaultNodeConfig() {
  NodeConfig config;
  config.set_metrics_listen("127.0.0.1:9464");
  ApplyDefaults(&config);
  return config;
}

namespace {

// Proto3 `string` fields must hold UTF-8. The binary and JSON forms refuse
// anything else, but text format does not check, so a config with, say, a stage name that is not
// UTF-8 loaded and then could not round-trip through JSON or the admin API. Found by config_fuzz.
void CheckUtf8(Checker& check, const ::google::protobuf::Message& m, const std::string& at) {
  const ::google::protobuf::Reflection* refl = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string path = at.empty() ? f->name() : absl::StrCat(at, ".", f->name());
    const int n = f->is_repeated() ? refl->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string p = f->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& s = f->is_repeated()
                                   ? refl->GetRepeatedStringReference(m, f, i, &scratch)
                                   : refl->GetStringReference(m, f, &scratch);
        if (!::google::protobuf::internal::IsStructurallyValidUTF8(s)) {
          check.Fail(p, "must be valid UTF-8");
        }
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        CheckUtf8(check,
                  f->is_repeated() ? refl->GetRepeatedMessage(m, f, i) : refl->GetMessage(m, f), p);
      }
    }
  }
}

}  // namespace

std::vector<ConfigProblem> ValidateNodeConfig(const NodeConfig& config) {
  std::vector<ConfigProblem> problems;
  Checker check(&problems);
  CheckUtf8(check, config, "");
  CheckAddress(check, "p2p_listen", config.p2p_listen(), false);
  CheckAddress(check, "client_listen", config.client_listen(), false);
  CheckAddress(check, "admin_listen", config.admin_listen(), false);
  CheckAddress(check, "metrics_listen", config.metrics_listen(), true);
  if (config.client_max_streams() > 1'000'000) {
    check.Fail("client_max_streams",
               absl::StrCat("must be <= 1000000, got ", config.client_max_streams()));
  }
  if (config.admin_listen() == config.client_listen() &&
      !absl::EndsWith(config.admin_listen(), ":0")) {
    check.Fail("admin_listen",
               "must differ from client_listen: the client port never serves "
               "admin methods");
  }

  absl::flat_hash_set<std::string> peer_keys;
  for (int i = 0; i < config.peers_size(); ++i) {
    const std::string at = absl::StrCat("peers[", i, "]");
    CheckAddress(check, at + ".address", config.peers(i).address(), false);
    const std::string key = absl::AsciiStrToLower(config.peers(i).public_key_hex());
    if (!IsHexKey(key)) {
      check.Fail(at + ".public_key_hex", "must be 64 hex characters (an Ed25519 public key)");
    } else if (!peer_keys.insert(key).second) {
      check.Fail(at + ".public_key_hex", "repeats an earlier peer's key");
    }
  }

  check.Append(ValidateResourceConfig(config.resources(), "resources"));

  if (config.partitions().empty()) check.Fail("partitions", "at least one partition is required");
  // A partition is named by its name where that name is valid, unique and not a number (which
  // would read as a position), else by its position.
  absl::flat_hash_map<std::string, int> name_count;
  for (const PartitionConfig& p : config.partitions()) ++name_count[p.name()];
  absl::flat_hash_set<uint32_t> ids;
  absl::flat_hash_set<std::string> names;
  std::vector<node::config::ShareConfig> shares;
  for (int i = 0; i < config.partitions_size(); ++i) {
    const PartitionConfig& p = config.partitions(i);
    uint64_t number = 0;
    const bool by_name = IsValidPartitionName(p.name()) && name_count[p.name()] == 1 &&
                         !absl::SimpleAtoi(p.name(), &number);
    const std::string at = by_name ? PartitionPath(p.name()) : absl::StrCat("partitions[", i, "]");
    check.Append(ValidatePartitionConfig(p, at));
    if (p.id() != 0 && !ids.insert(p.id()).second) {
      check.Fail(at + ".id", absl::StrCat("repeats partition id ", p.id()));
    }
    if (!p.name().empty() && !names.insert(p.name()).second) {
      check.Fail(at + ".name", absl::StrCat("repeats partition name \"", p.name(), "\""));
    }
    shares.push_back(p.share());
  }
  check.Append(ValidateGuaranteeSum(shares));
  check.Append(ValidateSpillDisk(config));
  // TLS: reads the PEM files, so a missing or wrong file fails --check and startup.
  for (ConfigProblem& p : ValidateTlsConfig(config.tls())) problems.push_back(std::move(p));
  return problems;
}

int LineOfField(absl::string_view text, absl::string_view path) {
  NodeConfig scratch;
  TextFormat::Parser parser;
  TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  CollectErrors ignored("");
  parser.RecordErrorsTo(&ignored);
  if (!parser.ParseFromString(std::string(text), &scratch)) return 0;
  return LineInTree(&scratch, &tree, path);
}

absl::StatusOr<NodeConfig> ParseConfig(absl::string_view text, absl::string_view source_name,
                                       bool json) {
  NodeConfig config;
  if (json) {
    ::google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    const auto status = ::google::protobuf::util::JsonStringToMessage(
        ::google::protobuf::StringPiece(text.data(), text.size()), &config, options);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": invalid JSON config: ", status.message().as_string()));
    }
  } else {
    TextFormat::Parser parser;
    CollectErrors errors(source_name);
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(std::string(text), &config)) {
      return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "\n"));
    }
  }
  ApplyDefaults(&config);
  const std::vector<ConfigProblem> problems = ValidateNodeConfig(config);
  if (problems.empty()) return config;
  std::vector<std::string> lines;
  for (const ConfigProblem& p : problems) {
    const int line = json ? 0 : LineOfField(text, p.path);
    lines.push_back(line > 0 ? absl::StrCat(source_name, ":", line, ": ", p.path, ": ", p.message)
                             : absl::StrCat(source_name, ": ", p.path, ": ", p.message));
  }
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

absl::StatusOr<NodeConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("config file ", path, ": cannot be read"));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseConfig(buf.str(), path, absl::EndsWith(path, ".json"));
}

}  // namespace runtime
