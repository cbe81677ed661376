#include "runtime/node.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/ledger.h"
#include "partitions/partition_channels.h"
#include "rocksdb/cache.h"
#include "runtime/config.h"
#include "runtime/config_validation.h"
#include "runtime/grpc_servers.h"
#include "runtime/latency_summary.h"
#include "runtime/metrics.h"
#include "runtime/node_metrics.h"
#include "runtime/partition_registry.h"
#include "runtime/tls.h"

namespace runtime {
namespace {

using node::config::NodeConfig;

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("admin_token_file: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin_token_file: ", path, " must hold a token of at least 16 characters"));
  }
  return token;
}

absl::StatusOr<base::PrivateKey> LoadOrCreateKey(const std::string& path) {
  if (std::filesystem::exists(path)) return base::PrivateKey::ReadPemFile(path);
  ASSIGN_OR_RETURN(base::PrivateKey key, base::PrivateKey::Generate());
  RETURN_IF_ERROR(key.WritePemFile(path));
  LOG(INFO) << "generated a new node key in " << path;
  return key;
}

// Removes `id` from a list of ids of the live-partition record.
void EraseId(google::protobuf::RepeatedField<uint32_t>* ids, uint32_t id) {
  ids->erase(std::remove(ids->begin(), ids->end(), id), ids->end());
}

// The admin API's form: an unbounded demand is reported as -1.
node::admin::ResourceShare ResourceShareOf(const flowctl::ResourceShareStats& s) {
  node::admin::ResourceShare r;
  r.set_weight(s.weight);
  r.set_guarantee(s.guarantee);
  r.set_ceiling(s.ceiling);
  r.set_demand(std::isinf(s.demand) ? -1 : s.demand);
  r.set_share(s.share);
  r.set_usage(s.usage);
  r.set_limit(s.limit);
  return r;
}

}  // namespace

std::string KeyFilePath(const NodeConfig& config) {
  return config.key_file().empty() ? config.data_dir() + "/node.key" : config.key_file();
}

absl::StatusOr<std::unique_ptr<Node>> Node::Create(NodeConfig config, NodeOptions options) {
  RETURN_IF_ERROR(ProblemsToStatus(ValidateNodeConfig(config)));
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir(), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("data_dir: cannot create ", config.data_dir(), ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(base::PrivateKey key, LoadOrCreateKey(KeyFilePath(config)));
  std::string token;
  if (!config.admin_token_file().empty()) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(config.admin_token_file()));
  }
  auto node = std::unique_ptr<Node>(new Node(std::move(config), options, std::move(key)));
  node->admin_token_ = std::move(token);
  return node;
}

Node::Node(NodeConfig config, NodeOptions options, base::PrivateKey key)
    : config_(std::move(config)),
      options_(options),
      key_(std::move(key)),
      id_(p2p::NodeIdFromPublicKey(key_.public_key().bytes())),
      read_hold_(std::make_unique<ReadHold>(options_.clock)),
      block_budget_(config_.resources().consensus_blocks_per_second()),
      consensus_store_cache_(rocksdb::NewLRUCache(kConsensusStoreCacheBytes, /*num_shard_bits=*/1)),
      write_buffer_budget_(config_.resources().ledger_write_buffer_bytes()) {}

Node::~Node() { Stop(absl::ZeroDuration()); }

