#include "runtime/node.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flowctl/arbiter.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/partition_channels.h"
#include "runtime/config.h"
#include "runtime/grpc_servers.h"
#include "runtime/metrics.h"
#include "runtime/node_metrics.h"
#include "runtime/partition_impl.h"
#include "runtime/tls.h"  // TLS (issue 9)

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

absl::StatusOr<p2p::PrivateKey> LoadOrCreateKey(const std::string& path) {
  if (std::filesystem::exists(path)) return p2p::PrivateKey::ReadPemFile(path);
  ASSIGN_OR_RETURN(p2p::PrivateKey key, p2p::PrivateKey::Generate());
  RETURN_IF_ERROR(key.WritePemFile(path));
  LOG(INFO) << "generated a new node key in " << path;
  return key;
}


}  // namespace

std::string KeyFilePath(const NodeConfig& config) {
  return config.key_file().empty() ? config.data_dir() + "/node.key" : config.key_file();
}

absl::StatusOr<std::unique_ptr<Node>> Node::Create(NodeConfig config, NodeOptions options) {
  std::vector<ConfigProblem> problems = ValidateNodeConfig(config);
  if (!problems.empty()) {
    std::vector<std::string> lines;
    for (const auto& p : problems) lines.push_back(absl::StrCat(p.path, ": ", p.message));
    return absl::InvalidArgumentError(absl::StrJoin(lines, "; "));
  }
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir(), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("data_dir: cannot create ", config.data_dir(), ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(p2p::PrivateKey key, LoadOrCreateKey(KeyFilePath(config)));
  std::string token;
  if (!config.admin_token_file().empty()) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(config.admin_token_file()));
  }
  auto node = std::unique_ptr<Node>(new Node(std::move(config), options, std::move(key)));
  node->admin_token_ = std::move(token);
  return node;
}

Node::Node(NodeConfig config, NodeOptions options, p2p::PrivateKey key)
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

  // 2. Replica set: every configured node, sorted by id (the same order on every node).
  std::vector<std::pair<p2p::NodeId, p2p::PublicKey>> members = {{id_, key_.public_key()}};
  std::vector<p2p::PeerSpec> specs;
  for (const auto& peer : config_.peers()) {
    std::string raw = absl::HexStringToBytes(peer.public_key_hex());
    ASSIGN_OR_RETURN(p2p::PublicKey pk, p2p::PublicKey::FromBytes(raw));
    members.push_back({p2p::NodeIdFromPublicKey(raw), pk});
    specs.push_back({.public_key = raw, .address = peer.address()});
  }
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i].first == members[i - 1].first) {
      return absl::InvalidArgumentError(
          absl::StrCat("peers: node ", members[i].first,
                       " is listed twice (or is this node's own key)"));
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
  std::vector<p2p::PublicKey> keys;
  for (auto& [id, pk] : members) {
    ids.push_back(id);
    keys.push_back(pk);
  }
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
      [by_id](const p2p::NodeId& from, p2p::PartitionId part, p2p::Channel ch,
              std::string payload) {
        auto it = by_id.find(part);
        if (it != by_id.end()) it->second->OnPeerMessage(from, ch, std::move(payload));
      },
      [](const p2p::NodeId& peer, p2p::PeerEvent ev) { LOG(INFO) << "peer " << peer << " " << ev; });
  for (const auto& p : partitions_) {
    RETURN_IF_ERROR(egress_->scheduler().SetPartitionWeight(
        p->id(), static_cast<uint32_t>(std::max(1.0, p->config().share().weight() * 100))));
  }
  if (transport_ != nullptr) RETURN_IF_ERROR(transport_->Start());
  if (!options_.egress_by_hand) RETURN_IF_ERROR(egress_->Start());
  for (auto& p : partitions_) RETURN_IF_ERROR(p->Start());

  // 5. Arbiter.
  ArbiterTick();
  arbiter_thread_ = std::thread([this] { ArbiterLoop(); });

  // 6. Servers.
  if (options_.serve_grpc) {
    ASSIGN_OR_RETURN(servers_, GrpcServers::Start(this, config_, admin_token_));
    client_port_ = servers_->client_port();
    admin_port_ = servers_->admin_port();
  }
  if (options_.serve_metrics && !config_.metrics_listen().empty()) {
    ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(config_.metrics_listen()));
    RegisterNodeMetrics(metrics_.get(), this);
  }
  LOG(INFO) << "noded " << kNodeVersion << " node " << id_ << " started: " << partitions_.size()
            << " partitions, " << members.size() << " replicas, client port " << client_port_
            << ", admin port " << admin_port_ << ", p2p port " << p2p_port();
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
  stop_arbiter_.Notify();
  if (arbiter_thread_.joinable()) arbiter_thread_.join();
  for (auto it = partitions_.rbegin(); it != partitions_.rend(); ++it) (*it)->Stop(drain);
  if (egress_) egress_->Stop();
  if (transport_) transport_->Stop();
  partitions_.clear();
  servers_.reset();
  if (pool_) pool_->Stop();
  LOG(INFO) << "node stopped";
}

