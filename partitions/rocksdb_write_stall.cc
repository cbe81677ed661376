#include "partitions/rocksdb_write_stall.h"

#include <string>

#include "absl/strings/numbers.h"
#include "rocksdb/db.h"

namespace partitions {

RocksDbWriteStall ReadWriteStall(rocksdb::DB& db) {
  auto property = [&db](const std::string& name) -> uint64_t {
    uint64_t v = 0;
    return db.GetIntProperty(name, &v) ? v : 0;
  };
  RocksDbWriteStall out;
  out.stopped = property(rocksdb::DB::Properties::kIsWriteStopped) != 0;
  out.delayed_write_rate = property(rocksdb::DB::Properties::kActualDelayedWriteRate);
  out.pending_compaction_bytes = property(rocksdb::DB::Properties::kEstimatePendingCompactionBytes);
  std::string files;
  uint64_t level0 = 0;
  if (db.GetProperty(rocksdb::DB::Properties::kNumFilesAtLevelPrefix + "0", &files) &&
      absl::SimpleAtoi(files, &level0)) {
    out.level0_files = level0;
  }
  return out;
}

}  // namespace partitions
