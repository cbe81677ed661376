// Executor: one partition's deterministic account and key/value state, and block execution.
//
// Execution is split in two so the ledger commit stays atomic: Execute() computes a block's
// receipts, write set and new state root without touching the state; the caller commits them to
// the ledger (one synced WriteBatch) and only then calls Apply(). A failed commit leaves the
// executor exactly as it was.
//
// Nonce policy (every replica applies the same rules, so their states stay identical):
//   - An account's nonce counts its executed transactions; the next valid one carries nonce + 1.
//   - nonce == next: the nonce is consumed whatever the operation's outcome. A transfer beyond
//     the balance gives a FAILED receipt ("insufficient funds") and changes only the nonce.
//   - nonce != next (replayed or ahead), or the tx names another partition: REJECTED receipt,
//     nothing changes (the nonce is not consumed).
//   - Transfers to oneself succeed and change only the nonce. Amount 0 is allowed.
//   Execution never fails as a whole: bad transactions only produce receipts. Signatures are not
//   checked here (a block's txs were verified before it was accepted).
//   Total supply (the sum of balances) is fixed at genesis and never changes.
//
// State layout (also what the ledger stores, and what the state root hashes):
//   "a" + 32-byte address -> 16 bytes: balance, nonce (uint64 little-endian each)
//   "k" + put key         -> value
// The state root is the LtHash of all entries (state_root.h), updated in O(keys a block
// changed). Whole state lives in memory; the ledger reloads it on open.
//
// Thread-safe: Execute and the getters may run concurrently with each other (reader lock); Apply
// takes the writer lock. Typically one thread executes and applies blocks while RPC threads read.
//
//   ASSIGN_OR_RETURN(auto exec, Executor::FromGenesis(partition, genesis));
//   BlockExecution result = exec->Execute(height, txs);
//   RETURN_IF_ERROR(ledger.CommitBlock(block_with(result.state_root), result.receipts,
//                                      result.writes));
//   exec->Apply(result);
#ifndef PARTITIONS_EXECUTOR_H_
#define PARTITIONS_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "partitions/state_root.h"
#include "partitions/tx_pool.h"
#include "proto/chain.pb.h"

namespace partitions {

// State key -> new value, sorted (deterministic iteration). Operations never delete keys.
using WriteSet = std::map<std::string, std::string>;
using StateMap = absl::flat_hash_map<std::string, std::string>;

std::string AccountKey(absl::string_view address);
std::string ValueKey(absl::string_view key);
std::string EncodeAccount(uint64_t balance, uint64_t nonce);
// Fills balance and nonce of `out`; false if `value` is not 16 bytes.
bool DecodeAccount(absl::string_view value, node::chain::Account* out);

// The state a genesis config describes. InvalidArgument naming the allocation on a bad address,
// a duplicate, or a total supply that overflows uint64.
absl::StatusOr<StateMap> GenesisState(const node::chain::GenesisConfig& genesis);

// The outcome of executing one block against the executor's current state.
struct BlockExecution {
  uint64_t height = 0;
  std::vector<node::chain::Receipt> receipts;  // one per tx, in block order
  WriteSet writes;                             // final value of every key the block changed
  std::string state_root;                      // 32 bytes, state after the block
  StateRoot accumulator;                       // the root before compression (for Apply)
  uint64_t base_version = 0;                   // executor version it was computed against
};

class Executor {
 public:
  // From a full state (genesis, or the ledger's state on reopen). O(state) to hash it.
  Executor(uint32_t partition, StateMap state);
  static absl::StatusOr<std::unique_ptr<Executor>> FromGenesis(
      uint32_t partition, const node::chain::GenesisConfig& genesis);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Executes `txs` in order against the current state. Does not change the state. `height` only
  // goes into the receipts.
  BlockExecution Execute(uint64_t height, absl::Span<const TxPtr> txs) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `result` the current state.
  // REQUIRES: no Apply since the Execute that produced `result` (CHECKed).
  void Apply(const BlockExecution& result) ABSL_LOCKS_EXCLUDED(mu_);

  uint32_t partition() const { return partition_; }
  std::string state_root() const ABSL_LOCKS_EXCLUDED(mu_);
  // The account (all zeros but the address if it was never touched).
  node::chain::Account GetAccount(absl::string_view address) const ABSL_LOCKS_EXCLUDED(mu_);
  // The nonce the next valid transaction of `address` must carry. Suits TxPool's NextNonceFn.
  uint64_t NextNonce(absl::string_view address) const ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<std::string> GetValue(absl::string_view key) const ABSL_LOCKS_EXCLUDED(mu_);
  // A sorted copy of the whole state. For tests and tools.
  std::map<std::string, std::string> SnapshotForTest() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint32_t partition_;

  mutable absl::Mutex mu_;
  StateMap state_ ABSL_GUARDED_BY(mu_);
  StateRoot root_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by every Apply
};

}  // namespace partitions

#endif  // PARTITIONS_EXECUTOR_H_
