// ProcCpuPressure on a fake /proc and cgroup root: the group's own cpu.pressure first, the
// machine's /proc/pressure/cpu otherwise, nothing when the kernel keeps no PSI.
#include "flowctl/cpu_pressure.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

class CpuPressureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/cpu_pressure_tree_" + std::to_string(getpid());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    const std::string path = root_ + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  ProcCpuPressure Source() { return ProcCpuPressure(root_ + "/proc", root_ + "/cg"); }
  std::string root_;
};

TEST_F(CpuPressureTest, TheGroupsOwnPressureFirst) {
  Write("proc/self/cgroup", "0::/svc/noded\n");
  Write("proc/pressure/cpu", "some avg10=3.00 avg60=1 avg300=0 total=5\n");
  Write("cg/svc/noded/cpu.pressure",
        "some avg10=41.50 avg60=20.00 avg300=5.00 total=99\n"
        "full avg10=10.00 avg60=0.00 avg300=0.00 total=7\n");
  ProcCpuPressure src = Source();
  EXPECT_EQ(src.SomeAvg10(), 41.5);
  EXPECT_EQ(src.Describe(), root_ + "/cg/svc/noded/cpu.pressure");
  // Read afresh every time.
  Write("cg/svc/noded/cpu.pressure", "some avg10=7.25 avg60=0 avg300=0 total=100\n");
  EXPECT_EQ(src.SomeAvg10(), 7.25);
}

TEST_F(CpuPressureTest, TheMachinesWithoutAGroupFile) {
  Write("proc/self/cgroup", "1:name=systemd:/x\n0::/x\n");
  Write("proc/pressure/cpu", "some avg10=12.00 avg60=1 avg300=0 total=5\n");
  EXPECT_EQ(Source().SomeAvg10(), 12.0);
  Write("proc/self/cgroup", "0::/\n");  // the root group has no cpu.pressure
  EXPECT_EQ(Source().SomeAvg10(), 12.0);
}

TEST_F(CpuPressureTest, NothingWithoutPsi) {
  Write("proc/self/cgroup", "0::/x\n");
  EXPECT_EQ(Source().SomeAvg10(), std::nullopt);
  Write("proc/pressure/cpu", "garbage\n");
  EXPECT_EQ(Source().SomeAvg10(), std::nullopt);
}

}  // namespace
}  // namespace flowctl
