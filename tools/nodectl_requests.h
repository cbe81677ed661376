// Builds and validates nodectl's requests (admin API, and the client API's watch-commits and
// get-value) from parsed flags, before any RPC.
//
// Pure functions (no I/O except reading an --interceptor file); thread-safe. Errors are
// absl::InvalidArgumentError naming the flag, e.g. "--weight: must be > 0, got -1" or
// "--pool high_water_fraction: must be <= 1, got 2"; nodectl exits 2 on them.
//
//   ASSIGN_OR_RETURN(ParsedFlags f, ParseFlags(args, UpdateArbiterFlags()));
//   ASSIGN_OR_RETURN(node::admin::UpdateArbiterRequest req, BuildUpdateArbiterRequest(f));
//
// Values nodectl cannot say in proto3 (a field left at zero) are documented per flag: the node
// reads zero as "keep the current value / use the default" as proto/admin.proto says.
#ifndef TOOLS_NODECTL_REQUESTS_H_
#define TOOLS_NODECTL_REQUESTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/admin.pb.h"
#include "proto/client.pb.h"
#include "proto/flowctl.pb.h"
#include "tools/nodectl_flags.h"

namespace nodectl {

// --interval-ms (100..60000; absent = 0, the node's default) and --partition.
absl::StatusOr<node::admin::WatchFlowStatsRequest> BuildWatchRequest(const ParsedFlags& f);

// Client API (watch-commits, get-value): --partition (required; a number is taken as the id),
// --from / --height (heights, default 0), --receipts, --txs; get-value's KEY is the positional
// argument (1..256 bytes, as given).
absl::StatusOr<node::client::WatchCommitsRequest> BuildWatchCommitsRequest(const ParsedFlags& f);
absl::StatusOr<node::client::GetValueRequest> BuildGetValueRequest(const ParsedFlags& f);

// --partition (required) plus at least one of --interceptor, --lane-weights, --budget, --pool.
absl::StatusOr<node::admin::UpdatePartitionFlowRequest> BuildUpdateFlowRequest(
    const ParsedFlags& f);

// --cap BYTES_PER_S|unlimited and/or --floor BYTES_PER_S.
absl::StatusOr<node::admin::UpdateEgressRequest> BuildUpdateEgressRequest(const ParsedFlags& f);

// One entry per --partition; the --weight/--guarantee/--ceiling after it belong to it.
absl::StatusOr<node::admin::UpdateArbiterRequest> BuildUpdateArbiterRequest(const ParsedFlags& f);

// create-partition --config FILE|TEXT: a text-format PartitionConfig (the body of a config file's
// `partitions { ... }` block), from a file or the text itself ('{' or ':' in it). id and name are
// required here; the node checks the rest.
absl::StatusOr<node::admin::CreatePartitionRequest> BuildCreatePartitionRequest(
    const ParsedFlags& f);
// stop-partition PARTITION [--drain-ms N (1..60000)].
absl::StatusOr<node::admin::StopPartitionRequest> BuildStopPartitionRequest(const ParsedFlags& f);
// remove-partition PARTITION [--delete-data].
absl::StatusOr<node::admin::RemovePartitionRequest> BuildRemovePartitionRequest(
    const ParsedFlags& f);
// --admins HOST:PORT,HOST:PORT,...: the admin addresses a partition command applies to, in order
// (each non-empty, none repeated); empty when the flag is absent (the --admin address alone).
absl::StatusOr<std::vector<std::string>> AdminList(const ParsedFlags& f);

// `spec` is a path to a text-format StageChainConfig file, or the text itself (recognised by a
// '{' or ':' in it). Errors name `what`, the line and the column.
absl::StatusOr<node::flowctl::StageChainConfig> ParseStageChain(absl::string_view what,
                                                                const std::string& spec);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_REQUESTS_H_