absl::Status Node::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("node already started");
    started_ = true;
  }
  const auto& res = config_.resources();
  // 1. Worker pool.
  flowctl::WorkerPool::Options po;
  po.threads = res.cpu_workers() > 0
                   ? static_cast<int>(res.cpu_workers())
                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pool_ = std::make_unique<flowctl::WorkerPool>(po);
  RETURN_IF_ERROR(pool_->Start());
  if (!res.memory_pressure().disabled()) {
    memory_pressure_ = std::make_unique<flowctl::MemoryPressure>(
        res.memory_pressure(), options_.memory_source
                                   ? options_.memory_source()
                                   : std::make_unique<flowctl::ProcMemorySource>());
    memory_pressure_->SetDividedBytes(res.memory_bytes());
    absl::Status sampled = memory_pressure_->Update();
    LOG(INFO) << "memory pressure: " << memory_pressure_->Stats().source
              << (sampled.ok() ? "" : absl::StrCat(" (", sampled.message(), ")"));
  }
  {
    const auto& bba = res.block_budget_adaptation();
    block_budget_.SetAdaptation(
        {.enabled = bba.enabled(),
         .min_blocks_per_second = std::max(1u, bba.min_blocks_per_second()),
         .delay_target_nanos =
             std::max<int64_t>(1, static_cast<int64_t>(bba.queueing_delay_target_ms() * 1e6))});
  }
  if (res.node_admission().enabled()) {
    const auto& na = res.node_admission();
    flowctl::NodeAdmission::Config ac{
        .consensus_delay_target = absl::Milliseconds(na.consensus_delay_target_ms()),
        .cpu_busy_fraction = na.cpu_busy_fraction(),
        .min_admit_fraction = na.min_admit_fraction(),
        .exit_ticks = static_cast<int>(na.exit_ticks()),
        .exit_calm = absl::Milliseconds(na.exit_calm_ms()),
        .measured_shares = na.measured_shares(),
        .cpu_pressure_percent = na.cpu_pressure_percent(),
        .measured_share_slack = na.measured_share_slack()};
    RETURN_IF_ERROR(flowctl::NodeAdmission::ValidateConfig(ac));
    absl::MutexLock lock(&admission_mu_);
    admission_ = std::make_unique<flowctl::NodeAdmission>(ac);
    admission_with_peers_ = na.agree_with_peers();
    cpu_pressure_ = options_.cpu_pressure_source ? options_.cpu_pressure_source()
                                                 : std::make_unique<flowctl::ProcCpuPressure>();
    const std::optional<double> psi = cpu_pressure_->SomeAvg10();
    LOG(INFO) << "node admission: CPU pressure from " << cpu_pressure_->Describe()
              << (psi ? absl::StrCat(" (some avg10 ", *psi, "%)") : " (not readable: unknown)");
  }
  // One timer for every partition's ticks (partitions own no threads).
  scheduler_ = std::make_unique<flowctl::TickScheduler>(options_.clock);
  RETURN_IF_ERROR(scheduler_->Start());

  // 2. Replica set: every configured node, sorted by id (the same order on every node).
  std::vector<std::pair<p2p::NodeId, base::PublicKey>> members = {{id_, key_.public_key()}};
  std::vector<p2p::PeerSpec> specs;
  for (const auto& peer : config_.peers()) {
    std::string raw = absl::HexStringToBytes(peer.public_key_hex());
    ASSIGN_OR_RETURN(base::PublicKey pk, base::PublicKey::FromBytes(raw));
    members.push_back({p2p::NodeIdFromPublicKey(raw), pk});
    specs.push_back({.public_key = raw, .address = peer.address()});
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i].first == members[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peers: node ", members[i].first, " is listed twice (or is this node's own key)"));
    }
  }

  // 3. Network: the transport (or the injected network), and the egress valve over it.
  p2p::Network* inner = options_.network;
  if (inner == nullptr) {
    p2p::GrpcTransportOptions to;
    to.listen_address = config_.p2p_listen();
    to.peers = specs;
    if (config_.tls().p2p()) {  // mutual TLS between peers
      ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsMaterial(config_.tls()));
      to.server_credentials = TlsServerCredentials(tls, /*require_client_cert=*/true);
      to.channel_credentials = TlsPeerChannelCredentials(tls);
      to.tls_peer_name = config_.tls().peer_server_name();
    }
    transport_ = std::make_unique<p2p::GrpcTransport>(key_, to, options_.clock);
    inner = transport_.get();
  }
  if (inner->self() != id_) {
    return absl::InvalidArgumentError("network self id does not match the node key");
  }
  p2p::EgressValveOptions vo;
  vo.egress.channels = partitions::NodeChannelTable();
  vo.egress.cap_bytes_per_second = static_cast<double>(res.egress_bytes_per_second());
  vo.egress.fifo_mode = res.egress_fifo_mode();
  if (res.egress_fifo_mode()) LOG(WARNING) << "egress in FIFO mode (benchmark comparison only)";
  if (res.tx_forward_floor_bytes_per_second() > 0) {
    vo.egress.tx_forward_floor_bytes_per_second =
        static_cast<double>(res.tx_forward_floor_bytes_per_second());
  }
  tx_forward_floor_.store(static_cast<uint64_t>(vo.egress.tx_forward_floor_bytes_per_second));
  vo.fault = options_.p2p_fault;
  ASSIGN_OR_RETURN(egress_, p2p::EgressValve::Create(inner, /*frames=*/transport_.get(),
                                                     std::move(vo), options_.clock));
  network_ = egress_.get();

  // 4. Partitions (opened before the network delivers anything to them): the config file's,
  // with the live changes recorded under the data directory.
  for (auto& [id, pk] : members) {
    replica_ids_.push_back(id);
    replica_keys_.push_back(pk);
  }
  std::vector<p2p::NodeId> others;
  for (const p2p::NodeId& member : replica_ids_) {
    if (member != id_) others.push_back(member);
  }
  refusals_ = std::make_unique<PeerRefusals>(others);
  {
    absl::MutexLock live_lock(&live_mu_);
    ASSIGN_OR_RETURN(std::vector<bool> run, PlanPartitionsLocked());
    const size_t running = static_cast<size_t>(std::count(run.begin(), run.end(), true));
    absl::MutexLock lock(&partitions_mu_);
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (!run[i]) continue;  // stopped through the admin API
      PartitionEntry& entry = entries_[i];
      entry.closed = std::make_shared<absl::Notification>();
      ASSIGN_OR_RETURN(entry.running, OpenPartition(entry.config, entry.closed, running));
    }
  }
  // Handlers before the transport starts: peer messages go straight to their partition's lanes.
  network_->SetHandlers(
      [this](const p2p::NodeId& from, p2p::PartitionId part, p2p::Channel ch, std::string payload) {
        RoutePeerMessage(from, part, ch, std::move(payload));
      },
      [](const p2p::NodeId& peer, p2p::PeerEvent ev) {
        LOG(INFO) << "peer " << peer << " " << ev;
      });
  if (transport_ != nullptr) {
    transport_->SetRefusedFrameHandler([refusals = refusals_.get()](const p2p::NodeId& peer) {
      refusals->Count(peer, PeerRefusals::kBadFrame);
    });
    RETURN_IF_ERROR(transport_->Start());
  }
  if (!options_.egress_by_hand) RETURN_IF_ERROR(egress_->Start());
  for (const std::shared_ptr<Partition>& p : partitions()) RETURN_IF_ERROR(p->Start());

  // 5. Arbiter.
  RETURN_IF_ERROR(StartArbiter());

  // 6. Servers.
  if (options_.serve_grpc) {
    if (options_.clock == flowctl::Clock::Real()) read_hold_->Start();
    ASSIGN_OR_RETURN(servers_, GrpcServers::Start(this, config_, admin_token_));
    client_port_ = servers_->client_port();
    admin_port_ = servers_->admin_port();
  }
  if (options_.serve_metrics && !config_.metrics_listen().empty()) {
    ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(config_.metrics_listen()));
    RegisterNodeMetrics(metrics_.get(), this);
    if (servers_) {
      metrics_->AddCollector(
          [servers = servers_.get()] { return servers->rpc_metrics().Collect(); });
    }
  }
  LOG(INFO) << "noded " << kNodeVersion << " node " << id_ << " started: " << partitions().size()
            << " partitions running, " << members.size() << " replicas, client port "
            << client_port_ << ", admin port " << admin_port_ << ", p2p port " << p2p_port()
            << ", metrics port " << (metrics_ ? metrics_->port() : 0);
  return absl::OkStatus();
}

void Node::Stop(absl::Duration drain) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_ || !started_) {
      stopped_ = true;
      return;
    }
    stopped_ = true;
  }
  LOG(INFO) << "node stopping";
  if (servers_) servers_->Shutdown(drain);
  read_hold_->Stop();
  metrics_.reset();
  // Live partition calls check stopped_ under live_mu_: none starts or stops a partition from
  // here on, and one in progress finishes first.
  absl::MutexLock live_lock(&live_mu_);
  if (arbiter_) arbiter_->Stop();
  std::vector<std::shared_ptr<Partition>> running = partitions();
  for (auto it = running.rbegin(); it != running.rend(); ++it) (*it)->Stop(drain);
  if (scheduler_) scheduler_->Stop();
  if (egress_) egress_->Stop();
  if (transport_) transport_->Stop();
  running.clear();
  {
    absl::MutexLock lock(&partitions_mu_);
    entries_.clear();
  }
  servers_.reset();
  if (pool_) pool_->Stop();
  LOG(INFO) << "node stopped";
}

int Node::p2p_port() const { return transport_ ? transport_->port() : 0; }

absl::Status Node::SetPeerAddress(absl::string_view public_key_hex, const std::string& address) {
  if (transport_ == nullptr) {
    return absl::FailedPreconditionError("this node runs on an injected network, not a transport");
  }
  const std::string key = absl::AsciiStrToLower(public_key_hex);
  bool known = false;
  for (const auto& peer : config_.peers()) {
    known = known || absl::AsciiStrToLower(peer.public_key_hex()) == key;
  }
  if (!known) return absl::NotFoundError(absl::StrCat("no peer has public key ", public_key_hex));
  std::string host;
  int port = 0;
  if (!ParseHostPort(address, &host, &port) || port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer address must be host:port with port 1-65535, got \"", address, "\""));
  }
  transport_->SetPeerAddress(p2p::NodeIdFromPublicKey(absl::HexStringToBytes(key)), address);
  return absl::OkStatus();
}

