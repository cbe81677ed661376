// PbftReplica: construction, restore, event dispatch, the normal case and execution.
// Restore and start live in pbft_restore.cc, checkpoints and sync in pbft_sync.cc, view changes
// in pbft_view_change.cc.
#include "partitions/pbft_replica.h"

#include <algorithm>
#include <utility>

#include "flowctl/status_macros.h"

namespace partitions {

using ::node::consensus::Commit;
using ::node::consensus::Prepare;
using ::node::consensus::PrePrepare;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

absl::StatusOr<std::unique_ptr<PbftReplica>> PbftReplica::Create(const PbftConfig& config,
                                                                 Deps deps,
                                                                 LedgerPosition position) {
  RETURN_IF_ERROR(config.Validate());
  if (deps.crypto == nullptr || deps.txs == nullptr || deps.store == nullptr ||
      deps.blocks == nullptr) {
    return absl::InvalidArgumentError("PbftReplica::Create: every dependency is required");
  }
  std::unique_ptr<PbftReplica> replica(new PbftReplica(config, deps, std::move(position)));
  RETURN_IF_ERROR(replica->Restore());
  return replica;
}

PbftReplica::PbftReplica(const PbftConfig& config, Deps deps, LedgerPosition position)
    : config_(config),
      deps_(deps),
      validator_(config, deps.crypto),
      last_executed_(position.last_executed),
      chain_digest_(position.chain_digest.empty() ? GenesisDigest() : position.chain_digest),
      stable_digest_(GenesisDigest()) {
  executed_at_last_tick_ = last_executed_;
}

std::vector<PbftAction> PbftReplica::Step(const PbftEvent& event) {
  out_.clear();
  if (!status_.ok()) return {};
  std::visit(Overloaded{
                 [&](const PbftStart&) { OnStart(); },
                 [&](const PbftMessage& e) { OnMessage(e.msg); },
                 [&](const PbftTimerFired& e) { OnTimer(e.timer); },
                 [&](const PbftBatchReady& e) { OnBatchReady(e.tx_hashes); },
                 [&](const PbftPendingRequests& e) { OnPendingRequests(e.count); },
                 [&](const PbftTxsAvailable&) { OnTxsAvailable(); },
             },
             event);
  UpdateRequestTimer();
  SetStateFlags();
  // A failed store write means what was signed may not be durable: send nothing, ever again.
  if (!status_.ok()) return {};
  return std::move(out_);
}

ConsensusState PbftReplica::state() const {
  if (!installed_) return ConsensusState::kViewChange;
  if (recovering_) return ConsensusState::kRecovering;
  return ConsensusState::kNormal;
}

void PbftReplica::SetStateFlags() {
  const ConsensusState now = state();
  if (now != reported_state_) {
    reported_state_ = now;
    out_.push_back(PbftStateChanged{now});
  }
}

bool PbftReplica::CanPropose() const {
  return status_.ok() && installed_ && !recovering_ && !Observing() && IsPrimary() &&
         next_seq_ <= h_ + config_.window && next_seq_ <= last_executed_ + config_.max_inflight;
}

void PbftReplica::OnMessage(const ConsensusMessage& msg) {
  if (msg.sender() >= config_.n || msg.sender() == config_.self) {
    ++counters_.dropped_not_replica;
    return;
  }
  switch (msg.body_case()) {
    case ConsensusMessage::kPrePrepare:
      return OnPrePrepare(msg);
    case ConsensusMessage::kPrepare:
      return OnPrepare(msg);
    case ConsensusMessage::kCommit:
      return OnCommit(msg);
    case ConsensusMessage::kCheckpoint:
      return OnCheckpoint(msg);
    case ConsensusMessage::kViewChange:
      return OnViewChange(msg);
    case ConsensusMessage::kNewView:
      return OnNewView(msg);
    case ConsensusMessage::kNewViewRequest:
      return OnNewViewRequest(msg);
    case ConsensusMessage::kSyncRequest:
      return OnSyncRequest(msg);
    case ConsensusMessage::kSyncResponse:
      return OnSyncResponse(msg);
    default:
      ++counters_.dropped_invalid;
      return;
  }
}

void PbftReplica::OnTimer(PbftTimer timer) {
  switch (timer) {
    case PbftTimer::kRequest:
      request_timer_armed_ = false;
      if (!installed_) return;
      if (recovering_) return;  // re-armed by UpdateRequestTimer; our own lag, not the primary's
      if (pending_requests_ > 0 || HasUnexecutedWork()) StartViewChange(view_ + 1);
      return;
    case PbftTimer::kViewChange: {
      if (installed_) return;
      // Escalate only a view change that 2f+1 replicas joined and whose NewView did not come
      // (Castro & Liskov 4.5.2). Alone, escalating would only take us further from the others.
      auto vcs = view_changes_.find(view_);
      if (vcs == view_changes_.end() || vcs->second.size() < config_.quorum()) {
        // Short of 2f+1, but some replica already asks for a higher view (e.g. one that went
        // back to its own earlier, higher ViewChange): join the lowest such view instead of
        // waiting here for ever. It only moves to a view someone announced, never a new one.
        uint64_t up = 0;
        for (const auto& [sender, v] : latest_vc_view_) {
          if (sender != config_.self && v > view_ && (up == 0 || v < up)) up = v;
        }
        if (up > 0) {
          StartViewChange(up);
          return;
        }
        if (own_view_change_) Broadcast(*own_view_change_);
        out_.push_back(PbftSetTimer{PbftTimer::kViewChange, ViewChangeTimeout()});
        return;
      }
      backoff_shift_ = std::min(backoff_shift_ + 1, config_.max_backoff_shift);
      StartViewChange(view_ + 1);
      return;
    }
    case PbftTimer::kRetransmit:
      OnRetransmit();
      out_.push_back(PbftSetTimer{PbftTimer::kRetransmit, config_.retransmit_ms});
      return;
  }
}

void PbftReplica::OnBatchReady(const std::vector<std::string>& tx_hashes) {
  if (!CanPropose() || tx_hashes.empty() || tx_hashes.size() > config_.max_batch_txs) return;
  for (const std::string& h : tx_hashes) {
    if (h.size() != kTxHashBytes) return;
  }
  while (log_.count(next_seq_) > 0 && log_[next_seq_].pre_prepare) ++next_seq_;
  if (!CanPropose()) return;
  const uint64_t seq = next_seq_++;
  ConsensusMessage msg;
  PrePrepare* pp = msg.mutable_pre_prepare();
  pp->set_view(view_);
  pp->set_seq(seq);
  pp->set_digest(BatchDigest(tx_hashes));
  pp->mutable_tx_hashes()->Assign(tx_hashes.begin(), tx_hashes.end());
  pp->set_proposer(config_.self);
  msg = Signed(std::move(msg));
  Persist(deps_.store->AppendLog({msg}));
  Slot& slot = log_[seq];
  slot.pre_prepare = msg;
  slot.digest = msg.pre_prepare().digest();
  Broadcast(msg);
  CheckPrepared(seq);
}

void PbftReplica::OnPendingRequests(uint64_t count) { pending_requests_ = count; }

void PbftReplica::OnTxsAvailable() {
  std::vector<uint64_t> waiting;
  for (const auto& [seq, slot] : log_) {
    if (slot.waiting_txs) waiting.push_back(seq);
  }
  // fetched_for_ is left alone: a fetch is retried once per retransmit period, not on every
  // arrival (which would multiply fetches while several slots wait).
  for (uint64_t seq : waiting) ContinueAfterTxs(seq);
  TryExecute();
}

void PbftReplica::OnRetransmit() {
  fetched_for_.clear();
  // In a view change, and while observing a lower view, our ViewChange must reach everyone.
  if (own_view_change_ && (!installed_ || Observing())) Broadcast(*own_view_change_);
  if (installed_) {
    std::vector<uint64_t> waiting;
    for (auto it = log_.upper_bound(last_executed_); it != log_.end(); ++it) {
      Slot& slot = it->second;
      if (slot.waiting_txs) waiting.push_back(it->first);
      if (slot.pre_prepare && slot.pre_prepare->sender() == config_.self) {
        Broadcast(*slot.pre_prepare);
      }
      if (auto p = slot.prepares.find(config_.self); p != slot.prepares.end()) Broadcast(p->second);
      if (auto c = slot.commits.find(config_.self); c != slot.commits.end()) Broadcast(c->second);
    }
    for (uint64_t seq : waiting) ContinueAfterTxs(seq);
    const bool ahead = std::any_of(future_.begin(), future_.end(), [&](const ConsensusMessage& m) {
      return MessageView(m) > view_;
    });
    if (ahead) {
      ConsensusMessage req;
      req.mutable_new_view_request()->set_min_view(view_ + 1);
      Broadcast(Signed(std::move(req)));
    }
  }
  // Re-announce the latest own checkpoint: lost checkpoints would otherwise freeze the watermarks,
  // and a replica that missed them learns it is behind.
  if (!own_checkpoints_.empty()) {
    auto it = checkpoints_.find(own_checkpoints_.rbegin()->first);
    if (it != checkpoints_.end() && it->second.count(config_.self) > 0) {
      Broadcast(it->second.at(config_.self));
    }
  }
  if (last_executed_ == executed_at_last_tick_ && (recovering_ || EvidenceAhead())) {
    sync_in_flight_ = false;
    RequestSync();
  }
  executed_at_last_tick_ = last_executed_;
}

bool PbftReplica::DivertByView(const ConsensusMessage& msg, uint64_t view) {
  if (view < view_) {
    if (!installed_ && msg.has_commit()) NoteLowerViewCommit(msg, view);
    ++counters_.dropped_stale_view;
    return true;
  }
  if (view > view_ || !installed_) {
    if (MessageSeq(msg) <= h_ || future_.size() >= config_.window * config_.n * 4) {
      ++counters_.dropped_outside_watermarks;
    } else {
      ++counters_.buffered_future;
      future_.push_back(msg);
    }
    return true;
  }
  return false;
}

void PbftReplica::OnPrePrepare(const ConsensusMessage& msg) {
  const PrePrepare& pp = msg.pre_prepare();
  if (DivertByView(msg, pp.view())) return;
  if (msg.sender() != config_.PrimaryOf(view_) || pp.proposer() != msg.sender()) {
    ++counters_.dropped_invalid;
    return;
  }
  if (!InWindow(pp.seq())) {
    ++counters_.dropped_outside_watermarks;
    return;
  }
  if (!validator_.ValidBatch(pp)) {
    ++counters_.dropped_invalid;
    return;
  }
  Slot& slot = log_[pp.seq()];
  if (slot.pre_prepare) {
    if (slot.digest == pp.digest()) {
      ++counters_.dropped_duplicate;
    } else {
      ++counters_.dropped_conflicting;
    }
    return;
  }
  AcceptPrePrepare(msg);
}

void PbftReplica::AcceptPrePrepare(const ConsensusMessage& msg) {
  const PrePrepare& pp = msg.pre_prepare();
  Slot& slot = log_[pp.seq()];
  if (slot.committed && slot.committed_digest != pp.digest()) {
    ++counters_.dropped_conflicting;
    return;
  }
  slot.pre_prepare = msg;
  slot.digest = pp.digest();
  ContinueAfterTxs(pp.seq());
}

void PbftReplica::ContinueAfterTxs(uint64_t seq) {
  auto it = log_.find(seq);
  if (it == log_.end() || !it->second.pre_prepare) return;
  Slot& slot = it->second;
  const PrePrepare& pp = slot.pre_prepare->pre_prepare();
  if (seq > last_executed_ && !slot.committed) {
    std::vector<std::string> missing;
    for (const std::string& h : pp.tx_hashes()) {
      if (!deps_.txs->HasTx(h)) missing.push_back(h);
    }
    if (!missing.empty()) {
      slot.waiting_txs = true;
      if (fetched_for_.insert(seq).second) out_.push_back(PbftFetchTxs{std::move(missing)});
      return;
    }
  }
  slot.waiting_txs = false;
  if (config_.self != config_.PrimaryOf(view_) && slot.prepares.count(config_.self) == 0 &&
      !Observing()) {
    ConsensusMessage msg;
    Prepare* p = msg.mutable_prepare();
    p->set_view(view_);
    p->set_seq(seq);
    p->set_digest(slot.digest);
    msg = Signed(std::move(msg));
    Persist(deps_.store->AppendLog({*slot.pre_prepare, msg}));
    slot.prepares[config_.self] = msg;
    Broadcast(msg);
  }
  CheckPrepared(seq);
}

void PbftReplica::CheckPrepared(uint64_t seq) {
  Slot& slot = log_[seq];
  if (!slot.pre_prepare || slot.waiting_txs) return;
  if (!slot.prepared) {
    const uint32_t primary = config_.PrimaryOf(view_);
    node::consensus::PreparedCertificate cert;
    *cert.mutable_pre_prepare() = *slot.pre_prepare;
    for (const auto& [sender, p] : slot.prepares) {
      if (sender != primary && p.prepare().digest() == slot.digest &&
          static_cast<uint32_t>(cert.prepares_size()) < 2 * config_.f()) {
        *cert.add_prepares() = p;
      }
    }
    if (static_cast<uint32_t>(cert.prepares_size()) < 2 * config_.f()) return;
    slot.prepared = true;
    slot.cert = std::move(cert);
    slot.cert_view = view_;
  }
  if (!slot.sent_commit && !Observing()) {
    ConsensusMessage msg;
    Commit* c = msg.mutable_commit();
    c->set_view(view_);
    c->set_seq(seq);
    c->set_digest(slot.digest);
    msg = Signed(std::move(msg));
    // The certificate goes to disk with the commit: a restarted replica must still report it in
    // its view changes, or a batch committed elsewhere could be replaced. (Its pre-prepare is on
    // disk already: written with our prepare, our proposal, or our NewView.)
    std::vector<ConsensusMessage> durable(slot.cert->prepares().begin(),
                                          slot.cert->prepares().end());
    durable.push_back(msg);
    Persist(deps_.store->AppendLog(durable));
    slot.commits[config_.self] = msg;
    slot.sent_commit = true;
    Broadcast(msg);
  }
  CheckCommitted(seq);
}

void PbftReplica::OnPrepare(const ConsensusMessage& msg) {
  const Prepare& p = msg.prepare();
  if (DivertByView(msg, p.view())) return;
  if (msg.sender() == config_.PrimaryOf(view_) || p.digest().size() != kTxHashBytes) {
    ++counters_.dropped_invalid;
    return;
  }
  if (!InWindow(p.seq())) {
    ++counters_.dropped_outside_watermarks;
    return;
  }
  Slot& slot = log_[p.seq()];
  auto it = slot.prepares.find(msg.sender());
  if (it != slot.prepares.end()) {
    if (it->second.prepare().digest() == p.digest()) {
      ++counters_.dropped_duplicate;
    } else {
      ++counters_.dropped_conflicting;
    }
    return;
  }
  slot.prepares.emplace(msg.sender(), msg);
  CheckPrepared(p.seq());
}

void PbftReplica::OnCommit(const ConsensusMessage& msg) {
  const Commit& c = msg.commit();
  if (DivertByView(msg, c.view())) return;
  if (c.digest().size() != kTxHashBytes) {
    ++counters_.dropped_invalid;
    return;
  }
  if (!InWindow(c.seq())) {
    ++counters_.dropped_outside_watermarks;
    return;
  }
  Slot& slot = log_[c.seq()];
  auto it = slot.commits.find(msg.sender());
  if (it != slot.commits.end()) {
    if (it->second.commit().digest() == c.digest()) {
      ++counters_.dropped_duplicate;
    } else {
      ++counters_.dropped_conflicting;
    }
    return;
  }
  slot.commits.emplace(msg.sender(), msg);
  CheckCommitted(c.seq());
}

void PbftReplica::CheckCommitted(uint64_t seq) {
  Slot& slot = log_[seq];
  if (!slot.prepared || slot.committed) return;
  std::vector<ConsensusMessage> cert;
  for (const auto& [sender, c] : slot.commits) {
    if (c.commit().digest() == slot.digest && cert.size() < config_.quorum()) cert.push_back(c);
  }
  if (cert.size() < config_.quorum()) return;
  slot.committed = true;
  slot.committed_digest = slot.digest;
  const auto& hashes = slot.pre_prepare->pre_prepare().tx_hashes();
  slot.committed_txs.assign(hashes.begin(), hashes.end());
  slot.committed_view = view_;
  slot.commit_cert = std::move(cert);
  TryExecute();
}

void PbftReplica::TryExecute() {
  const uint64_t before = last_executed_;
  while (status_.ok()) {
    const uint64_t seq = last_executed_ + 1;
    PbftCommit commit;
    commit.seq = seq;
    auto lit = log_.find(seq);
    auto sit = synced_.find(seq);
    if (lit != log_.end() && lit->second.committed) {
      const Slot& slot = lit->second;
      commit.view = slot.committed_view;
      commit.tx_hashes = slot.committed_txs;
      commit.digest = slot.committed_digest;
      commit.certificate = slot.commit_cert;
    } else if (sit != synced_.end()) {
      const auto& batch = sit->second;
      commit.view = batch.commit_certificate(0).commit().view();
      commit.tx_hashes.assign(batch.tx_hashes().begin(), batch.tx_hashes().end());
      commit.digest = BatchDigest(commit.tx_hashes);
      commit.certificate.assign(batch.commit_certificate().begin(),
                                batch.commit_certificate().end());
      ++counters_.synced_batches;
    } else {
      break;
    }
    std::vector<std::string> missing;
    for (const std::string& h : commit.tx_hashes) {
      if (!deps_.txs->HasTx(h)) missing.push_back(h);
    }
    if (!missing.empty()) {
      if (sit != synced_.end() && !(lit != log_.end() && lit->second.committed)) {
        --counters_.synced_batches;
      }
      if (fetched_for_.insert(seq).second) out_.push_back(PbftFetchTxs{std::move(missing)});
      break;
    }
    chain_digest_ = ChainDigest(chain_digest_, seq, commit.digest);
    commit.chain_digest = chain_digest_;
    last_executed_ = seq;
    ++counters_.committed_batches;
    out_.push_back(std::move(commit));
    synced_.erase(synced_.begin(), synced_.upper_bound(seq));
    if (seq == h_ && chain_digest_ != stable_digest_) {
      status_ = absl::InternalError("pbft: executed state diverges from the stable checkpoint");
      return;
    }
    if (seq % config_.checkpoint_interval == 0) SendOwnCheckpoint(seq);
  }
  if (last_executed_ == before) return;
  if (installed_) backoff_shift_ = 0;
  if (request_timer_armed_) {
    out_.push_back(PbftSetTimer{PbftTimer::kRequest, config_.request_timeout_ms});
  }
  if (recovering_ && last_executed_ >= sync_target_) recovering_ = false;
  if (recovering_ && synced_.empty() && !sync_in_flight_) RequestSync();
}

bool PbftReplica::HasUnexecutedWork() const {
  for (auto it = log_.upper_bound(last_executed_); it != log_.end(); ++it) {
    if (it->second.pre_prepare || it->second.committed) return true;
  }
  return false;
}

void PbftReplica::CancelRequestTimer() {
  if (!request_timer_armed_) return;
  request_timer_armed_ = false;
  out_.push_back(PbftCancelTimer{PbftTimer::kRequest});
}

void PbftReplica::UpdateRequestTimer() {
  const bool want = installed_ && (pending_requests_ > 0 || HasUnexecutedWork());
  if (want && !request_timer_armed_) {
    request_timer_armed_ = true;
    out_.push_back(PbftSetTimer{PbftTimer::kRequest, config_.request_timeout_ms});
  } else if (!want && request_timer_armed_) {
    request_timer_armed_ = false;
    out_.push_back(PbftCancelTimer{PbftTimer::kRequest});
  }
}

ConsensusMessage PbftReplica::Signed(ConsensusMessage msg) {
  msg.set_sender(config_.self);
  msg.clear_signature();
  msg.set_signature(deps_.crypto->Sign(msg));
  return msg;
}

void PbftReplica::Broadcast(const ConsensusMessage& msg, PbftChannel channel) {
  if (config_.n > 1) out_.push_back(PbftBroadcast{channel, msg});
}

void PbftReplica::SendTo(uint32_t to, const ConsensusMessage& msg, PbftChannel channel) {
  out_.push_back(PbftSend{to, channel, msg});
}

void PbftReplica::Persist(absl::Status status) {
  if (!status.ok() && status_.ok()) status_ = std::move(status);
}

int64_t PbftReplica::ViewChangeTimeout() const {
  return config_.view_change_timeout_ms << backoff_shift_;
}

}  // namespace partitions
