// Config validation: one validator per config message (proto/config.proto), shared by config
// loading (runtime/config.h) and by every live update (admin UpdatePartitionFlow, UpdateArbiter,
// UpdateEgress), so a bad value gets the same "path: what is wrong, got X" text whichever way it
// arrives. The live updates' merge rules (which request field replaces which config field) live
// here too, so an update is checked as the whole config it would leave.
//
// Paths. A problem's path is the field's path in NodeConfig: "resources.egress_bytes_per_second",
// "partitions[hot].pool.max_txs". A partition is named by its name in brackets (PartitionPath);
// only when a config file gives a partition no usable name (empty, invalid or repeated) is it
// named by its position, "partitions[2]". Config loading adds "FILE:LINE: " in front; a live
// update refuses with InvalidArgument holding the same lines (ProblemsToStatus).
//
// Each validator takes the path of the message it checks (`at`) and returns every problem it finds
// (empty when valid); StageChainConfig reports its first problem only (flowctl::StageRegistry
// stops there). Validators see messages with defaults applied (runtime::ApplyDefaults), the form
// in which both a loaded config and a merged live update reach them.
//
// Thread-safe free functions; no state.
//
//   std::vector<ConfigProblem> problems =
//       ValidatePoolConfig(config.pool(), PartitionPath(config.name()) + ".pool");
//   RETURN_IF_ERROR(ProblemsToStatus(problems));
#ifndef RUNTIME_CONFIG_VALIDATION_H_
#define RUNTIME_CONFIG_VALIDATION_H_

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flowctl/stage.h"
#include "proto/admin.pb.h"
#include "proto/config.pb.h"
#include "proto/flowctl.pb.h"

