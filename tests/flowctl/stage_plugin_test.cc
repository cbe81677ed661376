// Stage kinds as plug-ins: a kind that exists only in this test (`shed`, configured by
// tests/flowctl/test_stage_config.proto) is registered with a StageRegistry, configured through
// StageConfig.custom (a google.protobuf.Any) in text format, built, exercised and updated live,
// with no edit to flowctl/ or proto/flowctl.proto. Also: the errors of registration and of
// custom configs, which name the field.
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "flowctl/stage.h"
#include "flowctl/stage_chain.h"
#include "flowctl/stage_registry.h"
#include "gmock/gmock.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"
#include "tests/flowctl/test_stage_config.pb.h"
#include "tests/mocks/fake_clock.h"

namespace flowctl {
namespace {

using ::node::flowctl::StageChainConfig;
using ::node::flowctl::test::ShedStageConfig;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::string_view kShedKind = "shed";

// Rejects every nth request. Its count survives a live update (UpdateInPlace).
class ShedStage final : public Stage {
 public:
  ShedStage(std::string name, uint32_t every_nth, RejectKind kind)
      : name_(std::move(name)), every_nth_(every_nth), kind_(kind) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kShedKind; }
  Decision Check(const RequestMeta&, HoldList&) override {
    const uint64_t n = seen_.fetch_add(1) + 1;
    if (n % every_nth_.load() != 0) return Decision::Admit();
    return Decision::Reject(name_, kind_.load(), "shed by test plug-in", absl::Milliseconds(3));
  }
  void AppendGauges(std::vector<StageGauge>& gauges) const override {
    gauges.push_back({"seen", static_cast<double>(seen_.load())});
  }
  RequestLifecycle* lifecycle() override { return nullptr; }

  void Set(uint32_t every_nth, RejectKind kind) {
    every_nth_.store(every_nth);
    kind_.store(kind);
  }

 private:
  const std::string name_;
  std::atomic<uint64_t> seen_{0};
  std::atomic<uint32_t> every_nth_;
  std::atomic<RejectKind> kind_;
};

class ShedFactory final : public StageFactory {
 public:
  ShedFactory(std::string name, uint32_t every_nth, RejectKind kind)
      : name_(std::move(name)), every_nth_(every_nth), kind_(kind) {}

  absl::string_view name() const override { return name_; }
  absl::string_view kind() const override { return kShedKind; }
  std::shared_ptr<Stage> Create(const StageContext&) const override {
    return std::make_shared<ShedStage>(name_, every_nth_, kind_);
  }
  bool UpdateInPlace(Stage& existing) const override {
    auto* stage = dynamic_cast<ShedStage*>(&existing);
    if (stage == nullptr) return false;
    stage->Set(every_nth_, kind_);
    return true;
  }

 private:
  const std::string name_;
  const uint32_t every_nth_;
  const RejectKind kind_;
};

absl::StatusOr<std::unique_ptr<StageFactory>> BuildShed(const StageSpec& spec,
                                                        const ShedStageConfig& config) {
  if (config.every_nth() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.config_field, ".every_nth: must be >= 1, got ", config.every_nth()));
  }
  return std::make_unique<ShedFactory>(
      spec.name, config.every_nth(),
      config.reject_as_invalid() ? RejectKind::kInvalid : RejectKind::kOverloaded);
}

StageChainConfig Parse(const std::string& text) {
  StageChainConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

class StagePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.RegisterKind<ShedStageConfig>(std::string(kShedKind), BuildShed).ok());
  }

  tests::FakeClock clock_;
  StageRegistry registry_;
};

TEST_F(StagePluginTest, BuiltInKindsAreRegisteredLikePlugIns) {
  EXPECT_THAT(registry_.KindNames(),
              ElementsAre("adaptive", "concurrency", "gate", "rate", "shed"));
  StageRegistry fresh;
  EXPECT_THAT(fresh.KindNames(), ElementsAre("adaptive", "concurrency", "gate", "rate"));
}

