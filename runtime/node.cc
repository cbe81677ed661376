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
#include "partitions/partition_channels.h"
#include "runtime/config.h"
#include "runtime/config_validation.h"
#include "runtime/grpc_servers.h"
#include "runtime/latency_summary.h"
#include "runtime/metrics.h"
#include "runtime/node_metrics.h"
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

// The arbiter's view of the gRPC transport's egress scheduler.
class SchedulerEgressAccounting final : public flowctl::EgressAccounting {
 public:
  explicit SchedulerEgressAccounting(p2p::EgressScheduler* scheduler) : scheduler_(scheduler) {}

  flowctl::EgressUsage Usage() const override {
    p2p::EgressStats es = scheduler_->Stats();
    flowctl::EgressUsage u;
    u.cap_bytes_per_second = es.cap_bytes_per_second;
    for (const auto& [key, st] : es.partitions) u.bytes_sent[key.first] += st.bytes_sent;
    return u;
  }
  absl::Status SetPartitionWeight(uint32_t partition, uint32_t weight) override {
    return scheduler_->SetPartitionWeight(partition, weight);
  }

 private:
  p2p::EgressScheduler* const scheduler_;
};

// The admin API's form: an unbounded demand is reported as -1.
node::admin::ResourceShare ResourceShareOf(const flowctl::ResourceShareStats& s) {
  node::admin::ResourceShare r;
  r.set_weight(s.weight);
  r.set_guarantee(s.guarantee);
  r.set_ceiling(s.ceiling);
  r.set_demand(std::isinf(s.demand) ? -1 : s.demand);
  r.set_share(s.share);
  r.set_usage(s.usage);
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
      id_(p2p::NodeIdFromPublicKey(key_.public_key().bytes())) {}

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

  // 4. Partitions (opened before the network delivers anything to them).
  std::vector<p2p::NodeId> ids;
  std::vector<base::PublicKey> keys;
  for (auto& [id, pk] : members) {
    ids.push_back(id);
    keys.push_back(pk);
  }
  std::vector<p2p::NodeId> others;
  for (const p2p::NodeId& member : ids) {
    if (member != id_) others.push_back(member);
  }
  refusals_ = std::make_unique<PeerRefusals>(others);
  for (const auto& pc : config_.partitions()) {
    PartitionEnv env;
    env.config = pc;
    env.dir = absl::StrCat(config_.data_dir(), "/partition-", pc.id());
    env.pool = pool_.get();
    env.network = network_;
    env.key = key_;
    env.replica_ids = ids;
    env.replica_keys = keys;
    env.clock = options_.clock;
    env.scheduler = scheduler_.get();
    env.channels = &egress_->scheduler().channels();
    env.refusals = refusals_.get();
    env.fixed_retry_after = config_.resources().fixed_retry_after();
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
    partitions_.push_back(*std::move(part));
  }
  // Handlers before the transport starts: peer messages go straight to their partition's lanes.
  std::map<uint32_t, Partition*> by_id;
  for (auto& p : partitions_) by_id[p->id()] = p.get();
  network_->SetHandlers(
      [by_id, refusals = refusals_.get()](const p2p::NodeId& from, p2p::PartitionId part,
                                          p2p::Channel ch, std::string payload) {
        auto it = by_id.find(part);
        if (it != by_id.end()) {
          it->second->OnPeerMessage(from, ch, std::move(payload));
        } else {
          refusals->Count(from, PeerRefusals::kUnknownPartition);
        }
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
  for (auto& p : partitions_) RETURN_IF_ERROR(p->Start());

  // 5. Arbiter.
  RETURN_IF_ERROR(StartArbiter());

  // 6. Servers.
  if (options_.serve_grpc) {
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
  LOG(INFO) << "noded " << kNodeVersion << " node " << id_ << " started: " << partitions_.size()
            << " partitions, " << members.size() << " replicas, client port " << client_port_
            << ", admin port " << admin_port_ << ", p2p port " << p2p_port() << ", metrics port "
            << (metrics_ ? metrics_->port() : 0);
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
  metrics_.reset();
  if (arbiter_) arbiter_->Stop();
  for (auto it = partitions_.rbegin(); it != partitions_.rend(); ++it) (*it)->Stop(drain);
  if (scheduler_) scheduler_->Stop();
  if (egress_) egress_->Stop();
  if (transport_) transport_->Stop();
  partitions_.clear();
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

absl::StatusOr<Partition*> Node::FindPartition(const node::client::PartitionRef& ref) const {
  if (ref.id() != 0) {
    for (const auto& p : partitions_) {
      if (p->id() == ref.id()) return p.get();
    }
    return absl::NotFoundError(absl::StrCat("unknown partition id ", ref.id()));
  }
  if (ref.name().empty()) {
    return absl::InvalidArgumentError("partition: give its id or its name");
  }
  for (const auto& p : partitions_) {
    if (p->name() == ref.name()) return p.get();
  }
  return absl::NotFoundError(absl::StrCat("unknown partition \"", ref.name(), "\""));
}

absl::StatusOr<Partition*> Node::FindPartition(const std::string& id_or_name) const {
  node::client::PartitionRef ref;
  uint32_t id = 0;
  if (absl::SimpleAtoi(id_or_name, &id) && id != 0) {
    ref.set_id(id);
  } else {
    ref.set_name(id_or_name);
  }
  return FindPartition(ref);
}

std::vector<Partition*> Node::partitions() const {
  std::vector<Partition*> out;
  for (const auto& p : partitions_) out.push_back(p.get());
  return out;
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
  for (const auto& p : partitions_) *s.add_partitions() = p->Status();
  s.set_cpu_workers(static_cast<uint32_t>(cpu_workers()));
  return s;
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
  for (const p2p::NodeId& id : network_->peers()) {
    auto* info = out.add_peers();
    info->set_node_id(id);
    info->set_address(address[id]);
    info->set_connected(std::find(connected.begin(), connected.end(), id) != connected.end());
    if (refusals_ != nullptr) {
      node::admin::PeerRefusals* r = info->mutable_refused();
      r->set_unknown_partition(refusals_->count(id, PeerRefusals::kUnknownPartition));
      r->set_malformed(refusals_->count(id, PeerRefusals::kMalformed));
      r->set_wrong_channel(refusals_->count(id, PeerRefusals::kWrongChannel));
      r->set_bad_signature(refusals_->count(id, PeerRefusals::kBadSignature));
      r->set_bad_tx(refusals_->count(id, PeerRefusals::kBadTx));
      r->set_bad_frame(refusals_->count(id, PeerRefusals::kBadFrame));
    }
  }
  return out;
}

absl::StatusOr<node::admin::FlowStats> Node::FlowStats(const std::string& partition) const {
  node::admin::FlowStats out;
  out.set_unix_millis(absl::ToUnixMillis(absl::Now()));
  if (!partition.empty()) {
    ASSIGN_OR_RETURN(Partition * p, FindPartition(partition));
    *out.add_partitions() = p->FlowStats();
  } else {
    for (const auto& p : partitions_) *out.add_partitions() = p->FlowStats();
  }
  for (auto& p : *out.mutable_partitions()) {
    std::optional<flowctl::ConsumerShareStats> shares;
    if (arbiter_) shares = arbiter_->StatsOf(p.id());
    if (!shares) continue;
    *p.mutable_cpu() = ResourceShareOf(shares->cpu);
    *p.mutable_memory() = ResourceShareOf(shares->memory);
    *p.mutable_egress() = ResourceShareOf(shares->egress);
    *p.mutable_disk() = ResourceShareOf(shares->disk);
  }
  if (egress_) {
    p2p::EgressStats es = egress_->scheduler().Stats();
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
  if (request.entries().empty() && request.cpu_workers() == 0) {
    return absl::InvalidArgumentError(
        "entries: give at least one partition (or cpu_workers to change only the worker count)");
  }
  std::vector<std::pair<Partition*, node::config::ShareConfig>> changes;
  std::vector<ConfigProblem> problems;  // validated as the config it would leave
  for (int i = 0; i < request.entries_size(); ++i) {
    const auto& e = request.entries(i);
    const std::string at = absl::StrCat("entries[", i, "]");
    absl::StatusOr<Partition*> p = FindPartition(e.partition());
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
  std::vector<node::config::ShareConfig> shares;
  for (const auto& p : partitions_) {
    node::config::ShareConfig share = p->config().share();
    for (const auto& [changed, next] : changes) {
      if (changed == p.get()) share = next;
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
  std::vector<node::config::PartitionConfig> out;
  for (const auto& p : partitions_) out.push_back(p->config());
  return out;
}

absl::Status Node::StartArbiter() {
  egress_accounting_ = std::make_unique<SchedulerEgressAccounting>(&egress_->scheduler());
  flowctl::WorkerPool* pool = pool_.get();
  flowctl::ArbiterService::Options options{
      .tick = absl::Milliseconds(config_.resources().arbiter_tick_ms()),
      .cpu_workers = [pool] { return pool->threads(); },
      .memory_bytes = config_.resources().memory_bytes(),
      .disk_bytes = config_.resources().spill_disk_bytes(),
      .clock = options_.clock};
  ASSIGN_OR_RETURN(arbiter_,
                   flowctl::ArbiterService::Create(std::move(options), egress_accounting_.get()));
  for (const auto& p : partitions_) RETURN_IF_ERROR(arbiter_->AddConsumer(p.get()));
  return arbiter_->Start();
}

void Node::ArbiterTick() {
  if (arbiter_) arbiter_->Tick();
}

}  // namespace runtime