int Node::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

absl::StatusOr<std::shared_ptr<Partition>> Node::FindPartition(
    const node::client::PartitionRef& ref) const {
  if (ref.id() == 0 && ref.name().empty()) {
    return absl::InvalidArgumentError("partition: give its id or its name");
  }
  absl::ReaderMutexLock lock(&partitions_mu_);
  for (const PartitionEntry& e : entries_) {
    if (ref.id() != 0 ? e.config.id() != ref.id() : e.config.name() != ref.name()) continue;
    if (e.running == nullptr) {
      return absl::UnavailableError(absl::StrCat("partition ", e.config.name(),
                                                 " is stopped on this node (StartPartition "
                                                 "starts it); another node may serve it"));
    }
    return e.running;
  }
  if (ref.id() != 0) return absl::NotFoundError(absl::StrCat("unknown partition id ", ref.id()));
  return absl::NotFoundError(absl::StrCat("unknown partition \"", ref.name(), "\""));
}

absl::StatusOr<std::shared_ptr<Partition>> Node::FindPartition(
    const std::string& id_or_name) const {
  node::client::PartitionRef ref;
  uint32_t id = 0;
  if (absl::SimpleAtoi(id_or_name, &id) && id != 0) {
    ref.set_id(id);
  } else {
    ref.set_name(id_or_name);
  }
  return FindPartition(ref);
}

std::vector<std::shared_ptr<Partition>> Node::partitions() const {
  std::vector<std::shared_ptr<Partition>> out;
  absl::ReaderMutexLock lock(&partitions_mu_);
  for (const PartitionEntry& e : entries_) {
    if (e.running != nullptr) out.push_back(e.running);
  }
  return out;
}

node::admin::PartitionStatus Node::StatusOfLocked(const PartitionEntry& entry) const {
  node::admin::PartitionStatus s;
  if (entry.running != nullptr) {
    s = entry.running->Status();
  } else {
    s.set_id(entry.config.id());
    s.set_name(entry.config.name());
    s.set_lossless(entry.config.lossless().enabled());
    s.set_consensus_state("STOPPED");
  }
  s.set_created_live(entry.created_live);
  return s;
}

node::admin::ListPartitionsResponse Node::ListPartitions() const {
  node::admin::ListPartitionsResponse out;
  absl::ReaderMutexLock lock(&partitions_mu_);
  for (const PartitionEntry& e : entries_) {
    *out.add_partitions() = StatusOfLocked(e);
    *out.add_configs() = e.running != nullptr ? e.running->config() : e.config;
  }
  return out;
}

void Node::RoutePeerMessage(const p2p::NodeId& from, p2p::PartitionId part, p2p::Channel ch,
                            std::string payload) const {
  std::shared_ptr<Partition> target;
  bool stopped = false;
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    for (const PartitionEntry& e : entries_) {
      if (e.config.id() != part) continue;
      target = e.running;
      stopped = target == nullptr;
      break;
    }
  }
  if (target != nullptr) {
    target->OnPeerMessage(from, ch, std::move(payload));
  } else {
    refusals_->Count(from,
                     stopped ? PeerRefusals::kStoppedPartition : PeerRefusals::kUnknownPartition);
  }
}

node::admin::NodeStatus Node::Status() const {
  node::admin::NodeStatus s;
  s.set_node_id(id_);
  s.set_version(kNodeVersion);
  s.set_uptime_seconds(static_cast<uint64_t>(absl::ToInt64Seconds(absl::Now() - start_time_)));
  if (network_ != nullptr) {
    s.set_peers_connected(static_cast<uint32_t>(network_->connected_peers().size()));
    s.set_peers_configured(static_cast<uint32_t>(network_->peers().size()));
  }
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    for (const PartitionEntry& e : entries_) *s.add_partitions() = StatusOfLocked(e);
  }
  s.set_cpu_workers(static_cast<uint32_t>(cpu_workers()));
  s.set_consensus_blocks_per_second(block_budget_.blocks_per_second());
  s.set_consensus_blocks_per_second_ceiling(block_budget_.ceiling());
  {
    const flowctl::BlockBudget::AdaptationStats a = block_budget_.adaptation_stats();
    auto* out = s.mutable_block_budget();
    out->set_queueing_delay_ms(static_cast<double>(a.mean_delay_nanos) / 1e6);
    out->set_blocks_per_second(a.blocks_per_second);
    out->set_lowered(a.lowered);
    out->set_raised(a.raised);
  }
  s.set_partitions_with_work(block_budget_.ActivePartitions(options_.clock->NowNanos()));
  *s.mutable_ledger_memory() = LedgerMemory();
  *s.mutable_memory() = MemoryPressureStatus();
  *s.mutable_admission() = NodeAdmissionStatus();
  return s;
}

void Node::BlockBudgetTick(absl::Span<flowctl::ResourceConsumer* const> consumers) {
  std::vector<flowctl::BlockBudget::PartitionTick> ticks;
  ticks.reserve(consumers.size());
  // Every consumer the node gives the arbiter is a Partition (StartArbiter, CreatePartition).
  for (flowctl::ResourceConsumer* c : consumers) {
    ticks.push_back(static_cast<const Partition*>(c)->BlockBudgetTick());
  }
  block_budget_.Observe(options_.clock->NowNanos(), ticks);
}

void Node::AdmissionTick(double elapsed_nanos, double cpu_capacity_nanos,
                         absl::Span<flowctl::ResourceConsumer* const> consumers) {
  absl::MutexLock lock(&admission_mu_);
  if (admission_ == nullptr) return;
  // Every consumer the node gives the arbiter is a Partition (StartArbiter, CreatePartition).
  std::vector<flowctl::NodeAdmission::PartitionLoad> loads;
  loads.reserve(consumers.size());
  for (flowctl::ResourceConsumer* c : consumers) {
    loads.push_back(static_cast<Partition*>(c)->AdmissionLoad());
  }
  const std::vector<double> fractions = admission_->Update(static_cast<int64_t>(elapsed_nanos),
                                                           static_cast<int64_t>(cpu_capacity_nanos),
                                                           loads, cpu_pressure_->SomeAvg10());
  const double floor = admission_->config().min_admit_fraction;
  for (size_t i = 0; i < consumers.size(); ++i) {
    static_cast<Partition*>(consumers[i])
        ->SetAdmitFraction(fractions[i], floor, admission_with_peers_);
  }
}

