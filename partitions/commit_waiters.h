// CommitWaiters: clients waiting for their transaction to commit (SubmitTx with
// wait_for_commit). A CommitSubscriber: each committed block answers the waiters of its txs with
// their receipts; waiters whose deadline passes get DEADLINE_EXCEEDED from Expire (the tick).
//
// A tx may commit between its admission and Add: the caller checks the ledger after Add and
// calls Resolve with the stored receipt, so no commit is missed (each waiter is answered once).
// A tx refused before (REJECTED for a nonce gap) and pooled again is not settled: its waiter
// names the ledger height at which it was pooled, and a refusal at or below that height (the old
// one, found in the ledger or published late by the feed) does not answer it.
//
// Thread-safety: every method is thread-safe. Callbacks run with no lock held, on the thread that
// resolved, expired or cancelled them; they must not block.
//
//   uint64_t pooled_at = 0;
//   pool.Add(tx, origin, [&] { pooled_at = ledger->tip_height(); });  // under the pool's lock
//   waiters.Add(hash, now + timeout, [](absl::StatusOr<node::chain::Receipt> r) { ... },
//               pooled_at);
//   if (auto receipt = ledger->GetReceipt(hash); receipt.ok()) waiters.Resolve(hash, *receipt);
#ifndef PARTITIONS_COMMIT_WAITERS_H_
#define PARTITIONS_COMMIT_WAITERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "partitions/commit_feed.h"
#include "proto/chain.pb.h"

namespace partitions {

class CommitWaiters final : public CommitSubscriber {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<node::chain::Receipt>)>;

  // `wake_by`, if set, is called by Add (no lock held) with the new waiter's deadline, so the
  // owner runs Expire by then without ticking periodically.
  explicit CommitWaiters(std::function<void(int64_t deadline_nanos)> wake_by = nullptr)
      : wake_by_(std::move(wake_by)) {}

  // `refusals_above`: a REJECTED receipt in a block at or below this height does not answer the
  // waiter (0: any receipt does).
  void Add(std::string hash, int64_t deadline_nanos, Done done, uint64_t refusals_above = 0);
  // Answers every waiter of `hash` that `receipt` answers (see Add).
  void Resolve(absl::string_view hash, const node::chain::Receipt& receipt);
  void OnCommit(const CommitEvent& event) override;
  // Answers DEADLINE_EXCEEDED to every waiter whose deadline is <= now. Returns the earliest
  // deadline still recorded (INT64_MAX: none): when Expire next has work.
  int64_t Expire(int64_t now_nanos);
  // Answers `why` to every waiter (shutdown).
  void CancelAll(const absl::Status& why);
  size_t size() const;

 private:
  struct Waiter {
    int64_t deadline_nanos = 0;
    Done done;
    uint64_t refusals_above = 0;
  };
  // Takes the waiters of `hash` that `receipt` answers.
  std::vector<Waiter> TakeLocked(absl::string_view hash, const node::chain::Receipt& receipt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void(int64_t)> wake_by_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Waiter>> by_hash_ ABSL_GUARDED_BY(mu_);
  // (deadline -> hash); records of answered waiters stay until their deadline passes.
  std::multimap<int64_t, std::string> deadlines_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_COMMIT_WAITERS_H_
