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
#include "flowctl/adaptive_stage.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "partitions/block.h"
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

std::vector<int> LaneWeights(const node::config::LaneConfig& w) {
  return {LaneWeight(w.consensus()), LaneWeight(w.sync()), LaneWeight(w.tx_forward()),
          LaneWeight(w.bulk()), LaneWeight(w.client())};
}

node::admin::LatencySummary LatencySummaryOf(const flowctl::HistogramSnapshot& h) {
  node::admin::LatencySummary s;
  s.set_count(h.count);
  if (h.count > 0) {
    s.set_p50_us(static_cast<double>(h.Percentile(0.5)) / 1e3);
    s.set_p99_us(static_cast<double>(h.Percentile(0.99)) / 1e3);
    s.set_max_us(static_cast<double>(h.max) / 1e3);
  }
  return s;
}

std::string CertKey(uint64_t seq) {
  std::string key = "cert/";
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((seq >> (8 * i)) & 0xff));
  return key;
}

// ---- ClientJob ----

ClientJob::~ClientJob() {
  if (finished) return;
  for (SubmitResult& r : results) {
    if (r.status.ok() && !r.spilled) {
      r.status = absl::UnavailableError("partition is shutting down; the request was not applied");
    }
  }
  Finish();
}

void ClientJob::Finish() {
  if (finished) return;
  finished = true;
  for (Item& item : items) item.admission.Finish();
  if (single) {
    if (single_done) single_done(std::move(results[0]));
  } else if (batch_done) {
    batch_done(std::move(results));
  }
}

// ---- Impl: construction ----