node::admin::NodeAdmissionStatus Node::NodeAdmissionStatus() const {
  node::admin::NodeAdmissionStatus out;
  flowctl::NodeAdmission::Stats st;
  {
    absl::MutexLock lock(&admission_mu_);
    if (admission_ == nullptr) return out;
    st = admission_->stats();
  }
  out.set_enabled(true);
  out.set_congested(st.congested);
  out.set_episodes(st.episodes);
  out.set_congested_ticks(st.congested_ticks);
  out.set_trigger(st.trigger);
  if (st.cpu_pressure) out.set_cpu_pressure_percent(*st.cpu_pressure);
  out.set_measured_allocation(st.measured_allocation);
  for (const std::shared_ptr<Partition>& p : partitions()) {
    auto* a = out.add_partitions();
    a->set_name(p->name());
    a->set_admit_fraction(p->admit_fraction());
    const flowctl::PeerAdmission::Snapshot peers = p->peer_admission();
    a->set_local_admit_fraction(peers.own);
    a->set_peers_cutting(static_cast<uint32_t>(peers.peers_cutting));
    a->set_refused(p->admission_refused());
    for (const flowctl::NodeAdmission::PartitionState& ps : st.partitions) {
      if (ps.id != p->id()) continue;
      a->set_cpu_over_entitlement(ps.cpu_over_entitlement);
      a->set_consensus_delay_ms(static_cast<double>(ps.consensus_delay_nanos) / 1e6);
      a->set_cpu_cores(ps.cpu_cores);
      a->set_allocation_cores(ps.allocation_cores);
      a->set_contending(ps.contending);
    }
  }
  return out;
}

node::admin::MemoryPressureStatus Node::MemoryPressureStatus() const {
  node::admin::MemoryPressureStatus m;
  if (memory_pressure_ == nullptr) return m;
  const flowctl::MemoryPressureStats st = memory_pressure_->Stats();
  m.set_enabled(true);
  m.set_source(st.source);
  m.set_rss_bytes(st.sample.rss_bytes);
  m.set_rss_limit_bytes(memory_pressure_->config().rss_limit_bytes());
  m.set_cgroup_version(static_cast<uint32_t>(st.sample.cgroup_version));
  m.set_cgroup_current_bytes(flowctl::CgroupWorkingSet(st.sample));
  m.set_cgroup_max_bytes(st.sample.cgroup_max_bytes.value_or(0));
  m.set_psi_available(st.sample.psi_some_avg10.has_value());
  m.set_psi_some_avg10(st.sample.psi_some_avg10.value_or(0));
  m.set_pressure(st.pressure);
  m.set_driven_by(st.driven_by);
  m.set_pool_scale(st.pool_scale);
  m.set_drop_forwarded(st.drop_forwarded);
  m.set_refuse_clients(st.refuse_clients);
  m.set_no_cache_borrowing(st.no_cache_borrowing);
  m.set_transitions(st.transitions);
  m.set_refused_writes(memory_pressure_->refused_writes());
  m.set_dropped_messages(memory_pressure_->dropped_messages());
  m.set_error(st.error);
  m.set_heap_releases(st.heap_releases);
  return m;
}

int Node::cpu_workers() const {
  if (pool_ != nullptr) return pool_->threads();
  return static_cast<int>(config_.resources().cpu_workers());
}

node::admin::ListPeersResponse Node::Peers() const {
  node::admin::ListPeersResponse out;
  if (network_ == nullptr) return out;
  std::map<p2p::NodeId, std::string> address;
  for (const auto& peer : config_.peers()) {
    address[p2p::NodeIdFromPublicKey(absl::HexStringToBytes(peer.public_key_hex()))] =
        peer.address();
  }
  std::vector<p2p::NodeId> connected = network_->connected_peers();
  std::map<p2p::NodeId, p2p::PeerLinkStats> links;
  if (transport_ != nullptr) links = transport_->PeerLinks();
  for (const p2p::NodeId& id : network_->peers()) {
    auto* info = out.add_peers();
    info->set_node_id(id);
    info->set_address(address[id]);
    info->set_connected(std::find(connected.begin(), connected.end(), id) != connected.end());
    if (auto it = links.find(id); it != links.end()) {
      const p2p::PeerLinkStats& l = it->second;
      info->set_bytes_sent(l.bytes_sent);
      info->set_bytes_received(l.bytes_received);
      info->set_reconnects(l.connections > 0 ? l.connections - 1 : 0);
      info->set_link_stalls(l.stalls);
      if (l.rtt_ns >= 0) info->set_rtt_ms(static_cast<double>(l.rtt_ns) / 1e6);
    }
    if (refusals_ != nullptr) {
      node::admin::PeerRefusals* r = info->mutable_refused();
      r->set_unknown_partition(refusals_->count(id, PeerRefusals::kUnknownPartition));
      r->set_malformed(refusals_->count(id, PeerRefusals::kMalformed));
      r->set_wrong_channel(refusals_->count(id, PeerRefusals::kWrongChannel));
      r->set_bad_signature(refusals_->count(id, PeerRefusals::kBadSignature));
      r->set_bad_tx(refusals_->count(id, PeerRefusals::kBadTx));
      r->set_bad_frame(refusals_->count(id, PeerRefusals::kBadFrame));
      r->set_stopped_partition(refusals_->count(id, PeerRefusals::kStoppedPartition));
    }
  }
  return out;
}

absl::StatusOr<node::admin::FlowStats> Node::FlowStats(const std::string& partition) const {
  node::admin::FlowStats out;
  out.set_unix_millis(absl::ToUnixMillis(absl::Now()));
  if (!partition.empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<Partition> p, FindPartition(partition));
    *out.add_partitions() = p->FlowStats();
  } else {
    for (const std::shared_ptr<Partition>& p : partitions()) *out.add_partitions() = p->FlowStats();
  }
  std::optional<p2p::EgressStats> egress_stats;
  if (egress_) egress_stats = egress_->scheduler().Stats();
  for (auto& p : *out.mutable_partitions()) {
    const ReadHoldCounters held = read_hold_->Counters(p.id());
    node::admin::ReadHoldStats* rh = p.mutable_read_hold();
    rh->set_held(held.held);
    rh->set_answered(held.answered);
    rh->set_expired(held.expired);
    rh->set_full(held.full);
    rh->set_waiting(held.waiting);
    std::optional<flowctl::ConsumerShareStats> shares;
    if (arbiter_) shares = arbiter_->StatsOf(p.id());
    if (!shares) continue;
    node::admin::ResourceShare cpu = ResourceShareOf(shares->cpu);
    cpu.set_limit_holds(p.cpu().limit_holds());  // measured by the partition's worker-pool group
    cpu.set_limited_seconds(p.cpu().limited_seconds());
    *p.mutable_cpu() = std::move(cpu);
    *p.mutable_memory() = ResourceShareOf(shares->memory);
    *p.mutable_egress() = ResourceShareOf(shares->egress);
    if (egress_stats) {  // the hard egress limit's effect, measured by the scheduler
      auto it = egress_stats->partition_limits.find(p.id());
      if (it != egress_stats->partition_limits.end()) {
        p.mutable_egress()->set_limit_holds(it->second.limit_waits);
      }
    }
    *p.mutable_disk() = ResourceShareOf(shares->disk);
  }
  if (egress_stats) {
    const p2p::EgressStats& es = *egress_stats;
    auto* e = out.mutable_egress();
    const bool unlimited = es.cap_bytes_per_second >= flowctl::TokenBucket::kUnlimited;
    e->set_cap_bytes_per_second(unlimited ? 0 : es.cap_bytes_per_second);
    e->set_tx_forward_floor_bytes_per_second(static_cast<double>(tx_forward_floor_.load()));
    e->set_tx_forward_derived_bytes_per_second(
        es.tx_forward_rate >= flowctl::TokenBucket::kUnlimited ? 0 : es.tx_forward_rate);
    e->set_blocked_peers(es.blocked_peers);
    e->set_peer_block_events(es.peer_block_events);
    e->set_blocked_peer_drops(es.blocked_peer_drops);
    for (const p2p::ChannelEgressStats& c : es.channels) {  // in priority order
      auto* cs = e->add_channels();
      cs->set_channel(p2p::ChannelName(c.channel));
      cs->set_bytes_sent(c.bytes_sent);
      cs->set_frames_sent(c.frames_sent);
      cs->set_queue_bytes(c.queued_bytes);
      cs->set_dropped(c.messages_dropped + c.messages_refused);
      *cs->mutable_queueing_delay() = LatencySummaryOf(c.queue_delay_nanos);
    }
  }
  return out;
}

