// StageRegistry: the stage kinds a node knows, and the builder of interceptor chains from
// proto/flowctl.proto, validated whole.
//
// A kind is a name, a config message type and a builder that turns one validated config into a
// StageFactory. The built-in kinds (concurrency, rate, gate, adaptive) are registered by the
// constructor through the same RegisterKind a plug-in uses. A stage's config names its kind in
// one of two ways, both resolved by lookup, never by a switch:
//   - a typed field of StageConfig's `kind` oneof (`rate { ... }`): the kind is the field's name;
//   - `custom`, a google.protobuf.Any: the kind is the one registered with the Any's type, e.g.
//     `custom { [type.googleapis.com/acme.ShedConfig] { every_nth: 3 } }`.
//
// Build(StageChainConfig) validates every stage and returns a ChainFactory (or an
// InvalidArgument naming the first bad field, e.g. "stages[1].gate.predicate: unknown predicate
// 'foo' (registered: consensus_normal)" or "stages[2].custom: no stage kind is registered for
// config type 'acme.Nope' (registered: ...)"). A ChainFactory is immutable and shared by all
// partitions; Create() makes one partition's chain (cheap: one small object per stage).
//
// Live update, refused whole on error: Build() the new config first (nothing changes if it fails),
// then ApplyTo() each partition's StageChainHolder. ApplyTo() builds the new chain from the current
// one, keeping the state (in-flight count, bucket balance, adaptive tickets, counters) of every
// stage whose name and kind match, with the new parameters, and swaps it in atomically. Stages
// absent from the new config simply drop out once the requests holding the old chain finish.
//
// Thread-safety: all methods are thread-safe. Register kinds and predicates before building chains
// that name them; neither can be unregistered (built chains hold them).
//
//   flowctl::StageRegistry registry;  // built-in kinds registered
//   RETURN_IF_ERROR(registry.RegisterPredicate("consensus_normal", RejectKind::kUnavailable,
//                                              IsNormal));
//   RETURN_IF_ERROR(registry.RegisterKind<acme::ShedConfig>("shed", BuildShed));
//   ASSIGN_OR_RETURN(auto factory, registry.Build(config));
//   flowctl::StageChainHolder chain(factory->Create({.partition = 0}));
//   ...
//   ASSIGN_OR_RETURN(auto updated, registry.Build(new_config));  // refused whole on error
//   updated->ApplyTo(chain);
#ifndef FLOWCTL_STAGE_REGISTRY_H_
#define FLOWCTL_STAGE_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/builtin_stages.h"
#include "flowctl/stage.h"
#include "flowctl/stage_chain.h"
#include "google/protobuf/message.h"
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

// What a kind's builder is told about the stage it builds.
struct StageSpec {
  std::string name;          // the stage's name (the config's, or the kind name by default)
  std::string stage_field;   // path of the StageConfig, e.g. "stages[2]"
  std::string config_field;  // path of the kind's config, e.g. "stages[2].rate", "stages[2].custom"
};

// Validates one stage's config and makes its factory, or returns InvalidArgument naming the bad
// option under spec.config_field. `config` is a message of the type the kind was registered with.
// The factory's name() and kind() must be spec.name and the registered kind. Called from any
// thread, with no registry lock held (it may call FindPredicate).
using StageKindBuilder = std::function<absl::StatusOr<std::unique_ptr<StageFactory>>(
    const StageSpec& spec, const google::protobuf::Message& config)>;

struct StageKindOptions {
  // At most this many stages of the kind per chain; 0 for no bound.
  int max_per_chain = 0;
  // Why the bound exists, appended to the error, e.g. "it follows every admitted tx".
  std::string max_per_chain_reason;
};

class StageRegistry {
 public:
  // Registers the built-in kinds (concurrency, rate, gate, adaptive).
  StageRegistry();
  StageRegistry(const StageRegistry&) = delete;
  StageRegistry& operator=(const StageRegistry&) = delete;

  // Makes stage kind `kind` available, configured by messages of `config_prototype`'s type: as
  // the StageConfig oneof field of the same name if there is one (its type must match), and as a
  // `custom` Any of that type. InvalidArgument for an empty or reserved ("custom") kind name, an
  // empty builder, or a oneof field of that name with another type; AlreadyExists if the kind or
  // the config type is taken (an Any must name exactly one kind). `config_prototype` must outlive
  // the registry (a generated default instance does).
  absl::Status RegisterKind(std::string kind, const google::protobuf::Message& config_prototype,
                            StageKindBuilder builder, StageKindOptions options = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // Typed form: `builder` takes the generated message.
  //   registry.RegisterKind<acme::ShedConfig>(
  //       "shed", [](const StageSpec& spec, const acme::ShedConfig& c) { ... });
  template <typename Config>
  absl::Status RegisterKind(
      std::string kind,
      std::function<absl::StatusOr<std::unique_ptr<StageFactory>>(const StageSpec&, const Config&)>
          builder,
      StageKindOptions options = {}) {
    if (!builder) return RegisterKind(std::move(kind), Config::default_instance(), nullptr);
    return RegisterKind(
        std::move(kind), Config::default_instance(),
        [builder = std::move(builder)](const StageSpec& spec,
                                       const google::protobuf::Message& config) {
          // The registry passes only messages made from Config's default instance.
          return builder(spec, static_cast<const Config&>(config));
        },
        std::move(options));
  }

  // Makes `predicate` available to gate stages as `name`; a gate refusing on it rejects as
  // `rejects_as` (e.g. "consensus_normal" -> kUnavailable), with `retry_hint` as its retry-after
  // where the gate gives none of its own. InvalidArgument for an empty name or
  // predicate, AlreadyExists if the name is taken.
  absl::Status RegisterPredicate(std::string name, RejectKind rejects_as, GatePredicate predicate,
                                 GateRetryHint retry_hint = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // The predicate registered as `name`, or null.
  std::shared_ptr<const RegisteredPredicate> FindPredicate(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The registered predicate names, sorted and comma-separated; "none" if there are none.
  std::string PredicateNames() const ABSL_LOCKS_EXCLUDED(mu_);
  // The registered kind names, sorted.
  std::vector<std::string> KindNames() const ABSL_LOCKS_EXCLUDED(mu_);

  // Validates the whole config and makes its factory; InvalidArgument naming the field otherwise.
  absl::StatusOr<std::shared_ptr<const ChainFactory>> Build(
      const node::flowctl::StageChainConfig& config) const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Validate(const node::flowctl::StageChainConfig& config) const {
    return Build(config).status();
  }

 private:
  struct Kind {
    std::string name;
    const google::protobuf::Message* prototype;  // the config type; not owned
    StageKindBuilder builder;
    StageKindOptions options;
  };
  // One stage's kind and its config (unpacked from `custom` when it is an Any).
  struct ResolvedStage {
    std::shared_ptr<const Kind> kind;
    std::string config_field;
    const google::protobuf::Message* config = nullptr;    // points into the StageConfig, or
    std::unique_ptr<google::protobuf::Message> unpacked;  // owns the unpacked Any
  };

  absl::StatusOr<ResolvedStage> Resolve(const node::flowctl::StageConfig& config,
                                        const std::string& field) const ABSL_LOCKS_EXCLUDED(mu_);
  std::string KindListLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Kind>> kinds_ ABSL_GUARDED_BY(mu_);
  // Config message full name -> kind, for `custom`.
  absl::flat_hash_map<std::string, std::shared_ptr<const Kind>> kinds_by_type_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<const RegisteredPredicate>> predicates_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace flowctl

#endif  // FLOWCTL_STAGE_REGISTRY_H_
