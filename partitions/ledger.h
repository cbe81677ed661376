// Ledger: one partition's durable chain on RocksDB: blocks, tx index, receipts, state, and the
// consensus metadata the PBFT replica persists.
//
// One RocksDB per partition, in its own directory (the caller picks it, e.g.
// <data_dir>/partition-<id>/ledger). Chosen over one shared DB with key prefixes because each
// partition then has its own WAL and fsyncs (a busy partition's commits do not queue behind
// another's), its own compaction, and can be dropped or copied by directory. Inside the DB, keys
// carry a one-byte prefix (heights big-endian, so keys sort by height):
//   "b" height            -> Block (header, tx hashes, tx bodies)
//   "r" height index(u32) -> Receipt
//   "t" tx hash           -> height, index of the tx's inclusion that consumed its nonce
//                            (SUCCESS or FAILED), else of its latest (REJECTED) inclusion; every
//                            other inclusion keeps its receipt by position. (Written from this
//                            version on and only for blocks the ledger commits itself: an older
//                            ledger, or one that skipped the consuming block through a snapshot,
//                            may keep pointing at a refusal.)
//   "s" state key         -> state value (executor.h layout): the current state
//   "u" len32 key height  -> the key's value before block `height` (1 byte present/absent, then
//                            the value), written for every key whose value the block changed:
//                            what reads at older heights need (GetValueAt)
//   "l"                   -> the state's LtHash lanes after the last block (2 KiB), so a reopen
//                            checks the state root without rehashing the whole state
//   "h"                   -> height (8 bytes): the lowest whose state is readable, on a ledger
//                            upgraded from a version without undo records or installed from a
//                            snapshot
//   "c" key               -> consensus metadata (opaque bytes)
//   "n" state key         -> (or "s", whichever the state does not use) a snapshot's state being
//                            fetched (staged), which InstallStagedState makes the state at once
//   "e"                   -> height (8 bytes): the snapshot installed last; blocks below it are
//                            missing (earliest_height)
//   "g"                   -> the prefix the state uses ("s" if absent; "n" after an odd number
//                            of snapshot installs)
//   "p"                   -> height (8 bytes): blocks below it were pruned (absent: none)
//
// CommitBlock writes a block, its receipts, its state delta (and optionally consensus metadata)
// in ONE WriteBatch with sync=true: after a crash the ledger holds a prefix of the committed
// blocks, each with exactly its state. The genesis block (height 0, no txs) carries the genesis
// state; OpenChain commits it on first open. Reopening resumes after the last committed block;
// OpenChain checks the stored state hash against that block's state root, and the executor reads
// the state from here (the ledger is its StateStore) through a bounded cache: memory does not
// grow with the state. Every height's state stays readable (from the history mark on, on a
// ledger installed from a snapshot), unless pruning is on.
//
// Pruning (LedgerOptions::retain_blocks = K): a commit that leaves more than K + prune_step blocks
// deletes, in its own write batch, every block below tip + 1 - K with its receipts and the
// consensus metadata keyed by those heights (range deletes), and raises the history mark there.
// The tx index entries of those blocks and the undo records the history no longer needs are
// dropped by a compaction filter as RocksDB compacts (they are ignored meanwhile), so pruning
// costs no extra read or sync. A pruned block and its txs answer OUT_OF_RANGE naming the earliest
// height kept (a tx whose index entry the filter dropped: NOT_FOUND, as one never committed), the
// state before the mark FAILED_PRECONDITION.
//
// Snapshots (snapshot_sync.h): ScanStateAt reads the state as of any kept height in key order
// (what a peer serves); StageState writes a fetched snapshot's state beside the current one and
// InstallStagedState switches to it in one synced write, with the snapshot's block as the new
// tip (blocks the ledger held before stay; those in between are absent).
//
// Errors are absl::Status; RocksDB failures carry RocksDB's message (INTERNAL, or DATA_LOSS for
// corruption). Thread-safe: commits are serialized; reads may run concurrently with them.
//
//   ASSIGN_OR_RETURN(Chain chain, OpenChain(dir, partition, genesis));
//   ASSIGN_OR_RETURN(BlockExecution r, chain.executor->Execute(h, txs));
//   ... fill block.header().state_root() = r.state_root ...
//   RETURN_IF_ERROR(chain.ledger->CommitBlock(block, r.receipts, r.delta));
//   chain.executor->Apply(r);
#ifndef PARTITIONS_LEDGER_H_
#define PARTITIONS_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "partitions/executor.h"
#include "partitions/rocksdb_properties.h"
#include "proto/chain.pb.h"

