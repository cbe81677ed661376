// PbftReplica: view change and new view (PBFT with signatures).
#include <algorithm>

#include "partitions/pbft_replica.h"

namespace partitions {

using ::node::consensus::NewView;
using ::node::consensus::PersistedView;
using ::node::consensus::PrePrepare;
using ::node::consensus::ViewChange;

void PbftReplica::ResetViewState() {
  for (auto it = log_.begin(); it != log_.end();) {
    Slot& slot = it->second;
    slot.pre_prepare.reset();
    slot.digest.clear();
    slot.prepares.clear();
    slot.commits.clear();
    slot.waiting_txs = false;
    slot.prepared = false;
    slot.sent_commit = false;
    if (!slot.cert && !slot.committed) {
      it = log_.erase(it);
    } else {
      ++it;
    }
  }
}

void PbftReplica::StartViewChange(uint64_t new_view) {
  // An observer's ViewChange for a higher view is already out; it stands for any view up to it.
  if (own_view_change_ && new_view <= OwnViewChangeView()) {
    if (Observing()) ResumeOwnViewChange();
    return;
  }
  if (new_view <= view_) return;
  view_ = new_view;
  installed_ = false;
  new_view_sent_ = false;
  new_view_msg_.reset();
  ++counters_.view_changes_started;
  ResetViewState();
  CancelRequestTimer();  // the view-change timer watches the view change now

  ConsensusMessage msg;
  ViewChange* vc = msg.mutable_view_change();
  vc->set_new_view(new_view);
  vc->set_stable_seq(h_);
  vc->set_stable_digest(stable_digest_);
  for (const ConsensusMessage& m : stable_proof_) *vc->add_checkpoint_proof() = m;
  for (const auto& [seq, slot] : log_) {
    if (seq > h_ && slot.cert) *vc->add_prepared() = *slot.cert;
  }
  msg = Signed(std::move(msg));
  PersistedView pv;
  pv.set_view(new_view);
  pv.set_installed(false);
  *pv.mutable_own_view_change() = msg;
  Persist(deps_.store->PutView(pv));

  own_view_change_ = msg;
  view_changes_.erase(view_changes_.begin(), view_changes_.lower_bound(new_view));
  view_changes_[new_view][config_.self] = msg;
  latest_vc_view_[config_.self] = new_view;
  lower_view_commits_.clear();
  DropFutureBelowView();
  Broadcast(msg);
  out_.push_back(PbftSetTimer{PbftTimer::kViewChange, ViewChangeTimeout()});
  MaybeSendNewView();
}

void PbftReplica::DropFutureBelowView() {
  future_.erase(std::remove_if(future_.begin(), future_.end(),
                               [&](const ConsensusMessage& m) { return MessageView(m) < view_; }),
                future_.end());
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
  std::set<uint32_t>& senders = lower_view_commits_[view];
  senders.insert(msg.sender());
  // f+1 senders include a correct replica, which commits only in a view it installed.
  if (senders.size() >= config_.f() + 1) EnterObserver(view);
}

void PbftReplica::EnterObserver(uint64_t view) {
  view_ = view;
  installed_ = true;
  new_view_sent_ = false;
  new_view_msg_.reset();
  lower_view_commits_.clear();
  ++counters_.views_observed;
  ResetViewState();
  out_.push_back(PbftCancelTimer{PbftTimer::kViewChange});
  // Nothing is persisted: on disk we are still in the view change for OwnViewChangeView(), which
  // is what a restart must resume.
}

void PbftReplica::ResumeOwnViewChange() {
  view_ = OwnViewChangeView();
  installed_ = false;
  new_view_sent_ = false;
  new_view_msg_.reset();
  lower_view_commits_.clear();
  ResetViewState();
  view_changes_[view_][config_.self] = *own_view_change_;
  latest_vc_view_[config_.self] = view_;
  DropFutureBelowView();
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
  auto latest = latest_vc_view_.find(msg.sender());
  if (latest != latest_vc_view_.end() && latest->second >= w) {
    ++counters_.dropped_duplicate;  // same view again, or an older one the sender left behind
    return;
  }
  if (!validator_.ValidViewChange(msg)) {
    ++counters_.dropped_invalid;
    return;
  }
  // Keep only each sender's highest view change (bounded memory against view-number floods).
  if (latest != latest_vc_view_.end()) {
    auto old = view_changes_.find(latest->second);
    if (old != view_changes_.end()) old->second.erase(msg.sender());
  }
  latest_vc_view_[msg.sender()] = w;
  view_changes_[w][msg.sender()] = msg;
  JoinHigherViewIfBehind();
  MaybeSendNewView();
}

void PbftReplica::JoinHigherViewIfBehind() {
  // f+1 replicas asking for views above ours include a correct one: follow them to the highest
  // view that f+1 of them have reached (PBFT's liveness rule, so we do not wait for our timer).
  std::vector<uint64_t> higher;
  for (const auto& [sender, v] : latest_vc_view_) {
    if (sender != config_.self && v > view_) higher.push_back(v);
  }
  if (higher.size() < config_.f() + 1) return;
  std::sort(higher.begin(), higher.end(), std::greater<uint64_t>());
  StartViewChange(higher[config_.f()]);
}

void PbftReplica::MaybeSendNewView() {
  if (installed_ || new_view_sent_ || config_.PrimaryOf(view_) != config_.self) return;
  auto it = view_changes_.find(view_);
  if (it == view_changes_.end() || it->second.size() < config_.quorum()) return;
  std::vector<const ConsensusMessage*> vcs;
  for (const auto& [sender, m] : it->second) {
    if (vcs.size() < config_.quorum()) vcs.push_back(&m);
  }
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
  if (w == 0 || msg.sender() != config_.PrimaryOf(w)) {
    ++counters_.dropped_invalid;
    return;
  }
  std::set<uint32_t> senders;
  std::vector<const ConsensusMessage*> vcs;
  for (const ConsensusMessage& m : nv.view_changes()) {
    if (m.view_change().new_view() != w || !senders.insert(m.sender()).second ||
        !validator_.ValidViewChange(m)) {
      ++counters_.dropped_invalid;
      return;
    }
    vcs.push_back(&m);
  }
  if (vcs.size() < config_.quorum()) {
    ++counters_.dropped_invalid;
    return;
  }
  // The new primary has no choice: recompute what it must re-issue and compare.
  const NewViewPlan plan = validator_.Plan(vcs);
  if (static_cast<size_t>(nv.pre_prepares_size()) != plan.entries.size()) {
    ++counters_.dropped_invalid;
    return;
  }
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const ConsensusMessage& ppm = nv.pre_prepares(static_cast<int>(i));
    const PrePrepare& pp = ppm.pre_prepare();
    const NewViewPlan::Entry& e = plan.entries[i];
    const bool same_batch =
        static_cast<size_t>(pp.tx_hashes_size()) == e.tx_hashes.size() &&
        std::equal(e.tx_hashes.begin(), e.tx_hashes.end(), pp.tx_hashes().begin());
    if (!ppm.has_pre_prepare() || ppm.sender() != msg.sender() || pp.proposer() != msg.sender() ||
        pp.view() != w || pp.seq() != e.seq || pp.digest() != e.digest || !same_batch ||
        !deps_.crypto->Verify(ppm)) {
      ++counters_.dropped_invalid;
      return;
    }
  }
  // An observer keeps its view change on disk: a restart must not forget that it sent it.
  if (OwnViewChangeView() <= w) {
    PersistedView pv;
    pv.set_view(w);
    pv.set_installed(true);
    *pv.mutable_new_view() = msg;
    Persist(deps_.store->PutView(pv));
  }
  InstallNewView(msg, plan);
}

