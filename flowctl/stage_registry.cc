#include "flowctl/stage_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flowctl/adaptive_stage.h"
#include "glog/logging.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/descriptor.h"

namespace flowctl {
namespace {

using node::flowctl::StageChainConfig;
using node::flowctl::StageConfig;

// The StageConfig field holding a plug-in's config as a google.protobuf.Any.
constexpr absl::string_view kCustomField = "custom";

const google::protobuf::OneofDescriptor* KindOneof() {
  const google::protobuf::OneofDescriptor* oneof =
      StageConfig::descriptor()->FindOneofByName("kind");
  CHECK(oneof != nullptr) << "proto/flowctl.proto: StageConfig has no oneof `kind`";
  return oneof;
}

// "concurrency, rate, gate, adaptive, custom": the oneof's fields in declaration order.
std::string OneofFieldNames() {
  const google::protobuf::OneofDescriptor* oneof = KindOneof();
  std::vector<std::string> names;
  for (int i = 0; i < oneof->field_count(); ++i) names.push_back(oneof->field(i)->name());
  return absl::StrJoin(names, ", ");
}

// "type.googleapis.com/acme.ShedConfig" -> "acme.ShedConfig".
absl::string_view TypeNameOfUrl(absl::string_view url) {
  const size_t slash = url.rfind('/');
  return slash == absl::string_view::npos ? absl::string_view() : url.substr(slash + 1);
}

// The built-in kinds, registered as any plug-in would be.
absl::Status RegisterBuiltinKinds(StageRegistry& registry) {
  using BuildResult = absl::StatusOr<std::unique_ptr<StageFactory>>;
  absl::Status s = registry.RegisterKind<node::flowctl::ConcurrencyStageConfig>(
      std::string(kConcurrencyKind),
      [](const StageSpec& spec, const node::flowctl::ConcurrencyStageConfig& c) -> BuildResult {
        return MakeConcurrencyFactory(spec.name, c, spec.stage_field);
      });
  if (!s.ok()) return s;
  s = registry.RegisterKind<node::flowctl::RateStageConfig>(
      std::string(kRateKind),
      [](const StageSpec& spec, const node::flowctl::RateStageConfig& c) -> BuildResult {
        return MakeRateFactory(spec.name, c, spec.stage_field);
      });
  if (!s.ok()) return s;
  // The registry outlives every Build() it runs, so the builder may look predicates up in it.
  const StageRegistry* predicates = &registry;
  s = registry.RegisterKind<node::flowctl::GateStageConfig>(
      std::string(kGateKind),
      [predicates](const StageSpec& spec, const node::flowctl::GateStageConfig& c) -> BuildResult {
        return MakeGateFactory(spec.name, c, predicates->FindPredicate(c.predicate()),
                               predicates->PredicateNames(), spec.stage_field);
      });
  if (!s.ok()) return s;
  return registry.RegisterKind<node::flowctl::AdaptiveStageConfig>(
      std::string(kAdaptiveKind),
      [](const StageSpec& spec, const node::flowctl::AdaptiveStageConfig& c) -> BuildResult {
        return MakeAdaptiveFactory(spec.name, c, spec.stage_field);
      },
      StageKindOptions{.max_per_chain = 1,
                       .max_per_chain_reason = "each follows every admitted tx"});
}

}  // namespace

ChainFactory::ChainFactory(std::vector<std::unique_ptr<StageFactory>> stages)
    : stages_(std::move(stages)) {}

std::shared_ptr<const StageChain> ChainFactory::Create(const StageContext& context) const {
  std::vector<StageChain::Link> links;
  links.reserve(stages_.size());
  for (const std::unique_ptr<StageFactory>& factory : stages_) {
    links.push_back({factory->Create(context), std::make_shared<StageCounters>()});
  }
  return std::make_shared<const StageChain>(context, std::move(links));
}

std::shared_ptr<const StageChain> ChainFactory::CreateFrom(const StageChain& previous) const {
  std::vector<StageChain::Link> links;
  links.reserve(stages_.size());
  for (const std::unique_ptr<StageFactory>& factory : stages_) {
    const StageChain::Link* old = previous.Find(factory->name());
    if (old == nullptr || old->stage->kind() != factory->kind()) {
      links.push_back({factory->Create(previous.context()), std::make_shared<StageCounters>()});
    } else if (factory->UpdateInPlace(*old->stage)) {
      links.push_back(*old);
    } else {
      // Stateless kind: a new instance, but the counters carry on.
      links.push_back({factory->Create(previous.context()), old->counters});
    }
  }
  return std::make_shared<const StageChain>(previous.context(), std::move(links));
}

void ChainFactory::ApplyTo(StageChainHolder& holder) const {
  holder.Update([this](const StageChain& current) { return CreateFrom(current); });
}

StageRegistry::StageRegistry() {
  const absl::Status s = RegisterBuiltinKinds(*this);
  CHECK(s.ok()) << s;
}

absl::Status StageRegistry::RegisterKind(std::string kind,
                                         const google::protobuf::Message& config_prototype,
                                         StageKindBuilder builder, StageKindOptions options) {
  if (kind.empty()) return absl::InvalidArgumentError("stage kind: name must not be empty");
  if (kind == kCustomField) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage kind '", kind, "': reserved (the field that holds plug-in configs)"));
  }
  if (!builder) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage kind '", kind, "': builder must not be empty"));
  }
  const google::protobuf::Descriptor* type = config_prototype.GetDescriptor();
  if (const google::protobuf::FieldDescriptor* field =
          StageConfig::descriptor()->FindFieldByName(kind);
      field != nullptr) {
    if (field->containing_oneof() != KindOneof() || field->message_type() != type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage kind '", kind, "': StageConfig field '", kind, "' is not a `kind` of type ",
          type->full_name(), "; choose another kind name"));
    }
  }
  auto entry = std::make_shared<Kind>(Kind{.name = kind,
                                           .prototype = &config_prototype,
                                           .builder = std::move(builder),
                                           .options = std::move(options)});
  absl::MutexLock lock(&mu_);
  if (kinds_.contains(kind)) {
    return absl::AlreadyExistsError(absl::StrCat("stage kind '", kind, "' is already registered"));
  }
  if (auto it = kinds_by_type_.find(type->full_name()); it != kinds_by_type_.end()) {
    return absl::AlreadyExistsError(absl::StrCat("stage kind '", kind, "': config type ",
                                                 type->full_name(), " already configures kind '",
                                                 it->second->name, "'"));
  }
  kinds_by_type_.emplace(type->full_name(), entry);
  kinds_.emplace(std::move(kind), std::move(entry));
  return absl::OkStatus();
}