namespace rocksdb {
class Cache;
class DB;
class Env;
class Iterator;
class Snapshot;
class WriteBatch;
}  // namespace rocksdb

namespace partitions {

// The heights below which the ledger's compaction filter drops records (ledger.cc).
struct PruneMarks;
// One commit's records, written in key order (ledger.cc).
class SortedPuts;

struct LedgerOptions {
  // fsync every commit. Only benchmarks of the non-durable path turn it off.
  bool sync = true;
  // The RocksDB environment (file system); null: the default. Tests inject disk faults here
  // (tests/mocks/faulty_file_system.h). Must outlive the ledger.
  rocksdb::Env* env = nullptr;
  // RocksDB's block cache (data, index and filter blocks) of this ledger. A node gives it its part
  // of the partition's memory share live (SetBlockCacheCapacity).
  size_t block_cache_bytes = 32 << 20;
  // RocksDB's write buffer: a memtable switches to a new one (and is flushed to a table file)
  // once it holds this many bytes; the ledger holds at most two (one filling, one flushing), so
  // its memtables take at most about twice this. 0: RocksDB's default (64 MiB). A node divides
  // one budget among its partitions (resources.ledger_write_buffer_bytes) and changes it live
  // with SetWriteBufferBytes as partitions come and go.
  size_t write_buffer_bytes = 0;
  // The executor's state cache (executor.h) that OpenChain sets up.
  size_t state_cache_bytes = kDefaultStateCacheBytes;
  // OpenChain rehashes the whole state, O(state), and checks it against the stored hash.
  bool verify_state_on_open = false;
  // Blocks kept behind the tip, the tip included; older ones are pruned (see above). 0: keep
  // every block.
  uint64_t retain_blocks = 0;
  // Blocks pruned at once, at least (one range delete per record kind): the ledger holds between
  // retain_blocks and retain_blocks + prune_step blocks. >= 1.
  uint64_t prune_step = 64;
  // Prefixes of consensus metadata keyed by prefix + height (8 bytes big-endian), pruned with
  // their blocks (e.g. the commit certificates, "cert/").
  std::vector<std::string> height_keyed_meta = {};
};

// One ledger's write buffer when `ledgers` share `budget_bytes` of memtables (each holds at most
// two write buffers: one filling, one flushing): budget / (2 x ledgers), between 1 MiB (so a node
// with very many partitions may exceed the budget, by at most 2 MiB per ledger) and 16 MiB (a
// larger skip list costs more per insert: one ledger committing blocks of transfers used 0.81x
// the process CPU with 8 MiB as with RocksDB's default 64 MiB, 0.83x with 16 MiB; and it only
// delays flushes). 0 budget: 0 (RocksDB's default).
size_t LedgerWriteBufferBytes(uint64_t budget_bytes, size_t ledgers);

// The part of the write buffer budget a node divides under memory pressure, in steps of 1/8:
// `pressure_scale` (MemoryPressure::pool_scale, 1 without pressure, down to min_pool_scale) once
// it is 1/8 or more away from `current` (the part in force), rounded up to the next step, and 1
// as soon as it is back at 1; else `current`. The step keeps a pressure hovering near a boundary
// from changing every ledger's options (each change syncs a file) at every arbiter tick.
double LedgerWriteBufferScale(double current, double pressure_scale);

// Opaque consensus metadata written with a block (or alone): key -> bytes.
using ConsensusMetaWrites = std::vector<std::pair<std::string, std::string>>;

class Ledger : public StateStore {
 public:
  // Opens (creating if missing) the ledger at `path` for `partition`.
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(const std::string& path, uint32_t partition,
                                                      const LedgerOptions& options = {});
  ~Ledger() override;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Atomically and durably commits `block` (with its tx bodies), its receipts, the state delta
  // and the consensus metadata. FAILED_PRECONDITION unless the block extends the tip (height 0
  // on an empty ledger, else last height + 1 with parent_hash = last block hash);
  // INVALID_ARGUMENT if the block is inconsistent (partition, tx_count, tx_root, receipts count,
  // a state_root other than the delta's).
  absl::Status CommitBlock(const node::chain::Block& block,
                           absl::Span<const node::chain::Receipt> receipts, const StateDelta& delta,
                           const ConsensusMetaWrites& meta = {}) ABSL_LOCKS_EXCLUDED(mu_);

