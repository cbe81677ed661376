#include "runtime/config.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flowctl/adaptive_config.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/stubs/common.h"  // IsStructurallyValidUTF8 (fuzz, issue 9)
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/tls.h"

namespace runtime {
namespace {

using node::config::NodeConfig;
using node::config::PartitionConfig;
using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::TextFormat;

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

// Appends problems for one config; `At` builds the path of a field under a prefix.
class Checker {
 public:
  explicit Checker(std::vector<ConfigProblem>* out) : out_(out) {}
  void Fail(std::string path, std::string message) {
    out_->push_back({std::move(path), std::move(message)});
  }
  template <typename T>
  void AtLeast(const std::string& path, T value, T min) {
    if (value < min) Fail(path, absl::StrCat("must be >= ", min, ", got ", value));
  }
  void InRange(const std::string& path, double value, double lo, double hi) {
    if (!(value >= lo && value <= hi)) {
      Fail(path, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
    }
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

// "host:port" with port in [0, 65535] (0 = pick a free port); "[::1]:port" for IPv6.
bool ParseHostPort(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  *host = std::string(address.substr(0, colon));
  return absl::SimpleAtoi(address.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
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

  auto& d = *p->mutable_dispatcher();
  if (d.budget_messages() == 0) d.set_budget_messages(65536);
  if (d.budget_bytes() == 0) d.set_budget_bytes(64 * kMiB);
  auto& w = *d.mutable_lane_weights();
  if (w.consensus() == 0) w.set_consensus(8);
  if (w.sync() == 0) w.set_sync(4);
  if (w.tx_forward() == 0) w.set_tx_forward(2);
  if (w.bulk() == 0) w.set_bulk(1);
  if (w.client() == 0) w.set_client(4);

  auto& pool = *p->mutable_pool();
  if (pool.max_txs() == 0) pool.set_max_txs(100000);
  if (pool.max_bytes() == 0) pool.set_max_bytes(128 * kMiB);
  if (pool.max_per_sender() == 0) pool.set_max_per_sender(1000);
  if (pool.forward_reserve_fraction() == 0) pool.set_forward_reserve_fraction(0.1);
  if (pool.high_water_fraction() == 0) pool.set_high_water_fraction(0.9);
  if (pool.ttl_seconds() == 0) pool.set_ttl_seconds(600);
  if (pool.max_tx_bytes() == 0) pool.set_max_tx_bytes(64 * kKiB);

  auto& c = *p->mutable_consensus();
  if (c.batch_max_txs() == 0) c.set_batch_max_txs(500);
  if (c.batch_max_bytes() == 0) c.set_batch_max_bytes(1 * kMiB);
  if (c.batch_timeout_ms() == 0) c.set_batch_timeout_ms(50);
  if (c.checkpoint_interval() == 0) c.set_checkpoint_interval(16);
  if (c.watermark_window() == 0) c.set_watermark_window(4 * c.checkpoint_interval());
  if (c.view_change_timeout_ms() == 0) c.set_view_change_timeout_ms(2000);

  auto& l = *p->mutable_lossless();
  if (l.memory_bytes() == 0) l.set_memory_bytes(16 * kMiB);
  if (l.segment_bytes() == 0) l.set_segment_bytes(64 * kMiB);
  if (l.durability() == node::config::LosslessConfig::DURABILITY_UNSPECIFIED) {
    l.set_durability(node::config::LosslessConfig::INTERVAL);
  }
  if (l.sync_interval_ms() == 0) l.set_sync_interval_ms(10);
}

void CheckPartition(Checker& check, const std::string& at, const PartitionConfig& p) {
  check.AtLeast<uint32_t>(at + ".id", p.id(), 1);
  if (p.name().empty()) {
    check.Fail(at + ".name", "is required");
  } else {
    for (char c : p.name()) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
        check.Fail(at + ".name", absl::StrCat("may hold only letters, digits, '_' and '-', got \"",
                                              p.name(), "\""));
        break;
      }
    }
  }
  const auto& s = p.share();
  if (!(s.weight() > 0)) check.Fail(at + ".share.weight", absl::StrCat("must be > 0, got ", s.weight()));
  check.InRange(at + ".share.guarantee_fraction", s.guarantee_fraction(), 0, 1);
  check.InRange(at + ".share.ceiling_fraction", s.ceiling_fraction(), 0, 1);
  if (s.ceiling_fraction() < s.guarantee_fraction()) {
    check.Fail(at + ".share.ceiling_fraction",
               absl::StrCat("must be >= guarantee_fraction (", s.guarantee_fraction(), "), got ",
                            s.ceiling_fraction()));
  }

  for (int i = 0; i < p.interceptor().stages_size(); ++i) {
    const node::flowctl::StageConfig& stage = p.interceptor().stages(i);
    const std::string stage_at = absl::StrCat(at, ".interceptor.stages[", i, "]");
    if (stage.kind_case() == node::flowctl::StageConfig::KIND_NOT_SET) {
      check.Fail(stage_at, "names no stage kind (concurrency, rate, gate or adaptive)");
    } else if (stage.kind_case() == node::flowctl::StageConfig::kAdaptive) {
      // Checked here too (not only when the partition opens) so the error names the line.
      // The message is "<path>: <problem>"; the path locates the line.
      absl::Status s = flowctl::AdaptiveOptionsFromConfig(stage.adaptive(), stage_at).status();
      if (!s.ok()) {
        const std::vector<absl::string_view> parts =
            absl::StrSplit(s.message(), absl::MaxSplits(": ", 1));
        check.Fail(std::string(parts[0]), parts.size() > 1 ? std::string(parts[1]) : "invalid");
      }
    }
  }

  const auto& w = p.dispatcher().lane_weights();
  for (auto [name, value] : {std::pair{"consensus", w.consensus()}, {"sync", w.sync()},
                             {"tx_forward", w.tx_forward()}, {"bulk", w.bulk()},
                             {"client", w.client()}}) {
    if (!(value > 0)) {
      check.Fail(absl::StrCat(at, ".dispatcher.lane_weights.", name),
                 absl::StrCat("must be > 0, got ", value));
    }
  }

  const auto& pool = p.pool();
  check.InRange(at + ".pool.forward_reserve_fraction", pool.forward_reserve_fraction(), 0, 0.5);
  check.InRange(at + ".pool.high_water_fraction", pool.high_water_fraction(), 0.01, 1);
  check.AtLeast<uint32_t>(at + ".pool.max_tx_bytes", pool.max_tx_bytes(), 128);
  check.AtLeast<uint64_t>(at + ".pool.max_bytes", pool.max_bytes(), pool.max_tx_bytes());
  if (pool.max_per_sender() > pool.max_txs()) {
    check.Fail(at + ".pool.max_per_sender",
               absl::StrCat("must be <= max_txs (", pool.max_txs(), "), got ",
                            pool.max_per_sender()));
  }

  const auto& c = p.consensus();
  check.AtLeast<uint32_t>(at + ".consensus.batch_max_bytes", c.batch_max_bytes(),
                          pool.max_tx_bytes());
  if (c.watermark_window() % c.checkpoint_interval() != 0 ||
      c.watermark_window() < 2 * c.checkpoint_interval()) {
    check.Fail(at + ".consensus.watermark_window",
               absl::StrCat("must be a multiple of checkpoint_interval (", c.checkpoint_interval(),
                            ") and at least twice it, got ", c.watermark_window()));
  }
  check.AtLeast<uint32_t>(at + ".consensus.view_change_timeout_ms", c.view_change_timeout_ms(),
                          100);

  const auto& l = p.lossless();
  if (l.enabled()) {
    check.AtLeast<uint64_t>(at + ".lossless.drain_bytes_per_second", l.drain_bytes_per_second(),
                            1);
    check.AtLeast<uint64_t>(at + ".lossless.segment_bytes", l.segment_bytes(), 64 * kKiB);
    if (l.sync_interval_ms() > 10'000) {
      check.Fail(at + ".lossless.sync_interval_ms",
                 absl::StrCat("must be <= 10000, got ", l.sync_interval_ms()));
    }
  }

  absl::flat_hash_set<std::string> keys;
  for (int i = 0; i < p.genesis_size(); ++i) {
    const std::string path = absl::StrCat(at, ".genesis[", i, "].public_key_hex");
    const std::string key = absl::AsciiStrToLower(p.genesis(i).public_key_hex());
    if (!IsHexKey(key)) {
      check.Fail(path, "must be 64 hex characters (an Ed25519 public key)");
    } else if (!keys.insert(key).second) {
      check.Fail(path, "repeats an earlier genesis account");
    }
  }
}

// Walks a path such as "partitions[1].pool.max_txs" through the parse tree.
int LineInTree(const Descriptor* type, const TextFormat::ParseInfoTree* tree,
               absl::string_view path) {
  int line = 0;
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size() && tree != nullptr && type != nullptr; ++i) {
    absl::string_view part = parts[i];
    int index = -1;
    const size_t bracket = part.find('[');
    if (bracket != absl::string_view::npos) {
      if (!absl::SimpleAtoi(part.substr(bracket + 1, part.size() - bracket - 2), &index)) return line;
      part = part.substr(0, bracket);
    }
    const FieldDescriptor* field = type->FindFieldByName(std::string(part));
    if (field == nullptr) return line;
    if (field->is_repeated() && index < 0) index = 0;
    const auto loc = tree->GetLocation(field, index);
    if (loc.line < 0) return line;
    line = loc.line + 1;
    if (field->type() != FieldDescriptor::TYPE_MESSAGE) return line;
    tree = tree->GetTreeForNested(field, index);
    type = field->message_type();
  }
  return line;
}

}  // namespace

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

// fuzz (issue 9): proto3 `string` fields must hold UTF-8. The binary and JSON forms refuse
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
// end fuzz

std::vector<ConfigProblem> ValidateNodeConfig(const NodeConfig& config) {
  std::vector<ConfigProblem> problems;
  Checker check(&problems);
  CheckUtf8(check, config, "");  // fuzz (issue 9)
  CheckAddress(check, "p2p_listen", config.p2p_listen(), false);
  CheckAddress(check, "client_listen", config.client_listen(), false);
  CheckAddress(check, "admin_listen", config.admin_listen(), false);
  CheckAddress(check, "metrics_listen", config.metrics_listen(), true);
  if (config.admin_listen() == config.client_listen() &&
      !absl::EndsWith(config.admin_listen(), ":0")) {
    check.Fail("admin_listen", "must differ from client_listen: the client port never serves "
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

  const auto& r = config.resources();
  check.AtLeast<uint32_t>("resources.cpu_workers", r.cpu_workers(), 1);
  if (r.cpu_workers() > 1024) {
    check.Fail("resources.cpu_workers", absl::StrCat("must be <= 1024, got ", r.cpu_workers()));
  }
  check.AtLeast<uint64_t>("resources.memory_bytes", r.memory_bytes(), 16 * kMiB);
  if (r.egress_bytes_per_second() != 0 &&
      r.tx_forward_floor_bytes_per_second() > r.egress_bytes_per_second()) {
    check.Fail("resources.tx_forward_floor_bytes_per_second",
               absl::StrCat("must be <= egress_bytes_per_second (", r.egress_bytes_per_second(),
                            "), got ", r.tx_forward_floor_bytes_per_second()));
  }
  if (r.arbiter_tick_ms() < 10 || r.arbiter_tick_ms() > 10'000) {
    check.Fail("resources.arbiter_tick_ms",
               absl::StrCat("must be in [10, 10000], got ", r.arbiter_tick_ms()));
  }

  if (config.partitions().empty()) check.Fail("partitions", "at least one partition is required");
  absl::flat_hash_set<uint32_t> ids;
  absl::flat_hash_set<std::string> names;
  double guarantees = 0;
  for (int i = 0; i < config.partitions_size(); ++i) {
    const PartitionConfig& p = config.partitions(i);
    const std::string at = absl::StrCat("partitions[", i, "]");
    CheckPartition(check, at, p);
    if (p.id() != 0 && !ids.insert(p.id()).second) {
      check.Fail(at + ".id", absl::StrCat("repeats partition id ", p.id()));
    }
    if (!p.name().empty() && !names.insert(p.name()).second) {
      check.Fail(at + ".name", absl::StrCat("repeats partition name \"", p.name(), "\""));
    }
    guarantees += p.share().guarantee_fraction();
  }
  if (guarantees > 1 + 1e-9) {
    check.Fail("partitions", absl::StrCat("share.guarantee_fraction sums to ", guarantees,
                                          " over all partitions; must be <= 1"));
  }
  // TLS (issue 9): reads the PEM files, so a missing or wrong file fails --check and startup.
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
  return LineInTree(NodeConfig::descriptor(), &tree, path);
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
