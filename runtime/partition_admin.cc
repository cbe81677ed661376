// Partition: stats, live flow updates, and the public facade over Partition::Impl.
#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flowctl/resource_consumer.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/executor.h"
#include "runtime/config_validation.h"
#include "runtime/partition_impl.h"

namespace runtime {

using node::config::PartitionConfig;

// ---- Queries ----

std::string Partition::Impl::StateName() const { return driver_->StateName(); }

node::admin::PartitionFlowStats Partition::Impl::FlowStats() const {
  node::admin::PartitionFlowStats out;
  out.set_id(id_);
  out.set_name(name_);
  // The hard CPU limit's effect (the node adds the arbiter's figures to the same message).
  const flowctl::Dispatcher::CpuLimitStats cpu_limit = dispatcher_->GetCpuLimitStats();
  out.mutable_cpu()->set_limit(cpu_limit.limit_cores);
  out.mutable_cpu()->set_limit_holds(static_cast<uint64_t>(cpu_limit.throttles));
  out.mutable_cpu()->set_limited_seconds(static_cast<double>(cpu_limit.throttled_nanos) * 1e-9);
  auto add_stages = [](const flowctl::StageChainHolder& chain, auto* stages) {
    for (const flowctl::StageStats& s : chain.Get()->Stats()) {
      auto* st = stages->Add();
      st->set_name(s.name);
      st->set_kind(s.kind);
      st->set_admitted(s.admitted);
      st->set_rejected(s.rejected);
      if (!s.gauges.empty()) st->set_current(s.gauges[0].value);
      if (s.gauges.size() > 1) st->set_limit(s.gauges[1].value);
      for (const flowctl::StageGauge& g : s.gauges) (*st->mutable_gauges())[g.name] = g.value;
    }
  };
  add_stages(*interceptor_, out.mutable_stages());
  add_stages(*read_chain_, out.mutable_read_stages());
  for (const flowctl::Dispatcher::LaneStats& l : dispatcher_->GetStats()) {
    auto* ls = out.add_lanes();
    ls->set_name(l.name);
    ls->set_weight(l.weight);
    ls->set_capacity_messages(l.capacity_messages);
    ls->set_capacity_bytes(l.capacity_bytes);
    ls->set_depth_messages(l.depth_messages);
    ls->set_depth_bytes(l.depth_bytes);
    ls->set_offered(l.offered);
    ls->set_processed(l.processed);
    ls->set_dropped_full(l.dropped_full + l.dropped_stopped);
    ls->set_dropped_bytes_full(l.dropped_bytes);
    *ls->mutable_queueing_delay() = LatencySummaryOf(l.queueing_delay);
    ls->set_cpu_nanos(l.cpu_nanos);
    ls->set_effective_weight(l.effective_weight);
    ls->set_delay_target_ms(static_cast<double>(l.delay_target_nanos) / 1e6);
    ls->set_max_weight(l.max_weight);
    ls->set_window_delay_ms(static_cast<double>(l.window_delay_nanos) / 1e6);
    ls->set_weight_raises(l.weight_raises);
    ls->set_weight_lowers(l.weight_lowers);
  }
  partitions::TxPoolStats ps = pool_->stats();
  partitions::TxPoolLimits pl = pool_->limits();
  auto* pool = out.mutable_pool();
  pool->set_txs(ps.txs);
  pool->set_bytes(ps.bytes);
  pool->set_max_txs(pl.max_txs);
  pool->set_max_bytes(pl.max_bytes);
  pool->set_above_high_water(pool_->AboveHighWater());
  pool->set_added(ps.added);
  pool->set_rejected_full(ps.rejected_full + ps.rejected_quota);
  pool->set_expired(ps.expired);
  const partitions::StateCacheStats cs = chain_.executor->cache_stats();
  auto* cache = out.mutable_state_cache();
  cache->set_hits(cs.hits);
  cache->set_misses(cs.misses);
  cache->set_entries(cs.entries);
  cache->set_bytes(cs.bytes);
  cache->set_capacity_bytes(cs.capacity_bytes);
  cache->set_evicted_misses(cs.evicted_misses);
  cache->set_ledger_memtable_bytes(chain_.ledger->MemtableBytes());
  cache->set_ledger_write_buffer_bytes(chain_.ledger->WriteBufferBytes());
  cache->set_ledger_block_cache_bytes(chain_.ledger->BlockCacheBytes());
  cache->set_ledger_block_cache_pinned_bytes(chain_.ledger->BlockCachePinnedBytes());
  cache->set_ledger_block_cache_capacity_bytes(chain_.ledger->BlockCacheCapacity());
  cache->set_borrowed_capacity_bytes(cache_borrowed_capacity_.load(std::memory_order_relaxed));
  cache->set_memory_demand_bytes(cache_memory_demand_.load(std::memory_order_relaxed));
  const partitions::ConsensusStoreMemory store = store_->Memory();
  cache->set_consensus_store_memtable_bytes(store.memtable_bytes);
  cache->set_consensus_store_table_reader_bytes(store.table_reader_bytes);
  auto write_stats = [](const partitions::RocksDbWriteStall& stall,
                        node::admin::LedgerWriteStats* writes) {
    writes->set_stopped(stall.stopped);
    writes->set_delayed_write_rate(stall.delayed_write_rate);
    writes->set_level0_files(stall.level0_files);
    writes->set_pending_compaction_bytes(stall.pending_compaction_bytes);
  };
  write_stats(chain_.ledger->WriteStallNow(), out.mutable_ledger_writes());
  write_stats(store_->WriteStallNow(), out.mutable_consensus_store_writes());
  if (fifo_) {
    flowctl::SpillFifoStats fs = fifo_->stats();
    auto* sp = out.mutable_spill();
    sp->set_appended(fs.appended);
    sp->set_drained(fs.consumed);
    sp->set_memory_bytes(fs.memory_bytes);
    sp->set_disk_bytes(fs.disk_bytes);
    sp->set_segments(fs.segments);
    sp->set_drain_bytes_per_second(drain_->rate());
    sp->set_drain_measured_bytes_per_second(drain_meter_.rate());
    sp->set_disk_budget_bytes(fs.disk_budget_bytes);
    sp->set_memory_budget_bytes(fs.memory_budget_bytes);
    sp->set_refused_disk_budget(fs.refused);
  }
  auto* hints = out.mutable_retry_hints();
  hints->set_commit_txs_per_second(commit_meter_.rate());
  hints->set_commit_blocks_per_second(block_meter_.rate());
  hints->set_client_lane_jobs_per_second(client_lane_meter_.rate());
  auto ms = [](absl::Duration d) {
    return static_cast<uint32_t>(absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1))));
  };
  hints->set_pool_retry_after_ms(ms(PoolRetryAfter(/*take_slot=*/false)));
  hints->set_client_lane_retry_after_ms(ms(ClientLaneRetryAfter(/*take_slot=*/false)));
  hints->set_commit_rate_measured(commit_meter_.measured());
  hints->set_fixed(fixed_retry_after_);
  const flowctl::RetryReservations::Stats tickets = retry_reservations_.stats(clock_->NowNanos());
  hints->set_tickets_issued(tickets.issued);
  hints->set_tickets_redeemed(tickets.redeemed);
  hints->set_tickets_early(tickets.early);
  hints->set_tickets_expired(tickets.expired);
  hints->set_tickets_unknown(tickets.unknown);
  hints->set_tickets_outstanding(static_cast<uint64_t>(tickets.outstanding));
  hints->set_reserved_txs(static_cast<uint64_t>(tickets.reserved));
  hints->set_max_reserved_txs(static_cast<uint64_t>(retry_reservations_.max_reserved()));
  *out.mutable_commit_latency() = LatencySummaryOf(commit_latency_.Snapshot());
  *out.mutable_stage_decision() =
      LatencySummaryOf(admission_->decision_time(), kFastBucketBoundsUs);
  out.set_committed_txs(pipeline_->committed_txs());
  out.set_send_failures(sender_->send_failures());
  out.set_broadcast_failures(sender_->broadcast_failures());
  const partitions::TxTrackerStats tracked = tracker_.stats();
  out.set_tracked_txs(tracked.entries);
  out.set_tracker_evicted(tracked.evicted_by_count + tracked.evicted_by_age);
  const partitions::ConsensusDriver::Stats driver = driver_->stats();
  out.set_peer_refused_unknown_peer(dropped_unknown_peer_.load(std::memory_order_relaxed));
  out.set_peer_refused_malformed(dropped_malformed_.load(std::memory_order_relaxed));
  out.set_peer_refused_wrong_channel(dropped_wrong_channel_.load(std::memory_order_relaxed));
  out.set_peer_refused_bad_signature(driver.dropped_bad_signature);
  out.set_peer_refused_bad_tx(driver.dropped_bad_tx);
  out.set_consensus_verifications(crypto_->verifications());
  out.set_consensus_redundant_votes(driver.redundant_votes);
  out.set_fetched_txs_checked(driver.fetched_checked);
  out.set_fetched_txs_certified(driver.fetched_certified);
  out.set_cpu_nanos(static_cast<uint64_t>(std::max<int64_t>(0, CpuNanos())));
  out.set_overload_refusals(admission_->overload_refusals());
  if (env_.block_budget != nullptr) {
    out.set_block_interval_ms(static_cast<double>(env_.block_budget->LastIntervalNanos(id_)) / 1e6);
  }
  const CommitStreamStats streams = commit_streams_->stats();
  out.set_commit_watchers(streams.watchers);
  out.set_commit_watchers_cut_slow(streams.cut_slow);
  node::admin::ConsensusRoundStats* rounds = out.mutable_consensus_rounds();
  *rounds->mutable_cut_wait() = LatencySummaryOf(driver.rounds.cut_wait);
  *rounds->mutable_accept() = LatencySummaryOf(driver.rounds.accept);
  *rounds->mutable_prepare() = LatencySummaryOf(driver.rounds.prepare);
  *rounds->mutable_commit() = LatencySummaryOf(driver.rounds.commit);
  *rounds->mutable_apply() = LatencySummaryOf(driver.rounds.apply);
  *rounds->mutable_interval() = LatencySummaryOf(driver.rounds.interval);
  rounds->set_slow_rounds(driver.rounds.slow_rounds);
  node::admin::SnapshotSyncStats* snap = out.mutable_snapshot();
  snap->set_installed(driver.snapshots_installed);
  snap->set_fetch_seq(driver.snapshot_fetch.seq);
  snap->set_fetch_chunks_done(driver.snapshot_fetch.chunks_done);
  snap->set_fetch_chunks_total(driver.snapshot_fetch.chunks_total);
  snap->set_fetch_bad_chunks(driver.snapshot_fetch.bad_chunks);
  snap->set_fetch_bad_manifests(driver.snapshot_fetch.bad_manifests);
  snap->set_fetch_retries(driver.snapshot_fetch.retries);
  snap->set_served_manifests(driver.snapshot_serve.manifests);
  snap->set_served_chunks(driver.snapshot_serve.chunks);
  snap->set_served_bytes(driver.snapshot_serve.bytes);
  snap->set_served_refused(driver.snapshot_serve.refused);
  return out;
}

