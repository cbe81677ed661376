// The partitions a node runs: the config file's, changed by the admin API's live operations
// (CreatePartition, StopPartition, StartPartition, RemovePartition; proto/admin.proto).
//
// The changes are recorded in <data_dir>/live_partitions.textproto (node.config.LivePartitions,
// proto/config.proto) and applied over the config file's partitions at every start:
//
//   file partitions   minus the ids in `removed`,
//   plus `created`    (an id or name that a file partition still uses is a startup error naming
//                      both files: the operator chose one),
//   `stopped` ids     listed, not started.
//
// An id in `removed` that the file no longer lists is dropped from the record (the operator
// took it out of the file too), so a partition later added to the file under that id runs.
//
// Thread-compatible free functions; the node serializes its live operations.
#ifndef RUNTIME_PARTITION_REGISTRY_H_
#define RUNTIME_PARTITION_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace runtime {

// <data_dir>/live_partitions.textproto.
std::string LivePartitionsPath(const std::string& data_dir);

// The record at `path`; an empty one when the file does not exist. InvalidArgument naming the
// file when it does not parse; Unavailable when it cannot be read.
absl::StatusOr<node::config::LivePartitions> ReadLivePartitions(const std::string& path);

// Replaces the record atomically: written to path + ".tmp", fsync'ed, renamed over `path`, and
// the directory fsync'ed. Errors name the file and the failing call.
absl::Status WriteLivePartitions(const std::string& path, const node::config::LivePartitions& live);

// One partition the node runs or lists.
struct PlannedPartition {
  node::config::PartitionConfig config;  // defaults applied
  bool stopped = false;                  // listed, not started
  bool created_live = false;             // from `created`, not from the file
};

struct PartitionPlan {
  std::vector<PlannedPartition> partitions;  // file order, then creation order
  // The record with `removed` pruned to ids the file still lists and `stopped` to ids planned
  // (write it back when it differs from what was read).
  node::config::LivePartitions live;
  // One line per removed partition the file still lists (logged as warnings at startup).
  std::vector<std::string> warnings;
};

// Applies `live` over `file_config`'s partitions (defaults already applied to the file's).
// InvalidArgument when a created partition's id or name is used by a file partition that is not
// removed, or when created partitions repeat an id or name.
absl::StatusOr<PartitionPlan> PlanPartitions(const node::config::NodeConfig& file_config,
                                             const node::config::LivePartitions& live,
                                             const std::string& live_path);

}  // namespace runtime

#endif  // RUNTIME_PARTITION_REGISTRY_H_
