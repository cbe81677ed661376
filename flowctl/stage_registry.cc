#include "flowctl/stage_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flowctl/adaptive_stage.h"
#include "glog/logging.h"

namespace flowctl {

using node::flowctl::StageChainConfig;
using node::flowctl::StageConfig;

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

absl::Status StageRegistry::RegisterPredicate(std::string name, GatePredicate predicate) {
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
  it->second = std::make_shared<const GatePredicate>(std::move(predicate));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StageFactory>> StageRegistry::BuildStage(
    const StageConfig& config, const std::string& name, const std::string& field) const {
  switch (config.kind_case()) {
    case StageConfig::kConcurrency:
      return MakeConcurrencyFactory(name, config.concurrency(), field);
    case StageConfig::kRate:
      return MakeRateFactory(name, config.rate(), field);
    case StageConfig::kGate: {
      std::shared_ptr<const GatePredicate> predicate;
      std::vector<std::string> known;
      {
        absl::MutexLock lock(&mu_);
        auto it = predicates_.find(config.gate().predicate());
        if (it != predicates_.end()) predicate = it->second;
        for (const auto& [known_name, unused] : predicates_) known.push_back(known_name);
      }
      std::sort(known.begin(), known.end());
      return MakeGateFactory(name, config.gate(), std::move(predicate),
                             known.empty() ? "none" : absl::StrJoin(known, ", "), field);
    }
    case StageConfig::kAdaptive:
      return MakeAdaptiveFactory(name, config.adaptive(), field);
    case StageConfig::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ".kind: no stage kind set (one of concurrency, rate, gate, adaptive)"));
}

absl::StatusOr<std::shared_ptr<const ChainFactory>> StageRegistry::Build(
    const StageChainConfig& config) const {
  std::vector<std::unique_ptr<StageFactory>> stages;
  absl::flat_hash_map<std::string, int> seen;  // name -> index of the stage using it
  int adaptive_at = -1;  // the adaptive stage, if any: at most one receives commit feedback
  for (int i = 0; i < config.stages_size(); ++i) {
    const StageConfig& stage = config.stages(i);
    const std::string field = absl::StrCat("stages[", i, "]");
    std::string name = stage.name();
    if (name.empty()) {
      switch (stage.kind_case()) {
        case StageConfig::kConcurrency:
          name = std::string(kConcurrencyKind);
          break;
        case StageConfig::kRate:
          name = std::string(kRateKind);
          break;
        case StageConfig::kGate:
          name = std::string(kGateKind);
          break;
        case StageConfig::kAdaptive:
          name = std::string(kAdaptiveKind);
          break;
        case StageConfig::KIND_NOT_SET:
          break;
      }
    }
    auto factory = BuildStage(stage, name, field);
    if (!factory.ok()) return factory.status();
    if (stage.kind_case() == StageConfig::kAdaptive) {
      if (adaptive_at >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".adaptive: at most one adaptive stage per chain (also stages[",
                         adaptive_at, "]): the partition reports commits to one limiter"));
      }
      adaptive_at = i;
    }
    auto [it, inserted] = seen.try_emplace(name, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name: duplicate stage name '", name,
                                                     "' (also stages[", it->second,
                                                     "]); give stages of one kind distinct names"));
    }
    stages.push_back(*std::move(factory));
  }
  return std::make_shared<const ChainFactory>(std::move(stages));
}

}  // namespace flowctl