absl::StatusOr<PartitionConfig> Partition::Impl::UpdateFlow(
    const node::admin::UpdatePartitionFlowRequest& request) {
  // One change at a time from the merge to the write-back, so a concurrent one is never lost.
  absl::MutexLock update(&update_mu_);
  PartitionConfig next;
  {
    absl::MutexLock lock(&config_mu_);
    next = config_;
  }
  // 1. Validate the whole config the update would leave (runtime/config_validation.h); nothing
  // changes on error.
  ASSIGN_OR_RETURN(next, ApplyFlowUpdate(next, request));
  std::shared_ptr<const flowctl::ChainFactory> factory;
  if (request.has_interceptor()) {
    // Validated above with the same registry code; this builds it with the real predicates.
    ASSIGN_OR_RETURN(factory, registry_.Build(next.interceptor()));
  }
  std::shared_ptr<const flowctl::ChainFactory> read_factory;
  if (request.has_read_interceptor()) {
    ASSIGN_OR_RETURN(read_factory, registry_.Build(next.read_interceptor()));
  }
  partitions::TxPoolLimits limits = PoolLimitsFrom(next.pool());
  flowctl::Dispatcher::Budget budget{
      .max_messages = next.dispatcher().budget_messages(),
      .max_bytes = static_cast<int64_t>(next.dispatcher().budget_bytes())};

  // 2. Apply (each step below was validated above and cannot fail on values).
  absl::MutexLock lock(&config_mu_);
  if (factory) factory->ApplyTo(*interceptor_);
  if (read_factory) read_factory->ApplyTo(*read_chain_);
  SetReadHold(next.read_hold());
  std::vector<int> weights = LaneWeights(next.dispatcher().lane_weights());
  for (int i = 0; i < kNumPartitionLanes; ++i) {
    absl::Status s = dispatcher_->SetLaneWeight(i, weights[i]);
    if (!s.ok()) LOG(ERROR) << "partition " << name_ << ": lane weight: " << s;
  }
  // Ticks compete for CPU like consensus messages (see Open).
  if (absl::Status s = dispatcher_->SetLaneWeight(kTickLane, weights[kConsensusLane]); !s.ok()) {
    LOG(ERROR) << "partition " << name_ << ": tick lane weight: " << s;
  }
  std::vector<flowctl::Dispatcher::DelayTarget> targets = LaneDelayTargets(next.dispatcher());
  for (int i = 0; i <= kTickLane; ++i) {
    if (absl::Status s = dispatcher_->SetDelayTarget(i, targets[i]); !s.ok()) {
      LOG(ERROR) << "partition " << name_ << ": lane delay target: " << s;
    }
  }
  if (absl::Status s = dispatcher_->SetBudget(budget); !s.ok()) {
    LOG(ERROR) << "partition " << name_ << ": budget: " << s;
  }
  if (pool_bytes_cap_ > 0) limits.max_bytes = std::min<size_t>(limits.max_bytes, pool_bytes_cap_);
  if (absl::Status s = pool_->SetLimits(limits); !s.ok()) {
    LOG(ERROR) << "partition " << name_ << ": pool limits: " << s;
  }
  tracker_.SetPolicy(TrackerPolicyFor(limits));  // the tracker's bound follows the pool's
  SetRetryReserve(next.pool().retry_reserve_fraction());
  if (drain_ && request.has_lossless()) {
    const double rate = static_cast<double>(next.lossless().drain_bytes_per_second());
    if (absl::Status s = drain_->SetRate(rate); !s.ok()) {
      LOG(ERROR) << "partition " << name_ << ": drain rate: " << s;
    }
  }
  // A flow update never changes the share; an UpdateArbiter that landed while this one was
  // validated outside the lock keeps its share.
  *next.mutable_share() = config_.share();
  config_ = next;
  ApplyDiskBudgetLocked();
  LOG(INFO) << "partition " << name_ << ": flow configuration updated";
  return next;
}