Partition::Impl::Impl(PartitionEnv env)
    : env_(std::move(env)),
      id_(env_.config.id()),
      name_(env_.config.name()),
      clock_(env_.clock),
      config_(env_.config) {}

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
    return absl::InvalidArgumentError(
        absl::StrCat("partition ", name_, ": this node (", env_.network->self(),
                     ") is not in the replica set"));
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
  ASSIGN_OR_RETURN(chain_, partitions::OpenChain(env_.dir + "/ledger", id_, genesis));
  ASSIGN_OR_RETURN(store_, partitions::RocksDbConsensusStore::Open(env_.dir + "/consensus"));
  ASSIGN_OR_RETURN(crypto_, partitions::Ed25519PbftCrypto::Create(id_, self_index_, *env_.key,
                                                                  env_.replica_keys));

  partitions::TxPoolLimits limits = PoolLimitsFrom(cfg.pool());
  RETURN_IF_ERROR(partitions::ValidateTxPoolLimits(limits));
  partitions::Executor* executor = chain_.executor.get();
  pool_ = std::make_unique<partitions::TxPool>(
      limits, clock_, [executor](absl::string_view s) { return executor->NextNonce(s); });

  // Interceptor predicates read atomics only.
  RETURN_IF_ERROR(registry_.RegisterPredicate(
      "consensus_normal", [this](const flowctl::RequestMeta&) {
        return state_.load(std::memory_order_relaxed) ==
               static_cast<int>(partitions::ConsensusState::kNormal);
      }));
  RETURN_IF_ERROR(registry_.RegisterPredicate(
      "pool_below_high_water",
      [this](const flowctl::RequestMeta&) { return !pool_->AboveHighWater(); }));
  ASSIGN_OR_RETURN(auto factory, registry_.Build(cfg.interceptor()));
  interceptor_ = std::make_unique<flowctl::StageChainHolder>(
      factory->Create(flowctl::StageContext{.partition = id_, .clock = clock_}));

  flowctl::Dispatcher::Options d;
  d.name = name_;
  d.clock = clock_;
  d.budget.max_messages = cfg.dispatcher().budget_messages();
  d.budget.max_bytes = static_cast<int64_t>(cfg.dispatcher().budget_bytes());
  std::vector<int> weights = LaneWeights(cfg.dispatcher().lane_weights());
  const char* names[kNumPartitionLanes] = {"consensus", "sync", "tx_forward", "bulk", "client"};
  for (int i = 0; i < kNumPartitionLanes; ++i) {
    flowctl::Dispatcher::Handler handler;
    if (i == kClientLane) {
      handler = [this](flowctl::Message m) { HandleClientJob(std::move(m)); };
    } else {
      handler = [this](flowctl::Message m) { HandlePeerMessage(std::move(m)); };
    }
    d.lanes.push_back({.name = names[i], .weight = weights[i], .handler = std::move(handler)});
  }
  ASSIGN_OR_RETURN(dispatcher_, flowctl::Dispatcher::Create(env_.pool, std::move(d)));

  const auto& cc = cfg.consensus();
  partitions::BatchPolicy::Options bp{.max_txs = cc.batch_max_txs(),
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
  // A held tx not proposed within one retransmit period is forwarded (see held_).
  hold_nanos_ = pc.retransmit_ms * 1'000'000;
  partitions::PbftReplica::LedgerPosition position;
  position.last_executed = chain_.ledger->last_height();
  if (position.last_executed > 0) {
    ASSIGN_OR_RETURN(position.chain_digest, chain_.ledger->GetConsensusMeta(kChainDigestKey));
  }
  height_.store(position.last_executed);
  {
    absl::MutexLock lock(&cons_mu_);
    ASSIGN_OR_RETURN(replica_,
                     partitions::PbftReplica::Create(
                         pc, {.crypto = crypto_.get(), .txs = this, .store = store_.get(),
                              .blocks = this},
                         position));
    state_.store(static_cast<int>(replica_->state()));
    view_.store(replica_->view());
  }

  if (cfg.lossless().enabled()) {
    const auto& l = cfg.lossless();
    flowctl::SpillFifoOptions so;
    so.dir = env_.dir + "/spill";
    if (l.memory_bytes() > 0) so.memory_bytes = l.memory_bytes();
    if (l.segment_bytes() > 0) so.segment_bytes = l.segment_bytes();
    so.max_record_bytes = static_cast<uint32_t>(tx_limits_.max_tx_bytes);
    so.durability = DurabilityOf(l.durability());
    if (l.sync_interval_ms() > 0) so.sync_interval = absl::Milliseconds(l.sync_interval_ms());
    ASSIGN_OR_RETURN(fifo_, flowctl::SpillFifo::Open(so));
    // A drained record is safe only once its tx commits (the pool is memory): the FIFO may
    // record as consumed only what has committed, so a restart replays the rest.
    {
      absl::MutexLock lock(&spill_mu_);
      spill_drained_max_ = fifo_->stats().persisted_seq;
    }
    fifo_->SetPersistLimit(fifo_->stats().persisted_seq);
    flowctl::QuotaDrainOptions qo;
    qo.rate_bytes_per_sec = static_cast<double>(l.drain_bytes_per_second());
    qo.clock = clock_;
    RETURN_IF_ERROR(flowctl::QuotaDrain::ValidateOptions(qo));
    drain_ = std::make_unique<flowctl::QuotaDrain>(
        fifo_.get(), [this](const flowctl::SpillFifo::Record& r) { return DrainSink(r); }, qo);
  }
  LOG(INFO) << "partition " << name_ << " (" << id_ << ") open: height " << height_.load()
            << ", replica " << self_index_ << " of " << env_.replica_ids.size()
            << (fifo_ ? ", lossless" : "");
  return absl::OkStatus();
}

