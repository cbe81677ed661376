// RocksDbConsensusStore: the durable ConsensusStore (pbft_types.h) of a partition's PBFT replica,
// in its own RocksDB next to the ledger (e.g. <partition dir>/consensus). It survives a process
// crash: every write is one WriteBatch with WriteOptions.sync, so a call that returns OK is on
// disk. Tests hold it to the in-memory model of the same semantics (tests/mocks/
// fake_consensus_store.h).
//
// Layout (one key space):
//   "v"                                      -> PersistedView
//   "c"                                      -> StableCheckpointRecord
//   "l" <seq: 8B big-endian> <n: 8B big-endian> -> ConsensusMessage
// `seq` is MessageSeq(msg) and `n` an append counter, so log keys sort by seq, then append order.
// Load() therefore returns the log ordered by seq (the in-memory store keeps global append order);
// the replica's Restore() depends only on the order within one seq (a later message replaces an
// earlier one for the same view/seq/sender), which both stores preserve.
// PutStableCheckpoint writes "c" and DeleteRange's the log keys with seq <= record.seq() in one
// batch; AppendLog skips messages with seq <= the stable checkpoint, like the in-memory store.
//
// Errors: RocksDB failures become absl::Status with RocksDB's message (Corruption -> DataLoss,
// anything else -> Unavailable); an unparsable value or malformed log key -> DataLoss naming the
// key. After a failed write the replica halts (pbft_replica.h), so no retry happens here.
//
// Thread-safe: one mutex serialises all calls (a replica calls it from one thread anyway).
//
//   ASSIGN_OR_RETURN(auto store, RocksDbConsensusStore::Open(partition_dir + "/consensus"));
//   ASSIGN_OR_RETURN(auto replica, PbftReplica::Create(config, {&crypto, &txs, store.get(),
//                                                               &blocks}, position));
#ifndef PARTITIONS_ROCKSDB_CONSENSUS_STORE_H_
#define PARTITIONS_ROCKSDB_CONSENSUS_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "partitions/pbft_types.h"
#include "partitions/rocksdb_properties.h"

namespace rocksdb {
class Cache;
class DB;
}  // namespace rocksdb

namespace partitions {

// What a store may hold in memory. The log is bounded by the watermark window and written at a
// few messages per block (a pre-prepare carries its batch's tx hashes: about 17 KiB for 500 txs),
// and read back only when the replica starts (Load), so neither part needs much: a node opens one
// store per partition and gives them all one block cache.
struct ConsensusStoreOptions {
  // RocksDB's block cache (data, index and filter blocks) for the store's tables; a node shares
  // one among all its partitions' stores. Null: a cache of own_cache_bytes of the store's own.
  std::shared_ptr<rocksdb::Cache> block_cache;
  size_t own_cache_bytes = 1 << 20;
  // RocksDB's write buffer: a memtable is flushed to a table file once it holds this many bytes
  // (or the one write that crossed it), and RocksDB stops the store's writes while four wait for
  // their flush, so its memtables hold at most about four, usually one or two.
  size_t write_buffer_bytes = kDefaultWriteBufferBytes;
  static constexpr size_t kDefaultWriteBufferBytes = 512 << 10;
};

// What a store's RocksDB holds in memory, by part (RocksDB's own estimates).
struct ConsensusStoreMemory {
  uint64_t memtable_bytes = 0;      // its memtables (the one filling and any being flushed)
  uint64_t table_reader_bytes = 0;  // its open tables' readers outside the block cache
  uint64_t own_cache_bytes = 0;     // its own block cache (0 with a shared one)
};

class RocksDbConsensusStore final : public ConsensusStore {
 public:
  // Opens (creating if missing, parents included) the store in directory `dir`. Fails if `dir`
  // is unusable or another process holds it, or if the stored checkpoint or log keys are corrupt,
  // or (InvalidArgument) for a write buffer under 64 KiB.
  static absl::StatusOr<std::unique_ptr<RocksDbConsensusStore>> Open(
      const std::string& dir, ConsensusStoreOptions store_options = {});

  ~RocksDbConsensusStore() override;
  RocksDbConsensusStore(const RocksDbConsensusStore&) = delete;
  RocksDbConsensusStore& operator=(const RocksDbConsensusStore&) = delete;

  absl::Status PutView(const node::consensus::PersistedView& view) override;
  absl::Status PutStableCheckpoint(const node::consensus::StableCheckpointRecord& record) override;
  absl::Status AppendLog(const std::vector<ConsensusMessage>& messages) override;
  absl::StatusOr<node::consensus::PersistedConsensus> Load() const override;

  // What it holds in memory now (RocksDB's estimates; takes RocksDB's mutex briefly). Thread-safe.
  ConsensusStoreMemory Memory() const;
  // RocksDB's write backpressure on the store now (a stopped store holds up the replica's
  // synced writes). Thread-safe.
  RocksDbWriteStall WriteStallNow() const { return ReadWriteStall(*db_); }

 private:
  RocksDbConsensusStore(std::unique_ptr<rocksdb::DB> db, std::shared_ptr<rocksdb::Cache> own_cache,
                        std::string dir);
  // Reads the stable checkpoint's seq and the highest append counter (sets the fields below).
  absl::Status Recover();

  // Constant after construction.
  const std::shared_ptr<rocksdb::Cache> own_cache_;  // null with a shared cache
  const std::unique_ptr<rocksdb::DB> db_;
  const std::string dir_;  // for error messages

  // Protected by mu_ (also serialises the writes, so stable_seq_ matches what is on disk).
  mutable absl::Mutex mu_;
  uint64_t stable_seq_ ABSL_GUARDED_BY(mu_) = 0;   // seq of the record under "c"
  uint64_t next_append_ ABSL_GUARDED_BY(mu_) = 0;  // counter of the next log key
};

}  // namespace partitions

#endif  // PARTITIONS_ROCKSDB_CONSENSUS_STORE_H_
