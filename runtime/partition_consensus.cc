// Partition: the peer path, the replica's actions, commits, and the ticker.
#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "runtime/partition_impl.h"

namespace runtime {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

constexpr size_t kMaxFetch = 10'000;
constexpr size_t kFetchReplyBytes = 1 << 20;
constexpr int64_t kExpireEveryNanos = 1'000'000'000;
// Adaptive tickets held past max_hold are released this often (and ones whose tx left the pool).
constexpr int64_t kSweepEveryNanos = 100'000'000;

p2p::Channel ChannelOf(partitions::PbftChannel c) {
  return c == partitions::PbftChannel::kSync ? p2p::Channel::SYNC : p2p::Channel::CONSENSUS;
}

}  // namespace

// ---- Peer path ----

void Partition::Impl::OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel,
                                    std::string payload) {
  if (stopping_.load(std::memory_order_relaxed)) return;
  auto it = index_of_.find(from);
  if (it == index_of_.end() || it->second == self_index_) {
    dropped_unknown_peer_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  int lane = kBulkLane;
  switch (channel) {
    case p2p::Channel::CONSENSUS:
      lane = kConsensusLane;
      break;
    case p2p::Channel::SYNC:
      lane = kSyncLane;
      break;
    case p2p::Channel::TX_FORWARD:
      lane = kTxForwardLane;
      break;
    default:
      lane = kBulkLane;
  }
  // Full lanes drop and count (Dispatcher stats); PBFT retransmits what matters.
  flowctl::Message m;
  m.payload = std::move(payload);
  m.peer = it->second;
  dispatcher_->Offer(lane, std::move(m));
}

void Partition::Impl::HandlePeerMessage(flowctl::Message message) {
  node::partition::PartitionMessage msg;
  if (!msg.ParseFromString(message.payload)) {
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (msg.body_case()) {
    case node::partition::PartitionMessage::kConsensus: {
      const partitions::ConsensusMessage& cm = msg.consensus();
      // The envelope must be signed by the replica the authenticated connection belongs to.
      if (cm.sender() != message.peer || !crypto_->Verify(cm)) {
        dropped_bad_signature_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      WithConsensus([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        StepLocked(partitions::PbftMessage{cm});
      });
      return;
    }
    case node::partition::PartitionMessage::kTxs:
      HandleTxBatch(msg.txs());
      return;
    case node::partition::PartitionMessage::kFetch:
      HandleFetch(message.peer, msg.fetch());
      return;
    default:
      dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Partition::Impl::HandleTxBatch(const node::partition::TxBatch& batch) {
  std::vector<std::string> added;
  for (const std::string& bytes : batch.signed_txs()) {
    absl::StatusOr<base::DecodedTx> tx = base::DecodeSignedTx(bytes, tx_limits_);
    if (!tx.ok()) {
      dropped_bad_tx_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // Already pooled or already committed (a late forward, or a fetch answered twice): skip the
    // signature check, which is the expensive part.
    if (pool_->Get(tx->hash) != nullptr || chain_.ledger->GetReceipt(tx->hash).ok()) continue;
    if (!base::VerifySignature(*tx).ok()) {
      dropped_bad_tx_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    std::string hash = tx->hash;
    partitions::TxOrigin origin = partitions::TxOrigin::kForwarded;
    {
      absl::MutexLock lock(&wanted_mu_);
      if (wanted_.erase(hash) > 0) origin = partitions::TxOrigin::kFetched;
    }
    // Refusals (replayed, full) are expected under load and for already-committed txs.
    if (pool_->Add(*std::move(tx), origin).ok()) {
      added.push_back(std::move(hash));
    }
  }
  if (added.empty()) return;
  WithConsensus([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    StepLocked(partitions::PbftTxsAvailable{std::move(added)});
  });
  WakeTicker();
}

void Partition::Impl::HandleFetch(uint32_t from, const node::partition::TxFetch& fetch) {
  node::partition::PartitionMessage reply;
  size_t bytes = 0;
  size_t n = 0;
  for (const std::string& hash : fetch.tx_hashes()) {
    if (++n > kMaxFetch) break;
    std::string body;
    if (partitions::TxPtr tx = pool_->Get(hash)) {
      body = tx->signed_bytes;
    } else if (absl::StatusOr<std::string> stored = chain_.ledger->GetTx(hash); stored.ok()) {
      body = *std::move(stored);
    } else {
      continue;
    }
    bytes += body.size();
    reply.mutable_txs()->add_signed_txs(std::move(body));
    if (bytes >= kFetchReplyBytes) {
      SendPeer(from, p2p::Channel::SYNC, reply);
      reply.Clear();
      bytes = 0;
    }
  }
  if (reply.has_txs()) SendPeer(from, p2p::Channel::SYNC, reply);
}

void Partition::Impl::SendPeer(uint32_t to, p2p::Channel channel,
                               const node::partition::PartitionMessage& msg) {
  if (to >= env_.replica_ids.size() || to == self_index_) return;
  absl::Status s = env_.network->Send(env_.replica_ids[to], id_, channel, msg.SerializeAsString());
  if (!s.ok()) VLOG(1) << "partition " << name_ << ": send to " << to << ": " << s;
}

void Partition::Impl::BroadcastPeers(p2p::Channel channel,
                                     const node::partition::PartitionMessage& msg) {
  if (env_.replica_ids.size() <= 1) return;
  absl::Status s = env_.network->Broadcast(id_, channel, msg.SerializeAsString());
  if (!s.ok()) VLOG(1) << "partition " << name_ << ": broadcast: " << s;
}

// ---- Consensus ----

void Partition::Impl::WithConsensus(absl::FunctionRef<void()> fn) {
  std::vector<absl::AnyInvocable<void()>> deferred;
  {
    absl::MutexLock lock(&cons_mu_);
    fn();
    deferred.swap(deferred_);
  }
  for (auto& d : deferred) d();
}

void Partition::Impl::StepLocked(const partitions::PbftEvent& event) {
  if (halted_) return;
  ApplyLocked(replica_->Step(event));
  if (!replica_->status().ok() && !halted_) {
    halted_ = true;
    state_.store(kHaltedState);
    LOG(ERROR) << "partition " << name_ << ": consensus halted: " << replica_->status();
  }
}

void Partition::Impl::ApplyLocked(std::vector<partitions::PbftAction> actions) {
  for (partitions::PbftAction& action : actions) {
    if (halted_) break;
    std::visit(
        Overloaded{
            [&](partitions::PbftSend& a) {
              node::partition::PartitionMessage m;
              *m.mutable_consensus() = std::move(a.msg);
              SendPeer(a.to, ChannelOf(a.channel), m);
            },
            [&](partitions::PbftBroadcast& a) {
              // The bodies of a new proposal go first, on the same channel (see held_).
              if (proposal_bodies_ && a.msg.has_pre_prepare()) SendProposalBodiesLocked();
              node::partition::PartitionMessage m;
              *m.mutable_consensus() = std::move(a.msg);
              BroadcastPeers(ChannelOf(a.channel), m);
            },
            [&](partitions::PbftCommit& a) {
              absl::Status s = CommitLocked(a);
              if (!s.ok()) {
                halted_ = true;
                state_.store(kHaltedState);
                LOG(ERROR) << "partition " << name_ << ": commit of seq " << a.seq
                           << " failed, consensus halted: " << s;
              }
            },
            [&](partitions::PbftSetTimer& a) {
              timers_[a.timer] = clock_->NowNanos() + a.delay_ms * 1'000'000;
            },
            [&](partitions::PbftCancelTimer& a) { timers_.erase(a.timer); },
            [&](partitions::PbftFetchTxs& a) {
              node::partition::PartitionMessage m;
              bool repeat = true;
              {
                absl::MutexLock lock(&wanted_mu_);
                // Bounded: a fetch is retried every retransmit period if still needed.
                if (wanted_.size() > 4 * kMaxFetch) wanted_.clear();
                for (std::string& h : a.tx_hashes) {
                  if (m.fetch().tx_hashes_size() >= static_cast<int>(kMaxFetch)) break;
                  repeat &= !wanted_.insert(h).second;
                  m.mutable_fetch()->add_tx_hashes(std::move(h));
                }
              }
              // The first ask goes to the primary, which proposed the batch and so holds its
              // txs: one answer instead of n-1 on the (prioritized) SYNC channel. A repeated ask
              // (the primary did not answer in a retransmit period, or a synced batch) goes to all.
              const uint32_t primary = replica_->config().PrimaryOf(replica_->view());
              if (!repeat && primary != self_index_) {
                SendPeer(primary, p2p::Channel::SYNC, m);
              } else {
                BroadcastPeers(p2p::Channel::SYNC, m);
              }
            },
            [&](partitions::PbftStateChanged& a) {
              const auto old = static_cast<partitions::ConsensusState>(state_.load());
              state_.store(static_cast<int>(a.state));
              LOG(INFO) << "partition " << name_ << ": consensus "
                        << partitions::ConsensusStateName(old) << " -> "
                        << partitions::ConsensusStateName(a.state) << " (view "
                        << replica_->view() << ")";
              if (a.state == partitions::ConsensusState::kViewChange) {
                view_changes_.fetch_add(1);
                // Proposals of the old view are abandoned: their txs become selectable again
                // (a re-proposed one that commits twice gets a REJECTED receipt the second time).
                pool_->ReleaseAllProposed();
                ready_since_ = 0;
              }
            },
        },
        action);
  }
  view_.store(replica_->view());
  observing_.store(replica_->observing());
  UpdateHoldLocked();
}

void Partition::Impl::UpdateHoldLocked() {
  const bool primary_normal =
      !halted_ && replica_->IsPrimary() &&
      replica_->state() == partitions::ConsensusState::kNormal && env_.replica_ids.size() > 1;
  if (primary_normal == primary_normal_) return;
  primary_normal_ = primary_normal;
  {
    absl::MutexLock lock(&fwd_mu_);
    hold_own_ = primary_normal;
  }
  // No longer proposing: the next tick forwards everything held, so the new primary gets it.
  if (!primary_normal) deferred_.push_back([this] { WakeTicker(); });
}

void Partition::Impl::TakeProposalBodiesLocked(const std::vector<partitions::TxPtr>& batch) {
  node::partition::PartitionMessage bodies;
  {
    absl::MutexLock lock(&fwd_mu_);
    if (held_.empty()) return;
    for (const partitions::TxPtr& tx : batch) {
      if (held_.erase(tx->hash) > 0) bodies.mutable_txs()->add_signed_txs(tx->signed_bytes);
    }
  }
  if (bodies.has_txs()) proposal_bodies_ = std::move(bodies);
}

void Partition::Impl::SendProposalBodiesLocked() {
  if (!proposal_bodies_) return;
  const int n = proposal_bodies_->txs().signed_txs_size();
  absl::Status s =
      env_.network->Broadcast(id_, p2p::Channel::CONSENSUS, proposal_bodies_->SerializeAsString());
  if (!s.ok()) {
    // Refused (e.g. the CONSENSUS queue is full): forward them; backups fetch what they miss.
    VLOG(1) << "partition " << name_ << ": proposal bodies: " << s;
    ReturnProposalBodiesLocked();
    return;
  }
  proposal_body_txs_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  proposal_bodies_.reset();
}

void Partition::Impl::ReturnProposalBodiesLocked() {
  if (!proposal_bodies_) return;
  {
    absl::MutexLock lock(&fwd_mu_);
    for (std::string& t : *proposal_bodies_->mutable_txs()->mutable_signed_txs()) {
      fwd_bytes_ += t.size();
      fwd_.push_back(std::move(t));
    }
  }
  proposal_bodies_.reset();
}

absl::Status Partition::Impl::CommitLocked(const partitions::PbftCommit& commit) {
  const uint64_t height = chain_.ledger->last_height();
  if (commit.seq <= height) return absl::OkStatus();  // already in the ledger (restart)
  if (commit.seq != height + 1) {
    return absl::InternalError(absl::StrCat("commit of seq ", commit.seq, " but the ledger is at ",
                                            height));
  }
  std::vector<partitions::TxPtr> txs;
  txs.reserve(commit.tx_hashes.size());
  for (const std::string& h : commit.tx_hashes) {
    partitions::TxPtr tx = pool_->Get(h);
    if (tx == nullptr) {
      // Committed before (a replay inside a later batch): the executor rejects it again.
      absl::StatusOr<std::string> stored = chain_.ledger->GetTx(h);
      if (!stored.ok()) {
        return absl::InternalError(absl::StrCat("tx of committed batch ", commit.seq,
                                                " is neither pooled nor stored"));
      }
      absl::StatusOr<base::DecodedTx> d = base::DecodeSignedTx(*stored, tx_limits_);
      if (!d.ok()) return d.status();
      tx = std::make_shared<const base::DecodedTx>(*std::move(d));
    }
    txs.push_back(std::move(tx));
  }
  partitions::BlockExecution exec = chain_.executor->Execute(commit.seq, txs);

  node::chain::Block block;
  auto* header = block.mutable_header();
  header->set_partition(id_);
  header->set_height(commit.seq);
  header->set_parent_hash(chain_.ledger->last_block_hash());
  for (const auto& tx : txs) {
    block.add_tx_hashes(tx->hash);
    block.add_txs(tx->signed_bytes);
  }
  header->set_tx_root(partitions::TxRoot(block.tx_hashes()));
  header->set_state_root(exec.state_root);
  // No view or proposer: every replica must build the same block for a seq, and the view in
  // which a seq commits can differ between replicas (chain.proto); the certificate keeps it.
  header->set_timestamp_ms(0);  // every replica must build the same block: no local clock here
  header->set_tx_count(static_cast<uint32_t>(txs.size()));

  node::consensus::CommittedBatch cert;
  cert.set_seq(commit.seq);
  for (const std::string& h : commit.tx_hashes) cert.add_tx_hashes(h);
  for (const auto& m : commit.certificate) *cert.add_commit_certificate() = m;
  partitions::ConsensusMetaWrites meta = {{CertKey(commit.seq), cert.SerializeAsString()},
                                          {kChainDigestKey, commit.chain_digest}};
  absl::Status s = chain_.ledger->CommitBlock(block, exec.receipts, exec.writes, meta);
  if (!s.ok()) return s;
  chain_.executor->Apply(exec);
  pool_->RemoveCommitted(txs);
  height_.store(commit.seq);
  committed_txs_.fetch_add(txs.size(), std::memory_order_relaxed);
  if (fifo_) {
    absl::MutexLock lock(&spill_mu_);
    for (const auto& tx : txs) {
      if (auto it = spill_seq_of_.find(tx->hash); it != spill_seq_of_.end()) {
        SpillRecordDone(it->second);
        spill_seq_of_.erase(it);
      }
    }
  }

  const int64_t now = clock_->NowNanos();
  std::vector<std::string> waited;
  std::vector<flowctl::AdaptiveLimiter::Ticket> tickets;
  {
    absl::MutexLock lock(&wait_mu_);
    for (const auto& tx : txs) {
      if (auto it = admitted_at_.find(tx->hash); it != admitted_at_.end()) {
        commit_latency_.Record(now - it->second);
        admitted_at_.erase(it);
      }
      if (auto it = adaptive_tickets_.find(tx->hash); it != adaptive_tickets_.end()) {
        tickets.push_back(std::move(it->second.ticket));
        adaptive_tickets_.erase(it);
      }
      if (waiters_.contains(tx->hash)) waited.push_back(tx->hash);
    }
  }
  // Latency samples for the adaptive stage (its lock is a leaf, taken after wait_mu_ is free).
  for (flowctl::AdaptiveLimiter::Ticket& t : tickets) t.Commit();
  for (std::string& h : waited) {
    deferred_.push_back([this, h = std::move(h)] { ResolveWaiters(h); });
  }
  return absl::OkStatus();
}

bool Partition::Impl::HasTx(absl::string_view tx_hash) const {
  if (pool_->Get(tx_hash) != nullptr) return true;
  return chain_.ledger->GetReceipt(tx_hash).ok();
}

std::optional<node::consensus::CommittedBatch> Partition::Impl::GetCommitted(uint64_t seq) const {
  absl::StatusOr<std::string> bytes = chain_.ledger->GetConsensusMeta(CertKey(seq));
  if (!bytes.ok()) return std::nullopt;
  node::consensus::CommittedBatch batch;
  if (!batch.ParseFromString(*bytes)) return std::nullopt;
  return batch;
}

// ---- Ticker ----

void Partition::Impl::WakeTicker() {
  absl::MutexLock lock(&tick_mu_);
  tick_wake_ = true;
  tick_cv_.Signal();
}

void Partition::Impl::TickerLoop() {
  const int64_t period = absl::ToInt64Nanoseconds(env_.tick);
  while (true) {
    const int64_t now = clock_->NowNanos();
    int64_t next = std::min(Tick(now), now + period);
    absl::MutexLock lock(&tick_mu_);
    if (tick_stop_) return;
    if (!tick_wake_ && next > now) {
      tick_cv_.WaitWithTimeout(&tick_mu_, absl::Nanoseconds(next - now));
    }
    tick_wake_ = false;
    if (tick_stop_) return;
  }
}

int64_t Partition::Impl::Tick(int64_t now) {
  int64_t wake = now + absl::ToInt64Nanoseconds(env_.tick);
  FlushForward();
  WithConsensus([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Timers that are due, in deadline order.
    while (!halted_) {
      auto due = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second <= now && (due == timers_.end() || it->second < due->second)) due = it;
      }
      if (due == timers_.end()) break;
      partitions::PbftTimer timer = due->first;
      timers_.erase(due);
      if (timer == partitions::PbftTimer::kViewChange) {
        // A view change that outlived its timer: how much support it has says why (the view
        // moves on only with 2f+1 ViewChanges; fewer means this replica is alone or cut off).
        LOG(INFO) << "partition " << name_ << ": view change to view " << replica_->view()
                  << " timed out with " << replica_->view_change_votes() << " of "
                  << replica_->config().quorum() << " ViewChanges";
      }
      StepLocked(partitions::PbftTimerFired{timer});
    }
    for (const auto& [timer, at] : timers_) wake = std::min(wake, at);
    if (now >= next_expire_) {
      pool_->Expire(now);
      next_expire_ = now + kExpireEveryNanos;
    }
    if (now >= next_sweep_) {
      SweepAdaptiveTicketsLocked(now);
      next_sweep_ = now + kSweepEveryNanos;
    }
    CutBatchesLocked(now, &wake);
  });
  ExpireWaiters(now);
  return wake;
}

void Partition::Impl::CutBatchesLocked(int64_t now, int64_t* wake) {
  const uint64_t max_txs = batch_policy_->options().max_txs;
  partitions::TxPool::ReadyCount ready = pool_->CountReady(max_txs);
  if (ready.txs != reported_pending_) {
    reported_pending_ = ready.txs;
    StepLocked(partitions::PbftPendingRequests{ready.txs});
  }
  if (ready.txs == 0) {
    ready_since_ = 0;
    return;
  }
  if (ready_since_ == 0) ready_since_ = now;
  if (paused_.load(std::memory_order_relaxed) || now < empty_cut_until_) return;
  // Pipelining: cut as long as the replica takes proposals and the policy says so.
  for (int round = 0; round < 8 && !halted_; ++round) {
    partitions::BatchPolicy::Decision d = batch_policy_->Decide(
        now, ready.txs, ready.bytes, ready_since_, replica_->CanPropose());
    if (!d.cut) {
      if (d.wake_at_nanos) *wake = std::min(*wake, *d.wake_at_nanos);
      return;
    }
    std::vector<partitions::TxPtr> batch =
        pool_->SelectBatch(max_txs, batch_policy_->options().max_bytes);
    if (batch.empty()) {
      // Counted as ready but not selectable (races with commits): look again shortly.
      empty_cut_until_ = now + 1'000'000;
      return;
    }
    std::vector<std::string> hashes;
    hashes.reserve(batch.size());
    for (const auto& tx : batch) hashes.push_back(tx->hash);
    TakeProposalBodiesLocked(batch);
    StepLocked(partitions::PbftBatchReady{std::move(hashes)});
    ReturnProposalBodiesLocked();  // no pre-prepare came of it: forward them instead
    ready = pool_->CountReady(max_txs);
    ready_since_ = ready.txs > 0 ? now : 0;
    if (ready.txs == 0) return;
  }
}

void Partition::Impl::ExpireWaiters(int64_t now) {
  std::vector<CommitWaiter> expired;
  {
    absl::MutexLock lock(&wait_mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& list = it->second;
      for (size_t i = 0; i < list.size();) {
        if (list[i].deadline_nanos <= now) {
          expired.push_back(std::move(list[i]));
          list.erase(list.begin() + static_cast<ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      if (list.empty()) {
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
    // Bound the latency bookkeeping of txs that expired from the pool uncommitted.
    if (admitted_at_.size() > 4 * pool_->limits().max_txs) admitted_at_.clear();
  }
  for (CommitWaiter& w : expired) {
    w.result.status = absl::DeadlineExceededError(
        "the tx is in the pool but did not commit within wait_timeout_ms; query GetTx later");
    w.done(std::move(w.result));
  }
}

}  // namespace runtime