absl::Status Partition::Impl::Start() {
  if (started_.exchange(true)) return absl::FailedPreconditionError("partition already started");
  WithConsensus([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { StepLocked(partitions::PbftStart{}); });
  ticker_ = std::thread([this] { TickerLoop(); });
  if (drain_) RETURN_IF_ERROR(drain_->Start());
  return absl::OkStatus();
}

void Partition::Impl::Stop(absl::Duration drain) {
  if (stopping_.exchange(true)) return;
  if (!started_.load()) {
    if (dispatcher_) dispatcher_->Stop();
    return;
  }
  if (drain_) drain_->Stop();
  if (dispatcher_ && drain > absl::ZeroDuration()) {
    absl::Status s = dispatcher_->Drain(drain);
    if (!s.ok()) LOG(WARNING) << "partition " << name_ << ": drain: " << s;
  }
  {
    absl::MutexLock lock(&tick_mu_);
    tick_stop_ = true;
    tick_cv_.Signal();
  }
  if (ticker_.joinable()) ticker_.join();
  if (dispatcher_) dispatcher_->Stop();  // discards the rest; ClientJob answers UNAVAILABLE
  FlushForward();
  // Answer every commit waiter.
  absl::flat_hash_map<std::string, std::vector<CommitWaiter>> waiters;
  {
    absl::MutexLock lock(&wait_mu_);
    waiters.swap(waiters_);
  }
  for (auto& [hash, list] : waiters) {
    for (CommitWaiter& w : list) {
      w.result.status = absl::UnavailableError(
          "partition is shutting down; the tx was admitted but its commit was not awaited");
      w.done(std::move(w.result));
    }
  }
  if (fifo_) {
    absl::Status s = fifo_->PersistReadPosition();
    if (!s.ok()) LOG(WARNING) << "partition " << name_ << ": spill: " << s;
  }
  LOG(INFO) << "partition " << name_ << " stopped at height " << height_.load() << "; "
            << proposal_body_txs_.load() << " own txs sent with proposals";
}

// ---- Client path ----

void Partition::Impl::Submit(std::vector<std::string> txs, const SubmitOptions& options,
                             bool single, SubmitDone single_done, BatchDone batch_done) {
  auto job = std::make_shared<ClientJob>();
  job->options = options;
  job->single = single;
  job->single_done = std::move(single_done);
  job->batch_done = std::move(batch_done);
  job->arrival_nanos = clock_->NowNanos();
  job->results.resize(txs.size());

  absl::Status gate;
  if (stopping_.load(std::memory_order_relaxed)) {
    gate = absl::UnavailableError(absl::StrCat("partition ", name_, " is shutting down"));
  } else if (paused_.load(std::memory_order_relaxed)) {
    gate = absl::UnavailableError(
        absl::StrCat("partition ", name_, " is paused by the operator; retry after resume"));
  }
  const bool lossless = fifo_ != nullptr;
  uint64_t last_spill_seq = 0;
  for (size_t i = 0; i < txs.size(); ++i) {
    SubmitResult& r = job->results[i];
    if (!gate.ok()) {
      r.status = gate;
      continue;
    }
    flowctl::Admission admission;
    if (!lossless) {
      // Flow control on the raw request: nothing parsed, nothing verified yet.
      admission = interceptor_->Admit({.partition = id_,
                                       .size_bytes = txs[i].size(),
                                       .peer = options.client,
                                       .arrival_nanos = job->arrival_nanos});
      if (!admission.admitted()) {
        const flowctl::Decision& d = admission.decision();
        std::string msg = absl::StrCat("rejected by stage '", d.stage(), "': ", d.reason());
        // The health gate says consensus is not available; everything else is load.
        r.status = absl::StrContains(d.reason(), "consensus_normal")
                       ? absl::UnavailableError(absl::StrCat(msg, " (consensus is ",
                                                             StateName(), ")"))
                       : absl::ResourceExhaustedError(msg);
        r.rejected_by = std::string(d.stage());
        r.retry_after = d.retry_after();
        continue;
      }
    }
    absl::StatusOr<base::DecodedTx> decoded = base::DecodeSignedTx(txs[i], tx_limits_);
    if (!decoded.ok()) {
      r.status = decoded.status();
      continue;
    }
    r.tx_hash = decoded->hash;
    if (lossless) {
      // Lossless: the record is the acknowledgement; the drain verifies it later.
      absl::StatusOr<uint64_t> seq = fifo_->Append(txs[i]);
      if (!seq.ok()) {
        r.status = seq.status();
        continue;
      }
      last_spill_seq = *seq;
      r.spilled = true;
      continue;
    }
    job->items.push_back({.slot = static_cast<int>(i), .tx = *std::move(decoded),
                          .admission = std::move(admission)});
  }
  if (last_spill_seq > 0) {
    absl::Status durable = fifo_->WaitDurable(last_spill_seq);
    if (!durable.ok()) {
      for (SubmitResult& r : job->results) {
        if (r.spilled) r.status = durable;
      }
    }
  }
  if (job->items.empty()) {
    job->Finish();
    return;
  }
  // The job travels as the message context; its bytes stay in the decoded txs, so the lane is
  // bounded by its message capacity (the interceptor's in-flight stage bounds the bytes).
  flowctl::Message m;
  m.context = job;
  flowctl::Dispatcher::OfferResult offered = dispatcher_->Offer(kClientLane, std::move(m));
  if (offered != flowctl::Dispatcher::OfferResult::kAccepted) {
    for (auto& item : job->items) {
      SubmitResult& r = job->results[item.slot];
      r.status = absl::ResourceExhaustedError(
          "rejected: the partition's signature-check lane is full; retry later");
      r.rejected_by = "client_lane";
      r.retry_after = absl::Milliseconds(50);
    }
    job->Finish();
  }
}

void Partition::Impl::HandleClientJob(flowctl::Message message) {
  auto job = std::static_pointer_cast<ClientJob>(message.context);
  bool added = false;
  // An adaptive stage's slot outlives the request: a ticket taken before the item's permit is
  // released holds it until the tx commits or leaves the pool (see adaptive_stage.h).
  const std::shared_ptr<flowctl::AdaptiveLimiter> adaptive =
      flowctl::FindAdaptiveLimiter(*interceptor_->Get());
  for (auto& item : job->items) {
    SubmitResult& r = job->results[item.slot];
    absl::Status s = base::VerifySignature(item.tx);
    if (s.ok()) {
      auto tx = std::make_shared<const base::DecodedTx>(std::move(item.tx));
      const bool tracked =
          adaptive != nullptr && TrackAdaptive(adaptive, r.tx_hash, job->arrival_nanos);
      s = AdmitVerified(tx);
      if (!s.ok() && tracked) UntrackAdaptive(r.tx_hash);
      if (s.ok()) {
        added = true;
        absl::MutexLock lock(&wait_mu_);
        admitted_at_[r.tx_hash] = job->arrival_nanos;
      } else if (s.code() == absl::StatusCode::kResourceExhausted) {
        r.rejected_by = "pool";
        r.retry_after = absl::Milliseconds(100);
      }
    }
    r.status = s;
    item.admission.Finish();
  }
  if (added) WakeTicker();
  if (job->single && job->options.wait_for_commit && job->results[0].status.ok()) {
    // The waiter answers from now on. The tx may already have committed (a one-replica
    // partition commits inside the ticker at once): look at the ledger after registering.
    const std::string hash = job->results[0].tx_hash;
    {
      absl::MutexLock lock(&wait_mu_);
      CommitWaiter w;
      w.deadline_nanos = clock_->NowNanos() + absl::ToInt64Nanoseconds(job->options.wait_timeout);
      w.result = job->results[0];
      w.done = std::move(job->single_done);
      waiters_[hash].push_back(std::move(w));
    }
    job->finished = true;
    if (chain_.ledger->GetReceipt(hash).ok()) ResolveWaiters(hash);
    return;
  }
  job->Finish();
}

void Partition::Impl::ResolveWaiters(const std::string& hash) {
  std::vector<CommitWaiter> list;
  {
    absl::MutexLock lock(&wait_mu_);
    auto it = waiters_.find(hash);
    if (it == waiters_.end()) return;
    list = std::move(it->second);
    waiters_.erase(it);
  }
  absl::StatusOr<node::chain::Receipt> receipt = chain_.ledger->GetReceipt(hash);
  for (CommitWaiter& w : list) {
    if (receipt.ok()) {
      w.result.receipt = *receipt;
    } else {
      w.result.status = receipt.status();
    }
    w.done(std::move(w.result));
  }
}

absl::Status Partition::Impl::AdmitVerified(partitions::TxPtr tx) {
  partitions::TxPtr keep = tx;
  absl::Status s = pool_->Add(std::move(tx), partitions::TxOrigin::kClient);
  if (s.ok()) QueueForward(keep);
  return s;
}

void Partition::Impl::SpillRecordDone(uint64_t seq) {
  spill_drained_max_ = std::max(spill_drained_max_, seq);
  if (auto it = spill_pending_.find(seq); it != spill_pending_.end()) it->second = true;
  while (!spill_pending_.empty() && spill_pending_.begin()->second) {
    spill_pending_.erase(spill_pending_.begin());
  }
  fifo_->SetPersistLimit(spill_pending_.empty() ? spill_drained_max_
                                                : spill_pending_.begin()->first - 1);
}

absl::Status Partition::Impl::DrainSink(const flowctl::SpillFifo::Record& record) {
  absl::StatusOr<base::DecodedTx> decoded = base::DecodeSignedTx(record.data, tx_limits_);
  if (!decoded.ok() || !base::VerifySignature(*decoded).ok()) {
    spill_dropped_invalid_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&spill_mu_);
    SpillRecordDone(record.seq);
    return absl::OkStatus();  // acknowledged but invalid: counted and dropped, never retried
  }
  auto tx = std::make_shared<const base::DecodedTx>(*std::move(decoded));
  std::string hash = tx->hash;
  {
    // Pending before the pool sees it, so its commit cannot be missed.
    absl::MutexLock lock(&spill_mu_);
    spill_pending_[record.seq] = false;
    spill_seq_of_[hash] = record.seq;
    spill_drained_max_ = std::max(spill_drained_max_, record.seq);
  }
  absl::Status s = AdmitVerified(std::move(tx));
  if (!s.ok()) {
    absl::MutexLock lock(&spill_mu_);
    spill_seq_of_.erase(hash);
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      spill_pending_.erase(record.seq);  // kept in the FIFO, offered again
    } else {
      SpillRecordDone(record.seq);  // duplicate / replayed: already pooled or committed
    }
  }
  if (s.ok()) {
    {
      absl::MutexLock lock(&wait_mu_);
      admitted_at_[hash] = clock_->NowNanos();
    }
    WakeTicker();
    return s;
  }
  // Full pool: keep the record and retry (that is the point of lossless mode).
  if (s.code() == absl::StatusCode::kResourceExhausted) return s;
  return absl::OkStatus();  // duplicate / replayed: already in the pool or the ledger
}

