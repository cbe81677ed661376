// RocksDB's info log, sent to the node's glog instead of a LOG file in the database directory.
//
// A LOG file shares the database's disk: when that disk fills up, RocksDB's own report of the
// failed write goes to a log writer that has already failed, which Debian's librocksdb (built
// with assertions) answers with abort(). Through glog the report reaches the operator, and a full
// disk halts one partition instead of killing the node.
//
// Levels: WARN and above (RocksDB's default INFO level dumps every option at open); warnings
// become LOG(WARNING), errors LOG(ERROR), each prefixed with `name`.
//
// Example:
//   rocksdb::Options options;
//   options.info_log = NewGlogRocksDbLogger("ledger " + path);
//
// Thread-safe (glog is).
#ifndef PARTITIONS_ROCKSDB_LOGGER_H_
#define PARTITIONS_ROCKSDB_LOGGER_H_

#include <memory>
#include <string>

#include "rocksdb/env.h"

namespace partitions {

std::shared_ptr<rocksdb::Logger> NewGlogRocksDbLogger(std::string name);

}  // namespace partitions

#endif  // PARTITIONS_ROCKSDB_LOGGER_H_