absl::StatusOr<node::admin::EgressStats> Node::UpdateEgress(
    const node::admin::UpdateEgressRequest& request) {
  if (egress_ == nullptr) return absl::FailedPreconditionError("node not started");
  // Validated as the resources section it would leave, as when loading a config.
  node::config::ResourceConfig current = config_.resources();
  const double cap = egress_->scheduler().Stats().cap_bytes_per_second;
  current.set_egress_bytes_per_second(
      cap >= flowctl::TokenBucket::kUnlimited ? 0 : static_cast<uint64_t>(cap));
  current.set_tx_forward_floor_bytes_per_second(tx_forward_floor_.load());
  RETURN_IF_ERROR(ApplyEgressUpdate(current, request).status());
  if (request.set_cap()) {
    RETURN_IF_ERROR(
        egress_->scheduler().SetCap(static_cast<double>(request.cap_bytes_per_second())));
  }
  if (request.tx_forward_floor_bytes_per_second() > 0) {
    RETURN_IF_ERROR(egress_->scheduler().SetTxForwardFloor(
        static_cast<double>(request.tx_forward_floor_bytes_per_second())));
    tx_forward_floor_.store(request.tx_forward_floor_bytes_per_second());
  }
  ASSIGN_OR_RETURN(node::admin::FlowStats stats, FlowStats(""));
  return stats.egress();
}

absl::StatusOr<std::vector<node::config::PartitionConfig>> Node::UpdateArbiter(
    const node::admin::UpdateArbiterRequest& request) {
  if (request.entries().empty() && request.cpu_workers() == 0 &&
      !request.has_consensus_blocks_per_second() && request.ledger_write_buffer_bytes() == 0) {
    return absl::InvalidArgumentError(
        "entries: give at least one partition (or cpu_workers, consensus_blocks_per_second or "
        "ledger_write_buffer_bytes to change only those)");
  }
  // The guarantee sum is checked against the partitions as they are: no create or start may
  // change them meanwhile. One in progress may take seconds (a drain): refuse rather than wait.
  if (!live_mu_.TryLock()) {
    return absl::UnavailableError(
        "a live partition change (create, stop, start, remove) is in progress; retry");
  }
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&live_mu_};
  std::vector<std::pair<std::shared_ptr<Partition>, node::config::ShareConfig>> changes;
  std::vector<ConfigProblem> problems;  // validated as the config it would leave
  for (int i = 0; i < request.entries_size(); ++i) {
    const auto& e = request.entries(i);
    const std::string at = absl::StrCat("entries[", i, "]");
    absl::StatusOr<std::shared_ptr<Partition>> p = FindPartition(e.partition());
    if (!p.ok()) {
      return absl::Status(p.status().code(),
                          absl::StrCat(at, ".partition: ", p.status().message()));
    }
    node::config::ShareConfig share = ShareFromUpdate(e.share());
    for (ConfigProblem& problem :
         ValidateShareConfig(share, PartitionPath((*p)->name()) + ".share")) {
      problems.push_back(std::move(problem));
    }
    changes.push_back({*p, share});
  }
  std::vector<node::config::ShareConfig> shares;  // every partition's, stopped ones too
  const node::admin::ListPartitionsResponse listed = ListPartitions();
  for (const node::config::PartitionConfig& config : listed.configs()) {
    node::config::ShareConfig share = config.share();
    for (const auto& [changed, next] : changes) {
      if (changed->id() == config.id()) share = next;
    }
    shares.push_back(share);
  }
  for (ConfigProblem& problem : ValidateGuaranteeSum(shares)) {
    problems.push_back(std::move(problem));
  }
  if (request.cpu_workers() > kMaxCpuWorkers) {
    problems.push_back({"cpu_workers", absl::StrCat("must be in [1, ", kMaxCpuWorkers, "], got ",
                                                    request.cpu_workers())});
  }
  if (request.ledger_write_buffer_bytes() > 0 &&
      request.ledger_write_buffer_bytes() < kMinLedgerWriteBufferBytes) {
    problems.push_back({"ledger_write_buffer_bytes",
                        absl::StrCat("must be 0 (unchanged) or >= ", kMinLedgerWriteBufferBytes,
                                     ", got ", request.ledger_write_buffer_bytes())});
  }
  if (request.consensus_blocks_per_second() > kMaxConsensusBlocksPerSecond) {
    problems.push_back({"consensus_blocks_per_second",
                        absl::StrCat("must be in [0, ", kMaxConsensusBlocksPerSecond, "], got ",
                                     request.consensus_blocks_per_second())});
  }
  RETURN_IF_ERROR(ProblemsToStatus(problems));
  if (arbiter_ == nullptr) return absl::FailedPreconditionError("node not started");
  if (request.cpu_workers() > 0) {
    // The arbiter reads the pool's size at every tick: the tick UpdateShares runs below divides
    // the new capacity.
    const int before = pool_->threads();
    RETURN_IF_ERROR(pool_->SetThreads(static_cast<int>(request.cpu_workers())));
    LOG(INFO) << "worker pool: " << before << " -> " << request.cpu_workers() << " threads";
  }
  std::vector<std::pair<uint32_t, node::config::ShareConfig>> updates;
  for (const auto& [p, share] : changes) updates.push_back({p->id(), share});
  RETURN_IF_ERROR(arbiter_->UpdateShares(updates));
  // Last, once nothing else can fail: a refused request changes no budget.
  if (request.has_consensus_blocks_per_second()) {
    LOG(INFO) << "block budget: " << block_budget_.blocks_per_second() << " -> "
              << request.consensus_blocks_per_second() << " blocks/s";
    block_budget_.SetBlocksPerSecond(request.consensus_blocks_per_second());
  }
  if (request.ledger_write_buffer_bytes() > 0) {
    const uint64_t before = write_buffer_budget_.exchange(request.ledger_write_buffer_bytes());
    LOG(INFO) << "ledger write buffers: " << before << " -> " << request.ledger_write_buffer_bytes()
              << " bytes, all partitions";
    DivideWriteBuffers();
  }
  std::vector<node::config::PartitionConfig> out;
  for (const std::shared_ptr<Partition>& p : partitions()) out.push_back(p->config());
  return out;
}

