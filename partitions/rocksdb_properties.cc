#include "partitions/rocksdb_properties.h"

#include <string>

#include "absl/strings/numbers.h"
#include "rocksdb/db.h"

namespace partitions {

uint64_t RocksDbIntProperty(rocksdb::DB& db, const std::string& name) {
  uint64_t v = 0;
  return db.GetIntProperty(name, &v) ? v : 0;
}

RocksDbWriteStall ReadWriteStall(rocksdb::DB& db) {
  RocksDbWriteStall out;
  out.stopped = RocksDbIntProperty(db, rocksdb::DB::Properties::kIsWriteStopped) != 0;
  out.delayed_write_rate = RocksDbIntProperty(db, rocksdb::DB::Properties::kActualDelayedWriteRate);
  out.pending_compaction_bytes =
      RocksDbIntProperty(db, rocksdb::DB::Properties::kEstimatePendingCompactionBytes);
  std::string files;
  uint64_t level0 = 0;
  if (db.GetProperty(rocksdb::DB::Properties::kNumFilesAtLevelPrefix + "0", &files) &&
      absl::SimpleAtoi(files, &level0)) {
    out.level0_files = level0;
  }
  return out;
}

}  // namespace partitions
