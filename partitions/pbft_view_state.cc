#include "partitions/pbft_view_state.h"

#include <algorithm>

namespace partitions {

ViewState::ViewState(const PbftConfig& config) : config_(config) {}

void ViewState::Restore(const node::consensus::PersistedView& pv) {
  view_ = pv.view();
  installed_ = pv.installed() || view_ == 0;
  if (!installed_ && pv.has_own_view_change()) own_view_change_ = pv.own_view_change();
  if (installed_ && pv.has_new_view()) new_view_ = pv.new_view();
  if (installed_) last_installed_view_ = view_;
}

uint64_t ViewState::own_view_change_view() const {
  return own_view_change_ ? own_view_change_->view_change().new_view() : 0;
}

void ViewState::Enter(uint64_t view, bool installed) {
  view_ = view;
  installed_ = installed;
  new_view_sent_ = false;
  new_view_.reset();
}

void ViewState::Install(uint64_t view, const ConsensusMessage& new_view) {
  view_ = view;
  installed_ = true;
  if (own_view_change_view() <= view) own_view_change_.reset();
  new_view_ = new_view;
  last_installed_view_ = view;
  backoff_shift_ = 0;
}

void ViewState::Backoff() {
  backoff_shift_ = std::min(backoff_shift_ + 1, config_.max_backoff_shift);
}

}  // namespace partitions
