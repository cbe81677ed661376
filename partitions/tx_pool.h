// TxPool: one partition's pending transactions, between admission and commit.
//
// Holds checked transactions: the caller ran DecodeSignedTx and VerifySignature, or, for a body
// fetched for a batch certified at this replica, took it on that certificate (ConsensusDriver::
// OnTxBatch; docs/ARCHITECTURE.md, "Fetched bodies of a certified batch"). Bounded by
// count and bytes, both changeable live; deduplicated by hash; ordered per sender by nonce.
// A sender's transaction is *ready* when every nonce between the sender's next expected nonce
// (from committed state, through `NextNonceFn`) and its own is in the pool; later ones are held
// (up to `max_nonce_gap` ahead) until the gap fills or they expire.
//
// Client-submitted and peer-forwarded transactions are admitted differently: client ones are
// refused once usage reaches capacity minus `forward_reserve`, so the last slice of the pool is
// left for forwarded ones. A transaction that reached some replicas is then not refused by the
// others and left uncommittable (a primary must hold every tx of its proposal, a replica must find
// them). The per-sender quota applies to client txs only; forwarded ones are bounded by the nonce
// window (at most max_nonce_gap + 1 per sender).
//
// Refusals of Add (code, message prefix), beside those of transaction.h:
//   ALREADY_EXISTS      "duplicate transaction"   same hash already pooled
//   ALREADY_EXISTS      "replayed nonce"          nonce below the sender's next expected, or a
//                                                 different tx with that nonce is pooled
//   FAILED_PRECONDITION "nonce gap"               nonce more than max_nonce_gap ahead
//   RESOURCE_EXHAUSTED  "sender quota"            the sender has max_per_sender client txs pooled
//   RESOURCE_EXHAUSTED  "pool full"               count or bytes limit (minus reserve for clients)
//
// Proposal flow: the primary calls SelectBatch, which marks the returned txs *proposed* so the
// next (pipelined) proposal does not pick them again; RemoveCommitted drops them once their block
// commits; ReleaseProposed makes them selectable again when a proposal is abandoned (view change).
// Proposed txs never expire. Lowering a limit below current usage evicts nothing: new txs are
// refused until commits and expiry drain the pool.
//
// Thread-safe: every method may be called from any thread. `NextNonceFn` is called with the pool's
// lock held, so it must not call back into the pool.
//
//   TxPool pool(TxPoolLimits{}, flowctl::Clock::Real(),
//               [&](absl::string_view s) { return executor.NextNonce(s); });
//   RETURN_IF_ERROR(pool.Add(std::move(decoded), TxOrigin::kClient));
//   std::vector<TxPtr> batch = pool.SelectBatch(500, 1 << 20);
//   ... block commits ... pool.RemoveCommitted(batch);
#ifndef PARTITIONS_TX_POOL_H_
#define PARTITIONS_TX_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "flowctl/rate_meter.h"

namespace partitions {

using TxPtr = std::shared_ptr<const base::DecodedTx>;

// kFetched: a tx this replica asked its peers for because a proposal or a synced batch names it.
// Consensus cannot progress without it, so it is admitted past the capacity limits (the
// replica's watermark window bounds how many there can be).
// kClientReserved: a client tx admitted on a retry ticket (flowctl/retry_reservations.h), whose
// room was held for it: a client tx that may also use half the forwarding reserve.
enum class TxOrigin { kClient, kForwarded, kFetched, kClientReserved };

struct TxPoolLimits {
  // Maximum transactions held. >= 1.
  size_t max_txs = 100'000;
  // Maximum total DecodedTx::size() held, in bytes. >= 1.
  size_t max_bytes = 64 << 20;
  // Maximum client-submitted txs held per sender. >= 1.
  size_t max_per_sender = 256;
  // A tx whose nonce exceeds the sender's next expected nonce by more than this is refused.
  uint64_t max_nonce_gap = 1024;
  // Fraction of max_txs and of max_bytes that only forwarded txs may use. [0, 1).
  double forward_reserve = 0.1;
  // AboveHighWater() is true once count or bytes reach this fraction of its limit. (0, 1].
  double high_water = 0.8;
  // Unproposed txs older than this are dropped by Expire(). > 0.
  absl::Duration ttl = absl::Minutes(2);
};

// InvalidArgument naming the field when a limit is out of range.
absl::Status ValidateTxPoolLimits(const TxPoolLimits& limits);

struct TxPoolStats {
  size_t txs = 0;
  size_t bytes = 0;
  size_t senders = 0;
  size_t proposed = 0;  // selected, awaiting commit or release
  // Cumulative counters.
  uint64_t added = 0;
  uint64_t rejected_duplicate = 0;
  uint64_t rejected_replayed = 0;
  uint64_t rejected_gap = 0;
  uint64_t rejected_quota = 0;
  uint64_t rejected_full = 0;
  uint64_t expired = 0;
  uint64_t committed = 0;  // removed because their block committed
  uint64_t stale = 0;      // removed because another tx consumed their nonce
};

// The retry-after of a pool refusal: how long the measured commit rate takes to bring the pool
// back under its high-water mark (`excess`; its bytes counted in txs of the pool's mean size),
// and at least half the measured block interval, since room opens only when a block commits.
// A rate < 0 is unmeasured: bounds.unknown, unless the block floor says more.
absl::Duration PoolRetryAfter(uint64_t excess_txs, uint64_t excess_bytes, uint64_t pooled_txs,
                              uint64_t pooled_bytes, double commit_txs_per_second,
                              double blocks_per_second, const flowctl::RetryAfterBounds& bounds);

// The next nonce the committed state expects from `sender` (account nonce + 1). An error (the
// state could not be read) refuses the Add with that status.
using NextNonceFn = std::function<absl::StatusOr<uint64_t>(absl::string_view sender)>;

class TxPool {
 public:
  // REQUIRES: ValidateTxPoolLimits(limits).ok(); clock outlives the pool.
  TxPool(const TxPoolLimits& limits, const flowctl::Clock* clock, NextNonceFn next_nonce);
  TxPool(const TxPool&) = delete;
  TxPool& operator=(const TxPool&) = delete;

