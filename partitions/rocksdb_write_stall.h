// RocksDB's own write backpressure on one database, read from its properties: whether its writes
// are stopped now (rocksdb.is-write-stopped), the rate they are delayed to
// (rocksdb.actual-delayed-write-rate), and what drives them (level-0 table files, the estimate of
// the bytes its compactions have to rewrite). A property RocksDB cannot give reads 0. Both of a
// partition's databases report it: the ledger (Ledger::WriteStallNow) and the consensus store
// (RocksDbConsensusStore::WriteStallNow), whose synced writes a stall would hold up.
//
//   RocksDbWriteStall stall = ReadWriteStall(*db);
//   if (stall.stopped) LOG(WARNING) << "writes stopped, " << stall.level0_files << " L0 files";
//
// Thread-safe (RocksDB's properties are).
#ifndef PARTITIONS_ROCKSDB_WRITE_STALL_H_
#define PARTITIONS_ROCKSDB_WRITE_STALL_H_

#include <cstdint>

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace partitions {

struct RocksDbWriteStall {
  bool stopped = false;
  uint64_t delayed_write_rate = 0;  // bytes per second while delayed, else 0
  uint64_t level0_files = 0;
  uint64_t pending_compaction_bytes = 0;
};

RocksDbWriteStall ReadWriteStall(rocksdb::DB& db);

}  // namespace partitions

#endif  // PARTITIONS_ROCKSDB_WRITE_STALL_H_
