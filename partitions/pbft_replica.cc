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
      view_changes_(config),
      log_(config),
      last_executed_(position.last_executed),
      chain_digest_(position.chain_digest.empty() ? GenesisDigest() : position.chain_digest),
      future_(config),
      checkpoints_(config),
      sync_(config, position.last_executed) {}

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
  if (sync_.recovering()) return ConsensusState::kRecovering;
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
  return status_.ok() && installed_ && !sync_.recovering() && !Observing() && IsPrimary() &&
         next_seq_ <= low_watermark() + config_.window &&
         next_seq_ <= last_executed_ + config_.max_inflight;
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
      if (sync_.recovering()) return;  // re-armed by UpdateRequestTimer; our lag, not the primary's
      if (pending_requests_ > 0 || log_.HasWorkAbove(last_executed_)) StartViewChange(view_ + 1);
      return;
    case PbftTimer::kViewChange: {
      if (installed_) return;
      // Escalate only a view change that 2f+1 replicas joined and whose NewView did not come
      // (Castro & Liskov 4.5.2). Alone, escalating would only take us further from the others.
      if (view_changes_.CountFor(view_) < config_.quorum()) {
        // Short of 2f+1, but some replica already asks for a higher view (e.g. one that went
        // back to its own earlier, higher ViewChange): join the lowest such view instead of
        // waiting here for ever. It only moves to a view someone announced, never a new one.
        if (const uint64_t up = view_changes_.LowestViewAbove(view_); up > 0) {
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
  while (log_.HasPrePrepare(next_seq_)) ++next_seq_;
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
  Slot& slot = log_.At(seq);
  slot.pre_prepare = msg;
  slot.digest = msg.pre_prepare().digest();
  Broadcast(msg);
  CheckPrepared(seq);
}

void PbftReplica::OnPendingRequests(uint64_t count) { pending_requests_ = count; }

void PbftReplica::OnTxsAvailable() {
  // fetched_for_ is left alone: a fetch is retried once per retransmit period, not on every
  // arrival (which would multiply fetches while several slots wait).
  for (uint64_t seq : log_.WaitingForTxs(/*seq=*/0)) ContinueAfterTxs(seq);  // every slot
  TryExecute();
}

void PbftReplica::OnRetransmit() {
  fetched_for_.clear();
  // In a view change, and while observing a lower view, our ViewChange must reach everyone.
  if (own_view_change_ && (!installed_ || Observing())) Broadcast(*own_view_change_);
  if (installed_) {
    for (const ConsensusMessage& m : log_.OwnMessagesAbove(last_executed_)) Broadcast(m);
    for (uint64_t seq : log_.WaitingForTxs(last_executed_)) ContinueAfterTxs(seq);
    if (future_.HasAbove(view_)) {
      ConsensusMessage req;
      req.mutable_new_view_request()->set_min_view(view_ + 1);
      Broadcast(Signed(std::move(req)));
    }
  }
  // Re-announce the latest own checkpoint: lost checkpoints would otherwise freeze the watermarks,
  // and a replica that missed them learns it is behind.
  if (const ConsensusMessage* own = checkpoints_.LatestOwnVote()) Broadcast(*own);
  // Stalled for a period: a request still in flight is lost, or the evidence says we are behind.
  if (sync_.TickStalled(last_executed_) && (sync_.recovering() || EvidenceAhead())) RequestSync();
}

bool PbftReplica::DivertByView(const ConsensusMessage& msg, uint64_t view) {
  if (view < view_) {
    if (!installed_ && msg.has_commit()) NoteLowerViewCommit(msg, view);
    ++counters_.dropped_stale_view;
    return true;
  }
  if (view > view_ || !installed_) {
    if (future_.Add(msg, low_watermark())) {
      ++counters_.buffered_future;
    } else {
      ++counters_.dropped_outside_watermarks;
    }
    return true;
  }
  return false;
}

void PbftReplica::OnPrePrepare(const ConsensusMessage& msg) {
  if (DivertByView(msg, msg.pre_prepare().view())) return;
  if (Counted(log_.AddPrePrepare(msg, view_, low_watermark(), validator_))) {
    ContinueAfterTxs(msg.pre_prepare().seq());
  }
}

void PbftReplica::ContinueAfterTxs(uint64_t seq) {
  Slot* found = log_.Find(seq);
  if (found == nullptr || !found->pre_prepare) return;
  Slot& slot = *found;
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
  Slot* prepared = log_.TryPrepare(seq, view_);
  if (prepared == nullptr) return;
  Slot& slot = *prepared;
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
  if (DivertByView(msg, msg.prepare().view())) return;
  if (Counted(log_.AddPrepare(msg, view_, low_watermark()))) CheckPrepared(msg.prepare().seq());
}

void PbftReplica::OnCommit(const ConsensusMessage& msg) {
  if (DivertByView(msg, msg.commit().view())) return;
  if (Counted(log_.AddCommit(msg, low_watermark()))) CheckCommitted(msg.commit().seq());
}

void PbftReplica::CheckCommitted(uint64_t seq) {
  if (log_.TryCommit(seq, view_)) TryExecute();
}

void PbftReplica::TryExecute() {
  const uint64_t before = last_executed_;
  while (status_.ok()) {
    const uint64_t seq = last_executed_ + 1;
    std::optional<PbftCommit> next = log_.Decided(seq);  // committed here, else synced
    const bool synced = !next;
    if (synced) next = sync_.Batch(seq);
    if (!next) break;
    PbftCommit& commit = *next;
    if (synced) ++counters_.synced_batches;
    std::vector<std::string> missing;
    for (const std::string& h : commit.tx_hashes) {
      if (!deps_.txs->HasTx(h)) missing.push_back(h);
    }
    if (!missing.empty()) {
      if (synced) --counters_.synced_batches;
      if (fetched_for_.insert(seq).second) out_.push_back(PbftFetchTxs{std::move(missing)});
      break;
    }
    chain_digest_ = ChainDigest(chain_digest_, seq, commit.digest);
    commit.chain_digest = chain_digest_;
    last_executed_ = seq;
    ++counters_.committed_batches;
    out_.push_back(std::move(commit));
    sync_.DropThrough(seq);
    if (seq == low_watermark() && chain_digest_ != checkpoints_.stable_digest()) {
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
  sync_.NoteExecuted(last_executed_);
  if (sync_.WantsRequest()) RequestSync();
}

void PbftReplica::CancelRequestTimer() {
  if (!request_timer_armed_) return;
  request_timer_armed_ = false;
  out_.push_back(PbftCancelTimer{PbftTimer::kRequest});
}

void PbftReplica::UpdateRequestTimer() {
  const bool want = installed_ && (pending_requests_ > 0 || log_.HasWorkAbove(last_executed_));
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

bool PbftReplica::Counted(PbftLog::Vote vote) {
  switch (vote) {
    case PbftLog::Vote::kAdded:
      return true;
    case PbftLog::Vote::kInvalid:
      ++counters_.dropped_invalid;
      return false;
    case PbftLog::Vote::kOutsideWindow:
      ++counters_.dropped_outside_watermarks;
      return false;
    case PbftLog::Vote::kDuplicate:
      ++counters_.dropped_duplicate;
      return false;
    case PbftLog::Vote::kConflicting:
      ++counters_.dropped_conflicting;
      return false;
  }
  return false;
}

void PbftReplica::Persist(absl::Status status) {
  if (!status.ok() && status_.ok()) status_ = std::move(status);
}

int64_t PbftReplica::ViewChangeTimeout() const {
  return config_.view_change_timeout_ms << backoff_shift_;
}

}  // namespace partitions
