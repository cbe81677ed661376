// PbftReplica: view change and new view (PBFT with signatures).
#include <algorithm>

#include "partitions/pbft_messages.h"
#include "partitions/pbft_replica.h"

namespace partitions {

using ::node::consensus::NewView;

void PbftReplica::MoveToView(uint64_t view, bool installed) {
  views_.Enter(view, installed);
  view_changes_.ForgetLowerViewCommits();
  log_.ResetView();
}

void PbftReplica::StartViewChange(uint64_t new_view) {
  // An observer's ViewChange for a higher view is already out; it stands for any view up to it.
  if (views_.own_view_change() && new_view <= views_.own_view_change_view()) {
    if (views_.observing()) {
      request_timer_.Backoff();  // the view it followed stalled
      ResumeOwnViewChange();
    }
    return;
  }
  if (new_view <= views_.view()) return;
  // Leaving an installed view, on our request timer or pulled by f+1 others whose timers fired:
  // it made no progress in time, so the next view gets twice as long (RequestTimer). Every
  // replica of the quorum doubles together, so none leaves the next view early on its own.
  if (views_.installed()) request_timer_.Backoff();
  MoveToView(new_view, /*installed=*/false);
  ++counters_.view_changes_started;
  request_timer_.Cancel(out_);  // the view-change timer watches the view change now

  const ConsensusMessage msg = out_.Sign(ViewChangeMessage(
      new_view, checkpoints_.StableRecord(), log_.CertificatesAbove(low_watermark())));
  out_.PutView(ViewChangeRecord(new_view, msg));

  views_.SetOwnViewChange(msg);
  view_changes_.DropBelow(new_view);
  view_changes_.AddOwn(new_view, msg);
  future_.DropBelow(views_.view());
  out_.Broadcast(msg);
  out_.Add(PbftSetTimer{PbftTimer::kViewChange, views_.timeout_ms()});
  MaybeSendNewView();
}

// Liveness repair for a replica that started a view change nobody joined (it was cut off, paused,
// or restarted into it): the others carry on in a lower view and would never come to it. Going
// back to that view as a voting member is not safe: peers hold our ViewChange for w, and a
// NewView for w built from it must see everything we prepared, so we may not prepare or commit
// anything after it. Following without signing is safe, and keeps the replica executing (2f+1
// commits of the others, or block sync) and NORMAL until the others move to w or beyond.
void PbftReplica::NoteLowerViewCommit(const ConsensusMessage& msg, uint64_t view) {
  if (views_.installed() || !views_.own_view_change() || view < views_.last_installed_view()) {
    return;
  }
  // f+1 senders include a correct replica, which commits only in a view it installed.
  if (view_changes_.NoteLowerViewCommit(view, msg.sender())) EnterObserver(view);
}

void PbftReplica::EnterObserver(uint64_t view) {
  MoveToView(view, /*installed=*/true);
  ++counters_.views_observed;
  out_.Add(PbftCancelTimer{PbftTimer::kViewChange});
  // Nothing is persisted: on disk we are still in the view change of our own ViewChange, which is
  // what a restart must resume.
}

void PbftReplica::ResumeOwnViewChange() {
  MoveToView(views_.own_view_change_view(), /*installed=*/false);
  view_changes_.AddOwn(views_.view(), *views_.own_view_change());
  future_.DropBelow(views_.view());
  out_.Broadcast(*views_.own_view_change());
  out_.Add(PbftSetTimer{PbftTimer::kViewChange, views_.timeout_ms()});
  MaybeSendNewView();
}

void PbftReplica::OnViewChange(const ConsensusMessage& msg) {
  const uint64_t w = msg.view_change().new_view();
  if (views_.Stale(w)) {
    ++counters_.dropped_stale_view;
    // The sender missed the NewView that we installed: hand it over.
    if (views_.installed() && views_.new_view()) out_.Send(msg.sender(), *views_.new_view());
    return;
  }
  // Only each sender's highest ViewChange is kept (bounded memory against view-number floods).
  if (!counters_.Admitted(view_changes_.Offer(msg, validator_))) return;
  // f+1 replicas asking for views above ours include a correct one: follow them to the highest
  // view that f+1 of them have reached (PBFT's liveness rule, so we do not wait for our timer).
  if (const uint64_t up = view_changes_.ViewWithSupport(views_.view(), config_.f() + 1); up > 0) {
    StartViewChange(up);
  }
  MaybeSendNewView();
}

void PbftReplica::MaybeSendNewView() {
  if (!views_.NewViewDue()) return;
  const std::vector<const ConsensusMessage*> vcs = view_changes_.QuorumFor(views_.view());
  if (vcs.empty()) return;
  const NewViewPlan plan = validator_.Plan(vcs);
  std::vector<ConsensusMessage> pps;
  for (const NewViewPlan::Entry& e : plan.entries) {
    pps.push_back(
        out_.Sign(PrePrepareMessage(views_.view(), e.seq, e.digest, e.tx_hashes, config_.self)));
  }
  const ConsensusMessage nv_msg = out_.Sign(NewViewMessage(views_.view(), vcs, pps));
  out_.AppendLog(pps);
  out_.PutView(InstalledViewRecord(views_.view(), nv_msg));
  views_.MarkNewViewSent();
  out_.Broadcast(nv_msg);
  InstallNewView(nv_msg, plan);
}

void PbftReplica::OnNewView(const ConsensusMessage& msg) {
  const NewView& nv = msg.new_view();
  const uint64_t w = nv.view();
  if (views_.Stale(w)) {
    ++counters_.dropped_stale_view;
    return;
  }
  // The new primary has no choice: every backup recomputes what it must re-issue and compares.
  const std::optional<NewViewPlan> plan = validator_.CheckNewView(msg);
  if (!plan) {
    ++counters_.dropped_invalid;
    return;
  }
  // An observer keeps its view change on disk: a restart must not forget that it sent it.
  if (views_.own_view_change_view() <= w) out_.PutView(InstalledViewRecord(w, msg));
  InstallNewView(msg, *plan);
}

void PbftReplica::InstallNewView(const ConsensusMessage& nv_msg, const NewViewPlan& plan) {
  const NewView& nv = nv_msg.new_view();
  const uint64_t w = nv.view();
  // A higher own ViewChange is kept: then this replica observes view w. The view change
  // succeeded: the next one starts from the base timeout. (Doubling is for view changes that
  // fail to install; carried across installed views, a few primary crashes in a row left the
  // survivors waiting 16x the timeout for a dead primary's NewView.)
  views_.Install(w, nv_msg);
  view_changes_.ForgetLowerViewCommits();
  ++counters_.new_views_installed;
  log_.ResetView();
  out_.Add(PbftCancelTimer{PbftTimer::kViewChange});
  // The request timer restarts with the view (Step re-arms it if work is pending). Left running,
  // a timer armed in the old view fired moments after the install and sent the new view's own
  // primary into a view change against itself, one view after another.
  request_timer_.Cancel(out_);
  view_changes_.DropThrough(w);
  if (plan.min_s > low_watermark()) AdvanceStable(plan.min_s, plan.min_digest, plan.min_proof);
  if (!out_.ok()) return;  // diverged from the new view's stable checkpoint: sign nothing
  next_seq_ = std::max(plan.max_s, low_watermark()) + 1;
  for (const ConsensusMessage& ppm : nv.pre_prepares()) {
    const uint64_t seq = ppm.pre_prepare().seq();
    if (seq <= low_watermark() || seq > low_watermark() + config_.window) continue;
    if (counters_.Admitted(log_.AcceptPrePrepare(ppm))) ContinueAfterTxs(seq);
  }
  // Replay what arrived early for this view; keep what is for later views.
  for (const ConsensusMessage& m : future_.TakeFor(w)) OnMessage(m);
}

void PbftReplica::OnNewViewRequest(const ConsensusMessage& msg) {
  if (views_.installed() && views_.new_view() &&
      views_.view() >= msg.new_view_request().min_view()) {
    out_.Send(msg.sender(), *views_.new_view());
  }
}

}  // namespace partitions