absl::Status Node::StartArbiter() {
  egress_accounting_ = std::make_unique<p2p::SchedulerEgressAccounting>(&egress_->scheduler());
  flowctl::WorkerPool* pool = pool_.get();
  flowctl::MemoryPressure* pressure = memory_pressure_.get();
  flowctl::ArbiterService::Options options{
      .tick = absl::Milliseconds(config_.resources().arbiter_tick_ms()),
      .cpu_workers = [pool] { return pool->threads(); },
      .memory_bytes = config_.resources().memory_bytes(),
      // Memory pressure is sampled here, every tick, and shrinks the memory divided.
      .memory_scale = [pressure]() -> double {
        if (pressure == nullptr) return 1;
        pressure->Update().IgnoreError();  // logged by MemoryPressure when it changes
        return pressure->pool_scale();
      },
      .disk_bytes = config_.resources().spill_disk_bytes(),
      .after_tick =
          [this](double elapsed, double capacity,
                 absl::Span<flowctl::ResourceConsumer* const> consumers) {
            BlockBudgetTick(consumers);
            AdmissionTick(elapsed, capacity, consumers);
          },
      // RocksDB SetOptions syncs a file per ledger: not under the arbiter's mutex.
      .after_tick_unlocked = [this] { WriteBufferPressureTick(); },
      .clock = options_.clock,
      .advisory = config_.resources().arbiter_advisory()};
  ASSIGN_OR_RETURN(arbiter_,
                   flowctl::ArbiterService::Create(std::move(options), egress_accounting_.get()));
  for (const std::shared_ptr<Partition>& p : partitions()) {
    RETURN_IF_ERROR(arbiter_->AddConsumer(p.get()));
  }
  return arbiter_->Start();
}

void Node::ArbiterTick() {
  if (arbiter_) arbiter_->Tick();
}

// ---- Live partitions ----

std::string Node::PartitionDir(uint32_t id) const {
  return absl::StrCat(config_.data_dir(), "/partition-", id);
}

absl::StatusOr<std::vector<bool>> Node::PlanPartitionsLocked() {
  const std::string path = LivePartitionsPath(config_.data_dir());
  ASSIGN_OR_RETURN(node::config::LivePartitions live, ReadLivePartitions(path));
  ASSIGN_OR_RETURN(PartitionPlan plan, PlanPartitions(config_, live, path));
  for (const std::string& warning : plan.warnings) LOG(WARNING) << warning;
  // The whole set is validated as one config (a created partition may have been written by an
  // older version, or the file may have changed under it).
  NodeConfig effective = config_;
  effective.clear_partitions();
  for (const PlannedPartition& p : plan.partitions) *effective.add_partitions() = p.config;
  if (!plan.partitions.empty()) ApplyDefaults(&effective);  // (an empty list would get defaults)
  std::vector<ConfigProblem> problems = ValidateNodeConfig(effective);
  // A node whose partitions were all removed live still starts, to take CreatePartition.
  std::erase_if(problems, [&](const ConfigProblem& p) {
    return plan.partitions.empty() && p.path == "partitions";
  });
  if (absl::Status s = ProblemsToStatus(problems); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the config file's partitions with the live changes recorded in ", path, ": ",
                     s.message()));
  }
  live_ = std::move(plan.live);
  if (live_.SerializeAsString() != live.SerializeAsString()) RETURN_IF_ERROR(WriteLiveLocked());
  std::vector<bool> run;
  absl::MutexLock lock(&partitions_mu_);
  for (size_t i = 0; i < plan.partitions.size(); ++i) {
    entries_.push_back({.config = effective.partitions(static_cast<int>(i)),
                        .created_live = plan.partitions[i].created_live});
    run.push_back(!plan.partitions[i].stopped);
    if (plan.partitions[i].stopped) {
      LOG(INFO) << "partition " << plan.partitions[i].config.name()
                << " is stopped (StopPartition); StartPartition starts it";
    }
  }
  return run;
}

absl::Status Node::WriteLiveLocked() {
  return WriteLivePartitions(LivePartitionsPath(config_.data_dir()), live_);
}

absl::StatusOr<std::shared_ptr<Partition>> Node::OpenPartition(
    const node::config::PartitionConfig& pc, std::shared_ptr<absl::Notification> closed,
    size_t running) {
  PartitionEnv env;
  env.config = pc;
  env.dir = PartitionDir(pc.id());
  env.pool = pool_.get();
  env.network = network_;
  env.key = key_;
  env.replica_ids = replica_ids_;
  env.replica_keys = replica_keys_;
  env.clock = options_.clock;
  env.scheduler = scheduler_.get();
  env.channels = &egress_->scheduler().channels();
  env.refusals = refusals_.get();
  env.fixed_retry_after = config_.resources().fixed_retry_after();
  env.memory_pressure = memory_pressure_.get();
  env.block_budget = &block_budget_;
  // Its part as one of `running` partitions; DivideWriteBuffers evens the others out once it runs.
  env.ledger_write_buffer_bytes =
      partitions::LedgerWriteBufferBytes(WriteBufferBudgetInForce(), running);
  env.consensus_store_cache = consensus_store_cache_;
  env.test_equivocate = pc.name() == options_.test_equivocate_partition;
  if (env.test_equivocate) {
    LOG(WARNING) << "TEST FAILPOINT: partition " << pc.name()
                 << ": this node proposes conflicting batches when it is the primary";
  }
  if (pc.name() == options_.test_diverge_partition) {
    env.test_diverge_height = options_.test_diverge_height;
    LOG(WARNING) << "TEST FAILPOINT: partition " << pc.name() << ": block "
                 << env.test_diverge_height << " executes differently on this node";
  }
  env.test_withhold = pc.name() == options_.test_withhold_partition;
  if (env.test_withhold) {
    LOG(WARNING) << "TEST FAILPOINT: partition " << pc.name()
                 << ": this node withholds the bodies of its proposals and answers no fetch";
  }
  absl::StatusOr<std::unique_ptr<Partition>> part = Partition::Open(std::move(env));
  if (!part.ok()) {
    return absl::Status(part.status().code(),
                        absl::StrCat("partition ", pc.name(), ": ", part.status().message()));
  }
  // Whoever lets go of it last (the node, or a call still using it) closes it and says so.
  return std::shared_ptr<Partition>(part->release(), [closed](Partition* p) {
    delete p;
    closed->Notify();
  });
}