  // True until the genesis block is committed.
  bool empty() const ABSL_LOCKS_EXCLUDED(mu_);
  // Height of the last committed block. REQUIRES: !empty().
  uint64_t last_height() const ABSL_LOCKS_EXCLUDED(mu_);
  // The same without the commit lock (which a commit holds across its synced write): 0 while
  // empty. Set after the block is durable.
  uint64_t tip_height() const { return tip_height_.load(std::memory_order_acquire); }
  // Header and hash of the last committed block. REQUIRES: !empty().
  node::chain::BlockHeader last_header() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string last_block_hash() const ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_FOUND if no block has that height; OUT_OF_RANGE if it was pruned.
  absl::StatusOr<node::chain::Block> GetBlock(uint64_t height) const;
  // NOT_FOUND if the tx was never committed (or pruned and forgotten); OUT_OF_RANGE if its block
  // was pruned. A tx included more than once (a replay, or a refusal before its nonce came)
  // answers with the inclusion that consumed its nonce, else its latest refusal;
  // GetBlockReceipts has every one by position.
  absl::StatusOr<node::chain::Receipt> GetReceipt(absl::string_view tx_hash) const;
  // The receipts of block `height`, one per tx in block order. NOT_FOUND if there is no block
  // there; DATA_LOSS if its receipts are not all stored.
  absl::StatusOr<std::vector<node::chain::Receipt>> GetBlockReceipts(uint64_t height) const;
  // The SignedTransaction bytes. NOT_FOUND if the tx was never committed; OUT_OF_RANGE if its
  // block was pruned.
  absl::StatusOr<std::string> GetTx(absl::string_view tx_hash) const;
  // GetTx for many: one entry per hash, nullopt where GetTx answers NOT_FOUND or OUT_OF_RANGE
  // (not committed, pruned, or no block where the index points).
  // Each block is read once however many of its txs are asked for, and its txs are found by
  // scanning its encoding, not parsing it (a peer's fetch names up to hundreds of txs, most of
  // them in the same few blocks). DATA_LOSS if a block does not hold a tx its index names.
  absl::StatusOr<std::vector<std::optional<std::string>>> GetTxs(
      absl::Span<const std::string> tx_hashes) const;
  // The height of the block that holds the tx (where GetReceipt and GetTx find it) from the tx
  // index alone: nullopt if the tx was never committed; OUT_OF_RANGE if that block was pruned.
  absl::StatusOr<std::optional<uint64_t>> GetTxHeight(absl::string_view tx_hash) const;
  // The committed account (zeros if never touched).
  absl::StatusOr<node::chain::Account> GetAccount(absl::string_view address) const;
  // The committed value of a Put key, nullopt if never written.
  absl::StatusOr<std::optional<std::string>> GetValue(absl::string_view key) const;
  // Its value as of block `height` (after that block). OUT_OF_RANGE beyond the last block;
  // FAILED_PRECONDITION below the history an upgraded ledger keeps (UpgradeStateHistory).
  absl::StatusOr<std::optional<std::string>> GetValueAt(absl::string_view key,
                                                        uint64_t height) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // StateStore: the current value of a state key (executor.h layout).
  absl::StatusOr<std::optional<std::string>> GetState(absl::string_view key) const override;
  // The value of a state key as of block `height`. OUT_OF_RANGE beyond the last block.
  absl::StatusOr<std::optional<std::string>> GetStateAt(absl::string_view key,
                                                        uint64_t height) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The state hash stored with the last block; nullopt for a ledger written before it was.
  absl::StatusOr<std::optional<StateRoot>> LoadAccumulator() const;
  // Upgrades a ledger written before the state hash and the undo records were stored: stores
  // `root` (the hash of its state) and marks the tip as the lowest height GetStateAt can read
  // (FAILED_PRECONDITION below it).
  absl::Status UpgradeStateHistory(const StateRoot& root) ABSL_LOCKS_EXCLUDED(mu_);
  // The whole committed state (to rebuild the executor).
  absl::StatusOr<StateMap> LoadState() const;

