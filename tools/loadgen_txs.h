// Transactions for loadgen: deterministic sender keys, signing, the per-sender buffers with the
// nonce bookkeeping, and the table of submitted hashes that commit tracking matches blocks against.
//
// Senders: key i is base::PrivateKey::FromSeed(splitmix64 stream of (seed, i)), so a run with the
// same --seed reuses the same accounts, whose next nonce is read with GetAccount at start.
// Each transaction is a Put with a unique key ("lg/<partition>/<sender>/<nonce>") and a value
// padded so the SignedTransaction is `tx_bytes` long.
//
// Nonce hazard. A sender's transactions must execute in nonce order: if nonce n is rejected
// (RESOURCE_EXHAUSTED, UNAVAILABLE, "nonce gap", a failed RPC) while n+1.. were admitted, those
// sit unready in the pool until n arrives. So a rejected transaction is never dropped: it goes
// back to its sender (ReturnRejected), and the sender's next offer re-sends its lowest rejected
// transaction before any fresh one. An ALREADY_EXISTS "duplicate transaction" answer means an
// earlier send was admitted, so it counts as accepted. Rejections that can never succeed (bad
// signature, replayed nonce, malformed) are not re-offered (ReturnRejected with reoffer=false).
// Offers per second therefore mix fresh and re-sent transactions; fresh nonces are only used as
// fast as the node admits them, which keeps the pre-signed buffers small even at 10x overload.
// GetAccount gives the *committed* nonce: a new run with the same --seed while an earlier run's
// txs still sit in a pool gets "replayed nonce" rejections; let the earlier run drain, or change
// --seed.
//
// Retry-after holds (--honour-retry-after). A flow-control rejection may carry a hint: retry
// after h ms. ReturnRejected(tx, reoffer, not_before) then holds that tx until not_before. A
// sender offers its rejected txs lowest nonce first, each no sooner than its own not_before (a
// later nonce waits for the earlier ones whatever its own hint), and its fresh ones only once
// none is left: so no nonce arrives ahead of a held one, and each re-offer goes at its own hint
// (a retry ticket holds room from then, not from the latest hint of the sender's batch).
// Take reports when it came back empty because of holds,
// so that the runner counts those offers as held rather than dropped. Without a not_before no
// sender is ever held. Each OfferTx remembers the hint it was last rejected with and when, so
// the runner can tell whether a re-offer waited for the hint (loadgen_stats.h, HintCounts).
//
// Thread-safety: SenderBook and CommitTracker are thread-safe; TxFactory is immutable.
//
//   ASSIGN_OR_RETURN(std::vector<base::PrivateKey> keys, MakeSenderKeys(/*seed=*/1, 256));
//   TxFactory factory("hot", /*partition_id=*/1, /*tx_bytes=*/200);
//   SenderBook book(next_nonces);                 // from GetAccount, one per key
//   SignMore(factory, keys[0], /*sender=*/0, /*count=*/100, &book);
//   std::optional<OfferTx> tx = book.Take();      // send it; if rejected:
//   book.ReturnRejected(*std::move(tx), ShouldReoffer(code, message));
//   // or, with --honour-retry-after and a hint: the sender offers nothing before answer + hint
//   book.ReturnRejected(*std::move(tx), true, /*not_before_nanos=*/answered + hint_nanos);
//   bool held = false;
//   tx = book.Take(/*group=*/0, /*groups=*/1, /*now_nanos=*/now, &held);
#ifndef TOOLS_LOADGEN_TXS_H_
#define TOOLS_LOADGEN_TXS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/ed25519.h"

namespace loadgen {

// One signed transaction ready to send.
struct OfferTx {
  uint32_t sender = 0;
  uint64_t nonce = 0;
  std::string bytes;  // serialized SignedTransaction
  std::string hash;   // base::TxHash(bytes): SHA-256 of `bytes`
  // The retry-after hint of its latest rejection (0 = none, or never rejected) and when that
  // answer arrived (clock nanos): a re-offer sent at t waited for the hint iff
  // t - rejected_at_nanos >= hint_nanos.
  int64_t hint_nanos = 0;
  int64_t rejected_at_nanos = 0;
  // The retry ticket of its latest rejection (0 = none), sent back with the re-offer.
  uint64_t retry_ticket = 0;
  // While rejected (SenderBook): not offered again before this clock time (0 = at once).
  int64_t not_before_nanos = 0;
};

absl::StatusOr<std::vector<base::PrivateKey>> MakeSenderKeys(uint64_t seed, int count);

class TxFactory {
 public:
  // `key_per_sender`: every tx of a sender puts the same key (fixed-size state).
  TxFactory(std::string partition_name, uint32_t partition_id, uint64_t tx_bytes,
            bool key_per_sender = false)
      : name_(std::move(partition_name)),
        id_(partition_id),
        tx_bytes_(tx_bytes),
        key_per_sender_(key_per_sender) {}
  // Signs the Put of (sender, nonce). Thread-safe.
  OfferTx Make(uint32_t sender, const base::PrivateKey& key, uint64_t nonce) const;