absl::Status Node::LiveCallAllowedLocked() const {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("node is shutting down");
  return absl::OkStatus();
}

absl::StatusOr<size_t> Node::EntryIndexLocked(const std::string& id_or_name) const {
  if (id_or_name.empty()) return absl::InvalidArgumentError("partition: give its id or its name");
  uint32_t id = 0;
  const bool by_id = absl::SimpleAtoi(id_or_name, &id) && id != 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (by_id ? entries_[i].config.id() == id : entries_[i].config.name() == id_or_name) return i;
  }
  return absl::NotFoundError(absl::StrCat("partition: unknown partition \"", id_or_name, "\""));
}

absl::Status Node::RunPartition(size_t index) {
  node::config::PartitionConfig config;
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    config = entries_[index].config;
  }
  auto closed = std::make_shared<absl::Notification>();
  ASSIGN_OR_RETURN(std::shared_ptr<Partition> partition,
                   OpenPartition(config, closed, partitions().size() + 1));
  absl::Status s = partition->Start();
  if (s.ok()) s = arbiter_->AddConsumer(partition.get());
  if (!s.ok()) {
    partition->Stop(absl::ZeroDuration());
    return s;
  }
  {
    absl::MutexLock lock(&partitions_mu_);
    entries_[index].running = partition;
    entries_[index].closed = closed;
  }
  arbiter_->Tick();  // re-divide now, with the new consumer
  DivideWriteBuffers();
  return absl::OkStatus();
}

node::admin::LedgerMemoryStatus Node::LedgerMemory() const {
  node::admin::LedgerMemoryStatus out;
  const uint64_t in_force = WriteBufferBudgetInForce();
  const std::vector<std::shared_ptr<Partition>> running = partitions();
  out.set_write_buffer_budget_bytes(write_buffer_budget_.load(std::memory_order_relaxed));
  out.set_write_buffer_scale(write_buffer_scale_.load(std::memory_order_relaxed));
  out.set_write_buffer_budget_in_force_bytes(in_force);
  out.set_write_buffer_per_partition_bytes(
      partitions::LedgerWriteBufferBytes(in_force, running.size()));
  LedgerMemoryUse sum;
  for (const std::shared_ptr<Partition>& p : running) {
    const LedgerMemoryUse m = p->ledger_memory();
    sum.memtable_bytes += m.memtable_bytes;
    sum.block_cache_bytes += m.block_cache_bytes;
    sum.block_cache_capacity += m.block_cache_capacity;
    sum.consensus_store_memtable_bytes += m.consensus_store_memtable_bytes;
    sum.consensus_store_table_reader_bytes += m.consensus_store_table_reader_bytes;
  }
  out.set_memtable_bytes(sum.memtable_bytes);
  out.set_block_cache_bytes(sum.block_cache_bytes);
  out.set_block_cache_capacity_bytes(sum.block_cache_capacity);
  out.set_consensus_store_memtable_bytes(sum.consensus_store_memtable_bytes);
  out.set_consensus_store_table_reader_bytes(sum.consensus_store_table_reader_bytes);
  out.set_consensus_store_cache_bytes(consensus_store_cache_->GetUsage());
  out.set_consensus_store_cache_capacity_bytes(consensus_store_cache_->GetCapacity());
  return out;
}

uint64_t Node::WriteBufferBudgetInForce() const {
  return static_cast<uint64_t>(
      static_cast<double>(write_buffer_budget_.load(std::memory_order_relaxed)) *
      write_buffer_scale_.load(std::memory_order_relaxed));
}

void Node::WriteBufferPressureTick() {
  if (memory_pressure_ == nullptr) return;
  absl::MutexLock lock(&write_buffer_mu_);
  const double before = write_buffer_scale_.load(std::memory_order_relaxed);
  const double next =
      partitions::LedgerWriteBufferScale(before, memory_pressure_->pressure_scale());
  if (next == before) return;
  write_buffer_scale_.store(next, std::memory_order_relaxed);
  LOG(INFO) << "ledger write buffers: memory pressure scale " << before << " -> " << next << " ("
            << WriteBufferBudgetInForce() << " bytes in force)";
  DivideWriteBuffersLocked();
}

void Node::DivideWriteBuffers() {
  absl::MutexLock lock(&write_buffer_mu_);
  DivideWriteBuffersLocked();
}

void Node::DivideWriteBuffersLocked() {
  const std::vector<std::shared_ptr<Partition>> running = partitions();
  const size_t per = partitions::LedgerWriteBufferBytes(WriteBufferBudgetInForce(), running.size());
  for (const std::shared_ptr<Partition>& p : running) {
    if (absl::Status s = p->SetLedgerWriteBufferBytes(per); !s.ok()) {
      LOG(WARNING) << "partition " << p->name() << ": ledger write buffer: " << s;
    }
  }
}

void Node::ClosePartition(size_t index, absl::Duration drain) {
  std::shared_ptr<Partition> partition;
  std::shared_ptr<absl::Notification> closed;
  {
    absl::MutexLock lock(&partitions_mu_);
    PartitionEntry& entry = entries_[index];
    partition = std::move(entry.running);
    entry.running = nullptr;
    closed = entry.closed;
  }
  // Out of the lookups first (new calls get UNAVAILABLE), then out of the arbiter, then stopped.
  absl::Status s = arbiter_->RemoveConsumer(partition->id());
  if (!s.ok()) LOG(WARNING) << "partition " << partition->name() << ": arbiter: " << s;
  partition->Stop(drain);
  read_hold_->EndQueue(partition->id());  // reads waiting for it hold a reference
  {
    // Live updates made while it ran (the last of them included) are kept for the next start.
    absl::MutexLock lock(&partitions_mu_);
    entries_[index].config = partition->config();
  }
  const std::string name = partition->name();
  partition.reset();
  // A call that still holds it lets go when it finishes; its callbacks were all answered.
  if (!closed->WaitForNotificationWithTimeout(absl::Seconds(30))) {
    LOG(WARNING) << "partition " << name << " stopped but still referenced after 30 s";
  }
  arbiter_->Tick();
  DivideWriteBuffers();
}