void Partition::Impl::NoteTransientMemoryLocked(int64_t now_nanos, uint64_t bytes) {
  const int64_t half = kCacheBorrowWindowNanos / 2;
  if (!transient_bucket_start_ || now_nanos - *transient_bucket_start_ >= half) {
    // A new half-window; after a gap of a whole window the previous half saw nothing either.
    transient_peaks_[1] = transient_bucket_start_ && now_nanos - *transient_bucket_start_ < 2 * half
                              ? transient_peaks_[0]
                              : 0;
    transient_peaks_[0] = 0;
    transient_bucket_start_ = now_nanos;
  }
  transient_peaks_[0] = std::max(transient_peaks_[0], bytes);
}

uint64_t Partition::Impl::ConfiguredMemoryLocked() const {
  return config_.pool().max_bytes() + config_.dispatcher().budget_bytes() +
         config_.state().cache_bytes() + config_.state().block_cache_bytes() +
         (fifo_ ? fifo_->options().memory_bytes : 0);  // the configured tier, or the default
}

void Partition::Impl::ApplyDiskBudgetLocked() {
  if (!fifo_) return;
  uint64_t budget = config_.lossless().disk_budget_bytes();
  if (disk_share_ > 0) budget = budget == 0 ? disk_share_ : std::min(budget, disk_share_);
  if (budget > 0) budget = std::max(budget, LosslessMinDiskBudget(config_));
  if (budget == fifo_->disk_budget()) return;
  if (absl::Status s = fifo_->SetDiskBudget(budget); !s.ok()) {
    LOG_EVERY_N(ERROR, 100) << "partition " << name_ << ": spill disk budget: " << s;
  }
}

absl::Duration Partition::Impl::SpillRetryAfter(uint64_t record_bytes) const {
  const double bytes = static_cast<double>(fifo_->BytesToDrainForRoom(record_bytes));
  double rate = drain_meter_.rate();
  if (rate <= 0) rate = drain_->rate();  // not measured yet (or a stall): the configured rate
  return flowctl::RetryAfterFor(bytes, std::max(rate, 1.0),
                                {.min = kMinSpillRetry, .max = kMaxSpillRetry});
}

