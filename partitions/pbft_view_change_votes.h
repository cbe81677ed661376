// ViewChangeVotes: the ViewChange messages a PBFT replica holds, and the support they give.
//
// Keeps, by view and sender, the latest valid ViewChange of each replica (own included), and
// answers what the view-change rules ask: how many replicas want a view, which view f+1 others
// have reached, the lowest higher view someone announced, and the 2f+1 ViewChanges a new primary
// puts in its NewView. Also counts, while this replica is in a view change, which peers are seen
// committing in each lower view (the trigger of observer mode, see pbft_replica.h).
//
// Invariants: at most one ViewChange per sender, its latest; a sender's latest view only goes up
// (an older or repeated ViewChange is a duplicate) until a view at or above it is installed.
// Offer checks validity (signatures, nested certificates) through PbftValidator; Add and AddOwn
// take messages already known valid.
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   ViewChangeVotes votes(config);
//   if (votes.Offer(msg, validator) != PbftAdmission::kAdded) return;
//   if (uint64_t v = votes.ViewWithSupport(view, config.f() + 1)) StartViewChange(v);
//   std::vector<const ConsensusMessage*> vcs = votes.QuorumFor(view);  // empty if short of 2f+1
#ifndef PARTITIONS_PBFT_VIEW_CHANGE_VOTES_H_
#define PARTITIONS_PBFT_VIEW_CHANGE_VOTES_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_types.h"

namespace partitions {

class ViewChangeVotes {
 public:
  explicit ViewChangeVotes(const PbftConfig& config);

  // ViewChanges held for `view` (own included).
  size_t CountFor(uint64_t view) const;
  // True if `sender`'s latest ViewChange is for `view` or a higher view.
  bool HasAtLeast(uint32_t sender, uint64_t view) const;
  // A peer's ViewChange (for a view not stale here): refused as kDuplicate if the sender's
  // latest is for that view or a higher one (it left this one behind), as kInvalid if it is not
  // a valid ViewChange; else added.
  PbftAdmission Offer(const ConsensusMessage& msg, const PbftValidator& validator);
  // Records a peer's ViewChange, replacing the sender's earlier one.
  // REQUIRES: !HasAtLeast(msg.sender(), msg.view_change().new_view()).
  void Add(const ConsensusMessage& msg);
  // Records this replica's own ViewChange, for `view`.
  void AddOwn(uint64_t view, const ConsensusMessage& msg);
  // Forgets the ViewChanges for views below `view` (a view change to `view` started here).
  void DropBelow(uint64_t view);
  // Forgets the ViewChanges for views up to `view`, and the senders' latest views at or below
  // it (a NewView for `view` was installed here).
  void DropThrough(uint64_t view);

  // The lowest view above `view` that another replica asks for; 0 if none.
  uint64_t LowestViewAbove(uint64_t view) const;
  // The highest view w above `view` such that at least `support` other replicas ask for w or a
  // higher view; 0 if there is none.
  uint64_t ViewWithSupport(uint64_t view, size_t support) const;
  // The first 2f+1 ViewChanges for `view` (by sender); empty if fewer are held. The pointers
  // are valid until the next change to this object.
  std::vector<const ConsensusMessage*> QuorumFor(uint64_t view) const;

  // Observer mode: notes that `sender` committed in the lower view `view`; true once f+1
  // distinct senders were seen committing in it.
  bool NoteLowerViewCommit(uint64_t view, uint32_t sender);
  void ForgetLowerViewCommits() { lower_view_commits_.clear(); }

 private:
  const PbftConfig config_;
  std::map<uint64_t, std::map<uint32_t, ConsensusMessage>> by_view_;  // view -> sender -> msg
  std::map<uint32_t, uint64_t> latest_;  // sender -> highest ViewChange view seen
  std::map<uint64_t, std::set<uint32_t>> lower_view_commits_;  // view -> committing senders
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_VIEW_CHANGE_VOTES_H_
