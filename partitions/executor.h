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
// changed).
//
// Where the state lives: in a StateStore. A node's executor reads the partition's ledger (RocksDB,
// the same atomic write as the block), so the state outgrows RAM; the executor keeps only a
// bounded LRU cache of recently read and written entries (absent keys included), sized by
// `cache_bytes`. Tests and tools use the in-memory store (the StateMap constructor), which the
// executor itself updates on Apply.
//
// Thread-safe: Execute and the getters may run concurrently with each other (reader lock); Apply
// takes the writer lock. Typically one thread executes and applies blocks while RPC threads read.
// Reads that miss the cache go to the store; a store error (disk) comes back as the store's
// status and changes nothing.
//
//   ASSIGN_OR_RETURN(auto exec, Executor::FromGenesis(partition, genesis));
//   ASSIGN_OR_RETURN(BlockExecution result, exec->Execute(height, txs));
//   RETURN_IF_ERROR(ledger.CommitBlock(block_with(result.state_root), result.receipts,
//                                      result.delta));
//   exec->Apply(result);
#ifndef PARTITIONS_EXECUTOR_H_
#define PARTITIONS_EXECUTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
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
// State key -> its value before a block (nullopt: the key did not exist), for the keys whose value
// the block changed. The ledger keeps it to answer reads at older heights.
using PreviousValues = std::map<std::string, std::optional<std::string>>;

// What one block does to the state, as the ledger stores it with the block.
struct StateDelta {
  WriteSet writes;          // final value of every key the block wrote
  PreviousValues previous;  // the value before, of every key whose value changed
  StateRoot accumulator;    // the state's LtHash after the block (state_root = its Root())
};

// Where the executor reads committed state. Implemented by the ledger (ledger.h).
class StateStore {
 public:
  virtual ~StateStore() = default;
  // The committed value of a state key, nullopt if the key does not exist.
  virtual absl::StatusOr<std::optional<std::string>> GetState(absl::string_view key) const = 0;
};

// The state in memory: genesis, tests, tools. The executor that owns one writes to it on Apply.
class MemoryStateStore : public StateStore {
 public:
  explicit MemoryStateStore(StateMap state) : state_(std::move(state)) {}
  absl::StatusOr<std::optional<std::string>> GetState(absl::string_view key) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Write(const WriteSet& writes) ABSL_LOCKS_EXCLUDED(mu_);
  StateMap Copy() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  StateMap state_ ABSL_GUARDED_BY(mu_);
};

// Default bound of the executor's state cache.
inline constexpr size_t kDefaultStateCacheBytes = 64 << 20;

std::string AccountKey(absl::string_view address);
std::string ValueKey(absl::string_view key);
std::string EncodeAccount(uint64_t balance, uint64_t nonce);
// Fills balance and nonce of `out`; false if `value` is not 16 bytes.
bool DecodeAccount(absl::string_view value, node::chain::Account* out);
// Whether the inclusion this receipt describes consumed the tx's nonce (SUCCESS or FAILED; a
// REJECTED tx changed nothing). At most one inclusion of a tx does.
inline bool ConsumedNonce(const node::chain::Receipt& receipt) {
  return receipt.status() == node::chain::Receipt::SUCCESS ||
         receipt.status() == node::chain::Receipt::FAILED;
}

// The state root accumulator of a whole state, O(state).
StateRoot HashState(const StateMap& state);

// The state a genesis config describes. InvalidArgument naming the allocation on a bad address,
// a duplicate, or a total supply that overflows uint64.
absl::StatusOr<StateMap> GenesisState(const node::chain::GenesisConfig& genesis);

// The outcome of executing one block against the executor's current state.
struct BlockExecution {
  uint64_t height = 0;
  std::vector<node::chain::Receipt> receipts;  // one per tx, in block order
  StateDelta delta;                            // what the ledger commits with the block
  std::string state_root;                      // 32 bytes, state after the block
  uint64_t base_version = 0;                   // executor version it was computed against
};

// Counters of the executor's state cache.
struct StateCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;  // reads that went to the store
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  // Misses of keys the cache evicted recently (among the last max(entries, 1,024) evicted, at
  // most kGhostKeys): reads a cache twice as large would have hit, so a sign it is too small
  // (a first read of a new key is a miss no size avoids).
  uint64_t evicted_misses = 0;
};

