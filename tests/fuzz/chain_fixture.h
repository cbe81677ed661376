// Fuzz fixtures over a real ledger: commits a block of decoded txs the way the commit pipeline
// does (executed, committed, applied). Header-only; for targets that link `partitions`.
#ifndef TESTS_FUZZ_CHAIN_FIXTURE_H_
#define TESTS_FUZZ_CHAIN_FIXTURE_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "partitions/block.h"
#include "partitions/ledger.h"
#include "tests/temp_dirs.h"

namespace tests {

// A fresh directory for this process's fixture, `<tmp>/<name>_<pid>`, removed when the process
// exits (the fixture itself is never destroyed: a fuzz target keeps it for every input).
inline std::string FixtureDir(const char* name) {
  const std::string dir =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/", name, "_", getpid());
  std::filesystem::remove_all(dir);
  RemoveAtExit(dir);
  return dir;
}

// Executes `txs` at the chain's next height, commits the block and applies it. False on any
// error (a fixture that cannot be built is a broken target).
inline bool CommitFixtureBlock(partitions::Chain& chain, uint32_t partition,
                               const std::vector<partitions::TxPtr>& txs) {
  const uint64_t h = chain.ledger->last_height() + 1;
  absl::StatusOr<partitions::BlockExecution> r = chain.executor->Execute(h, txs);
  if (!r.ok()) return false;
  node::chain::Block block;
  for (const auto& tx : txs) {
    block.add_tx_hashes(tx->hash);
    block.add_txs(tx->signed_bytes);
  }
  node::chain::BlockHeader* header = block.mutable_header();
  header->set_partition(partition);
  header->set_height(h);
  header->set_parent_hash(chain.ledger->last_block_hash());
  header->set_tx_root(partitions::TxRoot(block.tx_hashes()));
  header->set_state_root(r->state_root);
  header->set_tx_count(static_cast<uint32_t>(txs.size()));
  if (!chain.ledger->CommitBlock(block, r->receipts, r->delta).ok()) return false;
  chain.executor->Apply(*r);
  return true;
}

}  // namespace tests

#endif  // TESTS_FUZZ_CHAIN_FIXTURE_H_