absl::Duration Partition::Impl::PoolRetryAfter(bool take_slot, uint64_t* ticket) const {
  if (ticket != nullptr) *ticket = 0;
  if (fixed_retry_after_) return kFixedPoolRetryAfter;
  const partitions::TxPool::Excess excess = pool_->HighWaterExcess();
  const double rate = commit_meter_.estimate();
  const absl::Duration room =
      partitions::PoolRetryAfter(excess.txs, excess.bytes, pool_->size_now(), pool_->bytes_now(),
                                 rate, block_meter_.estimate(), kPoolRetryBounds);
  // Refusals queue behind the ones already told when to come back, one tx each at the commit
  // rate, so a burst of them does not all return into the same block's room.
  // Room opens at the commit rate for all the nodes that admit clients; this node's clients get
  // the share of it they were measured to get (the others' come in forwarded), so its refusals
  // queue at that share of the rate. Otherwise every node would promise its clients all of it.
  const double slot_rate =
      rate > 0 ? rate * client_room_share_.load(std::memory_order_relaxed) : rate;
  const int64_t now = clock_->NowNanos();
  if (!take_slot) return pool_retry_slots_.Peek(now, room, slot_rate, kPoolRetryBounds);
  const absl::Duration hint = pool_retry_slots_.Take(now, room, slot_rate, kPoolRetryBounds);
  if (ticket != nullptr)
    *ticket = retry_reservations_.Issue(now, now + absl::ToInt64Nanoseconds(hint));
  return hint;
}

absl::Duration Partition::Impl::ClientLaneRetryAfter(bool take_slot) const {
  if (fixed_retry_after_) return kFixedClientLaneRetryAfter;
  // A full lane has room again when one job is done; a burst of refusals queues a job apart.
  const double rate = client_lane_meter_.estimate();
  const absl::Duration room = flowctl::RetryAfterFor(1, rate, kClientLaneRetryBounds);
  const int64_t now = clock_->NowNanos();
  if (!take_slot) return client_lane_slots_.Peek(now, room, rate, kClientLaneRetryBounds);
  return client_lane_slots_.Take(now, room, rate, kClientLaneRetryBounds);
}

bool Partition::Impl::PoolGateAdmits(const flowctl::RequestMeta& request) const {
  const bool above = pool_->AboveHighWater();
  const uint64_t ticket = request.retry != nullptr ? request.retry->presented : 0;
  if (ticket == 0 && !retry_reservations_.enabled()) return !above;
  const int64_t free_txs = above ? 0 : static_cast<int64_t>(pool_->ClientRoomTxs());
  const flowctl::RetryReservations::Verdict v =
      retry_reservations_.Admit(ticket, clock_->NowNanos(), free_txs);
  if (v.redeemed && request.retry != nullptr) request.retry->redeemed = true;
  return v.admitted;
}

void Partition::Impl::SetRetryReserve(double fraction) {
  retry_reservations_.set_max_reserved(static_cast<int64_t>(fraction * pool_->ClientMarkTxs()));
}

// ---- Partition (facade) ----

Partition::Partition(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), id_(impl_->id_), name_(impl_->name_) {}

