// The live-partition record (runtime/partition_registry.h): how it is written and read, and how
// it is applied over the config file's partitions at startup.
#include "runtime/partition_registry.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/config.pb.h"

namespace runtime {
namespace {

using node::config::LivePartitions;
using node::config::NodeConfig;
using node::config::PartitionConfig;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

PartitionConfig Part(uint32_t id, const std::string& name) {
  PartitionConfig p;
  p.set_id(id);
  p.set_name(name);
  return p;
}

NodeConfig FileWith(std::initializer_list<PartitionConfig> parts) {
  NodeConfig c;
  for (const PartitionConfig& p : parts) *c.add_partitions() = p;
  return c;
}

class PartitionRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/partition_registry_test_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(PartitionRegistryTest, MissingRecordIsEmptyAndAWrittenOneReadsBack) {
  const std::string path = LivePartitionsPath(dir_);
  absl::StatusOr<LivePartitions> empty = ReadLivePartitions(path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->created_size(), 0);

  LivePartitions live;
  *live.add_created() = Part(7, "orders");
  live.add_stopped(7);
  live.add_removed(2);
  ASSERT_TRUE(WriteLivePartitions(path, live).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  absl::StatusOr<LivePartitions> read = ReadLivePartitions(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->created(0).name(), "orders");
  EXPECT_THAT(read->stopped(), ElementsAre(7u));
  EXPECT_THAT(read->removed(), ElementsAre(2u));
}

TEST_F(PartitionRegistryTest, AnUnreadableRecordIsAnErrorNamingTheFile) {
  const std::string path = LivePartitionsPath(dir_);
  std::ofstream(path) << "created { id: \"seven\" }\n";
  absl::StatusOr<LivePartitions> read = ReadLivePartitions(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(path));
}

TEST_F(PartitionRegistryTest, WriteIntoAMissingDirectoryFailsNamingIt) {
  absl::Status s = WriteLivePartitions(dir_ + "/no/such/dir/live.textproto", LivePartitions());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("no/such/dir"));
}

TEST(PlanPartitions, AppliesCreatedStoppedAndRemovedOverTheFile) {
  NodeConfig file = FileWith({Part(1, "alpha"), Part(2, "beta"), Part(3, "gamma")});
  LivePartitions live;
  *live.add_created() = Part(7, "orders");
  live.add_stopped(3);
  live.add_stopped(7);
  live.add_removed(2);
  absl::StatusOr<PartitionPlan> plan = PlanPartitions(file, live, "LIVE");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->partitions.size(), 3u);
  EXPECT_EQ(plan->partitions[0].config.name(), "alpha");
  EXPECT_FALSE(plan->partitions[0].stopped);
  EXPECT_EQ(plan->partitions[1].config.name(), "gamma");
  EXPECT_TRUE(plan->partitions[1].stopped);
  EXPECT_FALSE(plan->partitions[1].created_live);
  EXPECT_EQ(plan->partitions[2].config.name(), "orders");
  EXPECT_TRUE(plan->partitions[2].stopped);
  EXPECT_TRUE(plan->partitions[2].created_live);
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_THAT(plan->warnings[0], HasSubstr("beta"));
  EXPECT_THAT(plan->live.removed(), ElementsAre(2u));
}

TEST(PlanPartitions, ARemovedIdTheFileNoLongerListsIsForgotten) {
  LivePartitions live;
  live.add_removed(2);
  absl::StatusOr<PartitionPlan> plan = PlanPartitions(FileWith({Part(1, "alpha")}), live, "LIVE");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->live.removed_size(), 0);
  EXPECT_TRUE(plan->warnings.empty());
  // So a partition added to the file later under that id runs.
  plan = PlanPartitions(FileWith({Part(1, "alpha"), Part(2, "new")}), plan->live, "LIVE");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->partitions.size(), 2u);
}

TEST(PlanPartitions, AStoppedMarkOfAnIdNoLongerPlannedIsForgotten) {
  LivePartitions live;
  live.add_stopped(5);  // stopped, then taken out of the file
  live.add_stopped(1);
  absl::StatusOr<PartitionPlan> plan = PlanPartitions(FileWith({Part(1, "alpha")}), live, "LIVE");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->live.stopped(), ElementsAre(1u));
  // So a partition the file adds later under id 5 starts.
  plan = PlanPartitions(FileWith({Part(1, "alpha"), Part(5, "late")}), plan->live, "LIVE");
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->partitions.size(), 2u);
  EXPECT_FALSE(plan->partitions[1].stopped);
}

TEST(PlanPartitions, ACreatedPartitionMayReuseTheIdOfARemovedFilePartition) {
  LivePartitions live;
  live.add_removed(2);
  *live.add_created() = Part(2, "beta2");
  absl::StatusOr<PartitionPlan> plan =
      PlanPartitions(FileWith({Part(1, "alpha"), Part(2, "beta")}), live, "LIVE");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->partitions.size(), 2u);
  EXPECT_EQ(plan->partitions[1].config.name(), "beta2");
}

TEST(PlanPartitions, ACreatedPartitionClashingWithTheFileIsAnError) {
  LivePartitions live;
  *live.add_created() = Part(1, "orders");
  absl::StatusOr<PartitionPlan> plan = PlanPartitions(FileWith({Part(1, "alpha")}), live, "LIVE");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("LIVE"));
  EXPECT_THAT(plan.status().message(), HasSubstr("id 1"));

  live.mutable_created(0)->set_id(5);
  live.mutable_created(0)->set_name("alpha");
  plan = PlanPartitions(FileWith({Part(1, "alpha")}), live, "LIVE");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("name alpha"));
}

}  // namespace
}  // namespace runtime