class Executor {
 public:
  // Over a whole state held in memory (its own MemoryStateStore). O(state) to hash it.
  Executor(uint32_t partition, StateMap state);
  // Over `store` (which must outlive the executor), whose state hashes to `root`. The caller
  // writes each applied block's delta to the store before Apply (the ledger's CommitBlock does).
  Executor(uint32_t partition, const StateStore* store, const StateRoot& root,
           size_t cache_bytes = kDefaultStateCacheBytes);
  static absl::StatusOr<std::unique_ptr<Executor>> FromGenesis(
      uint32_t partition, const node::chain::GenesisConfig& genesis);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Executes `txs` in order against the current state. Does not change the state. `height` only
  // goes into the receipts. Fails only when the store cannot be read.
  absl::StatusOr<BlockExecution> Execute(uint64_t height, absl::Span<const TxPtr> txs) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `result` the current state.
  // REQUIRES: no Apply since the Execute that produced `result` (CHECKed).
  void Apply(const BlockExecution& result) ABSL_LOCKS_EXCLUDED(mu_);

  // The store's state was replaced under the executor (a snapshot installed into the ledger):
  // `root` is its hash; the cache is emptied. REQUIRES: a store-backed executor (CHECKed).
  void Reset(const StateRoot& root) ABSL_LOCKS_EXCLUDED(mu_);

  uint32_t partition() const { return partition_; }
  std::string state_root() const ABSL_LOCKS_EXCLUDED(mu_);
  StateRoot accumulator() const ABSL_LOCKS_EXCLUDED(mu_);
  // The account (all zeros but the address if it was never touched).
  absl::StatusOr<node::chain::Account> GetAccount(absl::string_view address) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The nonce the next valid transaction of `address` must carry. Suits TxPool's NextNonceFn.
  absl::StatusOr<uint64_t> NextNonce(absl::string_view address) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<std::string>> GetValue(absl::string_view key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Bounds the cache (evicting down to it at once). Live: from config or the partition's share.
  void SetCacheCapacity(size_t bytes) ABSL_LOCKS_EXCLUDED(cache_mu_);
  StateCacheStats cache_stats() const ABSL_LOCKS_EXCLUDED(cache_mu_);

  // Test failpoint (noded --test-diverge): block `height` also writes a value no other replica
  // writes, a planted nondeterminism that changes this replica's state root from there on.
  // 0 (the default): none. Never set outside fault tests.
  void PlantNondeterminismForTest(uint64_t height) {
    planted_height_.store(height, std::memory_order_relaxed);
  }

  // A sorted copy of the whole state. REQUIRES: an in-memory executor (StateMap constructor).
  std::map<std::string, std::string> SnapshotForTest() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Overlay;  // the state one Execute sees (executor.cc)

  // A cached state entry: the value, or nullopt for a key known to be absent.
  struct CacheEntry {
    std::string key;
    std::optional<std::string> value;
    size_t charge = 0;
  };
  using CacheList = std::list<CacheEntry>;

  // The committed value of `key`: the cache, else the store (then cached).
  absl::StatusOr<std::optional<std::string>> Read(absl::string_view key) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_LOCKS_EXCLUDED(cache_mu_);
  void CachePut(absl::string_view key, std::optional<std::string> value) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);
  void EvictToCapacity() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_);

  const uint32_t partition_;
  std::atomic<uint64_t> planted_height_{0};
  const std::unique_ptr<MemoryStateStore> owned_store_;  // set by the StateMap constructor
  const StateStore* const store_;

  mutable absl::Mutex mu_;
  StateRoot root_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by every Apply

  // The cache changes under a reader lock of mu_ too (reads fill it), so it has its own mutex.
  // Lock order: mu_ before cache_mu_.
  mutable absl::Mutex cache_mu_;
  mutable CacheList lru_ ABSL_GUARDED_BY(cache_mu_);  // most recently used first
  // Keyed by a view of the entry's own key (list nodes do not move).
  mutable absl::flat_hash_map<absl::string_view, CacheList::iterator> index_
      ABSL_GUARDED_BY(cache_mu_);
  mutable size_t cache_bytes_ ABSL_GUARDED_BY(cache_mu_) = 0;
  size_t cache_capacity_ ABSL_GUARDED_BY(cache_mu_);
  mutable uint64_t hits_ ABSL_GUARDED_BY(cache_mu_) = 0;
  mutable uint64_t misses_ ABSL_GUARDED_BY(cache_mu_) = 0;
  // Hashes of the keys evicted last, oldest first, at most max(entries, 1,024) and kGhostKeys
  // (StateCacheStats::evicted_misses).
  static constexpr size_t kGhostKeys = 1 << 16;
  mutable std::deque<uint64_t> ghost_order_ ABSL_GUARDED_BY(cache_mu_);
  mutable absl::flat_hash_map<uint64_t, uint32_t> ghosts_ ABSL_GUARDED_BY(cache_mu_);
  mutable uint64_t evicted_misses_ ABSL_GUARDED_BY(cache_mu_) = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_EXECUTOR_H_
