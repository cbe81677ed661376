#include "partitions/commit_pipeline.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/status_macros.h"
#include "partitions/block.h"

namespace partitions {

std::string CertKey(uint64_t seq) {
  std::string key = kCertKeyPrefix;
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((seq >> (8 * i)) & 0xff));
  return key;
}

CommitPipeline::CommitPipeline(Deps deps) : deps_(std::move(deps)) {}

absl::StatusOr<std::optional<CommitEvent>> CommitPipeline::Commit(const PbftCommit& commit) {
  Ledger* ledger = deps_.chain->ledger.get();
  Executor* executor = deps_.chain->executor.get();
  const uint64_t height = ledger->last_height();
  if (commit.seq <= height) return std::nullopt;  // already in the ledger (restart)
  if (commit.seq != height + 1) {
    return absl::InternalError(
        absl::StrCat("commit of seq ", commit.seq, " but the ledger is at ", height));
  }
  std::vector<TxPtr> txs;
  txs.reserve(commit.tx_hashes.size());
  for (const std::string& h : commit.tx_hashes) {
    TxPtr tx = deps_.pool->Get(h);
    if (tx == nullptr) {
      // Committed before (a replay inside a later batch): the executor rejects it again.
      absl::StatusOr<std::string> stored = ledger->GetTx(h);
      if (!stored.ok()) {
        return absl::InternalError(
            absl::StrCat("tx of committed batch ", commit.seq, " is neither pooled nor stored"));
      }
      absl::StatusOr<base::DecodedTx> d = base::DecodeSignedTx(*stored, deps_.tx_limits);
      if (!d.ok()) return d.status();
      tx = std::make_shared<const base::DecodedTx>(*std::move(d));
    }
    txs.push_back(std::move(tx));
  }
  ASSIGN_OR_RETURN(BlockExecution exec, executor->Execute(commit.seq, txs));

  node::chain::Block block;
  auto* header = block.mutable_header();
  header->set_partition(deps_.partition);
  header->set_height(commit.seq);
  header->set_parent_hash(ledger->last_block_hash());
  for (const auto& tx : txs) {
    block.add_tx_hashes(tx->hash);
    block.add_txs(tx->signed_bytes);
  }
  header->set_tx_root(TxRoot(block.tx_hashes()));
  header->set_state_root(exec.state_root);
  header->set_timestamp_ms(0);  // every replica must build the same block: no local clock here
  header->set_tx_count(static_cast<uint32_t>(txs.size()));

  node::consensus::CommittedBatch cert;
  cert.set_seq(commit.seq);
  for (const std::string& h : commit.tx_hashes) cert.add_tx_hashes(h);
  for (const auto& m : commit.certificate) *cert.add_commit_certificate() = m;
  ConsensusMetaWrites meta = {{CertKey(commit.seq), cert.SerializeAsString()},
                              {kChainDigestKey, commit.chain_digest}};
  if (absl::Status s = ledger->CommitBlock(block, exec.receipts, exec.delta, meta); !s.ok()) {
    return s;
  }
  executor->Apply(exec);
  deps_.pool->RemoveCommitted(txs);
  committed_txs_.fetch_add(txs.size(), std::memory_order_relaxed);

  CommitEvent event;
  event.height = commit.seq;
  event.commit_nanos = deps_.clock->NowNanos();
  event.block_hash = BlockHash(block.header());
  event.tracked = deps_.tracker->TakeCommitted(commit.tx_hashes);
  event.receipts.assign(exec.receipts.begin(), exec.receipts.end());
  event.txs = std::move(txs);
  return event;
}

absl::StatusOr<std::string> CommitPipeline::StateRootAt(uint64_t seq) const {
  // Commits run on this thread, so the tip cannot move in between.
  if (seq == deps_.chain->ledger->last_height()) return deps_.chain->executor->state_root();
  ASSIGN_OR_RETURN(node::chain::Block block, deps_.chain->ledger->GetBlock(seq));
  return block.header().state_root();
}

bool CommitPipeline::HasTx(absl::string_view tx_hash, uint64_t seq) const {
  if (deps_.pool->Get(tx_hash) != nullptr) return true;
  // The tx index alone (no receipt read and parse): a replica waiting for a proposal's bodies
  // asks this for every tx of every waiting proposal each time a batch of txs arrives.
  absl::StatusOr<std::optional<uint64_t>> height = deps_.chain->ledger->GetTxHeight(tx_hash);
  if (!height.ok() || !height->has_value()) return false;
  // Committing seq - 1 prunes the blocks below seq - retain: the body must be at or above that.
  const uint64_t retain = deps_.chain->ledger->retain_blocks();
  return retain == 0 || **height + retain >= seq;
}

bool CommitPipeline::KnowsTx(absl::string_view tx_hash) const {
  if (deps_.pool->Get(tx_hash) != nullptr) return true;
  absl::StatusOr<node::chain::Receipt> receipt = deps_.chain->ledger->GetReceipt(tx_hash);
  return receipt.ok() && ConsumedNonce(*receipt);
}

std::optional<node::consensus::CommittedBatch> CommitPipeline::GetCommitted(uint64_t seq) const {
  absl::StatusOr<std::string> bytes = deps_.chain->ledger->GetConsensusMeta(CertKey(seq));
  if (!bytes.ok()) return std::nullopt;
  node::consensus::CommittedBatch batch;
  if (!batch.ParseFromString(*bytes)) return std::nullopt;
  return batch;
}

}  // namespace partitions
