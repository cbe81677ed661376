#include "partitions/pbft_view_change_votes.h"

#include <algorithm>
#include <functional>
#include <iterator>

namespace partitions {

ViewChangeVotes::ViewChangeVotes(const PbftConfig& config) : config_(config) {}

size_t ViewChangeVotes::CountFor(uint64_t view) const {
  auto it = by_view_.find(view);
  return it == by_view_.end() ? 0 : it->second.size();
}

bool ViewChangeVotes::HasAtLeast(uint32_t sender, uint64_t view) const {
  auto it = latest_.find(sender);
  return it != latest_.end() && it->second >= view;
}

PbftAdmission ViewChangeVotes::Offer(const ConsensusMessage& msg, const PbftValidator& validator) {
  if (HasAtLeast(msg.sender(), msg.view_change().new_view())) return PbftAdmission::kDuplicate;
  if (!validator.ValidViewChange(msg)) return PbftAdmission::kInvalid;
  Add(msg);
  return PbftAdmission::kAdded;
}

void ViewChangeVotes::Add(const ConsensusMessage& msg) {
  const uint64_t view = msg.view_change().new_view();
  auto latest = latest_.find(msg.sender());
  if (latest != latest_.end()) {
    auto old = by_view_.find(latest->second);
    if (old != by_view_.end()) old->second.erase(msg.sender());
  }
  latest_[msg.sender()] = view;
  by_view_[view][msg.sender()] = msg;
}

void ViewChangeVotes::AddOwn(uint64_t view, const ConsensusMessage& msg) {
  by_view_[view][config_.self] = msg;
  latest_[config_.self] = view;
}

void ViewChangeVotes::DropBelow(uint64_t view) {
  by_view_.erase(by_view_.begin(), by_view_.lower_bound(view));
}

void ViewChangeVotes::DropThrough(uint64_t view) {
  by_view_.erase(by_view_.begin(), by_view_.upper_bound(view));
  for (auto it = latest_.begin(); it != latest_.end();) {
    it = it->second <= view ? latest_.erase(it) : std::next(it);
  }
}

uint64_t ViewChangeVotes::LowestViewAbove(uint64_t view) const {
  uint64_t up = 0;
  for (const auto& [sender, v] : latest_) {
    if (sender != config_.self && v > view && (up == 0 || v < up)) up = v;
  }
  return up;
}

uint64_t ViewChangeVotes::ViewWithSupport(uint64_t view, size_t support) const {
  std::vector<uint64_t> higher;
  for (const auto& [sender, v] : latest_) {
    if (sender != config_.self && v > view) higher.push_back(v);
  }
  if (support == 0 || higher.size() < support) return 0;
  std::sort(higher.begin(), higher.end(), std::greater<uint64_t>());
  return higher[support - 1];
}

std::vector<const ConsensusMessage*> ViewChangeVotes::QuorumFor(uint64_t view) const {
  std::vector<const ConsensusMessage*> vcs;
  auto it = by_view_.find(view);
  if (it == by_view_.end() || it->second.size() < config_.quorum()) return vcs;
  for (const auto& [sender, m] : it->second) {
    if (vcs.size() < config_.quorum()) vcs.push_back(&m);
  }
  return vcs;
}

bool ViewChangeVotes::NoteLowerViewCommit(uint64_t view, uint32_t sender) {
  std::set<uint32_t>& senders = lower_view_commits_[view];
  senders.insert(sender);
  return senders.size() >= config_.f() + 1;
}

}  // namespace partitions