int Node::p2p_port() const { return transport_ ? transport_->port() : 0; }

std::string Node::metrics_address() const { return metrics_ ? metrics_->address() : ""; }

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
  return s;
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
  if (request.entries().empty()) {
    return absl::InvalidArgumentError("entries: give at least one partition");
  }
  std::vector<std::pair<Partition*, node::config::ShareConfig>> changes;
  for (int i = 0; i < request.entries_size(); ++i) {
    const auto& e = request.entries(i);
    const std::string at = absl::StrCat("entries[", i, "]");
    absl::StatusOr<Partition*> p = FindPartition(e.partition());
    if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat(at, ".partition: ", p.status().message()));
    const auto& s = e.share();
    if (!(s.weight() > 0) || !std::isfinite(s.weight())) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".share.weight: must be > 0, got ", s.weight()));
    }
    if (!(s.guarantee_fraction() >= 0 && s.guarantee_fraction() <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".share.guarantee_fraction: must be in [0, 1], got ", s.guarantee_fraction()));
    }
    double ceiling = s.ceiling_fraction() == 0 ? 1 : s.ceiling_fraction();
    if (!(ceiling > 0 && ceiling <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".share.ceiling_fraction: must be in (0, 1] (0 = 1), got ", s.ceiling_fraction()));
    }
    if (ceiling < s.guarantee_fraction()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".share.ceiling_fraction: ", ceiling,
                       " is below guarantee_fraction ", s.guarantee_fraction()));
    }
    node::config::ShareConfig share = s;
    share.set_ceiling_fraction(ceiling);
    changes.push_back({*p, share});
  }
  double guaranteed = 0;
  for (const auto& p : partitions_) {
    double g = p->config().share().guarantee_fraction();
    for (const auto& [cp, share] : changes) {
      if (cp == p.get()) g = share.guarantee_fraction();
    }
    guaranteed += g;
  }
  if (guaranteed > 1 + 1e-9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "entries: guarantee fractions would sum to ", guaranteed, " over all partitions (max 1)"));
  }
  for (const auto& [p, share] : changes) p->SetShareConfig(share);
  ArbiterTick();
  std::vector<node::config::PartitionConfig> out;
  for (const auto& p : partitions_) out.push_back(p->config());
  return out;
}

void Node::ArbiterLoop() {
  const absl::Duration tick = absl::Milliseconds(std::max<uint32_t>(
      10, config_.resources().arbiter_tick_ms() == 0 ? 100 : config_.resources().arbiter_tick_ms()));
  while (!stop_arbiter_.WaitForNotificationWithTimeout(tick)) ArbiterTick();
}

