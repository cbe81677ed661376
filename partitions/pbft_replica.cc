// PbftReplica: construction, restore, event dispatch, the normal case and execution.
// Checkpoints and sync live in pbft_sync.cc, view changes in pbft_view_change.cc.
#include "partitions/pbft_replica.h"

#include <algorithm>
#include <utility>

#include "flowctl/status_macros.h"
#include "partitions/pbft_messages.h"

namespace partitions {

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
      out_(config, deps.crypto, deps.store),
      views_(config),
      view_changes_(config),
      log_(config),
      last_executed_(position.last_executed),
      chain_digest_(position.chain_digest.empty() ? GenesisDigest() : position.chain_digest),
      position_root_(position.state_root),
      fetcher_(deps.txs),
      future_(config),
      checkpoints_(config),
      sync_(config, position.last_executed),
      request_timer_(config) {}

absl::Status PbftReplica::Restore() {
  ASSIGN_OR_RETURN(node::consensus::PersistedConsensus persisted, deps_.store->Load());
  const auto& pv = persisted.view();
  views_.Restore(pv);
  if (views_.own_view_change()) view_changes_.AddOwn(views_.view(), *views_.own_view_change());
  checkpoints_.RestoreStable(persisted.stable_checkpoint());
  const uint64_t h = low_watermark();
  next_seq_ = std::max(h, last_executed_) + 1;
  if (last_executed_ < h) sync_.RecoverTo(h);
  // Nothing signed before is contradicted: own checkpoints, prepared certificates and the
  // installed view's messages come back.
  checkpoints_.RestoreOwn(persisted.log(), last_executed_);
  const uint64_t own_max = log_.Restore(persisted.log(), h, views_.view(), views_.installed());
  next_seq_ = std::max(next_seq_, own_max + 1);
  // A backup logs a pre-prepare with its own prepare, so one that stopped while it waited for the
  // bodies of a batch the installed view's NewView re-issued has no record of it in the log. The
  // NewView is persisted with the view: take its pre-prepares back as InstallNewView did (OnStart
  // resumes them), instead of waiting for the primary's next retransmission.
  if (views_.installed() && views_.new_view()) {
    for (const ConsensusMessage& ppm : views_.new_view()->new_view().pre_prepares()) {
      const uint64_t seq = ppm.pre_prepare().seq();
      if (ppm.pre_prepare().view() != views_.view() || seq <= h || seq > h + config_.window) {
        continue;
      }
      if (const Slot* slot = log_.Find(seq); slot != nullptr && slot->pre_prepare) continue;
      log_.AcceptPrePrepare(ppm);
    }
  }
  return absl::OkStatus();
}

void PbftReplica::OnStart() {
  out_.set_reported_state(ConsensusState::kNormal);
  // A replica restarted exactly at its stable checkpoint checks its ledger against it.
  if (last_executed_ > 0 && last_executed_ == low_watermark() &&
      !MatchesStable(chain_digest_, position_root_)) {
    return;
  }
  // A crash after the commit of a checkpoint seq and before its vote: sign it now.
  if (last_executed_ > low_watermark() && last_executed_ % config_.checkpoint_interval == 0 &&
      !position_root_.empty() && checkpoints_.OwnVote(last_executed_) == nullptr) {
    SendOwnCheckpoint(last_executed_, chain_digest_, position_root_);
  }
  out_.Add(PbftSetTimer{PbftTimer::kRetransmit, config_.retransmit_ms});
  if (!views_.installed()) {
    if (views_.own_view_change()) out_.Broadcast(*views_.own_view_change());
    out_.Add(PbftSetTimer{PbftTimer::kViewChange, views_.timeout_ms()});
  }
  // Resume restored slots: prepare what was accepted, commit what was prepared.
  for (uint64_t seq : log_.WithPrePrepare()) ContinueAfterTxs(seq);
  if (last_executed_ < low_watermark()) {
    Recover();
  } else if (config_.n > 1) {
    // A restarted replica may be behind; ask one peer (cheap if it is not).
    sync_.Ask(last_executed_, low_watermark(), beyond_window_, out_);
  }
  TryExecute();
}

std::vector<PbftAction> PbftReplica::Step(const PbftEvent& event) {
  if (!out_.ok()) return {};
  std::visit(
      Overloaded{
          [&](const PbftStart&) { OnStart(); },
          [&](const PbftMessage& e) { OnMessage(e.msg); },
          [&](const PbftTimerFired& e) { OnTimer(e.timer); },
          [&](const PbftBatchReady& e) { OnBatchReady(e.tx_hashes); },
          [&](const PbftPendingRequests& e) { OnPendingRequests(e.count); },
          [&](const PbftTxsAvailable&) { OnTxsAvailable(); },
          [&](const PbftExecuted& e) { OnExecuted(e.seq, e.state_root); },
          [&](const PbftSnapshotInstalled& e) { OnSnapshotInstalled(e.seq, e.chain_digest); },
          [&](const PbftSnapshotAbandoned&) { OnSnapshotAbandoned(); },
      },
      event);
  const bool work = request_timer_.pending() > 0 || log_.HasWorkAbove(last_executed_);
  // An installed view with nothing to do has nothing to be late with: the next timeout is the base.
  if (views_.installed() && !work) request_timer_.ResetBackoff();
  request_timer_.Update(views_.installed() && work, out_);
  out_.ReportState(state());
  // A failed store write means what was signed may not be durable: send nothing, ever again.
  return out_.Take();
}

ConsensusState PbftReplica::state() const {
  if (divergence_) return ConsensusState::kDiverged;
  if (!views_.installed()) return ConsensusState::kViewChange;
  if (sync_.recovering()) return ConsensusState::kRecovering;
  return ConsensusState::kNormal;
}

bool PbftReplica::CanPropose() const {
  return out_.ok() && views_.installed() && !sync_.recovering() && !views_.observing() &&
         IsPrimary() && next_seq_ <= low_watermark() + config_.window &&
         next_seq_ <= last_executed_ + config_.max_inflight;
}

bool PbftReplica::Redundant(const ConsensusMessage& msg) const {
  return out_.ok() && views_.installed() && msg.sender() < config_.n &&
         msg.sender() != config_.self && log_.Redundant(msg, views_.view());
}

bool PbftReplica::ForEachCertifiedTx(uint64_t seq,
                                     const std::function<void(const std::string&)>& fn) const {
  if (seq <= last_executed_) return false;  // its txs are in the ledger
  if (const Slot* slot = log_.Find(seq); slot != nullptr) {
    if (slot->committed) {
      for (const std::string& h : slot->committed_txs) fn(h);
      return true;
    }
    if (slot->pre_prepare) {
      const node::consensus::PrePrepare& pp = slot->pre_prepare->pre_prepare();
      uint32_t matching = 0;
      for (const auto& [sender, m] : slot->prepares) {
        // Backups other than this one (the log keeps no prepare of the primary; skipped here
        // too, as Certificate does).
        if (sender != config_.self && sender != config_.PrimaryOf(pp.view()) &&
            m.prepare().view() == pp.view() && m.prepare().digest() == slot->digest) {
          ++matching;
        }
      }
      if (matching >= 2 * config_.f() && config_.f() > 0) {
        for (const std::string& h : pp.tx_hashes()) fn(h);
        return true;
      }
    }
  }
  const auto& held = sync_.held();
  if (auto it = held.find(seq); it != held.end()) {
    for (const std::string& h : it->second.tx_hashes()) fn(h);
    return true;
  }
  return false;
}

uint64_t PbftReplica::own_proposals_in_flight() const {
  if (!IsPrimary() || next_seq_ <= last_executed_ + 1) return 0;
  return next_seq_ - 1 - last_executed_;
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
      request_timer_.Fired();
      if (!views_.installed()) return;
      if (sync_.recovering()) return;  // re-armed after the Step; our own lag, not the primary's
      if (request_timer_.pending() > 0 || log_.HasWorkAbove(last_executed_)) {
        StartViewChange(views_.view() + 1);
      }
      return;
    case PbftTimer::kViewChange: {
      if (views_.installed()) return;
      // Escalate only a view change that 2f+1 replicas joined and whose NewView did not come
      // (Castro & Liskov 4.5.2). Alone, escalating would only take us further from the others.
      if (view_changes_.CountFor(views_.view()) < config_.quorum()) {
        // Short of 2f+1, but some replica already asks for a higher view (e.g. one that went
        // back to its own earlier, higher ViewChange): join the lowest such view instead of
        // waiting here for ever. It only moves to a view someone announced, never a new one.
        if (const uint64_t up = view_changes_.LowestViewAbove(views_.view()); up > 0) {
          StartViewChange(up);
          return;
        }
        if (views_.own_view_change()) out_.Broadcast(*views_.own_view_change());
        out_.Add(PbftSetTimer{PbftTimer::kViewChange, views_.timeout_ms()});
        return;
      }
      views_.Backoff();
      StartViewChange(views_.view() + 1);
      return;
    }
    case PbftTimer::kRetransmit:
      OnRetransmit();
      out_.Add(PbftSetTimer{PbftTimer::kRetransmit, config_.retransmit_ms});
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
  Slot& slot = log_.At(seq);
  slot.pre_prepare = out_.Publish(
      PrePrepareMessage(views_.view(), seq, BatchDigest(tx_hashes), tx_hashes, config_.self));
  slot.digest = slot.pre_prepare->pre_prepare().digest();
  CheckPrepared(seq);
}

void PbftReplica::OnPendingRequests(uint64_t count) { request_timer_.set_pending(count); }

void PbftReplica::OnTxsAvailable() {
  // The fetcher asks again only in the next retransmit period.
  for (uint64_t seq : log_.WaitingForTxs(/*seq=*/0)) ContinueAfterTxs(seq);  // every slot
  TryExecute();
}

void PbftReplica::OnRetransmit() {
  fetcher_.NewPeriod();
  // Synced batches waiting for bodies: ask again (a fetch or its answer may be lost).
  if (!sync_.held().empty()) TryExecute();
  // In a view change, and while observing a lower view, our ViewChange must reach everyone.
  if (views_.own_view_change() && (!views_.installed() || views_.observing())) {
    out_.Broadcast(*views_.own_view_change());
  }
  if (views_.installed()) {
    for (const ConsensusMessage& m : log_.OwnMessagesAbove(last_executed_)) out_.Broadcast(m);
    for (uint64_t seq : log_.WaitingForTxs(last_executed_)) ContinueAfterTxs(seq);
    if (future_.HasAbove(views_.view())) {
      out_.Broadcast(out_.Sign(NewViewRequestMessage(views_.view() + 1)));
    }
  }
  // Re-announce the latest own checkpoint: lost checkpoints would otherwise freeze the watermarks,
  // and a replica that missed them learns it is behind.
  if (const ConsensusMessage* own = checkpoints_.LatestOwnVote()) out_.Broadcast(*own);
  // Stalled for a period: a request still in flight is lost, or the evidence says we are behind.
  if (sync_.TickStalled(last_executed_) && (sync_.recovering() || EvidenceAhead())) AskSync();
}

void PbftReplica::PrefetchSynced(uint64_t waiting) {
  // One fetch round trip per chunk instead of one per batch: ask now for the bodies every held
  // batch lacks (each held batch checked once per retransmit period).
  for (const auto& [seq, batch] : sync_.held()) {
    if (seq > waiting) fetcher_.Prefetch(seq, batch.tx_hashes(), out_);
  }
}

bool PbftReplica::DivertByView(const ConsensusMessage& msg, uint64_t view) {
  if (view < views_.view()) {
    if (!views_.installed() && msg.has_commit()) NoteLowerViewCommit(msg, view);
    ++counters_.dropped_stale_view;
    return true;
  }
  if (view > views_.view() || !views_.installed()) {
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
  const PbftAdmission admission =
      log_.AddPrePrepare(msg, views_.view(), low_watermark(), validator_);
  NoteBeyondWindow(msg.sender(), msg.pre_prepare().seq(), admission);
  if (counters_.Admitted(admission)) ContinueAfterTxs(msg.pre_prepare().seq());
}

void PbftReplica::ContinueAfterTxs(uint64_t seq) {
  Slot* found = log_.Find(seq);
  if (found == nullptr || !found->pre_prepare) return;
  Slot& slot = *found;
  if (seq > last_executed_ && !slot.committed &&
      !fetcher_.HaveAll(seq, slot.pre_prepare->pre_prepare().tx_hashes(), out_)) {
    slot.waiting_txs = true;
    return;
  }
  slot.waiting_txs = false;
  if (!views_.is_primary() && slot.prepares.count(config_.self) == 0 && !views_.observing()) {
    // A seq already executed here (by block sync, or before a restart) is voted for without its
    // bodies, but only as the batch executed: a faulty primary's other batch for it gets no
    // prepare (PbftLog refuses it only against a decision made in this log).
    if (seq <= last_executed_ && !slot.committed && !MatchesExecuted(seq, slot.digest)) {
      ++counters_.dropped_conflicting;
      return;
    }
    slot.prepares[config_.self] =
        out_.Publish(PrepareMessage(views_.view(), seq, slot.digest), {*slot.pre_prepare});
  }
  CheckPrepared(seq);
}

bool PbftReplica::MatchesExecuted(uint64_t seq, const std::string& digest) const {
  std::optional<node::consensus::CommittedBatch> executed = deps_.blocks->GetCommitted(seq);
  // Not readable (pruned, or a state installed from a snapshot above it): as before, vote.
  return !executed.has_value() || BatchDigest(executed->tx_hashes()) == digest;
}

void PbftReplica::CheckPrepared(uint64_t seq) {
  Slot* prepared = log_.TryPrepare(seq, views_.view());
  if (prepared == nullptr) return;
  Slot& slot = *prepared;
  if (!slot.sent_commit && !views_.observing()) {
    // The certificate goes to disk with the commit: a restarted replica must still report it in
    // its view changes, or a batch committed elsewhere could be replaced. (Its pre-prepare is on
    // disk already: written with our prepare, our proposal, or our NewView.)
    slot.commits[config_.self] =
        out_.Publish(CommitMessage(views_.view(), seq, slot.digest),
                     {slot.cert->prepares().begin(), slot.cert->prepares().end()});
    slot.sent_commit = true;
  }
  CheckCommitted(seq);
}

void PbftReplica::OnPrepare(const ConsensusMessage& msg) {
  if (DivertByView(msg, msg.prepare().view())) return;
  const PbftAdmission admission = log_.AddPrepare(msg, views_.view(), low_watermark());
  NoteBeyondWindow(msg.sender(), msg.prepare().seq(), admission);
  if (counters_.Admitted(admission)) CheckPrepared(msg.prepare().seq());
}

void PbftReplica::OnCommit(const ConsensusMessage& msg) {
  if (DivertByView(msg, msg.commit().view())) return;
  const PbftAdmission admission = log_.AddCommit(msg, low_watermark());
  NoteBeyondWindow(msg.sender(), msg.commit().seq(), admission);
  if (counters_.Admitted(admission)) CheckCommitted(msg.commit().seq());
}

void PbftReplica::CheckCommitted(uint64_t seq) {
  if (log_.TryCommit(seq, views_.view())) TryExecute();
}

void PbftReplica::TryExecute() {
  if (snapshot_seq_ != 0) return;  // the state arrives whole
  const uint64_t before = last_executed_;
  while (out_.ok()) {
    const uint64_t seq = last_executed_ + 1;
    std::optional<PbftCommit> next = log_.Decided(seq);  // committed here, else synced
    const bool synced = !next;
    if (synced) next = sync_.Batch(seq);
    if (!next) break;
    PbftCommit& commit = *next;
    if (synced) ++counters_.synced_batches;
    if (!fetcher_.HaveAll(seq, commit.tx_hashes, out_)) {
      if (synced) {
        --counters_.synced_batches;
        PrefetchSynced(seq);
      }
      break;
    }
    chain_digest_ = ChainDigest(chain_digest_, seq, commit.digest);
    commit.chain_digest = chain_digest_;
    // The checkpoint vote (and the check of a stable checkpoint reached by sync) waits for the
    // state root, which exists only once the commit is executed (OnExecuted).
    commit.report_state_root = seq % config_.checkpoint_interval == 0 || seq == low_watermark();
    if (commit.report_state_root) awaiting_root_[seq] = chain_digest_;
    last_executed_ = seq;
    ++counters_.committed_batches;
    out_.Add(std::move(commit));
    sync_.DropThrough(seq);
    if (seq == low_watermark() && !MatchesStable(chain_digest_, "")) return;
  }
  if (last_executed_ == before) return;
  if (views_.installed()) views_.ResetBackoff();
  request_timer_.ResetBackoff();  // progress (a batch decided here or fetched by sync)
  request_timer_.Restart(out_);
  sync_.NoteExecuted(last_executed_);
  if (sync_.WantsRequest()) AskSync();
}

}  // namespace partitions
