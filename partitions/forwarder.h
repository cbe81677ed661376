// Forwarder: takes this node's admitted client txs to the other replicas.
//
// Backups (and a primary outside NORMAL) batch them onto TX_FORWARD: Queue() appends, Flush()
// (on the owner's next tick, or at once when `flush_bytes` are queued) broadcasts one TxBatch.
//
// The primary in NORMAL holds them instead (SetHolding(true)). A pre-prepare names txs by hash and
// goes out on CONSENSUS, which the egress scheduler serves before TX_FORWARD: had the primary
// forwarded its clients' txs, its proposal would overtake their bodies under load, every backup
// would fetch them (SYNC, also ahead of TX_FORWARD) and then receive them a second time. Held, they
// go out once: TakeBodies() takes the held bodies of the batch being proposed and SendBodies()
// broadcasts them on CONSENSUS right before the pre-prepare (same partition and channel, so every
// peer's link keeps that order). A held tx not proposed within `hold_nanos`, and every held tx
// once holding stops or at Flush(release_all), is forwarded as usual, so a new primary and the
// backups' request timers still learn of it.
//
// Forwarding is lossy (a full queue or a cut link drops a batch), so a backup sends again, to the
// primary only, the pooled txs it has held unproposed for a while (Reforward; the consensus
// driver decides when): a primary that never got them would otherwise leave them pending at the
// backup until its request timer forced a needless view change.
//
// Thread-safety: every method is thread-safe (one mutex, a leaf: the network is called after
// it is released).
//
//   Forwarder fwd(&sender, clock, {.hold_nanos = 250'000'000});
//   fwd.Queue(tx);   // after the pool admitted it
//   fwd.Flush(/*release_all=*/false);  // on the tick after each Queue, and at the time it returns
#ifndef PARTITIONS_FORWARDER_H_
#define PARTITIONS_FORWARDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"
#include "partitions/peer_sender.h"
#include "partitions/tx_pool.h"
#include "proto/partition.pb.h"

namespace partitions {

class Forwarder {
 public:
  struct Options {
    int64_t hold_nanos = 0;          // how long the primary holds an unproposed tx
    size_t flush_bytes = 256 << 10;  // queued bytes that flush at once
    // Queued txs wait until this long after the last TX_FORWARD batch of queued txs (Nagle's
    // rule: a tx queued on an idle forwarder goes with the next Flush, under load they go in
    // fewer, larger batches). Not while holding (bodies given back go with the next Flush), nor
    // with held txs that go anyway, `flush_bytes` queued or release_all. 0: every Flush sends
    // what is queued.
    int64_t min_interval_nanos = 0;
  };

  // `sender` and `clock` outlive the forwarder.
  Forwarder(PeerSender* sender, const flowctl::Clock* clock, Options options);
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // An admitted client tx: held (primary in NORMAL) or queued for TX_FORWARD.
  void Queue(const TxPtr& tx);
  // Broadcasts what is queued (once `min_interval_nanos` have passed since the last batch, or at
  // once with `release_all`), plus held txs past the hold time (all of them when not holding or
  // when `release_all`, e.g. at stop). Returns when the next Flush has something due: the
  // queued txs' interval, or the oldest held tx's hold time (INT64_MAX: nothing waits); Queue
  // asks for no time, the caller flushes after it.
  int64_t Flush(bool release_all);
  // Follows the replica's role. Returns true when holding stops (the caller should flush soon).
  bool SetHolding(bool hold);

  // The held bodies of `batch`, which is about to be proposed (nullopt if none were held).
  std::optional<node::partition::PartitionMessage> TakeBodies(const std::vector<TxPtr>& batch);
  // Broadcasts `bodies` on CONSENSUS; if the network refuses, they go back to forwarding and it
  // returns false (the caller should flush soon).
  bool SendBodies(node::partition::PartitionMessage bodies);
  // No pre-prepare followed: the bodies go back to forwarding (the caller should flush soon).
  void ReturnBodies(node::partition::PartitionMessage bodies);

  // Sends `txs` again, to replica `to` only (the primary), on TX_FORWARD: a backup's txs that the
  // primary has not proposed after a while (it may never have got them). False if the network
  // refused (they may go again next round).
  bool Reforward(uint32_t to, const std::vector<TxPtr>& txs);

  uint64_t proposal_body_txs() const { return proposal_body_txs_.load(std::memory_order_relaxed); }
  uint64_t reforwarded_txs() const { return reforwarded_txs_.load(std::memory_order_relaxed); }
  size_t held() const;

 private:
  struct HeldTx {
    TxPtr tx;
    int64_t since = 0;
  };

  PeerSender* const sender_;
  const flowctl::Clock* const clock_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::vector<std::string> queued_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // When the last TX_FORWARD batch of queued txs went (INT64_MIN: none yet).
  int64_t last_batch_nanos_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::min();
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, HeldTx> held_ ABSL_GUARDED_BY(mu_);  // by tx hash
  // (since, hash) in hold order; records of proposed txs are skipped when reached.
  std::deque<std::pair<int64_t, std::string>> held_order_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> proposal_body_txs_{0};
  std::atomic<uint64_t> reforwarded_txs_{0};
};

}  // namespace partitions

#endif  // PARTITIONS_FORWARDER_H_