absl::Status StageRegistry::RegisterPredicate(std::string name, RejectKind rejects_as,
                                              GatePredicate predicate, GateRetryHint retry_hint) {
  if (name.empty()) return absl::InvalidArgumentError("gate predicate: name must not be empty");
  if (!predicate) {
    return absl::InvalidArgumentError(
        absl::StrCat("gate predicate '", name, "': function must not be empty"));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = predicates_.try_emplace(name, nullptr);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("gate predicate '", name, "' is already registered"));
  }
  it->second = std::make_shared<const RegisteredPredicate>(
      RegisteredPredicate{.predicate = std::move(predicate),
                          .rejects_as = rejects_as,
                          .retry_hint = std::move(retry_hint)});
  return absl::OkStatus();
}

std::shared_ptr<const RegisteredPredicate> StageRegistry::FindPredicate(
    absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = predicates_.find(name);
  return it == predicates_.end() ? nullptr : it->second;
}

std::string StageRegistry::PredicateNames() const {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, unused] : predicates_) names.push_back(name);
  }
  if (names.empty()) return "none";
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

std::vector<std::string> StageRegistry::KindNames() const {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, unused] : kinds_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string StageRegistry::KindListLocked() const {
  std::vector<std::string> names;
  for (const auto& [type, kind] : kinds_by_type_) {
    names.push_back(absl::StrCat(kind->name, " (", type, ")"));
  }
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<StageRegistry::ResolvedStage> StageRegistry::Resolve(
    const StageConfig& config, const std::string& field) const {
  const google::protobuf::FieldDescriptor* set =
      config.GetReflection()->GetOneofFieldDescriptor(config, KindOneof());
  if (set == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".kind: no stage kind set (one of ", OneofFieldNames(), ")"));
  }
  ResolvedStage resolved;
  resolved.config_field = absl::StrCat(field, ".", set->name());
  if (set->name() != kCustomField) {
    absl::MutexLock lock(&mu_);
    auto it = kinds_.find(set->name());
    if (it == kinds_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(resolved.config_field, ": no stage kind '", set->name(),
                       "' is registered with this node (registered: ", KindListLocked(), ")"));
    }
    resolved.kind = it->second;
    resolved.config = &config.GetReflection()->GetMessage(config, set);
    return resolved;
  }
  const google::protobuf::Any& any = config.custom();
  const absl::string_view type_name = TypeNameOfUrl(any.type_url());
  if (type_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(resolved.config_field,
                     ": type_url must name the config type of a registered stage kind, "
                     "got '",
                     any.type_url(), "'"));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = kinds_by_type_.find(type_name);
    if (it == kinds_by_type_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(resolved.config_field, ": no stage kind is registered for config type '",
                       type_name, "' (registered: ", KindListLocked(), ")"));
    }
    resolved.kind = it->second;
  }
  resolved.unpacked.reset(resolved.kind->prototype->New());
  if (!any.UnpackTo(resolved.unpacked.get())) {
    return absl::InvalidArgumentError(
        absl::StrCat(resolved.config_field, ": cannot parse the value as ", type_name));
  }
  resolved.config = resolved.unpacked.get();
  return resolved;
}

