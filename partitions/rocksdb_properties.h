// What a partition's RocksDB databases (its ledger, its consensus store) report about themselves,
// read from their properties.
//
// RocksDbIntProperty: an integer property, 0 when RocksDB cannot give it.
// ReadWriteStall: RocksDB's own write backpressure on one database: whether its writes are stopped
// now (rocksdb.is-write-stopped), the rate they are delayed to (rocksdb.actual-delayed-write-rate),
// and what drives them (level-0 table files, the estimate of the bytes its compactions have to
// rewrite). Both databases report it (Ledger::WriteStallNow, RocksDbConsensusStore::WriteStallNow):
// a stopped consensus store holds up the replica's synced writes.
//
//   RocksDbWriteStall stall = ReadWriteStall(*db);
//   if (stall.stopped) LOG(WARNING) << "writes stopped, " << stall.level0_files << " L0 files";
//
// Thread-safe (RocksDB's properties are).
#ifndef PARTITIONS_ROCKSDB_PROPERTIES_H_
#define PARTITIONS_ROCKSDB_PROPERTIES_H_

#include <cstdint>
#include <string>

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace partitions {

uint64_t RocksDbIntProperty(rocksdb::DB& db, const std::string& name);

struct RocksDbWriteStall {
  bool stopped = false;
  uint64_t delayed_write_rate = 0;  // bytes per second while delayed, else 0
  uint64_t level0_files = 0;
  uint64_t pending_compaction_bytes = 0;
};

RocksDbWriteStall ReadWriteStall(rocksdb::DB& db);

}  // namespace partitions

#endif  // PARTITIONS_ROCKSDB_PROPERTIES_H_