void PbftReplica::InstallNewView(const ConsensusMessage& nv_msg, const NewViewPlan& plan) {
  const NewView& nv = nv_msg.new_view();
  const uint64_t w = nv.view();
  view_ = w;
  installed_ = true;
  if (OwnViewChangeView() <= w) own_view_change_.reset();  // else: observing view w
  new_view_msg_ = nv_msg;
  last_installed_view_ = w;
  lower_view_commits_.clear();
  // The view change succeeded: the next one starts from the base timeout. (Doubling is for
  // view changes that fail to install; carried across installed views, a few primary crashes
  // in a row left the survivors waiting 16x the timeout for a dead primary's NewView.)
  backoff_shift_ = 0;
  ++counters_.new_views_installed;
  ResetViewState();
  out_.push_back(PbftCancelTimer{PbftTimer::kViewChange});
  // The request timer restarts with the view (Step re-arms it if work is pending). Left running,
  // a timer armed in the old view fired moments after the install and sent the new view's own
  // primary into a view change against itself, one view after another.
  CancelRequestTimer();
  view_changes_.erase(view_changes_.begin(), view_changes_.upper_bound(w));
  for (auto it = latest_vc_view_.begin(); it != latest_vc_view_.end();) {
    it = it->second <= w ? latest_vc_view_.erase(it) : std::next(it);
  }
  if (plan.min_s > h_) AdvanceStable(plan.min_s, plan.min_digest, plan.min_proof);
  next_seq_ = std::max(plan.max_s, h_) + 1;
  for (const ConsensusMessage& ppm : nv.pre_prepares()) {
    if (!InWindow(ppm.pre_prepare().seq())) continue;
    AcceptPrePrepare(ppm);
  }
  // Replay what arrived early for this view; keep what is for later views.
  std::vector<ConsensusMessage> replay;
  std::vector<ConsensusMessage> keep;
  for (ConsensusMessage& m : future_) {
    const uint64_t v = MessageView(m);
    if (v == w) {
      replay.push_back(std::move(m));
    } else if (v > w) {
      keep.push_back(std::move(m));
    }
  }
  future_ = std::move(keep);
  for (const ConsensusMessage& m : replay) OnMessage(m);
}

void PbftReplica::OnNewViewRequest(const ConsensusMessage& msg) {
  if (installed_ && new_view_msg_ && view_ >= msg.new_view_request().min_view()) {
    SendTo(msg.sender(), *new_view_msg_);
  }
}

}  // namespace partitions