absl::StatusOr<node::admin::CreatePartitionResponse> Node::CreatePartition(
    node::config::PartitionConfig config) {
  if (arbiter_ == nullptr) return absl::FailedPreconditionError("node not started");
  absl::MutexLock live_lock(&live_mu_);
  RETURN_IF_ERROR(LiveCallAllowedLocked());
  // Validated as the config it would leave: every partition (stopped ones too) plus this one.
  NodeConfig effective = config_;
  effective.clear_partitions();
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    for (const PartitionEntry& e : entries_) {
      if (e.config.id() == config.id() && config.id() != 0) {
        return absl::AlreadyExistsError(absl::StrCat("config.id: partition id ", config.id(),
                                                     " is in use by partition ", e.config.name(),
                                                     e.running ? "" : " (stopped)"));
      }
      if (e.config.name() == config.name()) {
        return absl::AlreadyExistsError(
            absl::StrCat("config.name: partition name \"", config.name(), "\" is in use (id ",
                         e.config.id(), e.running ? ")" : ", stopped)"));
      }
      *effective.add_partitions() = e.running ? e.running->config() : e.config;
    }
  }
  *effective.add_partitions() = config;
  ApplyDefaults(&effective);
  RETURN_IF_ERROR(ProblemsToStatus(ValidateNodeConfig(effective)));
  config = effective.partitions(effective.partitions_size() - 1);

  size_t index = 0;
  {
    absl::MutexLock lock(&partitions_mu_);
    entries_.push_back({.config = config, .created_live = true});
    index = entries_.size() - 1;
  }
  std::error_code ec;
  const bool had_data = std::filesystem::exists(PartitionDir(config.id()), ec);
  absl::Status s = RunPartition(index);
  if (s.ok()) {
    node::config::LivePartitions next = live_;
    *next.add_created() = config;
    // A stopped mark left by an earlier partition with this id is not this one's.
    EraseId(next.mutable_stopped(), config.id());
    std::swap(live_, next);
    s = WriteLiveLocked();
    if (!s.ok()) {
      std::swap(live_, next);
      ClosePartition(index, absl::ZeroDuration());
    }
  }
  if (!s.ok()) {
    absl::MutexLock lock(&partitions_mu_);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
    // A failed create leaves no data behind that a later create with this id would reopen.
    if (!had_data) std::filesystem::remove_all(PartitionDir(config.id()), ec);
    return s;
  }
  LOG(INFO) << "partition " << config.name() << " (" << config.id() << ") created live";
  node::admin::CreatePartitionResponse out;
  absl::ReaderMutexLock lock(&partitions_mu_);
  *out.mutable_status() = StatusOfLocked(entries_[index]);
  *out.mutable_config() = entries_[index].running->config();
  return out;
}

absl::StatusOr<node::admin::PartitionStatus> Node::StopPartition(const std::string& id_or_name,
                                                                 absl::Duration drain) {
  if (arbiter_ == nullptr) return absl::FailedPreconditionError("node not started");
  absl::MutexLock live_lock(&live_mu_);
  RETURN_IF_ERROR(LiveCallAllowedLocked());
  size_t index = 0;
  uint32_t id = 0;
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    ASSIGN_OR_RETURN(index, EntryIndexLocked(id_or_name));
    if (entries_[index].running == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("partition ", entries_[index].config.name(), " is already stopped"));
    }
    id = entries_[index].config.id();
  }
  ClosePartition(index, drain);
  EraseId(live_.mutable_stopped(), id);
  live_.add_stopped(id);
  return RecordLiveChangeLocked(index, "stopped", "start it again");
}

absl::StatusOr<node::admin::PartitionStatus> Node::StartPartition(const std::string& id_or_name) {
  if (arbiter_ == nullptr) return absl::FailedPreconditionError("node not started");
  absl::MutexLock live_lock(&live_mu_);
  RETURN_IF_ERROR(LiveCallAllowedLocked());
  size_t index = 0;
  uint32_t id = 0;
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    ASSIGN_OR_RETURN(index, EntryIndexLocked(id_or_name));
    if (entries_[index].running != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("partition ", entries_[index].config.name(), " is running"));
    }
    if (entries_[index].closed != nullptr && !entries_[index].closed->HasBeenNotified()) {
      return absl::FailedPreconditionError(
          absl::StrCat("partition ", entries_[index].config.name(),
                       " is stopped but a call still holds it open; retry"));
    }
    id = entries_[index].config.id();
  }
  RETURN_IF_ERROR(RunPartition(index));
  EraseId(live_.mutable_stopped(), id);
  return RecordLiveChangeLocked(index, "started", "leave it stopped");
}

absl::StatusOr<node::admin::PartitionStatus> Node::RecordLiveChangeLocked(size_t index,
                                                                          absl::string_view done,
                                                                          absl::string_view lost) {
  absl::Status written = WriteLiveLocked();
  absl::ReaderMutexLock lock(&partitions_mu_);
  LOG(INFO) << "partition " << entries_[index].config.name() << " " << done << " live";
  if (!written.ok()) {
    return absl::Status(written.code(), absl::StrCat("partition ", done,
                                                     ", but recording it failed (a restart "
                                                     "would ",
                                                     lost, "): ", written.message()));
  }
  return StatusOfLocked(entries_[index]);
}

absl::StatusOr<node::admin::RemovePartitionResponse> Node::RemovePartition(
    const std::string& id_or_name, bool delete_data) {
  if (arbiter_ == nullptr) return absl::FailedPreconditionError("node not started");
  absl::MutexLock live_lock(&live_mu_);
  RETURN_IF_ERROR(LiveCallAllowedLocked());
  PartitionEntry entry;
  size_t index = 0;
  {
    absl::ReaderMutexLock lock(&partitions_mu_);
    ASSIGN_OR_RETURN(index, EntryIndexLocked(id_or_name));
    entry = entries_[index];
  }
  if (entry.running != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "partition ", entry.config.name(), " is running; stop it first (StopPartition)"));
  }
  if (entry.closed != nullptr && !entry.closed->HasBeenNotified()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "partition ", entry.config.name(), " is stopped but a call still holds it; retry"));
  }
  const uint32_t id = entry.config.id();
  node::config::LivePartitions next = live_;
  EraseId(next.mutable_stopped(), id);
  if (entry.created_live) {
    auto* created = next.mutable_created();
    for (int i = 0; i < created->size(); ++i) {
      if (created->Get(i).id() == id) {
        created->DeleteSubrange(i, 1);
        break;
      }
    }
  } else {
    next.add_removed(id);
  }
  std::swap(live_, next);
  if (absl::Status s = WriteLiveLocked(); !s.ok()) {
    std::swap(live_, next);
    return s;
  }
  {
    absl::MutexLock lock(&partitions_mu_);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  }
  node::admin::RemovePartitionResponse out;
  out.set_data_dir(PartitionDir(id));
  if (delete_data) {
    std::error_code ec;
    std::filesystem::remove_all(out.data_dir(), ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("partition ", entry.config.name(),
                                              " removed, but deleting ", out.data_dir(),
                                              " failed: ", ec.message()));
    }
    out.set_data_deleted(true);
  }
  LOG(INFO) << "partition " << entry.config.name() << " (" << id << ") removed live; data "
            << (delete_data ? "deleted" : "kept in ") << (delete_data ? "" : out.data_dir());
  return out;
}

}  // namespace runtime
