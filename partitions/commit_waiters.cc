#include "partitions/commit_waiters.h"

#include <limits>
#include <utility>

#include "partitions/executor.h"

namespace partitions {

void CommitWaiters::Add(std::string hash, int64_t deadline_nanos, Done done,
                        uint64_t refusals_above) {
  {
    absl::MutexLock lock(&mu_);
    deadlines_.emplace(deadline_nanos, hash);
    by_hash_[std::move(hash)].push_back({deadline_nanos, std::move(done), refusals_above});
    ++count_;
  }
  if (wake_by_) wake_by_(deadline_nanos);
}

std::vector<CommitWaiters::Waiter> CommitWaiters::TakeLocked(absl::string_view hash,
                                                             const node::chain::Receipt& receipt) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return {};
  std::vector<Waiter> out;
  std::vector<Waiter>& list = it->second;
  const bool refusal = receipt.status() == node::chain::Receipt::REJECTED;
  for (size_t i = 0; i < list.size();) {
    if (!refusal || list[i].refusals_above == 0 ||
        receipt.block_height() > list[i].refusals_above) {
      out.push_back(std::move(list[i]));
      list.erase(list.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  if (list.empty()) by_hash_.erase(it);
  count_ -= out.size();
  return out;
}

void CommitWaiters::Resolve(absl::string_view hash, const node::chain::Receipt& receipt) {
  std::vector<Waiter> list;
  {
    absl::MutexLock lock(&mu_);
    list = TakeLocked(hash, receipt);
  }
  for (Waiter& w : list) w.done(receipt);
}

void CommitWaiters::OnCommit(const CommitEvent& event) {
  std::vector<std::pair<std::vector<Waiter>, size_t>> answered;
  {
    absl::MutexLock lock(&mu_);
    if (count_ == 0) return;
    // A tx can appear more than once in a block (a faulty primary's batch): the waiter gets the
    // inclusion that consumed its nonce, as GetReceipt does (ledger.h), else its first refusal in
    // the block (the one the ledger indexes).
    for (const bool consumed : {true, false}) {
      for (size_t i = 0; i < event.txs.size(); ++i) {
        if (consumed && !ConsumedNonce(event.receipts[i])) continue;
        std::vector<Waiter> list = TakeLocked(event.txs[i]->hash, event.receipts[i]);
        if (!list.empty()) answered.emplace_back(std::move(list), i);
      }
    }
  }
  for (auto& [list, i] : answered) {
    for (Waiter& w : list) w.done(event.receipts[i]);
  }
}

int64_t CommitWaiters::Expire(int64_t now_nanos) {
  std::vector<Waiter> expired;
  int64_t next = std::numeric_limits<int64_t>::max();
  {
    absl::MutexLock lock(&mu_);
    while (!deadlines_.empty() && deadlines_.begin()->first <= now_nanos) {
      auto it = by_hash_.find(deadlines_.begin()->second);
      deadlines_.erase(deadlines_.begin());
      if (it == by_hash_.end()) continue;  // answered already
      std::vector<Waiter>& list = it->second;
      for (size_t i = 0; i < list.size();) {
        if (list[i].deadline_nanos <= now_nanos) {
          expired.push_back(std::move(list[i]));
          list.erase(list.begin() + static_cast<ptrdiff_t>(i));
          --count_;
        } else {
          ++i;
        }
      }
      if (list.empty()) by_hash_.erase(it);
    }
    if (!deadlines_.empty()) next = deadlines_.begin()->first;
  }
  for (Waiter& w : expired) {
    w.done(absl::DeadlineExceededError(
        "the tx is in the pool but did not commit within wait_timeout_ms; query GetTx later"));
  }
  return next;
}

void CommitWaiters::CancelAll(const absl::Status& why) {
  absl::flat_hash_map<std::string, std::vector<Waiter>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(by_hash_);
    deadlines_.clear();
    count_ = 0;
  }
  for (auto& [hash, list] : all) {
    for (Waiter& w : list) w.done(why);
  }
}

size_t CommitWaiters::size() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

}  // namespace partitions
