// StageRegistry: builds interceptor chains from proto/flowctl.proto, validating them whole.
//
// Build(StageChainConfig) validates every stage and returns a ChainFactory (or an
// InvalidArgument naming the first bad field, e.g. "stages[1].gate.predicate: unknown predicate
// 'foo' (registered: consensus_normal)"). A ChainFactory is immutable and shared by all
// partitions; Create() makes one partition's chain (cheap: one small object per stage).
//
// Live update, refused whole on error: Build() the new config first (nothing changes if it fails),
// then ApplyTo() each partition's StageChainHolder. ApplyTo() builds the new chain from the current
// one, keeping the state (in-flight count, bucket balance, counters) of every stage whose name and
// kind match, with the new parameters, and swaps it in atomically. Stages with changed parameters
// take them a moment before the swap; stages absent from the new config simply drop out once the
// requests holding the old chain finish.
//
// Thread-safety: all methods are thread-safe. Register predicates before building chains that
// name them; a predicate cannot be unregistered (built chains hold it).
//
//   flowctl::StageRegistry registry;
//   RETURN_IF_ERROR(registry.RegisterPredicate("consensus_normal", IsNormal));
//   ASSIGN_OR_RETURN(auto factory, registry.Build(config));
//   flowctl::StageChainHolder chain(factory->Create({.partition = 0}));
//   ...
//   ASSIGN_OR_RETURN(auto updated, registry.Build(new_config));  // refused whole on error
//   updated->ApplyTo(chain);
#ifndef FLOWCTL_STAGE_REGISTRY_H_
#define FLOWCTL_STAGE_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/builtin_stages.h"
#include "flowctl/stage.h"
#include "flowctl/stage_chain.h"
#include "proto/flowctl.pb.h"

namespace flowctl {

// A validated StageChainConfig: one StageFactory per stage, in order. Immutable, thread-safe.
class ChainFactory {
 public:
  explicit ChainFactory(std::vector<std::unique_ptr<StageFactory>> stages);

  // A new chain with fresh state for one partition.
  std::shared_ptr<const StageChain> Create(const StageContext& context) const;

  // A new chain for the same partition as `previous`, reusing the links (state and counters) of
  // its stages with the same name and kind, updated to this factory's parameters.
  std::shared_ptr<const StageChain> CreateFrom(const StageChain& previous) const;

  // Replaces the holder's chain by CreateFrom(its current chain), atomically.
  void ApplyTo(StageChainHolder& holder) const;

  size_t size() const { return stages_.size(); }

 private:
  const std::vector<std::unique_ptr<StageFactory>> stages_;
};

class StageRegistry {
 public:
  StageRegistry() = default;
  StageRegistry(const StageRegistry&) = delete;
  StageRegistry& operator=(const StageRegistry&) = delete;

  // Makes `predicate` available to gate stages as `name`. InvalidArgument for an empty name or
  // predicate, AlreadyExists if the name is taken.
  absl::Status RegisterPredicate(std::string name, GatePredicate predicate)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Validates the whole config and makes its factory; InvalidArgument naming the field otherwise.
  absl::StatusOr<std::shared_ptr<const ChainFactory>> Build(
      const node::flowctl::StageChainConfig& config) const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Validate(const node::flowctl::StageChainConfig& config) const {
    return Build(config).status();
  }

 private:
  absl::StatusOr<std::unique_ptr<StageFactory>> BuildStage(const node::flowctl::StageConfig& config,
                                                           const std::string& name,
                                                           const std::string& field) const
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const GatePredicate>> predicates_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_STAGE_REGISTRY_H_