  // Replaces the limits (live). InvalidArgument, and nothing changes, if they are invalid.
  absl::Status SetLimits(const TxPoolLimits& limits) ABSL_LOCKS_EXCLUDED(mu_);
  TxPoolLimits limits() const ABSL_LOCKS_EXCLUDED(mu_);

  // Admits a verified transaction or says why not (see the table above).
  absl::Status Add(base::DecodedTx tx, TxOrigin origin) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Add(TxPtr tx, TxOrigin origin) ABSL_LOCKS_EXCLUDED(mu_);
  // Add, calling `on_added` under the pool's lock once the tx is in: before any batch can select
  // it, and after the removal of any earlier copy (e.g. to read the ledger height at which it was
  // pooled). `on_added` must not call the pool.
  absl::Status Add(TxPtr tx, TxOrigin origin, absl::FunctionRef<void()> on_added)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Up to `max_txs` ready, unproposed txs whose sizes sum to at most `max_bytes`, each sender's in
  // nonce order, senders served round-robin (one tx each per round, starting point rotating
  // between calls). Marks them proposed. O(senders + selected).
  std::vector<TxPtr> SelectBatch(size_t max_txs, size_t max_bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Ready, unproposed txs (what SelectBatch could return now): `txs` is their number capped at
  // `limit`, `bytes` the size of all of them (not only of the first `limit`). O(1): the counts are
  // kept as txs arrive, are selected, released, committed and expire.
  struct ReadyCount {
    size_t txs = 0;
    size_t bytes = 0;
  };
  ReadyCount CountReady(size_t limit) const ABSL_LOCKS_EXCLUDED(mu_);
  // Makes proposed txs selectable again (their proposal was abandoned). Unknown hashes are
  // ignored. Releasing one tx of a sender releases the sender's later proposed txs too (they
  // could not commit before it).
  void ReleaseProposed(absl::Span<const std::string> hashes) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseAllProposed() ABSL_LOCKS_EXCLUDED(mu_);

  // Call after a block committed AND the executor's state advanced: drops those txs (pooled or
  // not), re-reads each affected sender's next nonce and drops pooled txs below it.
  void RemoveCommitted(absl::Span<const TxPtr> txs) ABSL_LOCKS_EXCLUDED(mu_);
  // Call after the executor's state jumped (a snapshot installed): re-reads every pooled
  // sender's next nonce and drops pooled txs below it (they committed in the skipped blocks).
  void Resync() ABSL_LOCKS_EXCLUDED(mu_);

  // Drops unproposed txs added at or before now_nanos - ttl. Returns how many.
  size_t Expire(int64_t now_nanos) ABSL_LOCKS_EXCLUDED(mu_);

  // While on, the hashes of txs dropped without committing (expired, or stale: another tx took
  // their nonce) are kept for TakeDropped, which the owner must call regularly (a lossless
  // partition's spill cursor must hear of them, or it waits for their commit for ever). Off by
  // default.
  void TrackDropped(bool on) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> TakeDropped() ABSL_LOCKS_EXCLUDED(mu_);

  // For a backup to send again to the primary (forwarding is lossy): unproposed txs added at or
  // before `added_by_nanos`, oldest first, at most `max_txs` and `max_bytes`, skipping those
  // already taken with this `round` (a view: each tx goes again at most once per round). Marks
  // them taken. O(txs added by then).
  std::vector<TxPtr> TakeForReforward(int64_t added_by_nanos, uint64_t round, size_t max_txs,
                                      size_t max_bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // The pooled tx with this hash, or null.
  TxPtr Get(absl::string_view hash) const ABSL_LOCKS_EXCLUDED(mu_);
  // The hashes of `hashes` not in the pool, in the given order (to fetch them from a peer).
  std::vector<std::string> Missing(absl::Span<const std::string> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The hashes of `hashes` that are pooled but wait behind a nonce gap: an earlier nonce of
  // their sender is neither committed nor pooled, so they cannot be proposed until their client
  // sends it. In the given order. O(sum of the senders' pooled txs before each).
  std::vector<std::string> Gapped(absl::Span<const std::string> hashes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Lock-free; read by the interceptor's pool gate on every request.
  bool AboveHighWater() const { return above_high_water_.load(std::memory_order_relaxed); }
  // Lock-free: what must leave the pool (commit, expire) before AboveHighWater() turns false and
  // a client tx fits under its cap (the pool less the forwarding reserve), in txs and in bytes
  // (both 0 below both); the backlog behind a pool refusal's retry-after.
  struct Excess {
    uint64_t txs = 0;
    uint64_t bytes = 0;
  };
  Excess HighWaterExcess() const {
    return {excess_txs_.load(std::memory_order_relaxed),
            excess_bytes_.load(std::memory_order_relaxed)};
  }
  // Lock-free: how many more client txs fit below both the high-water mark and the client's cap
  // (in txs; the byte mark is AboveHighWater's), 0 at or above either.
  uint64_t ClientRoomTxs() const { return client_room_txs_.load(std::memory_order_relaxed); }
  // Lock-free: the client txs' mark (txs): the lower of the high-water mark and the pool less its
  // forwarding reserve.
  double ClientMarkTxs() const { return client_mark_txs_.load(std::memory_order_relaxed); }
  // Lock-free: txs added since start that this node's clients submitted, and that peers
  // forwarded (fetched ones not counted): how the pool's room is shared among the nodes that
  // admit clients (the spacing of pool retry-after slots).
  uint64_t added_client() const { return added_client_.load(std::memory_order_relaxed); }
  uint64_t added_forwarded() const { return added_forwarded_.load(std::memory_order_relaxed); }
  // Lock-free: pooled txs and bytes as of the last change.
  uint64_t size_now() const { return txs_now_.load(std::memory_order_relaxed); }
  uint64_t bytes_now() const { return bytes_now_.load(std::memory_order_relaxed); }

  TxPoolStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    TxPtr tx;
    int64_t added_nanos;
    TxOrigin origin;
    bool proposed = false;
    uint64_t reforward_round = 0;  // TakeForReforward's round + 1 when it last took this tx
  };
  using EntryList = std::list<Entry>;
  struct Sender {
    uint64_t next_nonce = 1;   // committed state's next expected nonce
    uint64_t select_from = 1;  // next nonce SelectBatch may take (>= next_nonce)
    size_t client_txs = 0;
    // The ready run: pooled nonces select_from, select_from + 1, ... without a gap (unproposed
    // by construction), their number and bytes; included in ready_txs_ / ready_bytes_.
    size_t run = 0;
    size_t run_bytes = 0;
    std::map<uint64_t, EntryList::iterator> by_nonce;
  };

  absl::StatusOr<Sender*> GetSender(const std::string& sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseSenderIfEmpty(const std::string& sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-reads the sender's next nonce; drops its pooled txs below it.
  void ResyncSender(const std::string& sender) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry everywhere; may invalidate the sender record if it empties.
  void RemoveEntry(EntryList::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnmarkFrom(Sender& s, uint64_t nonce) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes the sender's ready run from select_from (O(run)), keeping the totals.
  void Recount(Sender& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends the run past its end while the next nonces are pooled (O(extension)).
  void ExtendRun(Sender& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateHighWater() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const flowctl::Clock* const clock_;
  const NextNonceFn next_nonce_;

  mutable absl::Mutex mu_;
  TxPoolLimits limits_ ABSL_GUARDED_BY(mu_);
  EntryList fifo_ ABSL_GUARDED_BY(mu_);  // insertion order = expiry order
  absl::flat_hash_map<std::string, EntryList::iterator> by_hash_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Sender> senders_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t rr_offset_ ABSL_GUARDED_BY(mu_) = 0;
  size_t ready_txs_ ABSL_GUARDED_BY(mu_) = 0;    // sum of the senders' runs
  size_t ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of their run_bytes
  TxPoolStats counters_ ABSL_GUARDED_BY(mu_);
  bool track_dropped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> dropped_ ABSL_GUARDED_BY(mu_);  // while track_dropped_

  std::atomic<bool> above_high_water_{false};
  // Mirrors for lock-free readers, set by UpdateHighWater.
  std::atomic<uint64_t> excess_txs_{0};
  std::atomic<uint64_t> excess_bytes_{0};
  std::atomic<uint64_t> txs_now_{0};
  std::atomic<uint64_t> client_room_txs_{0};
  std::atomic<double> client_mark_txs_{0};
  std::atomic<uint64_t> added_client_{0};
  std::atomic<uint64_t> added_forwarded_{0};
  std::atomic<uint64_t> bytes_now_{0};
};

}  // namespace partitions

#endif  // PARTITIONS_TX_POOL_H_
