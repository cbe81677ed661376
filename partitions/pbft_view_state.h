// ViewState: where a PBFT replica stands in the sequence of views.
//
// The current view and whether its NewView is installed (view 0 needs none), this replica's own
// ViewChange while it has one out, the NewView that installed the view, the highest view
// installed here, and the doubling of the view-change timeout. Observer mode (see
// pbft_replica.h) is derived: installed in a view below the one of its own ViewChange.
//
// Invariants: new_view() is held only while installed (Enter clears it); after Install the own
// ViewChange, if still held, is for a higher view; the timeout is view_change_timeout_ms << b
// with b <= max_backoff_shift.
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   ViewState views(config);
//   views.Enter(w, /*installed=*/false);
//   views.SetOwnViewChange(signed_view_change);
//   if (views.Stale(msg.new_view().view())) ++dropped_stale_view;
//   views.Install(w, new_view_msg);
#ifndef PARTITIONS_PBFT_VIEW_STATE_H_
#define PARTITIONS_PBFT_VIEW_STATE_H_

#include <cstdint>
#include <optional>

#include "partitions/pbft_types.h"

namespace partitions {

class ViewState {
 public:
  // Starts installed in view 0.
  explicit ViewState(const PbftConfig& config);
  // After a restart, from the persisted view record.
  void Restore(const node::consensus::PersistedView& pv);

  uint64_t view() const { return view_; }
  bool installed() const { return installed_; }
  bool is_primary() const { return config_.PrimaryOf(view_) == config_.self; }
  // Following a lower view without voting, while the own ViewChange for a higher one is out.
  bool observing() const {
    return installed_ && own_view_change_ && own_view_change_view() > view_;
  }
  const std::optional<ConsensusMessage>& own_view_change() const { return own_view_change_; }
  // The view of the own ViewChange; 0 if none.
  uint64_t own_view_change_view() const;
  // The NewView that installed view(), if any.
  const std::optional<ConsensusMessage>& new_view() const { return new_view_; }
  uint64_t last_installed_view() const { return last_installed_view_; }
  // A ViewChange or NewView for view `w` is stale: below view(), or view() already installed.
  bool Stale(uint64_t w) const { return w < view_ || (w == view_ && installed_); }
  // In a view change whose new primary is this replica, which has not sent its NewView yet.
  bool NewViewDue() const { return !installed_ && !new_view_sent_ && is_primary(); }
  void MarkNewViewSent() { new_view_sent_ = true; }

  // Moves to `view`, installed (observer mode) or not (a view change), with no NewView.
  void Enter(uint64_t view, bool installed);
  void SetOwnViewChange(const ConsensusMessage& msg) { own_view_change_ = msg; }
  // Installs `view` with its NewView. The own ViewChange is dropped unless it is for a higher
  // view (then this replica observes `view`); the timeout goes back to its base.
  void Install(uint64_t view, const ConsensusMessage& new_view);

  // The view-change timeout: doubled per escalation (capped), back to the base on Install.
  int64_t timeout_ms() const { return config_.view_change_timeout_ms << backoff_shift_; }
  void Backoff();
  void ResetBackoff() { backoff_shift_ = 0; }

 private:
  const PbftConfig config_;
  uint64_t view_ = 0;
  bool installed_ = true;
  std::optional<ConsensusMessage> own_view_change_;
  std::optional<ConsensusMessage> new_view_;
  bool new_view_sent_ = false;
  uint32_t backoff_shift_ = 0;
  uint64_t last_installed_view_ = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_VIEW_STATE_H_
