// Partition: construction, the client path, queries and admin. The peer path, consensus and the
// ticker are in partition_consensus.cc.
#include "runtime/partition.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flowctl/clock.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/partition_channels.h"
#include "runtime/config_validation.h"
#include "runtime/partition_impl.h"

namespace runtime {
namespace {

using node::config::PartitionConfig;

flowctl::SpillDurability DurabilityOf(node::config::LosslessConfig::Durability d) {
  switch (d) {
    case node::config::LosslessConfig::NONE:
      return flowctl::SpillDurability::kNone;
    case node::config::LosslessConfig::EVERY_RECORD:
      return flowctl::SpillDurability::kEveryRecord;
    default:
      return flowctl::SpillDurability::kInterval;
  }
}

int LaneWeight(double w) { return static_cast<int>(std::max(1.0, std::round(w))); }

}  // namespace

// The tracker outlives what it tracks by a margin: the pool holds at most max_txs txs for at most
// its TTL, the lossless FIFO and fetches add a few more.
partitions::TxTrackerPolicy TrackerPolicyFor(const partitions::TxPoolLimits& pool) {
  constexpr size_t kMinEntries = 65'536;
  constexpr size_t kEntriesPerPoolSlot = 4;
  const absl::Duration kMinAge = absl::Minutes(10);
  return {.max_entries = std::max(kMinEntries, kEntriesPerPoolSlot * pool.max_txs),
          .max_age = std::max(kMinAge, 2 * pool.ttl)};
}

std::vector<int> LaneWeights(const node::config::LaneConfig& w) {
  return {LaneWeight(w.consensus()), LaneWeight(w.sync()), LaneWeight(w.tx_forward()),
          LaneWeight(w.bulk()), LaneWeight(w.client())};
}

std::vector<flowctl::Dispatcher::DelayTarget> LaneDelayTargets(
    const node::config::DispatcherConfig& d) {
  std::vector<flowctl::Dispatcher::DelayTarget> out(kNumPartitionLanes + 1);  // + the tick lane
  const node::config::AdaptiveLaneWeights& a = d.adaptive_weights();
  if (!a.enabled()) return out;
  const node::config::LaneDelayTarget* targets[kNumPartitionLanes] = {
      &a.consensus(), &a.sync(), &a.tx_forward(), &a.bulk(), &a.client()};
  for (int i = 0; i < kNumPartitionLanes; ++i) {
    out[i] = {
        .target_nanos = static_cast<int64_t>(targets[i]->target_p99_ms() * 1e6),
        .max_weight = targets[i]->max_weight() > 0 ? LaneWeight(targets[i]->max_weight()) : 0};
  }
  out[kTickLane] = out[kConsensusLane];  // ticks compete like consensus messages (see Open)
  return out;
}

// ---- Impl: construction ----

Partition::Impl::Impl(PartitionEnv env)
    : env_(std::move(env)),
      id_(env_.config.id()),
      name_(env_.config.name()),
      clock_(env_.clock),
      config_(env_.config) {
  fixed_retry_after_ = env_.fixed_retry_after;
}

Partition::Impl::~Impl() { Stop(absl::ZeroDuration()); }

partitions::TxPoolLimits Partition::Impl::PoolLimitsFrom(const node::config::PoolConfig& p) const {
  partitions::TxPoolLimits limits;
  limits.max_txs = p.max_txs();
  limits.max_bytes = p.max_bytes();
  limits.max_per_sender = p.max_per_sender();
  limits.forward_reserve = p.forward_reserve_fraction();
  limits.high_water = p.high_water_fraction();
  if (p.ttl_seconds() > 0) limits.ttl = absl::Seconds(p.ttl_seconds());
  return limits;
}

absl::Status Partition::Impl::Open() {
  const PartitionConfig& cfg = env_.config;
  if (env_.pool == nullptr || env_.network == nullptr || !env_.key.has_value()) {
    return absl::InvalidArgumentError("partition: worker pool, network and key are required");
  }
  if (env_.replica_ids.size() != env_.replica_keys.size() || env_.replica_ids.empty()) {
    return absl::InvalidArgumentError("partition: replica ids and keys must match");
  }
  for (uint32_t i = 0; i < env_.replica_ids.size(); ++i) index_of_[env_.replica_ids[i]] = i;
  auto self = index_of_.find(env_.network->self());
  if (self == index_of_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition ", name_, ": this node (", env_.network->self(), ") is not in the replica set"));
  }
  self_index_ = self->second;

  std::error_code ec;
  std::filesystem::create_directories(env_.dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot create ", env_.dir, ": ", ec.message()));
  }

  tx_limits_.partition = id_;
  if (cfg.pool().max_tx_bytes() > 0) tx_limits_.max_tx_bytes = cfg.pool().max_tx_bytes();

  node::chain::GenesisConfig genesis;
  for (const auto& acct : cfg.genesis()) {
    auto* a = genesis.add_allocations();
    a->set_address_hex(acct.public_key_hex());
    a->set_balance(acct.balance());
  }
  partitions::LedgerOptions ledger_options;
  ledger_options.state_cache_bytes = cfg.state().cache_bytes();
  ledger_options.block_cache_bytes = cfg.state().block_cache_bytes();
  ledger_options.write_buffer_bytes = env_.ledger_write_buffer_bytes;
  ledger_options.retain_blocks = cfg.state().retain_blocks();
  // A range delete per 1/16 of the kept blocks, at most every 64 blocks.
  ledger_options.prune_step = std::clamp<uint64_t>(cfg.state().retain_blocks() / 16, 1, 64);
  ledger_options.height_keyed_meta = {partitions::kCertKeyPrefix};
  ASSIGN_OR_RETURN(chain_,
                   partitions::OpenChain(env_.dir + "/ledger", id_, genesis, ledger_options));
  partitions::ConsensusStoreOptions store_options;
  store_options.block_cache = env_.consensus_store_cache;
  ASSIGN_OR_RETURN(store_,
                   partitions::RocksDbConsensusStore::Open(env_.dir + "/consensus", store_options));
  ASSIGN_OR_RETURN(crypto_, partitions::Ed25519PbftCrypto::Create(id_, self_index_, *env_.key,
                                                                  env_.replica_keys));

  partitions::TxPoolLimits limits = PoolLimitsFrom(cfg.pool());
  RETURN_IF_ERROR(partitions::ValidateTxPoolLimits(limits));
  partitions::Executor* executor = chain_.executor.get();
  pool_ = std::make_unique<partitions::TxPool>(
      limits, clock_, [executor](absl::string_view s) { return executor->NextNonce(s); });
  tracker_.SetPolicy(TrackerPolicyFor(limits));
  SetRetryReserve(cfg.pool().retry_reserve_fraction());
  sender_ =
      std::make_unique<partitions::PeerSender>(env_.network, id_, env_.replica_ids, self_index_);
  peer_admission_ = std::make_unique<flowctl::PeerAdmission>(
      static_cast<uint32_t>(env_.replica_ids.size()), self_index_);
  pipeline_ = std::make_unique<partitions::CommitPipeline>(
      partitions::CommitPipeline::Deps{.partition = id_,
                                       .chain = &chain_,
                                       .pool = pool_.get(),
                                       .tracker = &tracker_,
                                       .tx_limits = tx_limits_,
                                       .clock = clock_});
  feed_ = std::make_unique<partitions::CommitFeed>(chain_.ledger->last_height());
  feed_->Subscribe(this);  // first: height() shows a block before its waiters hear of it
  feed_->Subscribe(&waiters_);
  {
    const node::config::WatchConfig& w = cfg.watch();
    commit_streams_ = std::make_shared<CommitStreamHub>(
        name_, chain_.ledger.get(),
        CommitStreamLimits{.max_watchers = w.max_watchers(),
                           .max_buffered_blocks = w.max_buffered_blocks(),
                           .max_buffered_bytes = w.max_buffered_bytes()});
    feed_->Subscribe(commit_streams_.get());
  }

  // Interceptor predicates read atomics only. Consensus not NORMAL means unavailable (another
  // node may serve); a full pool means overloaded (retry here later).
  RETURN_IF_ERROR(registry_.RegisterPredicate(
      kConsensusNormalPredicate, flowctl::RejectKind::kUnavailable,
      [this](const flowctl::RequestMeta&) {
        return driver_->state() == static_cast<int>(partitions::ConsensusState::kNormal);
      }));
  RETURN_IF_ERROR(registry_.RegisterPredicate(
      kPoolBelowHighWaterPredicate, flowctl::RejectKind::kOverloaded,
      [this](const flowctl::RequestMeta& request) { return PoolGateAdmits(request); },
      [this](const flowctl::RequestMeta& request) {
        return PoolRetryAfter(/*take_slot=*/true,
                              request.retry != nullptr ? &request.retry->issued : nullptr);
      }));
  ASSIGN_OR_RETURN(auto factory, registry_.Build(cfg.interceptor()));
  interceptor_ = std::make_unique<flowctl::StageChainHolder>(
      factory->Create(flowctl::StageContext{.partition = id_, .clock = clock_}));
  ASSIGN_OR_RETURN(auto read_factory, registry_.Build(cfg.read_interceptor()));
  read_chain_ = std::make_unique<flowctl::StageChainHolder>(
      read_factory->Create(flowctl::StageContext{.partition = id_, .clock = clock_}));
  SetReadHold(cfg.read_hold());

  flowctl::Dispatcher::Options d;
  d.name = name_;
  d.clock = clock_;
  d.budget.max_messages = cfg.dispatcher().budget_messages();
  d.budget.max_bytes = static_cast<int64_t>(cfg.dispatcher().budget_bytes());
  std::vector<int> weights = LaneWeights(cfg.dispatcher().lane_weights());
  std::vector<flowctl::Dispatcher::DelayTarget> targets = LaneDelayTargets(cfg.dispatcher());
  const char* names[kNumPartitionLanes] = {
      partitions::kConsensusLaneName, partitions::kSyncLaneName, partitions::kTxForwardLaneName,
      partitions::kBulkLaneName, "client"};
  if (env_.scheduler == nullptr) {
    return absl::InvalidArgumentError("partition: a tick scheduler is required");
  }
  for (int i = 0; i < kNumPartitionLanes; ++i) {
    flowctl::Dispatcher::Handler handler;
    if (i == kClientLane) {
      handler = [this](flowctl::Message m) { admission_->HandleJob(std::move(m)); };
    } else {
      handler = [this](flowctl::Message m) { HandlePeerMessage(std::move(m)); };
    }
    // The consensus lane's delay is always measured (node-wide admission watches it). The memory
    // share never shrinks the consensus and sync lanes: their messages (view changes, snapshot
    // manifests and chunks) have no small bound, and dropping them costs liveness.
    d.lanes.push_back({.name = names[i],
                       .weight = weights[i],
                       .handler = std::move(handler),
                       .delay_target = targets[i],
                       .watch_delay = i == kConsensusLane,
                       .exempt_from_byte_cap = i == kConsensusLane || i == kSyncLane});
  }
  // Ticks compete for CPU like consensus messages (they cut and sign proposals and fire
  // consensus timers); coalesced, so two slots are plenty.
  d.lanes.push_back({.name = "tick",
                     .weight = weights[kConsensusLane],
                     .handler = [this](flowctl::Message) { HandleTick(); },
                     .reserved_messages = 2,
                     .delay_target = targets[kTickLane]});
  ASSIGN_OR_RETURN(dispatcher_, flowctl::Dispatcher::Create(env_.pool, std::move(d)));
  // Registered once, before anything can ask for a tick; ticks run only after Start.
  tick_id_ = env_.scheduler->Register([this](int64_t) { RequestTick(); });
  // Inbound routing comes from the channel descriptors: each channel feeds the lane it names.
  channels_ = env_.channels != nullptr ? env_.channels : &partitions::NodeChannelTable();
  lane_of_channel_.fill(-1);
  for (const p2p::ChannelDescriptor& c : channels_->by_priority()) {
    const int lane = dispatcher_->FindLane(c.lane);
    if (lane < 0 || lane == kClientLane || lane == kTickLane) {
      return absl::InvalidArgumentError(
          absl::StrCat("channel ", p2p::ChannelName(c.channel), " feeds lane \"", c.lane,
                       "\", which partition ", name_, " does not have"));
    }
    lane_of_channel_[static_cast<size_t>(c.channel)] = lane;
  }

  const auto& cc = cfg.consensus();
  partitions::BatchPolicy::Options bp{
      .max_txs = cc.batch_max_txs(),
      .max_bytes = cc.batch_max_bytes(),
      .max_delay_nanos = int64_t{cc.batch_timeout_ms()} * 1'000'000};
  RETURN_IF_ERROR(partitions::BatchPolicy::Validate(bp));
  batch_policy_ = std::make_unique<partitions::BatchPolicy>(bp);

  partitions::PbftConfig pc;
  pc.n = static_cast<uint32_t>(env_.replica_ids.size());
  pc.self = self_index_;
  pc.checkpoint_interval = cc.checkpoint_interval();
  pc.window = cc.watermark_window();
  pc.max_batch_txs = std::max<uint32_t>(cc.batch_max_txs(), 1);
  pc.max_inflight = std::min<uint64_t>(pc.window, 8);
  pc.request_timeout_ms = cc.view_change_timeout_ms();
  pc.view_change_timeout_ms = cc.view_change_timeout_ms();
  pc.retransmit_ms = std::max<int64_t>(100, cc.view_change_timeout_ms() / 4);
  pc.snapshot_min_gap = cc.snapshot_sync_min_blocks();
  // A held tx not proposed within one retransmit period is forwarded (forwarder.h).
  forwarder_ = std::make_unique<partitions::Forwarder>(
      sender_.get(), clock_,
      partitions::Forwarder::Options{
          .hold_nanos = pc.retransmit_ms * 1'000'000,
          .min_interval_nanos = int64_t{cc.forward_interval_ms()} * 1'000'000});
  partitions::PbftReplica::LedgerPosition position;
  position.last_executed = chain_.ledger->last_height();
  if (position.last_executed > 0) {
    ASSIGN_OR_RETURN(position.chain_digest,
                     chain_.ledger->GetConsensusMeta(partitions::kChainDigestKey));
    position.state_root = chain_.executor->state_root();
  }
  height_.store(position.last_executed);
  partitions::ConsensusDriver::Deps dd;
  dd.name = name_;
  dd.clock = clock_;
  dd.crypto = crypto_.get();
  dd.equivocate = env_.test_equivocate;
  dd.withhold = env_.test_withhold;
  dd.slow_round_nanos = int64_t{cc.slow_round_log_ms()} * 1'000'000;
  chain_.executor->PlantNondeterminismForTest(env_.test_diverge_height);
  dd.store = store_.get();
  dd.pool = pool_.get();
  dd.tracker = &tracker_;
  dd.forwarder = forwarder_.get();
  dd.sender = sender_.get();
  dd.pipeline = pipeline_.get();
  dd.feed = feed_.get();
  dd.ledger = chain_.ledger.get();
  dd.executor = chain_.executor.get();
  dd.snapshot_serve_bytes_per_second = static_cast<double>(cc.snapshot_serve_bytes_per_second());
  dd.batch_policy = batch_policy_.get();
  if (env_.block_budget != nullptr) {
    dd.partial_batch_interval = [budget = env_.block_budget, id = id_](int64_t now,
                                                                       int64_t max_nanos) {
      return budget->PartialBatchIntervalNanos(id, now, max_nanos);
    };
  }
  dd.tx_limits = tx_limits_;
  // Stages that follow requests (adaptive admission) hear of commits in the critical section
  // that removed the txs from the pool, and tick under the same lock, so a sweep never takes a
  // just-committed tx for a dropped one.
  dd.on_commit_locked = [this](const partitions::CommitEvent& e) {
    // The ledger's tip is this block now: its header, for the commit streams, without a read.
    if (commit_streams_->has_live_watchers()) {
      commit_streams_->NoteCommittedHeader(chain_.ledger->last_header());
    }
    if (!interceptor_->Get()->follows_requests()) return;
    std::vector<std::string> hashes;
    hashes.reserve(e.txs.size());
    for (const partitions::TxPtr& tx : e.txs) hashes.push_back(tx->hash);
    interceptor_->Committed(hashes, e.commit_nanos);
  };
  dd.on_tick_locked = [this](int64_t now) {
    interceptor_->Tick(now, pool_view_);
    return interceptor_->Get()->follows_requests();
  };
  dd.request_tick = [this] { RequestTick(); };
  if (cfg.lossless().enabled()) {
    // A drained tx the pool drops (expired, stale) will never commit: its record must not pin
    // the FIFO's persisted position (and its disk budget) for ever.
    pool_->TrackDropped(true);
    dd.on_pool_dropped = [this](std::vector<std::string> hashes) {
      if (spill_cursor_) spill_cursor_->Dropped(hashes);
    };
  }
  dd.wake_by = [this](int64_t when) { WakeBy(when); };
  ASSIGN_OR_RETURN(driver_, partitions::ConsensusDriver::Create(std::move(dd), pc, position));

  if (cfg.lossless().enabled()) {
    const auto& l = cfg.lossless();
    flowctl::SpillFifoOptions so;
    so.dir = env_.dir + "/spill";
    if (l.memory_bytes() > 0) so.memory_bytes = l.memory_bytes();
    if (l.segment_bytes() > 0) so.segment_bytes = l.segment_bytes();
    so.max_record_bytes = static_cast<uint32_t>(tx_limits_.max_tx_bytes);
    so.durability = DurabilityOf(l.durability());
    if (l.sync_interval_ms() > 0) so.sync_interval = absl::Milliseconds(l.sync_interval_ms());
    so.disk_budget_bytes = l.disk_budget_bytes();
    ASSIGN_OR_RETURN(fifo_, flowctl::SpillFifo::Open(so));
    // A drained record is safe only once its tx commits (the pool is memory): the FIFO may
    // record as consumed only what has committed, so a restart replays the rest.
    spill_cursor_ =
        std::make_unique<partitions::SpillCursor>(fifo_.get(), fifo_->stats().persisted_seq);
    feed_->Subscribe(spill_cursor_.get());
    flowctl::QuotaDrainOptions qo;
    qo.rate_bytes_per_sec = static_cast<double>(l.drain_bytes_per_second());
    qo.clock = clock_;
    RETURN_IF_ERROR(flowctl::QuotaDrain::ValidateOptions(qo));
    drain_ = std::make_unique<flowctl::QuotaDrain>(
        fifo_.get(),
        [this](const flowctl::SpillFifo::Record& r) {
          // The drain thread decodes, verifies and pools: the partition's CPU, off the pool.
          return ChargeOffPool([&] { return admission_->DrainSink(r); });
        },
        qo);
  }
  admission_ = std::make_unique<partitions::ClientAdmission>(partitions::ClientAdmission::Deps{
      .partition = id_,
      .name = name_,
      .clock = clock_,
      .interceptor = interceptor_.get(),
      .dispatcher = dispatcher_.get(),
      .client_lane = kClientLane,
      .pool = pool_.get(),
      .tracker = &tracker_,
      .forwarder = forwarder_.get(),
      .waiters = &waiters_,
      .ledger = chain_.ledger.get(),
      .fifo = fifo_.get(),
      .spill_cursor = spill_cursor_.get(),
      .tx_limits = tx_limits_,
      .consensus_state = [this] { return StateName(); },
      .request_tick = [this] { RequestTick(); },
      .spill_retry_after = [this](uint64_t bytes) { return SpillRetryAfter(bytes); },
      .pool_retry_after = [this](uint64_t* ticket) { return PoolRetryAfter(true, ticket); },
      .client_lane_retry_after = [this] { return ClientLaneRetryAfter(); }});
  LOG(INFO) << "partition " << name_ << " (" << id_ << ") open: height " << height_.load()
            << ", replica " << self_index_ << " of " << env_.replica_ids.size()
            << (fifo_ ? ", lossless" : "");
  return absl::OkStatus();
}

absl::Status Partition::Impl::Start() {
  if (started_.exchange(true)) return absl::FailedPreconditionError("partition already started");
  {
    absl::MutexLock lock(&config_mu_);
    ApplyBlockWeightLocked();
  }
  driver_->Start();
  ticking_.store(true);
  RequestTick();
  if (drain_) RETURN_IF_ERROR(drain_->Start());
  return absl::OkStatus();
}

void Partition::Impl::Stop(absl::Duration drain) {
  if (stopping_.exchange(true)) return;
  if (commit_streams_) {
    commit_streams_->Close(
        absl::UnavailableError(absl::StrCat("partition ", name_, " is shutting down")));
  }
  if (!started_.load()) {
    if (tick_id_ != 0) env_.scheduler->Unregister(tick_id_);
    if (dispatcher_) dispatcher_->Stop();
    return;
  }
  if (drain_) drain_->Stop();
  if (dispatcher_ && drain > absl::ZeroDuration()) {
    absl::Status s = dispatcher_->Drain(drain);
    if (!s.ok()) LOG(WARNING) << "partition " << name_ << ": drain: " << s;
  }
  env_.scheduler->Unregister(tick_id_);  // no more ticks offered
  if (dispatcher_) dispatcher_->Stop();  // discards the rest; ClientJob answers UNAVAILABLE
  // After the last tick ran: a tick's batch cut would register the partition again. Under
  // config_mu_, so that an arbiter tick's ApplyBlockWeightLocked, which checks stopping_ under it,
  // cannot register it again either.
  if (env_.block_budget != nullptr) {
    absl::MutexLock lock(&config_mu_);
    env_.block_budget->Remove(id_);
  }
  forwarder_->Flush(/*release_all=*/true);
  waiters_.CancelAll(absl::UnavailableError(
      "partition is shutting down; the tx was admitted but its commit was not awaited"));
  if (fifo_) {
    absl::Status s = fifo_->PersistReadPosition();
    if (!s.ok()) LOG(WARNING) << "partition " << name_ << ": spill: " << s;
  }
  LOG(INFO) << "partition " << name_ << " stopped at height " << height_.load() << "; "
            << forwarder_->proposal_body_txs() << " own txs sent with proposals";
}

// ---- Client path ----

void Partition::Impl::Submit(std::vector<std::string> txs, const SubmitOptions& options,
                             bool single, SubmitDone single_done, BatchDone batch_done) {
  // The gRPC thread's part of the partition's CPU (gates, the interceptor, decoding, refusals,
  // lossless appends), charged with the worker pool's for the arbiter (TakeUsage).
  ChargeOffPool([&] {
    SubmitCharged(std::move(txs), options, single, std::move(single_done), std::move(batch_done));
  });
}

void Partition::Impl::SubmitCharged(std::vector<std::string> txs, const SubmitOptions& options,
                                    bool single, SubmitDone single_done, BatchDone batch_done) {
  partitions::SubmitGate gate;
  if (stopping_.load(std::memory_order_relaxed)) {
    gate = absl::UnavailableError(absl::StrCat("partition ", name_, " is shutting down"));
  } else if (paused_.load(std::memory_order_relaxed)) {
    gate = absl::UnavailableError(
        absl::StrCat("partition ", name_, " is paused by the operator; retry after resume"));
  } else if (const int state = driver_->state();
             state == partitions::kHaltedState ||
             state == static_cast<int>(partitions::ConsensusState::kDiverged)) {
    // Whatever the interceptor's stages: a halted replica never commits here again.
    gate = absl::UnavailableError(absl::StrCat(
        "partition ", name_, " is ", state == partitions::kHaltedState ? "halted" : "DIVERGED",
        " on this node (see its halt_reason); another node may serve it"));
  } else if (env_.memory_pressure != nullptr && env_.memory_pressure->refuse_clients()) {
    // Before anything is parsed: the node is short of memory (flowctl/memory_pressure.h).
    env_.memory_pressure->CountRefusedWrites(txs.size());
    gate =
        partitions::SubmitGate(absl::ResourceExhaustedError(env_.memory_pressure->RefusalMessage()),
                               std::string(kMemoryPressureStage), kMemoryPressureRetryAfter);
  } else if (!shedder_.Admit()) {
    // Before anything is parsed: the node is congested and this partition's share of client
    // writes is cut (flowctl/node_admission.h).
    gate = partitions::SubmitGate(absl::ResourceExhaustedError(absl::StrCat(
                                      "node congested: partition ", name_, " admits ",
                                      static_cast<int>(100 * shedder_.fraction()),
                                      "% of client writes until the episode ends; retry later")),
                                  std::string(kNodeAdmissionStage), kNodeAdmissionRetryAfter);
  }
  admission_->Submit(std::move(txs), options, gate, single, std::move(single_done),
                     std::move(batch_done));
}

}  // namespace runtime