absl::StatusOr<std::shared_ptr<const ChainFactory>> StageRegistry::Build(
    const StageChainConfig& config) const {
  std::vector<std::unique_ptr<StageFactory>> stages;
  absl::flat_hash_map<std::string, int> seen;  // name -> index of the stage using it
  absl::flat_hash_map<std::string, std::vector<int>> of_kind;  // kind -> indexes
  for (int i = 0; i < config.stages_size(); ++i) {
    const StageConfig& stage = config.stages(i);
    const std::string field = absl::StrCat("stages[", i, "]");
    absl::StatusOr<ResolvedStage> resolved = Resolve(stage, field);
    if (!resolved.ok()) return resolved.status();
    const Kind& kind = *resolved->kind;
    StageSpec spec{.name = stage.name().empty() ? kind.name : stage.name(),
                   .stage_field = field,
                   .config_field = resolved->config_field};
    absl::StatusOr<std::unique_ptr<StageFactory>> factory = kind.builder(spec, *resolved->config);
    if (!factory.ok()) return factory.status();
    if (*factory == nullptr || (*factory)->name() != spec.name || (*factory)->kind() != kind.name) {
      return absl::InternalError(
          absl::StrCat(resolved->config_field, ": the builder of stage kind '", kind.name,
                       "' made a factory that is null or does not report name '", spec.name,
                       "' and kind '", kind.name, "'"));
    }
    std::vector<int>& same_kind = of_kind[kind.name];
    if (const int max = kind.options.max_per_chain;
        max > 0 && static_cast<int>(same_kind.size()) >= max) {
      const std::string also = absl::StrJoin(same_kind, ", ", [](std::string* out, int at) {
        absl::StrAppend(out, "stages[", at, "]");
      });
      return absl::InvalidArgumentError(
          absl::StrCat(resolved->config_field, ": at most ", max == 1 ? "one" : absl::StrCat(max),
                       " ", kind.name, " stage", max == 1 ? "" : "s", " per chain (also ", also,
                       ")", kind.options.max_per_chain_reason.empty() ? "" : ": ",
                       kind.options.max_per_chain_reason));
    }
    same_kind.push_back(i);
    auto [it, inserted] = seen.try_emplace(spec.name, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name: duplicate stage name '",
                                                     spec.name, "' (also stages[", it->second,
                                                     "]); give stages of one kind distinct names"));
    }
    stages.push_back(*std::move(factory));
  }
  return std::make_shared<const ChainFactory>(std::move(stages));
}

}  // namespace flowctl