void Partition::Impl::QueueForward(const partitions::TxPtr& tx) {
  if (env_.replica_ids.size() <= 1) return;
  bool flush = false;
  {
    absl::MutexLock lock(&fwd_mu_);
    if (hold_own_) {
      const int64_t now = clock_->NowNanos();
      if (held_.try_emplace(tx->hash, HeldTx{.tx = tx, .since = now}).second) {
        held_order_.emplace_back(now, tx->hash);
      }
      return;
    }
    fwd_.push_back(tx->signed_bytes);
    fwd_bytes_ += tx->signed_bytes.size();
    flush = fwd_bytes_ >= (256 << 10);
  }
  if (flush) FlushForward();
}

void Partition::Impl::FlushForward() {
  std::vector<std::string> txs;
  {
    absl::MutexLock lock(&fwd_mu_);
    txs.swap(fwd_);
    fwd_bytes_ = 0;
    // Held txs past the hold limit, or all of them when this replica no longer proposes.
    const bool release_all = !hold_own_ || stopping_.load(std::memory_order_relaxed);
    const int64_t now = clock_->NowNanos();
    while (!held_order_.empty()) {
      const auto& [since, hash] = held_order_.front();
      auto it = held_.find(hash);
      if (it != held_.end() && it->second.since == since) {
        if (!release_all && now - since < hold_nanos_) break;
        txs.push_back(it->second.tx->signed_bytes);
        held_.erase(it);
      }
      held_order_.pop_front();  // forwarded now, or already proposed
    }
  }
  if (txs.empty()) return;
  node::partition::PartitionMessage msg;
  for (std::string& t : txs) msg.mutable_txs()->add_signed_txs(std::move(t));
  BroadcastPeers(p2p::Channel::TX_FORWARD, msg);
}

}  // namespace runtime