  // ---- Snapshots ----
  // Calls fn(key, value) for each state entry as of block `height`, in key order from `from`
  // (inclusive), until fn returns false: one consistent view, whatever commits meanwhile.
  // OUT_OF_RANGE beyond the last block; FAILED_PRECONDITION below the kept history. Keys written
  // after `height` are visited and skipped: `scanned` (if set) gets the bytes of every record
  // visited, and the scan stops (OK) once they reach `max_scanned` (0: no bound).
  absl::Status ScanStateAt(uint64_t height, absl::string_view from,
                           absl::FunctionRef<bool(absl::string_view, absl::string_view)> fn,
                           uint64_t max_scanned = 0, uint64_t* scanned = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the staged state and the consensus metadata whose keys start with `meta_prefix`
  // (a fetch's progress). Synced.
  absl::Status ClearStaged(absl::string_view meta_prefix);
  // Stages `entries` (state key, value) and writes `meta`, in one synced batch.
  absl::Status StageState(absl::Span<const std::pair<std::string, std::string>> entries,
                          const ConsensusMetaWrites& meta);
  // Makes the staged state the ledger's state, in one synced batch: `base` (the block at the
  // snapshot's height, with its receipts) becomes the tip and `lanes` the stored state hash;
  // state history starts at base (older undo records are dropped); the consensus metadata under
  // `meta_prefix` is deleted and `meta` written. FAILED_PRECONDITION unless base is above the tip;
  // INVALID_ARGUMENT if base is inconsistent (as CommitBlock) or its state root is not lanes'.
  // The previous state is deleted after the switch. Readers during the switch may see either.
  absl::Status InstallStagedState(const node::chain::Block& base,
                                  absl::Span<const node::chain::Receipt> receipts,
                                  const StateRoot& lanes, const ConsensusMetaWrites& meta,
                                  absl::string_view meta_prefix) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls fn(key without the prefix, value) for each consensus metadata key starting with
  // `prefix`, in key order.
  absl::Status ScanConsensusMeta(
      absl::string_view prefix,
      absl::FunctionRef<void(absl::string_view, absl::string_view)> fn) const;
  // The lowest height whose state GetStateAt and ScanStateAt read.
  uint64_t history_from() const ABSL_LOCKS_EXCLUDED(mu_);
  // The lowest height from which every block up to the tip is here: 0, the height of the
  // snapshot installed last (blocks before it were never fetched), or the first block pruning
  // kept.
  uint64_t earliest_height() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks below this height were pruned (0: none).
  uint64_t pruned_below() const;

  // Compacts the whole database now (RocksDB's manual compaction): a settled ledger, for
  // benchmarks and maintenance. Blocks commits' background compactions meanwhile, not commits.
  absl::Status Compact();

  // Consensus metadata outside a block commit (synced). NOT_FOUND from Get if never put.
  absl::Status PutConsensusMeta(absl::string_view key, absl::string_view value);
  absl::StatusOr<std::string> GetConsensusMeta(absl::string_view key) const;

  // Changes the write buffer (LedgerOptions::write_buffer_bytes) live (RocksDB SetOptions: it
  // syncs the MANIFEST and writes an OPTIONS file, so callers change it only when it differs). A
  // smaller one switches the memtable filling now once it holds that many bytes; a larger one
  // applies from the next memtable. REQUIRES: bytes > 0.
  absl::Status SetWriteBufferBytes(size_t bytes);
  // The write buffer RocksDB holds now.
  size_t WriteBufferBytes() const;
  // Bytes the ledger's memtables hold now: the one filling, those waiting for or in a flush, and
  // those pinned by readers (RocksDB's rocksdb.size-all-mem-tables).
  uint64_t MemtableBytes() const;

  // Changes the block cache's capacity live (LedgerOptions::block_cache_bytes). A smaller one
  // evicts at once down to it, except the blocks pinned in the cache (the top-level index and
  // filter partitions, the level-0 tables' index and filter blocks, those a reader holds), which
  // leave when their table or reader does. REQUIRES: bytes > 0.
  absl::Status SetBlockCacheCapacity(size_t bytes);
  // What the block cache holds now (its pinned blocks included), its pinned part, and its
  // capacity.
  uint64_t BlockCacheBytes() const;
  uint64_t BlockCachePinnedBytes() const;
  uint64_t BlockCacheCapacity() const;
  // RocksDB's own write backpressure now and what drives it (partitions/rocksdb_properties.h).
  using WriteStall = RocksDbWriteStall;
  WriteStall WriteStallNow() const;

  uint32_t partition() const { return partition_; }
  uint64_t retain_blocks() const { return options_.retain_blocks; }

 private:
  Ledger(std::unique_ptr<rocksdb::DB> db, std::shared_ptr<rocksdb::Cache> block_cache,
         std::shared_ptr<PruneMarks> marks, uint32_t partition, const LedgerOptions& options);
  absl::Status LoadTip() ABSL_LOCKS_EXCLUDED(mu_);
  // A RocksDB integer property of the DB; 0 when RocksDB cannot give it.
  uint64_t IntProperty(const std::string& name) const;
  absl::StatusOr<std::optional<std::string>> Read(
      absl::string_view key, const rocksdb::Snapshot* snapshot = nullptr) const;
  // A height mark ("h", "e"): 8 bytes big-endian; 0 when absent. DATA_LOSS naming `what`.
  absl::StatusOr<uint64_t> ReadHeightMark(absl::string_view key, absl::string_view what) const;
  // The state key's record key ("s" or "n" + key: see "g").
  std::string StateKey(absl::string_view key) const;
  char staging_prefix() const;
  // A consistent read view at `height` (checked against the tip and the history mark): a
  // RocksDB snapshot (the caller releases it) and the state prefix that goes with it.
  struct ReadView {
    const rocksdb::Snapshot* snapshot = nullptr;
    char prefix = 's';
    bool at_tip = false;
  };
  absl::StatusOr<ReadView> SnapshotAt(uint64_t height) const ABSL_LOCKS_EXCLUDED(mu_);
  // FAILED_PRECONDITION if pruning raised the history mark above `height` (a read at `height`
  // that ran meanwhile may have missed undo records).
  absl::Status CheckHistoryKept(uint64_t height) const;
  // The value of `key` at `height` from the undo records, through `it` (an iterator of the read
  // view); false when the key has not changed since (its current value is it).
  absl::StatusOr<bool> UndoValueAt(rocksdb::Iterator* it, absl::string_view key, uint64_t height,
                                   std::optional<std::string>* value) const;
  // Puts `block`, its receipts and its tx index entries into `puts`.
  absl::Status AddBlock(const node::chain::Block& block,
                        absl::Span<const node::chain::Receipt> receipts, SortedPuts* puts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckBlock(const node::chain::Block& block,
                          absl::Span<const node::chain::Receipt> receipts) const;
  // Adds to `batch` the pruning that committing block `height` calls for (retain_blocks): returns
  // the height below which it prunes, 0 for none.
  uint64_t AddPrune(uint64_t height, rocksdb::WriteBatch* batch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction. rocksdb::DB is thread-safe.
  const std::unique_ptr<rocksdb::DB> db_;
  // The DB's block cache (thread-safe); its capacity changes live.
  const std::shared_ptr<rocksdb::Cache> block_cache_;
  // What the compaction filter may drop; shared with it (it lives as long as the DB's options).
  const std::shared_ptr<PruneMarks> marks_;
  const uint32_t partition_;
  const LedgerOptions options_;

  mutable absl::Mutex mu_;  // serializes commits; guards the tip
  bool empty_ ABSL_GUARDED_BY(mu_) = true;
  node::chain::BlockHeader tip_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> tip_height_{0};  // tip_.height(), readable without mu_
  std::string tip_hash_ ABSL_GUARDED_BY(mu_);
  uint64_t history_from_ ABSL_GUARDED_BY(mu_) = 0;  // the lowest height GetStateAt reads
  uint64_t earliest_ ABSL_GUARDED_BY(mu_) = 0;      // "e"
  // The state's key prefix, 's' or 'n' ("g"); switched by InstallStagedState.
  std::atomic<char> state_prefix_{'s'};
};

// A ledger and the executor holding its current state.
struct Chain {
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<Executor> executor;
};

// Opens the ledger at `path`. On an empty ledger, builds the genesis state from `genesis` and
// commits genesis block 0; otherwise checks the stored state hash against the last block's state
// root (DATA_LOSS on mismatch; `genesis` is then ignored). The executor reads the ledger's state.
absl::StatusOr<Chain> OpenChain(const std::string& path, uint32_t partition,
                                const node::chain::GenesisConfig& genesis,
                                const LedgerOptions& options = {});

}  // namespace partitions

#endif  // PARTITIONS_LEDGER_H_