namespace runtime {

// resources.cpu_workers (and UpdateArbiter's cpu_workers) is in [1, kMaxCpuWorkers].
inline constexpr uint32_t kMaxCpuWorkers = 1024;
// resources.consensus_blocks_per_second: the default (ApplyDefaults) and the most accepted
// (config and UpdateArbiter). 64 a second is about 7% of a core per node in per-block work on the
// benchmark machine (docs/BENCHMARKS.md, "Partition scale").
inline constexpr uint32_t kDefaultConsensusBlocksPerSecond = 64;
// pool.retry_reserve_fraction's default (ApplyDefaults): off, see docs/BENCHMARKS.md "Retry
// reservations" (little gain over the measured hints).
inline constexpr double kDefaultRetryReserveFraction = 0;
inline constexpr uint32_t kMaxConsensusBlocksPerSecond = 100'000;
// resources.ledger_write_buffer_bytes: the default (ApplyDefaults) and the least accepted (config
// and UpdateArbiter).
inline constexpr uint64_t kDefaultLedgerWriteBufferBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMinLedgerWriteBufferBytes = uint64_t{4} << 20;

// One problem found in a config: the field's path and what is wrong with it.
struct ConfigProblem {
  std::string path;     // e.g. "partitions[hot].consensus.checkpoint_interval"
  std::string message;  // e.g. "must be >= 1, got 0"
};

// The gate predicates every partition registers (runtime/partition.cc), with the kind of
// rejection each gives; a gate stage may name only these.
inline constexpr char kConsensusNormalPredicate[] = "consensus_normal";
inline constexpr char kPoolBelowHighWaterPredicate[] = "pool_below_high_water";
struct GatePredicateSpec {
  absl::string_view name;
  flowctl::RejectKind rejects_as;
};
// (From the array's length: string_view's const char* constructor tests the pointer for null,
// which GCC does not evaluate at compile time under -fsanitize=undefined.)
template <size_t N>
constexpr absl::string_view LiteralView(const char (&s)[N]) {
  return absl::string_view(s, N - 1);
}
inline constexpr std::array<GatePredicateSpec, 2> kGatePredicates = {{
    {LiteralView(kConsensusNormalPredicate), flowctl::RejectKind::kUnavailable},
    {LiteralView(kPoolBelowHighWaterPredicate), flowctl::RejectKind::kOverloaded},
}};

// Upper bound of a lane weight (weights become integer strides in the worker pool).
inline constexpr double kMaxLaneWeight = 1e6;
// Upper bound of a lane's queueing-delay target, in milliseconds.
inline constexpr double kMaxLaneDelayTargetMs = 60000;
// The consensus lane's default delay target when adaptive lane weights are on.
inline constexpr double kDefaultConsensusDelayTargetMs = 5;

// Fills adaptive lane weights' defaults (enabled false; a consensus target when its block is
// absent). Used by ApplyDefaults and by a live update that replaces the block.
void ApplyAdaptiveLaneDefaults(node::config::AdaptiveLaneWeights* adaptive);

// "partitions[<name>]".
std::string PartitionPath(absl::string_view name);

// Letters, digits, '_' and '-', at least one.
bool IsValidPartitionName(absl::string_view name);

// OK when `problems` is empty; else InvalidArgument with one "path: message" line per problem.
absl::Status ProblemsToStatus(const std::vector<ConfigProblem>& problems);

// ---- One validator per message ----

std::vector<ConfigProblem> ValidateShareConfig(const node::config::ShareConfig& share,
                                               const std::string& at);
std::vector<ConfigProblem> ValidateLaneConfig(const node::config::LaneConfig& lanes,
                                              const std::string& at);
// Targets and ceilings in range; a lane's ceiling (when it has a target) not below its weight in
// `lanes`.
std::vector<ConfigProblem> ValidateAdaptiveLaneWeights(
    const node::config::AdaptiveLaneWeights& adaptive, const node::config::LaneConfig& lanes,
    const std::string& at);
std::vector<ConfigProblem> ValidateDispatcherConfig(
    const node::config::DispatcherConfig& dispatcher, const std::string& at);
std::vector<ConfigProblem> ValidatePoolConfig(const node::config::PoolConfig& pool,
                                              const std::string& at);
std::vector<ConfigProblem> ValidateConsensusConfig(const node::config::ConsensusConfig& consensus,
                                                   const std::string& at);
std::vector<ConfigProblem> ValidateLosslessConfig(const node::config::LosslessConfig& lossless,
                                                  const std::string& at);
std::vector<ConfigProblem> ValidateWatchConfig(const node::config::WatchConfig& watch,
                                               const std::string& at);
// Builds the chain with a flowctl::StageRegistry holding kGatePredicates, the same code that
// builds it in a partition, and adds "must list at least one stage".
std::vector<ConfigProblem> ValidateStageChainConfig(const node::flowctl::StageChainConfig& chain,
                                                    const std::string& at);
// The whole partition: the messages above plus id, name, genesis accounts and the checks across
// messages (a batch holds at least one max-size tx).
std::vector<ConfigProblem> ValidatePartitionConfig(const node::config::PartitionConfig& partition,
                                                   const std::string& at);
// The egress settings of a ResourceConfig: cap (0 = unlimited) and the tx-forward floor.
std::vector<ConfigProblem> ValidateEgressConfig(const node::config::ResourceConfig& resources,
                                                const std::string& at);
// Workers, memory, arbiter tick and ValidateEgressConfig.
std::vector<ConfigProblem> ValidateResourceConfig(const node::config::ResourceConfig& resources,
                                                  const std::string& at);
// The smallest disk budget a lossless partition may have: two segments or two of its largest txs
// (flowctl::SpillFifo::MinDiskBudget). REQUIRES: defaults applied.
uint64_t LosslessMinDiskBudget(const node::config::PartitionConfig& partition);
// resources.spill_disk_bytes: 0, or enough for every lossless partition's smallest budget.
std::vector<ConfigProblem> ValidateSpillDisk(const node::config::NodeConfig& config);
// Across the node's partitions: guarantee fractions sum to at most 1 (path "partitions").
std::vector<ConfigProblem> ValidateGuaranteeSum(
    const std::vector<node::config::ShareConfig>& shares);

// ---- Live updates: the config each would leave, validated whole ----

// UpdatePartitionFlow: an interceptor given replaces the chain whole; a dispatcher or pool field
// left at 0 keeps its current value (dispatcher.adaptive_weights, when present, replaces the
// block whole, with its defaults); pool.max_tx_bytes cannot change live; lossless (on a lossless
// partition only) sets the drain rate when > 0 and the disk budget when set_disk_budget. Paths are
// under PartitionPath(current.name()).
absl::StatusOr<node::config::PartitionConfig> ApplyFlowUpdate(
    const node::config::PartitionConfig& current,
    const node::admin::UpdatePartitionFlowRequest& request);

// The share an UpdateArbiter entry sets: the entry's share whole, a ceiling of 0 read as 1 (as
// ApplyDefaults does). Check it with ValidateShareConfig, and the sum with ValidateGuaranteeSum.
node::config::ShareConfig ShareFromUpdate(const node::config::ShareConfig& share);

// UpdateEgress: the cap when set_cap, the floor when > 0; the rest of `current` is kept.
absl::StatusOr<node::config::ResourceConfig> ApplyEgressUpdate(
    const node::config::ResourceConfig& current, const node::admin::UpdateEgressRequest& request);

}  // namespace runtime

#endif  // RUNTIME_CONFIG_VALIDATION_H_