Partition::~Partition() { Stop(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Partition>> Partition::Open(PartitionEnv env) {
  auto impl = std::make_unique<Impl>(std::move(env));
  RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<Partition>(new Partition(std::move(impl)));
}

absl::Status Partition::Start() { return impl_->Start(); }
void Partition::Stop(absl::Duration drain) { impl_->Stop(drain); }

void Partition::Submit(std::string signed_tx, const SubmitOptions& options, SubmitDone done) {
  std::vector<std::string> txs;
  txs.push_back(std::move(signed_tx));
  impl_->Submit(std::move(txs), options, /*single=*/true, std::move(done), nullptr);
}

void Partition::SubmitBatch(std::vector<std::string> signed_txs, const SubmitOptions& options,
                            BatchDone done) {
  if (signed_txs.empty()) {
    done({});
    return;
  }
  SubmitOptions o = options;
  o.wait_for_commit = false;
  impl_->Submit(std::move(signed_txs), o, /*single=*/false, nullptr, std::move(done));
}

void Partition::OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel, std::string payload) {
  impl_->OnPeerMessage(from, channel, std::move(payload));
}

Partition::ReadHoldLimits Partition::read_hold() const {
  return {.max_wait_ns = impl_->read_hold_wait_ns_.load(std::memory_order_relaxed),
          .max_waiting = impl_->read_hold_max_waiting_.load(std::memory_order_relaxed)};
}

bool Partition::stopping() const { return impl_->stopping_.load(std::memory_order_acquire); }

flowctl::Admission Partition::AdmitRead(uint64_t size_bytes, absl::string_view client) const {
  flowctl::Admission a = impl_->read_chain_->Admit({.partition = id_,
                                                    .size_bytes = size_bytes,
                                                    .peer = client,
                                                    .arrival_nanos = impl_->clock_->NowNanos()});
  if (a.admitted()) impl_->reads_admitted_.fetch_add(1, std::memory_order_relaxed);
  return a;
}

absl::StatusOr<node::client::GetTxResponse> Partition::GetTx(const std::string& tx_hash) const {
  // A tx moves FIFO (lossless) -> pool -> ledger, each step entering the next place before it
  // leaves the last; looking in that order (after the quick ledger check) cannot miss one that
  // moves while we look. A tx that was only refused so far (REJECTED: a nonce gap) may be
  // pending again: its refusal answers only if it is in neither the FIFO nor the pool.
  for (const bool last_look : {false, true}) {
    node::client::GetTxResponse out;
    absl::StatusOr<node::chain::Receipt> receipt = impl_->chain_.ledger->GetReceipt(tx_hash);
    if (receipt.ok() && (last_look || partitions::ConsumedNonce(*receipt))) {
      out.set_state(node::client::GetTxResponse::COMMITTED);
      *out.mutable_receipt() = *receipt;
      absl::StatusOr<std::string> bytes = impl_->chain_.ledger->GetTx(tx_hash);
      if (bytes.ok()) out.set_signed_tx(*bytes);
      return out;
    }
    // An error (a pruned block: OUT_OF_RANGE) answers only if the tx is not pending again.
    if (last_look) {
      if (!receipt.ok() && receipt.status().code() != absl::StatusCode::kNotFound) {
        return receipt.status();
      }
      break;
    }
    if (impl_->tracker_.Get(tx_hash).spill_seq > 0) {
      // Lossless: acknowledged and durable in the FIFO, not yet drained into the pool.
      out.set_state(node::client::GetTxResponse::PENDING);
      return out;
    }
    if (partitions::TxPtr tx = impl_->pool_->Get(tx_hash)) {
      out.set_state(node::client::GetTxResponse::PENDING);
      out.set_signed_tx(tx->signed_bytes);
      return out;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("unknown transaction in partition ", name_,
                   " (not in the lossless FIFO, not pooled, not committed)"));
}

absl::StatusOr<node::client::GetAccountResponse> Partition::GetAccount(
    const std::string& address) const {
  node::client::GetAccountResponse out;
  out.set_height(impl_->chain_.ledger->last_height());
  ASSIGN_OR_RETURN(*out.mutable_account(), impl_->chain_.ledger->GetAccount(address));
  return out;
}

absl::StatusOr<node::client::GetBlockResponse> Partition::GetBlock(uint64_t height,
                                                                   bool include_txs) const {
  node::client::GetBlockResponse out;
  // Height 0 means the latest committed block (proto/client.proto); genesis while there is none.
  if (height == 0) height = impl_->chain_.ledger->last_height();
  ASSIGN_OR_RETURN(*out.mutable_block(), impl_->chain_.ledger->GetBlock(height));
  if (!include_txs) out.mutable_block()->clear_txs();
  out.set_block_hash(partitions::BlockHash(out.block().header()));
  return out;
}

absl::StatusOr<node::client::GetValueResponse> Partition::GetValue(const std::string& key,
                                                                   uint64_t height) const {
  const partitions::Ledger& ledger = *impl_->chain_.ledger;
  const uint64_t tip = ledger.last_height();
  if (height > tip) {
    return absl::OutOfRangeError(
        absl::StrCat("height ", height, " is beyond the tip of partition ", name_, " (", tip, ")"));
  }
  // One RocksDB snapshot: the value is exactly the state after the height reported, even when a
  // block commits meanwhile.
  const uint64_t at = height == 0 ? tip : height;
  ASSIGN_OR_RETURN(std::optional<std::string> value, ledger.GetValueAt(key, at));
  node::client::GetValueResponse out;
  out.set_height(at);
  out.set_found(value.has_value());
  if (value.has_value()) out.set_value(*std::move(value));
  return out;
}

absl::StatusOr<std::shared_ptr<CommitWatcher>> Partition::WatchCommits(
    const CommitWatcher::Options& options, absl::AnyInvocable<void()> wake) {
  return impl_->commit_streams_->Watch(options, std::move(wake));
}

node::client::GetChainStatusResponse Partition::ChainStatus() const {
  node::client::GetChainStatusResponse out;
  out.set_partition_id(id_);
  out.set_partition_name(name_);
  node::chain::BlockHeader tip = impl_->chain_.ledger->last_header();
  out.set_height(tip.height());
  out.set_last_block_hash(partitions::BlockHash(tip));
  out.set_state_root(tip.state_root());
  out.set_view(impl_->driver_->view());
  out.set_consensus_state(impl_->StateName());
  out.set_pool_txs(static_cast<uint32_t>(impl_->pool_->stats().txs));
  out.set_halt_reason(impl_->driver_->halt_reason());
  out.set_earliest_height(impl_->chain_.ledger->earliest_height());
  return out;
}

node::admin::PartitionStatus Partition::Status() const {
  node::admin::PartitionStatus s;
  s.set_id(id_);
  s.set_name(name_);
  s.set_height(impl_->height_.load());
  s.set_view(impl_->driver_->view());
  s.set_consensus_state(impl_->StateName());
  s.set_paused(paused());
  s.set_lossless(lossless());
  s.set_view_changes(impl_->driver_->view_changes());
  s.set_observing(impl_->driver_->observing());
  s.set_halt_reason(impl_->driver_->halt_reason());
  s.set_earliest_height(impl_->chain_.ledger->earliest_height());
  s.set_stable_checkpoint(impl_->driver_->stable_checkpoint());
  return s;
}

node::admin::PartitionFlowStats Partition::FlowStats() const { return impl_->FlowStats(); }

absl::StatusOr<PartitionConfig> Partition::UpdateFlow(
    const node::admin::UpdatePartitionFlowRequest& request) {
  return impl_->UpdateFlow(request);
}

PartitionConfig Partition::config() const {
  absl::MutexLock lock(&impl_->config_mu_);
  return impl_->config_;
}

node::config::ShareConfig Partition::share_config() const {
  absl::MutexLock lock(&impl_->config_mu_);
  return impl_->config_.share();
}

void Partition::SetShareConfig(const node::config::ShareConfig& share) {
  absl::MutexLock update(&impl_->update_mu_);  // not overwritten by an UpdateFlow in progress
  absl::MutexLock lock(&impl_->config_mu_);
  *impl_->config_.mutable_share() = share;
  impl_->ApplyBlockWeightLocked();
}

void Partition::Pause() {
  if (!impl_->paused_.exchange(true)) LOG(INFO) << "partition " << name_ << " paused";
}
void Partition::Resume() {
  if (impl_->paused_.exchange(false)) LOG(INFO) << "partition " << name_ << " resumed";
  impl_->RequestTick();
}
bool Partition::paused() const { return impl_->paused_.load(std::memory_order_relaxed); }

flowctl::ConsumerUsage Partition::TakeUsage() {
  // The arbiter's tick is also the adaptive lane weights' control step (one clock, one thread).
  impl_->dispatcher_->AdaptWeights();
  flowctl::ConsumerUsage u;
  const int64_t cpu = impl_->CpuNanos();
  u.cpu_nanos = cpu - impl_->last_cpu_nanos_;
  impl_->last_cpu_nanos_ = cpu;
  impl_->tick_cpu_nanos_.store(u.cpu_nanos, std::memory_order_relaxed);
  uint64_t lane_bytes = 0;
  const std::vector<flowctl::Dispatcher::LaneStats> lanes = impl_->dispatcher_->GetStats();
  for (size_t i = 0; i < lanes.size(); ++i) {
    lane_bytes += static_cast<uint64_t>(lanes[i].depth_bytes);
    // A queued tick is the partition's own timer, not demand for CPU.
    if (lanes[i].depth_messages > 0 && static_cast<int>(i) != kTickLane) {
      u.cpu_backlogged = true;
    }
  }
  impl_->tick_backlogged_.store(u.cpu_backlogged, std::memory_order_relaxed);
  const uint64_t refusals = impl_->admission_->overload_refusals();
  impl_->tick_refusing_.store(refusals != impl_->last_overload_refusals_,
                              std::memory_order_relaxed);
  impl_->last_overload_refusals_ = refusals;
  impl_->tick_consensus_delay_nanos_.store(lanes[kConsensusLane].window_delay_nanos,
                                           std::memory_order_relaxed);
  {
    // The first tick only takes the baseline.
    const flowctl::Histogram::Totals q = impl_->dispatcher_->QueueingTotals();
    const flowctl::Histogram::Totals before = impl_->last_queueing_.value_or(q);
    impl_->tick_queueing_sum_.store(q.sum - before.sum, std::memory_order_relaxed);
    impl_->tick_queueing_messages_.store(q.count - before.count, std::memory_order_relaxed);
    impl_->last_queueing_ = q;
    const uint64_t blocks = impl_->blocks_committed_.load(std::memory_order_relaxed);
    impl_->tick_blocks_.store(blocks - impl_->last_blocks_committed_.value_or(blocks),
                              std::memory_order_relaxed);
    impl_->last_blocks_committed_ = blocks;
  }
  impl_->tick_client_backlog_nanos_.store(impl_->dispatcher_->LaneBusyNanos(kClientLane),
                                          std::memory_order_relaxed);
  const double client_mark = impl_->pool_->ClientMarkTxs();
  impl_->tick_pool_fill_.store(
      client_mark > 0 ? static_cast<double>(impl_->pool_->size_now()) / client_mark : 0,
      std::memory_order_relaxed);
  partitions::TxPoolStats ps = impl_->pool_->stats();
  const partitions::StateCacheStats cs = impl_->chain_.executor->cache_stats();
  const uint64_t cache_bytes = cs.bytes;
  const uint64_t block_cache_bytes = impl_->chain_.ledger->BlockCacheBytes();
  // The transient parts' resident bytes (a pooled tx about twice its wire bytes, as the pool's
  // share assumes), for what the caches may borrow.
  uint64_t transient = 2 * ps.bytes + lane_bytes;
  // Resident, as the shares are applied: a pool full at its fraction of the share then counts
  // that fraction, so a full pool and lanes make the partition busy (ArbiterService).
  u.memory_bytes = transient + cache_bytes + block_cache_bytes;
  if (impl_->fifo_) {
    const flowctl::SpillFifoStats fs = impl_->fifo_->stats();
    u.memory_bytes += fs.memory_bytes;
    transient += fs.memory_bytes;
    u.disk_bytes = fs.disk_bytes;
    // The drain's rate while it had a backlog (an idle drain says nothing about how fast it
    // can go).
    impl_->drain_meter_.Observe(impl_->clock_->NowNanos(), impl_->drain_->stats().bytes,
                                fs.memory_records + fs.disk_records > 0);
  }
  {
    absl::MutexLock lock(&impl_->config_mu_);
    u.memory_limit = impl_->ConfiguredMemoryLocked();
    if (impl_->fifo_) {
      u.disk_limit = impl_->config_.lossless().disk_budget_bytes();  // 0: none of its own
      u.disk_floor = LosslessMinDiskBudget(impl_->config_);
    }
    impl_->NoteTransientMemoryLocked(impl_->clock_->NowNanos(), transient);
    // What each cache holds beyond its own fraction of the share, up to what it was lent, is
    // borrowed (not more: a cap the 5% rule left above its own fraction, or pinned blocks above
    // it, are the cache's own).
    auto borrowed = [](uint64_t held, uint64_t own_cap, uint64_t lent) -> uint64_t {
      return own_cap == 0 || held <= own_cap ? 0 : std::min(held - own_cap, lent);
    };
    const uint64_t cache_borrowed =
        borrowed(cache_bytes, impl_->cache_own_cap_, impl_->cache_lent_);
    const uint64_t block_borrowed =
        borrowed(block_cache_bytes, impl_->block_cache_own_cap_, impl_->block_cache_lent_);
    u.memory_borrowed_bytes = cache_borrowed + block_borrowed;
    u.memory_cache_demand = impl_->cache_demand_.Observe(
        {.now_nanos = impl_->clock_->NowNanos(),
         .state_lookups = cs.hits + cs.misses,
         .state_evicted_misses = cs.evicted_misses,
         .state_own_bytes = cache_bytes - cache_borrowed,
         .block_own_bytes = block_cache_bytes - block_borrowed,
         .reads = impl_->reads_admitted_.load(std::memory_order_relaxed),
         .limit = u.memory_limit,
         .state_configured = impl_->config_.state().cache_bytes(),
         .block_configured = impl_->config_.state().block_cache_bytes()});
    impl_->cache_memory_demand_.store(u.memory_cache_demand, std::memory_order_relaxed);
  }
  // Service rates behind the retry-after hints, each measured while there was more work than it
  // served: commits while the pool is at its high-water mark or its client cap (the regimes in
  // which the pool refuses; a pool merely holding txs, e.g. gapped ones, says nothing of how fast
  // blocks go), the client lane while jobs wait behind the one running (a lane runs one job at a
  // time).
  const int64_t now = impl_->clock_->NowNanos();
  const partitions::TxPool::Excess excess = impl_->pool_->HighWaterExcess();
  const bool saturated = excess.txs > 0 || excess.bytes > 0;  // above the mark or the client cap
  impl_->commit_meter_.Observe(now, impl_->pipeline_->committed_txs(), saturated);
  impl_->block_meter_.Observe(now, impl_->height_.load(std::memory_order_relaxed), saturated);
  impl_->client_added_meter_.Observe(now, impl_->pool_->added_client(), saturated);
  impl_->forwarded_added_meter_.Observe(now, impl_->pool_->added_forwarded(), saturated);
  {
    const double own = impl_->client_added_meter_.rate();
    const double others = impl_->forwarded_added_meter_.rate();
    const bool measured =
        impl_->client_added_meter_.measured() && impl_->forwarded_added_meter_.measured();
    impl_->client_room_share_.store(measured && own + others > 0
                                        ? std::max(own / (own + others), Impl::kMinClientRoomShare)
                                        : 1.0,
                                    std::memory_order_relaxed);
  }
  if (lanes.size() > kClientLane) {
    const flowctl::Dispatcher::LaneStats& client = lanes[kClientLane];
    impl_->client_lane_meter_.Observe(now, static_cast<uint64_t>(client.processed),
                                      client.depth_messages > 1);
  }
  return u;
}

flowctl::NodeAdmission::PartitionLoad Partition::AdmissionLoad() const {
  return {
      .id = id_,
      .cpu_nanos = impl_->tick_cpu_nanos_.load(std::memory_order_relaxed),
      .entitlement_nanos = impl_->dispatcher_->cpu_share(),
      .consensus_delay_nanos = impl_->tick_consensus_delay_nanos_.load(std::memory_order_relaxed),
      .backlogged = impl_->tick_backlogged_.load(std::memory_order_relaxed),
      .refusing = impl_->tick_refusing_.load(std::memory_order_relaxed),
      .client_backlog_nanos = impl_->tick_client_backlog_nanos_.load(std::memory_order_relaxed),
      .pool_fill = impl_->tick_pool_fill_.load(std::memory_order_relaxed),
      .height = impl_->height_.load(),
      .cpu_limit_cores = impl_->dispatcher_->GetCpuLimitStats().limit_cores};
}

absl::Status Partition::SetLedgerWriteBufferBytes(size_t bytes) {
  partitions::Ledger& ledger = *impl_->chain_.ledger;
  if (ledger.WriteBufferBytes() == bytes) return absl::OkStatus();  // each change syncs a file
  return ledger.SetWriteBufferBytes(bytes);
}

LedgerMemoryUse Partition::ledger_memory() const {
  const partitions::Ledger& ledger = *impl_->chain_.ledger;
  const partitions::ConsensusStoreMemory store = impl_->store_->Memory();
  return {.memtable_bytes = ledger.MemtableBytes(),
          .block_cache_bytes = ledger.BlockCacheBytes(),
          .block_cache_capacity = ledger.BlockCacheCapacity(),
          .consensus_store_memtable_bytes = store.memtable_bytes,
          .consensus_store_table_reader_bytes = store.table_reader_bytes};
}

flowctl::BlockBudget::PartitionTick Partition::BlockBudgetTick() const {
  return {.partition = id_,
          .delay_sum_nanos = impl_->tick_queueing_sum_.load(std::memory_order_relaxed),
          .messages = impl_->tick_queueing_messages_.load(std::memory_order_relaxed),
          .blocks = impl_->tick_blocks_.load(std::memory_order_relaxed)};
}

void Partition::SetAdmitFraction(double own, double floor, bool with_peers) {
  const int64_t now = impl_->clock_->NowNanos();
  const flowctl::PeerAdmission::Decision d = impl_->peer_admission_->Update(own, floor, now);
  impl_->shedder_.SetFraction(with_peers ? d.applied : d.own);
  {
    absl::MutexLock lock(&impl_->config_mu_);
    impl_->ApplyBlockWeightLocked();
  }
  if (!d.send || !with_peers) return;
  node::partition::PartitionMessage msg;
  msg.mutable_admission()->set_admit_ppm(flowctl::PeerAdmission::ToPpm(d.own));
  // A queue-only send (the network never blocks); refused, it is asked for at the next tick.
  if (impl_->sender_->Broadcast(p2p::Channel::CONSENSUS, msg)) {
    impl_->peer_admission_->Sent(d.own, now);
  }
}
double Partition::admit_fraction() const { return impl_->shedder_.fraction(); }

void Partition::Impl::ApplyBlockWeightLocked() {
  if (env_.block_budget == nullptr || !started_.load() || stopping_.load()) return;
  // The fraction applied is at least the node's floor (min_admit_fraction > 0); a weight must be
  // positive whatever the shedder holds.
  const double fraction = std::max(shedder_.fraction(), 1e-3);
  env_.block_budget->SetWeight(id_, config_.share().weight() * fraction);
}
flowctl::PeerAdmission::Snapshot Partition::peer_admission() const {
  return impl_->peer_admission_->snapshot(impl_->clock_->NowNanos());
}
uint64_t Partition::admission_refused() const { return impl_->shedder_.refused(); }

void Partition::ApplyCpuLimit(double cores) {
  absl::Status s = impl_->dispatcher_->SetCpuLimit(cores);
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": cpu limit: " << s;
  }
}

void Partition::ApplyShare(flowctl::Resource resource, double amount) {
  if (resource == flowctl::Resource::kEgress) return;  // the arbiter weights the egress scheduler
  if (resource == flowctl::Resource::kDisk) {
    absl::MutexLock lock(&impl_->config_mu_);
    impl_->disk_share_ = static_cast<uint64_t>(std::max(0.0, amount));
    impl_->ApplyDiskBudgetLocked();
    return;
  }
  if (resource == flowctl::Resource::kCpu) {
    if (amount > 0) {
      absl::Status s = impl_->dispatcher_->SetCpuShare(amount);
      if (!s.ok()) {
        LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": cpu share: " << s;
      }
    }
    return;
  }
  // kMemory. The pool, the state cache, the ledger's block cache, the lanes and (lossless) the
  // spill memory tier each get their configured fraction of the partition's memory applied to the
  // share, never below 1 MiB nor above their configured limits. The two caches also borrow part
  // of the room the others (the transient parts) leave of theirs (Impl::kCacheBorrowFraction).
  const double memory_bytes = amount;
  absl::MutexLock lock(&impl_->config_mu_);
  const double limit = static_cast<double>(impl_->ConfiguredMemoryLocked());
  // A part's own fraction of the share: configured at `configured`, resident at
  // `resident_factor` x what it counts; 0 when the share covers the configuration (no cap).
  auto own = [&](uint64_t configured, double resident_factor) -> uint64_t {
    if (memory_bytes >= limit) return 0;
    return std::min(configured,
                    static_cast<uint64_t>(std::max(
                        double{1 << 20},
                        memory_bytes * static_cast<double>(configured) / limit / resident_factor)));
  };
  // The new cap of a part configured at `configured`, its own fraction `own_cap` (0 = none) plus
  // `borrowed`, if it moved by more than 5% from `*cap` (0 = the configured value; limits are not
  // worth churning every tick); then `*cap` holds it.
  auto moved = [&](uint64_t configured, uint64_t own_cap, double borrowed,
                   uint64_t* cap) -> std::optional<uint64_t> {
    const uint64_t next = own_cap == 0
                              ? configured  // its whole configured memory: no cap
                              : std::min(configured, own_cap + static_cast<uint64_t>(borrowed));
    const uint64_t old = *cap == 0 ? configured : *cap;
    if (next == old || std::abs(static_cast<double>(next) - static_cast<double>(old)) <
                           0.05 * static_cast<double>(old)) {
      return std::nullopt;
    }
    *cap = next;
    return next;
  };
  const uint64_t cache_configured = impl_->config_.state().cache_bytes();
  const uint64_t block_configured = impl_->config_.state().block_cache_bytes();
  impl_->cache_own_cap_ = own(cache_configured, 1);
  impl_->block_cache_own_cap_ = own(block_configured, 1);
  // What the caches borrow: a fraction of the room the transient parts left of their fractions of
  // the share at their most over the window, divided between the caches as configured.
  // Under memory pressure they borrow nothing (MemoryPressure::no_cache_borrowing).
  const bool pressed =
      impl_->env_.memory_pressure != nullptr && impl_->env_.memory_pressure->no_cache_borrowing();
  double lent = 0;
  if (memory_bytes < limit && !pressed) {
    // The transient parts: everything configured but the two caches.
    const double transient_configured =
        limit - static_cast<double>(cache_configured + block_configured);
    const double room = memory_bytes * transient_configured / limit -
                        static_cast<double>(impl_->TransientMemoryPeakLocked());
    lent = Impl::kCacheBorrowFraction * std::max(0.0, room);
  }
  const double caches_configured = static_cast<double>(cache_configured + block_configured);
  const double cache_lent =
      caches_configured > 0 ? lent * static_cast<double>(cache_configured) / caches_configured : 0;
  const double block_lent = lent - cache_lent;
  // The cache counts resident bytes (its entries' bookkeeping included).
  if (auto cap =
          moved(cache_configured, impl_->cache_own_cap_, cache_lent, &impl_->cache_bytes_cap_)) {
    impl_->chain_.executor->SetCacheCapacity(*cap);
  }
  // The ledger's block cache (RocksDB counts what it holds, pinned blocks included, which it can
  // evict only when their tables go).
  if (auto cap = moved(block_configured, impl_->block_cache_own_cap_, block_lent,
                       &impl_->block_cache_cap_)) {
    if (absl::Status s = impl_->chain_.ledger->SetBlockCacheCapacity(*cap); !s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": block cache: " << s;
    }
  }
  // What the caps in force lend the caches beyond their own fractions (a cap still 0 is the
  // configured size).
  auto lent_now = [](uint64_t cap, uint64_t configured, uint64_t own_cap) -> uint64_t {
    const uint64_t in_force = cap == 0 ? configured : cap;
    return own_cap == 0 || in_force <= own_cap ? 0 : in_force - own_cap;
  };
  impl_->cache_lent_ = lent_now(impl_->cache_bytes_cap_, cache_configured, impl_->cache_own_cap_);
  impl_->block_cache_lent_ =
      lent_now(impl_->block_cache_cap_, block_configured, impl_->block_cache_own_cap_);
  impl_->cache_borrowed_capacity_.store(impl_->cache_lent_ + impl_->block_cache_lent_,
                                        std::memory_order_relaxed);
  // A lossless partition's spill memory tier: what does not fit goes to its disk tier (nothing
  // is refused or lost for it).
  if (impl_->fifo_) {
    const uint64_t configured = impl_->fifo_->options().memory_bytes;
    if (auto cap = moved(configured, own(configured, 1), 0, &impl_->spill_memory_cap_)) {
      impl_->fifo_->SetMemoryBudget(*cap);
    }
  }
  // The lanes' bytes (Dispatcher::SetByteCap, which keeps the consensus and sync lanes' room):
  // no cap while the share covers the configured budget.
  const uint64_t lane_configured = impl_->config_.dispatcher().budget_bytes();
  if (auto cap = moved(lane_configured, own(lane_configured, 1), 0, &impl_->lane_bytes_cap_)) {
    const int64_t byte_cap = *cap >= lane_configured ? 0 : static_cast<int64_t>(*cap);
    if (absl::Status s = impl_->dispatcher_->SetByteCap(byte_cap); !s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": lane byte cap: " << s;
    }
  }
  // A pooled tx is resident at about twice its wire size (the bytes plus the parsed message,
  // base/transaction.h) and the pool counts wire bytes: halve the share for it.
  const uint64_t pool_configured = impl_->config_.pool().max_bytes();
  if (auto cap = moved(pool_configured, own(pool_configured, 2), 0, &impl_->pool_bytes_cap_)) {
    partitions::TxPoolLimits limits = impl_->PoolLimitsFrom(impl_->config_.pool());
    limits.max_bytes = *cap;
    if (absl::Status s = impl_->pool_->SetLimits(limits); !s.ok()) {
      LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": memory share: " << s;
    }
  }
}

uint64_t Partition::height() const { return impl_->height_.load(); }
bool Partition::lossless() const { return impl_->fifo_ != nullptr; }
std::string Partition::consensus_state() const { return impl_->StateName(); }

}  // namespace runtime
