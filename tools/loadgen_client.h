// loadgen's blocking setup and teardown calls: resolve partitions, read sender nonces, read
// view-change counters, read admin token files. (The hot path, SubmitTxBatch, is async in
// loadgen_runner.cc.) Every call has a deadline (3 s), so none can hang a run.
//
// Thread-safety: the functions are thread-safe (gRPC stubs are).
//
//   ASSIGN_OR_RETURN(ChainInfo info, ResolvePartition(stubs, targets, "hot"));
//   ASSIGN_OR_RETURN(std::vector<uint64_t> next, ReadNextNonces(*stubs[0], targets[0], info.id,
//                                                               keys));
#ifndef TOOLS_LOADGEN_CLIENT_H_
#define TOOLS_LOADGEN_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/ed25519.h"
#include "proto/admin.grpc.pb.h"
#include "proto/client.grpc.pb.h"

namespace loadgen {

struct ChainInfo {
  uint32_t id = 0;
  uint64_t height = 0;  // on the first target
};

// GetChainStatus by name on every target: Unavailable naming the target when one fails,
// FailedPrecondition when the targets disagree on the partition's id.
absl::StatusOr<ChainInfo> ResolvePartition(
    const std::vector<std::unique_ptr<node::client::ClientService::Stub>>& stubs,
    const std::vector<std::string>& targets, const std::string& name);

// Each key's next nonce (committed nonce + 1; 1 for a fresh account) with GetAccount.
absl::StatusOr<std::vector<uint64_t>> ReadNextNonces(node::client::ClientService::Stub& stub,
                                                     const std::string& target,
                                                     uint32_t partition_id,
                                                     const std::vector<base::PrivateKey>& keys);

// PartitionStatus.view_changes by partition name, from GetNodeStatus. `token` may be empty.
absl::StatusOr<std::map<std::string, uint64_t>> ReadViewChanges(
    node::admin::AdminService::Stub& stub, const std::string& address, const std::string& token);

// The file's content without surrounding whitespace; NotFound naming the flag and file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace loadgen

#endif  // TOOLS_LOADGEN_CLIENT_H_