 private:
  std::string name_;
  uint32_t id_;
  uint64_t tx_bytes_;
  bool key_per_sender_;
};

class SenderBook {
 public:
  // `next_nonces[i]`: sender i's first nonce to use (committed nonce + 1).
  explicit SenderBook(std::vector<uint64_t> next_nonces);

  // The next transaction to offer, round-robin over senders: a sender's lowest rejected one
  // first, else its oldest pre-signed one. A sender whose lowest rejected tx is held past
  // `now_nanos` (see ReturnRejected) is skipped. Nullopt when no sender has anything to offer now;
  // then `*held` (if given) is true when some sender of the group was skipped for a hold (the offer
  // waits for a hint), false when every buffer is simply empty (the signer is behind). With
  // `groups` > 1, only senders i with i % groups == group (one target's senders).
  std::optional<OfferTx> Take(size_t group = 0, size_t groups = 1, int64_t now_nanos = 0,
                              bool* held = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // A sent transaction came back rejected. With `reoffer` it is offered again before the
  // sender's fresh ones; without, it is forgotten (its nonce stays a hole; see file comment).
  // With `reoffer` and `not_before_nanos` > 0 the tx is held: Take offers neither it, nor
  // the sender's later nonces, nor its fresh txs while now_nanos < not_before_nanos.
  void ReturnRejected(OfferTx tx, bool reoffer, int64_t not_before_nanos = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Reserves the next `count` nonces of `sender` for signing; returns the first one.
  uint64_t ReserveNonces(uint32_t sender, uint64_t count) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends signed transactions (nonces reserved by ReserveNonces, in order) to the buffer.
  void AddSigned(uint32_t sender, std::vector<OfferTx> txs) ABSL_LOCKS_EXCLUDED(mu_);

  int senders() const { return static_cast<int>(num_senders_); }
  // Pre-signed transactions not offered yet, over all senders / for one sender.
  uint64_t buffered() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t buffered(uint32_t sender) const ABSL_LOCKS_EXCLUDED(mu_);
  // Rejected transactions waiting to be re-offered.
  uint64_t pending_reoffers() const ABSL_LOCKS_EXCLUDED(mu_);
  // Sender's rejected nonces waiting to be re-offered (for tests).
  std::vector<uint64_t> PendingNoncesForTest(uint32_t sender) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Sender {
    uint64_t next_nonce_to_sign = 1;
    std::deque<OfferTx> fresh;
    std::map<uint64_t, OfferTx> rejected;  // by nonce; each held until its not_before_nanos
  };
  size_t num_senders_;
  mutable absl::Mutex mu_;
  std::vector<Sender> senders_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> cursors_ ABSL_GUARDED_BY(mu_);  // per group: position within the group
  uint64_t buffered_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
};

// Reserves `count` nonces of `sender` in `book`, signs them with `factory` and appends them to
// the sender's buffer. Thread-safe (may run on several threads for different senders).
void SignMore(const TxFactory& factory, const base::PrivateKey& key, uint32_t sender,
              uint64_t count, SenderBook* book);

// Hashes of sent transactions and when they were sent, until their commit is seen.
class CommitTracker {
 public:
  // Called just before the RPC is sent (a block may be seen before the RPC's answer).
  void Sent(const std::string& hash, int64_t sent_nanos) ABSL_LOCKS_EXCLUDED(mu_);
  // The send was rejected: stop waiting for it.
  void Forget(const std::string& hash) ABSL_LOCKS_EXCLUDED(mu_);
  // If `hash` is awaited: removes it and returns its send time.
  std::optional<int64_t> Committed(const std::string& hash) ABSL_LOCKS_EXCLUDED(mu_);
  size_t outstanding() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> sent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_TXS_H_
