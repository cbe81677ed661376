// Human-readable rendering of admin API responses and of the client API's commit stream and
// values (nodectl's default output), and JSON output (nodectl --json). Pure functions of the
// message; thread-safe.
//
//   node::admin::FlowStats stats = ...;
//   PrintFlowStats(stats, std::cout);          // a table group per partition, then egress
//   std::cout << ToJson(stats, /*pretty=*/true);
//
// Tables print byte counts and rates with binary units and latencies as us/ms/s; --json gives
// the exact figures. JSON uses the proto field names (snake_case, as in config files) and
// prints fields at their zero value, so scripts always find every key.
#ifndef TOOLS_NODECTL_FORMAT_H_
#define TOOLS_NODECTL_FORMAT_H_

#include <ostream>
#include <string>

#include "google/protobuf/message.h"
#include "grpcpp/support/status.h"
#include "proto/admin.pb.h"
#include "proto/client.pb.h"
#include "proto/config.pb.h"
#include "proto/flowctl.pb.h"

namespace nodectl {

void PrintNodeStatus(const node::admin::NodeStatus& status, std::ostream& out);
void PrintPartitions(const node::admin::ListPartitionsResponse& resp, std::ostream& out);
void PrintPeers(const node::admin::ListPeersResponse& resp, std::ostream& out);
// Every partition (stages, lanes, pool, spill, shares), then egress.
void PrintFlowStats(const node::admin::FlowStats& stats, std::ostream& out);
// Cap, floor, derived rate and a table per channel.
void PrintEgress(const node::admin::EgressStats& egress, std::ostream& out);
// The flow-related parts of a partition's effective config (after update-flow).
void PrintPartitionFlowConfig(const node::config::PartitionConfig& config, std::ostream& out);
// One row per partition: weight, guarantee, ceiling (after update-arbiter).
void PrintShares(const google::protobuf::RepeatedPtrField<node::config::PartitionConfig>& configs,
                 std::ostream& out);

// watch-commits: the column header, then one line per committed block: height, the first 12 hex
// digits of its hash, its tx count and, with `receipts`, how many receipts have each status
// ("12 SUCCESS, 1 FAILED").
void PrintCommitHeader(bool receipts, std::ostream& out);
void PrintCommitLine(const node::client::WatchCommitsResponse& block, bool receipts,
                     std::ostream& out);
// get-value: key, found, value (C-escaped), height.
void PrintValue(const node::client::GetValueRequest& request,
                const node::client::GetValueResponse& response, std::ostream& out);

// "concurrency(max_in_flight=1024)", "rate(unlimited)", "gate(consensus_normal)"; prefixed by
// "name=" when the stage's name differs from its kind.
std::string StageSummary(const node::flowctl::StageConfig& stage);

// "NOT_FOUND", "UNAVAILABLE", ... as gRPC spells the code.
const char* StatusCodeName(grpc::StatusCode code);

// The protobuf JSON mapping of `message`, ending with a newline. pretty=false gives one line
// (watch --json prints one object per line).
std::string ToJson(const google::protobuf::Message& message, bool pretty);

}  // namespace nodectl

#endif  // TOOLS_NODECTL_FORMAT_H_
