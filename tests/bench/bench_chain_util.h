// Benchmark helper: commits a block of txs on a chain the way the commit pipeline does.
#ifndef TESTS_BENCH_BENCH_CHAIN_UTIL_H_
#define TESTS_BENCH_BENCH_CHAIN_UTIL_H_

#include <cstdint>
#include <vector>

#include "glog/logging.h"
#include "partitions/block.h"
#include "partitions/ledger.h"

namespace partitions {

// Executes `txs` at the chain's next height, commits the block and applies it; CHECKs success.
inline void CommitBenchBlock(Chain& chain, const std::vector<TxPtr>& txs) {
  const uint64_t height = chain.ledger->last_height() + 1;
  absl::StatusOr<BlockExecution> r = chain.executor->Execute(height, txs);
  CHECK(r.ok()) << r.status();
  node::chain::Block block;
  for (const TxPtr& tx : txs) {
    block.add_tx_hashes(tx->hash);
    block.add_txs(tx->signed_bytes);
  }
  node::chain::BlockHeader* h = block.mutable_header();
  h->set_partition(chain.ledger->partition());
  h->set_height(height);
  h->set_parent_hash(chain.ledger->last_block_hash());
  h->set_tx_root(TxRoot(block.tx_hashes()));
  h->set_state_root(r->state_root);
  h->set_tx_count(static_cast<uint32_t>(txs.size()));
  absl::Status s = chain.ledger->CommitBlock(block, r->receipts, r->delta);
  CHECK(s.ok()) << s;
  chain.executor->Apply(*r);
}

}  // namespace partitions

#endif  // TESTS_BENCH_BENCH_CHAIN_UTIL_H_