void Node::ArbiterTick() {
  absl::MutexLock lock(&arbiter_mu_);
  if (partitions_.empty() || pool_ == nullptr) return;
  const int64_t now = options_.clock->NowNanos();
  const double elapsed = arbiter_last_nanos_ == 0
                             ? 1e8
                             : std::max<double>(1e6, static_cast<double>(now - arbiter_last_nanos_));
  arbiter_last_nanos_ = now;

  std::map<uint32_t, uint64_t> egress_bytes;
  bool egress_limited = false;
  double egress_cap = 0;
  if (egress_) {
    p2p::EgressStats es = egress_->scheduler().Stats();
    for (const auto& [key, st] : es.partitions) egress_bytes[key.first] += st.bytes_sent;
    egress_limited = es.cap_bytes_per_second < flowctl::TokenBucket::kUnlimited;
    egress_cap = es.cap_bytes_per_second;
  }

  const size_t n = partitions_.size();
  std::vector<flowctl::ArbiterConsumer> cpu(n), mem(n), egress(n);
  std::vector<PartitionUsage> usage(n);
  std::vector<double> egress_rate(n, 0);
  const double cpu_capacity = static_cast<double>(pool_->threads()) * elapsed;
  uint64_t mem_capacity = config_.resources().memory_bytes();
  uint64_t mem_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    Partition* p = partitions_[i].get();
    usage[i] = p->TakeUsage();
    mem_sum += usage[i].memory_limit;
  }
  // No memory budget configured: every partition may use its configured limits.
  const bool mem_unlimited = mem_capacity == 0;
  if (mem_unlimited) mem_capacity = mem_sum;
  for (size_t i = 0; i < n; ++i) {
    Partition* p = partitions_[i].get();
    const node::config::ShareConfig s = p->config().share();
    const double ceiling = s.ceiling_fraction() == 0 ? 1 : s.ceiling_fraction();
    auto fill = [&](flowctl::ArbiterConsumer& c, double capacity, double demand) {
      c.weight = s.weight();
      c.guarantee = s.guarantee_fraction() * capacity;
      c.ceiling = std::max(c.guarantee, ceiling * capacity);
      c.demand = demand;
    };
    // Demand = what it would use if allowed: unbounded while its lanes are backlogged.
    fill(cpu[i], cpu_capacity,
         usage[i].cpu_backlogged ? flowctl::kUnboundedDemand
                                 : 1.25 * static_cast<double>(usage[i].cpu_nanos) + 1e5);
    // Memory: a partition using at least half of its last share wants its whole configured
    // limit; one using less lends the rest (keeping twice its usage, at least a quarter).
    const double limit = static_cast<double>(usage[i].memory_limit);
    const double used = static_cast<double>(usage[i].memory_bytes);
    const double last = mem_last_share_.contains(p->id()) ? mem_last_share_[p->id()] : limit;
    fill(mem[i], static_cast<double>(mem_capacity),
         mem_unlimited || used >= 0.5 * last
             ? limit
             : std::min(limit, std::max(2 * used, 0.25 * limit)));
    const uint64_t sent = egress_bytes[p->id()];
    const uint64_t prev = egress_last_[p->id()];
    egress_last_[p->id()] = sent;
    egress_rate[i] = static_cast<double>(sent - std::min(sent, prev)) * 1e9 / elapsed;
    fill(egress[i], egress_limited ? egress_cap : 1e12, 1.5 * egress_rate[i] + 65536);
  }
  auto cpu_shares = flowctl::AllocateFairShares(cpu_capacity, cpu);
  // What the worker pool gets is each partition's entitlement (every partition backlogged), not
  // its demand-capped share: the pool's stride scheduling is work-conserving by itself (an idle
  // group's time goes to the busy ones), and a low weight given to a quiet partition would make
  // its next message wait behind a busy neighbour's backlog. The demand-based shares above are
  // what the stats report as the current division.
  std::vector<flowctl::ArbiterConsumer> entitled = cpu;
  for (auto& c : entitled) c.demand = flowctl::kUnboundedDemand;
  auto cpu_weights = flowctl::AllocateFairShares(cpu_capacity, entitled);
  auto mem_shares = flowctl::AllocateFairShares(static_cast<double>(mem_capacity), mem);
  auto egress_shares =
      flowctl::AllocateFairShares(egress_limited ? egress_cap : 1e12, egress);
  // Egress weights likewise: the scheduler's round robin lends idle share by itself.
  std::vector<flowctl::ArbiterConsumer> egress_entitled = egress;
  for (auto& c : egress_entitled) c.demand = flowctl::kUnboundedDemand;
  auto egress_weights =
      flowctl::AllocateFairShares(egress_limited ? egress_cap : 1e12, egress_entitled);
  if (!cpu_shares.ok() || !cpu_weights.ok() || !mem_shares.ok() || !egress_shares.ok() ||
      !egress_weights.ok()) {
    LOG_EVERY_N(ERROR, 100) << "arbiter: " << cpu_shares.status() << " " << mem_shares.status()
                            << " " << egress_shares.status();
    return;
  }
  const double egress_total = egress_limited ? egress_cap : 1e12;
  for (size_t i = 0; i < n; ++i) {
    Partition* p = partitions_[i].get();
    const double cpu_share = std::max((*cpu_weights)[i], cpu_capacity * 1e-3);
    p->ApplyShares(cpu_share, (*mem_shares)[i]);
    mem_last_share_[p->id()] = (*mem_shares)[i];
    if (egress_) {
      const double frac = (*egress_weights)[i] / egress_total;
      absl::Status s = egress_->scheduler().SetPartitionWeight(
          p->id(), static_cast<uint32_t>(std::clamp(frac * 1000.0, 1.0, 1e6)));
      if (!s.ok()) {
        LOG_EVERY_N(WARNING, 100) << "arbiter: egress weight: " << s;
      }
    }
    auto share = [](const flowctl::ArbiterConsumer& c, double value, double used, double unit) {
      node::admin::ResourceShare r;
      r.set_weight(c.weight);
      r.set_guarantee(c.guarantee / unit);
      r.set_ceiling(c.ceiling / unit);
      r.set_demand(std::isinf(c.demand) ? -1 : c.demand / unit);
      r.set_share(value / unit);
      r.set_usage(used / unit);
      return r;
    };
    // CPU in cores (ns of CPU per ns of wall), memory in bytes, egress in bytes/s.
    p->RecordShares(share(cpu[i], (*cpu_shares)[i], static_cast<double>(usage[i].cpu_nanos), elapsed),
                    share(mem[i], (*mem_shares)[i], static_cast<double>(usage[i].memory_bytes), 1),
                    share(egress[i], (*egress_shares)[i], egress_rate[i], 1));
  }
}

}  // namespace runtime
