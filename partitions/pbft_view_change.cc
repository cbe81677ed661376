// PbftReplica: view change and new view (PBFT with signatures).
#include <algorithm>

#include "partitions/pbft_replica.h"

namespace partitions {

using ::node::consensus::NewView;
using ::node::consensus::PersistedView;
using ::node::consensus::PrePrepare;
using ::node::consensus::ViewChange;

void PbftReplica::MoveToView(uint64_t view, bool installed) {
  view_ = view;
  installed_ = installed;
  new_view_sent_ = false;
  new_view_msg_.reset();
  view_changes_.ForgetLowerViewCommits();
  log_.ResetView();
}

void PbftReplica::StartViewChange(uint64_t new_view) {
  // An observer's ViewChange for a higher view is already out; it stands for any view up to it.
  if (own_view_change_ && new_view <= OwnViewChangeView()) {
    if (Observing()) ResumeOwnViewChange();
    return;
  }
  if (new_view <= view_) return;
  MoveToView(new_view, /*installed=*/false);
  ++counters_.view_changes_started;
  CancelRequestTimer();  // the view-change timer watches the view change now

  ConsensusMessage msg;
  ViewChange* vc = msg.mutable_view_change();
  vc->set_new_view(new_view);
  vc->set_stable_seq(low_watermark());
  vc->set_stable_digest(checkpoints_.stable_digest());
  for (const ConsensusMessage& m : checkpoints_.stable_proof()) *vc->add_checkpoint_proof() = m;
  for (auto& cert : log_.CertificatesAbove(low_watermark())) *vc->add_prepared() = std::move(cert);
  msg = Signed(std::move(msg));
  PersistedView pv;
  pv.set_view(new_view);
  pv.set_installed(false);
  *pv.mutable_own_view_change() = msg;
  Persist(deps_.store->PutView(pv));

  own_view_change_ = msg;
  view_changes_.DropBelow(new_view);
  view_changes_.AddOwn(new_view, msg);
  future_.DropBelow(view_);
  Broadcast(msg);
  out_.push_back(PbftSetTimer{PbftTimer::kViewChange, ViewChangeTimeout()});
  MaybeSendNewView();
}

uint64_t PbftReplica::OwnViewChangeView() const {
  return own_view_change_ ? own_view_change_->view_change().new_view() : 0;
}

bool PbftReplica::Observing() const {
  return installed_ && own_view_change_ && OwnViewChangeView() > view_;
}

// Liveness repair for a replica that started a view change nobody joined (it was cut off, paused,
// or restarted into it): the others carry on in a lower view and would never come to it. Going
// back to that view as a voting member is not safe: peers hold our ViewChange for w, and a
// NewView for w built from it must see everything we prepared, so we may not prepare or commit
// anything after it. Following without signing is safe, and keeps the replica executing (2f+1
// commits of the others, or block sync) and NORMAL until the others move to w or beyond.
void PbftReplica::NoteLowerViewCommit(const ConsensusMessage& msg, uint64_t view) {
  if (installed_ || !own_view_change_ || view < last_installed_view_) return;
  // f+1 senders include a correct replica, which commits only in a view it installed.
  if (view_changes_.NoteLowerViewCommit(view, msg.sender())) EnterObserver(view);
}

void PbftReplica::EnterObserver(uint64_t view) {
  MoveToView(view, /*installed=*/true);
  ++counters_.views_observed;
  out_.push_back(PbftCancelTimer{PbftTimer::kViewChange});
  // Nothing is persisted: on disk we are still in the view change for OwnViewChangeView(), which
  // is what a restart must resume.
}

void PbftReplica::ResumeOwnViewChange() {
  MoveToView(OwnViewChangeView(), /*installed=*/false);
  view_changes_.AddOwn(view_, *own_view_change_);
  future_.DropBelow(view_);
  Broadcast(*own_view_change_);
  out_.push_back(PbftSetTimer{PbftTimer::kViewChange, ViewChangeTimeout()});
  MaybeSendNewView();
}

void PbftReplica::OnViewChange(const ConsensusMessage& msg) {
  const uint64_t w = msg.view_change().new_view();
  if (w < view_ || (w == view_ && installed_)) {
    ++counters_.dropped_stale_view;
    // The sender missed the NewView that we installed: hand it over.
    if (installed_ && new_view_msg_) SendTo(msg.sender(), *new_view_msg_);
    return;
  }
  if (view_changes_.HasAtLeast(msg.sender(), w)) {
    ++counters_.dropped_duplicate;  // same view again, or an older one the sender left behind
    return;
  }
  if (!validator_.ValidViewChange(msg)) {
    ++counters_.dropped_invalid;
    return;
  }
  // Keep only each sender's highest view change (bounded memory against view-number floods).
  view_changes_.Add(msg);
  // f+1 replicas asking for views above ours include a correct one: follow them to the highest
  // view that f+1 of them have reached (PBFT's liveness rule, so we do not wait for our timer).
  if (const uint64_t up = view_changes_.ViewWithSupport(view_, config_.f() + 1); up > 0) {
    StartViewChange(up);
  }
  MaybeSendNewView();
}

void PbftReplica::MaybeSendNewView() {
  if (installed_ || new_view_sent_ || config_.PrimaryOf(view_) != config_.self) return;
  const std::vector<const ConsensusMessage*> vcs = view_changes_.QuorumFor(view_);
  if (vcs.empty()) return;
  const NewViewPlan plan = validator_.Plan(vcs);
  ConsensusMessage nv_msg;
  NewView* nv = nv_msg.mutable_new_view();
  nv->set_view(view_);
  for (const ConsensusMessage* m : vcs) *nv->add_view_changes() = *m;
  std::vector<ConsensusMessage> pps;
  for (const NewViewPlan::Entry& e : plan.entries) {
    ConsensusMessage ppm;
    PrePrepare* pp = ppm.mutable_pre_prepare();
    pp->set_view(view_);
    pp->set_seq(e.seq);
    pp->set_digest(e.digest);
    pp->mutable_tx_hashes()->Assign(e.tx_hashes.begin(), e.tx_hashes.end());
    pp->set_proposer(config_.self);
    pps.push_back(Signed(std::move(ppm)));
    *nv->add_pre_prepares() = pps.back();
  }
  nv_msg = Signed(std::move(nv_msg));
  Persist(deps_.store->AppendLog(pps));
  PersistedView pv;
  pv.set_view(view_);
  pv.set_installed(true);
  *pv.mutable_new_view() = nv_msg;
  Persist(deps_.store->PutView(pv));
  new_view_sent_ = true;
  Broadcast(nv_msg);
  InstallNewView(nv_msg, plan);
}

void PbftReplica::OnNewView(const ConsensusMessage& msg) {
  const NewView& nv = msg.new_view();
  const uint64_t w = nv.view();
  if (w < view_ || (w == view_ && installed_)) {
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
  if (OwnViewChangeView() <= w) {
    PersistedView pv;
    pv.set_view(w);
    pv.set_installed(true);
    *pv.mutable_new_view() = msg;
    Persist(deps_.store->PutView(pv));
  }
  InstallNewView(msg, *plan);
}

void PbftReplica::InstallNewView(const ConsensusMessage& nv_msg, const NewViewPlan& plan) {
  const NewView& nv = nv_msg.new_view();
  const uint64_t w = nv.view();
  view_ = w;
  installed_ = true;
  if (OwnViewChangeView() <= w) own_view_change_.reset();  // else: observing view w
  new_view_msg_ = nv_msg;
  last_installed_view_ = w;
  view_changes_.ForgetLowerViewCommits();
  // The view change succeeded: the next one starts from the base timeout. (Doubling is for
  // view changes that fail to install; carried across installed views, a few primary crashes
  // in a row left the survivors waiting 16x the timeout for a dead primary's NewView.)
  backoff_shift_ = 0;
  ++counters_.new_views_installed;
  log_.ResetView();
  out_.push_back(PbftCancelTimer{PbftTimer::kViewChange});
  // The request timer restarts with the view (Step re-arms it if work is pending). Left running,
  // a timer armed in the old view fired moments after the install and sent the new view's own
  // primary into a view change against itself, one view after another.
  CancelRequestTimer();
  view_changes_.DropThrough(w);
  if (plan.min_s > low_watermark()) AdvanceStable(plan.min_s, plan.min_digest, plan.min_proof);
  next_seq_ = std::max(plan.max_s, low_watermark()) + 1;
  for (const ConsensusMessage& ppm : nv.pre_prepares()) {
    if (!InWindow(ppm.pre_prepare().seq())) continue;
    if (Counted(log_.AcceptPrePrepare(ppm))) ContinueAfterTxs(ppm.pre_prepare().seq());
  }
  // Replay what arrived early for this view; keep what is for later views.
  for (const ConsensusMessage& m : future_.TakeFor(w)) OnMessage(m);
}

void PbftReplica::OnNewViewRequest(const ConsensusMessage& msg) {
  if (installed_ && new_view_msg_ && view_ >= msg.new_view_request().min_view()) {
    SendTo(msg.sender(), *new_view_msg_);
  }
}

}  // namespace partitions