TEST_F(StagePluginTest, APlugInKindIsConfiguredThroughAnyAndBuilt) {
  absl::StatusOr<std::shared_ptr<const ChainFactory>> factory = registry_.Build(Parse(R"pb(
    stages { concurrency { max_in_flight: 10 } }
    stages {
      custom {
        [type.googleapis.com/node.flowctl.test.ShedStageConfig] { every_nth: 3 }
      }
    }
  )pb"));
  ASSERT_TRUE(factory.ok()) << factory.status();
  StageChainHolder holder((*factory)->Create({.partition = 2, .clock = &clock_}));
  std::vector<std::string> stages;
  for (const StageChain::Link& link : holder.Get()->links()) {
    stages.push_back(absl::StrCat(link.stage->name(), "/", link.stage->kind()));
  }
  EXPECT_THAT(stages, ElementsAre("concurrency/concurrency", "shed/shed"));  // default name

  std::vector<bool> admitted;
  for (int i = 0; i < 6; ++i) admitted.push_back(holder.Admit({.partition = 2}).admitted());
  EXPECT_THAT(admitted, ElementsAre(true, true, false, true, true, false));
  Admission shed = holder.Admit({.partition = 2});
  shed = holder.Admit({.partition = 2});
  shed = holder.Admit({.partition = 2});
  ASSERT_FALSE(shed.admitted());
  EXPECT_EQ(shed.decision().stage(), "shed");
  EXPECT_EQ(shed.decision().reject_kind(), RejectKind::kOverloaded);
  EXPECT_EQ(shed.decision().ToStatus().code(), absl::StatusCode::kResourceExhausted);

  // Live update through the same Any: the stage object (and its count) is kept.
  absl::StatusOr<std::shared_ptr<const ChainFactory>> updated = registry_.Build(Parse(R"pb(
    stages { concurrency { max_in_flight: 10 } }
    stages {
      custom {
        [type.googleapis.com/node.flowctl.test.ShedStageConfig] {
          every_nth: 2
          reject_as_invalid: true
        }
      }
    }
  )pb"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  const Stage* before = holder.Get()->Find("shed")->stage.get();
  (*updated)->ApplyTo(holder);
  EXPECT_EQ(holder.Get()->Find("shed")->stage.get(), before);
  Admission tenth = holder.Admit({.partition = 2});  // the 10th request: even
  ASSERT_FALSE(tenth.admitted());
  EXPECT_EQ(tenth.decision().ToStatus().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<StageStats> stats = holder.Get()->Stats();
  ASSERT_EQ(stats[1].gauges.size(), 1u);
  EXPECT_EQ(stats[1].gauges[0].value, 10);
}

TEST_F(StagePluginTest, AnAnyMadeInCodeBuildsToo) {
  ShedStageConfig shed;
  shed.set_every_nth(1);
  StageChainConfig config;
  node::flowctl::StageConfig* stage = config.add_stages();
  stage->set_name("closed");
  stage->mutable_custom()->PackFrom(shed);
  absl::StatusOr<std::shared_ptr<const ChainFactory>> factory = registry_.Build(config);
  ASSERT_TRUE(factory.ok()) << factory.status();
  Admission a = Admit((*factory)->Create({.clock = &clock_}), {});
  ASSERT_FALSE(a.admitted());
  EXPECT_EQ(a.decision().stage(), "closed");
}

TEST_F(StagePluginTest, CustomConfigErrorsNameTheField) {
  struct Case {
    std::string config;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"pb(stages { rate { unlimited: true } }
            stages { concurrency { max_in_flight: 1 } }
            stages {
              custom {
                [type.googleapis.com/google.protobuf.UInt32Value] { value: 1 }
              }
            })pb",
       "stages[2].custom: no stage kind is registered for config type "
       "'google.protobuf.UInt32Value' (registered: adaptive (node.flowctl.AdaptiveStageConfig)"},
      {R"pb(stages { custom { type_url: "nonsense" } })pb",
       "stages[0].custom: type_url must name the config type of a registered stage kind, "
       "got 'nonsense'"},
      {R"pb(stages {
              custom {
                type_url: "type.googleapis.com/node.flowctl.test.ShedStageConfig"
                value: "\377\377"
              }
            })pb",
       "stages[0].custom: cannot parse the value as node.flowctl.test.ShedStageConfig"},
      {R"pb(stages {
              custom {
                [type.googleapis.com/node.flowctl.test.ShedStageConfig] {}
              }
            })pb",
       "stages[0].custom.every_nth: must be >= 1, got 0"},
      {R"pb(stages {
              custom {
                [type.googleapis.com/node.flowctl.test.ShedStageConfig] { every_nth: 1 }
              }
            }
            stages {
              custom {
                [type.googleapis.com/node.flowctl.test.ShedStageConfig] { every_nth: 2 }
              }
            })pb",
       "stages[1].name: duplicate stage name 'shed' (also stages[0])"},
  };
  for (const Case& c : cases) {
    absl::Status s = registry_.Validate(Parse(c.config));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.config;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.config;
  }
}

TEST_F(StagePluginTest, RegistrationErrors) {
  using Builder = std::function<absl::StatusOr<std::unique_ptr<StageFactory>>(
      const StageSpec&, const google::protobuf::UInt32Value&)>;
  Builder never =
      [](const StageSpec&,
         const google::protobuf::UInt32Value&) -> absl::StatusOr<std::unique_ptr<StageFactory>> {
    return absl::UnimplementedError("not built in this test");
  };
  // Taken kind name, taken config type (an Any must name one kind).
  EXPECT_EQ(registry_.RegisterKind<google::protobuf::UInt32Value>("shed", never).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry_.RegisterKind<ShedStageConfig>("shed2", BuildShed).code(),
            absl::StatusCode::kAlreadyExists);
  // Empty or reserved names, an empty builder.
  EXPECT_EQ(registry_.RegisterKind<google::protobuf::UInt32Value>("", never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.RegisterKind<google::protobuf::UInt32Value>("custom", never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.RegisterKind<google::protobuf::UInt32Value>("u32", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // A StageConfig field of that name with another type.
  absl::Status clash = registry_.RegisterKind<google::protobuf::UInt32Value>("name", never);
  EXPECT_EQ(clash.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(clash.message()), HasSubstr("choose another kind name"));
  // A builder that fails: its status comes back from Build.
  ASSERT_TRUE(registry_.RegisterKind<google::protobuf::UInt32Value>("u32", never).ok());
  EXPECT_EQ(registry_
                .Validate(Parse(R"pb(stages {
                                       custom {
                                         [type.googleapis.com/google.protobuf.UInt32Value] {}
                                       }
                                     })pb"))
                .code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace flowctl
