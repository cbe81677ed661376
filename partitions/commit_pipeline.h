// CommitPipeline: turns a batch that consensus committed into a durable block, and answers the
// replica's questions about what is committed.
//
//   PbftCommit --> executor (deterministic: receipts, writes, state root, no state change)
//     --> one synced ledger write (block, receipts, state writes, commit certificate, chain digest)
//     --> executor state applied, committed txs out of the pool, the TxTracker's entries taken
//     --> a CommitEvent, which the caller publishes on the CommitFeed once it released its locks.
//
// Every replica builds the same block for a seq: height = seq, parent = ledger tip; no view,
// proposer or timestamp (the view in which a seq commits can differ between replicas; the commit
// certificate keeps it). It is the replica's PbftTxSource (pool or ledger) and PbftBlockSource
// (block sync reads the certificates back from the ledger).
//
// Thread-safety: Commit is called by one thread at a time, in seq order (the consensus driver
// calls it under its lock); HasTx and GetCommitted are thread-safe.
//
//   CommitPipeline pipeline({.partition = 1, .chain = &chain, .pool = &pool, ...});
//   ASSIGN_OR_RETURN(std::optional<CommitEvent> event, pipeline.Commit(commit));
//   ... unlock ... if (event) feed.Publish(*std::move(event));
#ifndef PARTITIONS_COMMIT_PIPELINE_H_
#define PARTITIONS_COMMIT_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "partitions/commit_feed.h"
#include "partitions/ledger.h"
#include "partitions/pbft_types.h"
#include "partitions/tx_pool.h"
#include "partitions/tx_tracker.h"

namespace partitions {

// Ledger consensus-metadata keys.
// The consensus metadata key of batch `seq`'s commit certificate: kCertKeyPrefix + seq (8 bytes
// big-endian), so pruning drops them with their blocks (LedgerOptions::height_keyed_meta).
inline constexpr char kCertKeyPrefix[] = "cert/";
std::string CertKey(uint64_t seq);
inline constexpr char kChainDigestKey[] = "chain_digest";

class CommitPipeline final : public PbftTxSource, public PbftBlockSource {
 public:
  struct Deps {
    uint32_t partition = 0;
    Chain* chain = nullptr;  // ledger + executor
    TxPool* pool = nullptr;
    TxTracker* tracker = nullptr;
    base::TxLimits tx_limits;  // for decoding stored txs
    const flowctl::Clock* clock = nullptr;
  };
  explicit CommitPipeline(Deps deps);

  // Commits `commit`. nullopt if the ledger already holds it (a restart replays the log);
  // InternalError when a seq is skipped or a tx of the batch is neither pooled nor stored; a
  // ledger error as is. After an error nothing changed but what the ledger reports.
  absl::StatusOr<std::optional<CommitEvent>> Commit(const PbftCommit& commit);

  // The state root after seq `seq` (the executor's root at the tip, else the block header).
  // Called by the thread that calls Commit.
  absl::StatusOr<std::string> StateRootAt(uint64_t seq) const;

  // Pooled, or committed in a block that pruning (LedgerOptions::retain_blocks) leaves in place
  // until `seq` has executed: a replay of a tx whose block will be gone by then is not here, so
  // a correct replica does not prepare a batch it could not execute (a faulty primary's replay
  // of an old tx costs it its view, not the partition its liveness).
  bool HasTx(absl::string_view tx_hash, uint64_t seq) const override;
  // Pooled, or committed by an inclusion that consumed its nonce (still indexed), whatever the
  // batch. A tx only refused so far (a nonce gap, which a view change can cause) is not known:
  // it may come again once its nonce is next, and must then be pooled like any other.
  bool KnowsTx(absl::string_view tx_hash) const;
  std::optional<node::consensus::CommittedBatch> GetCommitted(uint64_t seq) const override;

  uint64_t committed_txs() const { return committed_txs_.load(std::memory_order_relaxed); }

 private:
  const Deps deps_;
  std::atomic<uint64_t> committed_txs_{0};
};

}  // namespace partitions

#endif  // PARTITIONS_COMMIT_PIPELINE_H_
