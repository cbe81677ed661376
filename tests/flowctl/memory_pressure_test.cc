// MemoryPressure (flowctl/memory_pressure.h): the pressure and the actions from an injected
// source; ProcMemorySource on a fake /proc and cgroup tree (v2, a hybrid machine's v2, v1, none);
// and one real test in a memory cgroup the test creates (v2 where the memory controller is
// there, else v1), skipped with the reason where the machine does not allow it.
#include "flowctl/memory_pressure.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flowctl {
namespace {

using ::testing::HasSubstr;

class FakeSource final : public MemorySource {
 public:
  absl::StatusOr<MemorySample> Sample() override {
    if (!error.ok()) return error;
    return sample;
  }
  std::string Describe() const override { return "fake"; }
  MemorySample sample;
  absl::Status error;
};

node::config::MemoryPressureConfig Defaults() {
  node::config::MemoryPressureConfig c;
  ApplyMemoryPressureDefaults(&c);
  return c;
}

struct Harness {
  explicit Harness(node::config::MemoryPressureConfig c = Defaults()) {
    auto s = std::make_unique<FakeSource>();
    source = s.get();
    pressure = std::make_unique<MemoryPressure>(c, std::move(s), [this] { ++releases; });
  }
  int releases = 0;
  // Sets the cgroup usage to `fraction` of a 1 GiB limit and updates.
  void Cgroup(double fraction) {
    source->sample.cgroup_version = 2;
    source->sample.cgroup_max_bytes = uint64_t{1} << 30;
    source->sample.cgroup_current_bytes =
        static_cast<uint64_t>(std::ceil(fraction * static_cast<double>(uint64_t{1} << 30)));
    ASSERT_TRUE(pressure->Update().ok());
  }
  FakeSource* source = nullptr;
  std::unique_ptr<MemoryPressure> pressure;
};

TEST(MemoryPressure, NoLimitMeansNoPressure) {
  Harness h;
  h.source->sample.rss_bytes = uint64_t{8} << 30;  // large, but no rss limit configured
  h.source->sample.cgroup_version = 2;
  h.source->sample.cgroup_current_bytes = uint64_t{8} << 30;  // no max: "max" in memory.max
  ASSERT_TRUE(h.pressure->Update().ok());
  EXPECT_EQ(h.pressure->pressure(), 0);
  EXPECT_EQ(h.pressure->pool_scale(), 1);
  EXPECT_FALSE(h.pressure->refuse_clients());
  EXPECT_TRUE(h.pressure->Stats().sampled);
}

TEST(MemoryPressure, ActionsFollowTheThresholds) {
  Harness h;
  h.Cgroup(0.5);
  EXPECT_DOUBLE_EQ(h.pressure->pressure(), 0.5);
  EXPECT_EQ(h.pressure->pool_scale(), 1);
  EXPECT_FALSE(h.pressure->drop_forwarded());
  EXPECT_EQ(h.pressure->Stats().driven_by, "cgroup");

  h.Cgroup(0.9);  // 0.8 -> 1, 1.0 -> 0.25: halfway is 0.625
  EXPECT_NEAR(h.pressure->pool_scale(), 0.625, 1e-6);
  EXPECT_TRUE(h.pressure->drop_forwarded());
  EXPECT_FALSE(h.pressure->refuse_clients());

  h.Cgroup(0.96);
  EXPECT_TRUE(h.pressure->refuse_clients());
  EXPECT_THAT(h.pressure->RefusalMessage(),
              HasSubstr("node memory pressure 0.96 (cgroup: 0.96 GiB of 1.00 GiB)"));
  EXPECT_THAT(h.pressure->RefusalMessage(), HasSubstr("until it falls below 0.90"));

  h.Cgroup(1.3);  // past the limit: the floor
  EXPECT_DOUBLE_EQ(h.pressure->pool_scale(), 0.25);
}

TEST(MemoryPressure, FreeHeapIsReleasedUnderPressureAtMostOnceASecond) {
  Harness h;
  h.Cgroup(0.7);
  EXPECT_EQ(h.releases, 0);
  h.Cgroup(0.85);
  EXPECT_EQ(h.releases, 1);
  h.Cgroup(0.9);  // within the same second
  EXPECT_EQ(h.releases, 1);
  EXPECT_EQ(h.pressure->Stats().heap_releases, 1u);
  ReleaseFreeHeap();  // the real one runs (glibc or tcmalloc) without harm
}

TEST(MemoryPressure, SwitchesTurnOffOnlyBelowTheHysteresis) {
  Harness h;
  h.Cgroup(0.95);
  ASSERT_TRUE(h.pressure->refuse_clients());
  h.Cgroup(0.92);  // below 0.95, above 0.90: stays on
  EXPECT_TRUE(h.pressure->refuse_clients());
  h.Cgroup(0.94);  // hovering at the threshold does not flap
  EXPECT_TRUE(h.pressure->refuse_clients());
  h.Cgroup(0.89);
  EXPECT_FALSE(h.pressure->refuse_clients());
  EXPECT_TRUE(h.pressure->drop_forwarded()) << "0.89 is within drop_forwarded's hysteresis";
  h.Cgroup(0.84);
  EXPECT_FALSE(h.pressure->drop_forwarded());
  // on, on, off, off: four switches.
  EXPECT_EQ(h.pressure->Stats().transitions, 4u);
}

// Caches stop borrowing at shrink_pools_at (0.80) and borrow again only 0.05 below it: the
// pressure scale alone would turn them back on at 0.80 and off at 0.81.
TEST(MemoryPressure, CacheBorrowingStopsAtShrinkAndResumesBelowTheHysteresis) {
  Harness h;
  h.Cgroup(0.79);
  EXPECT_FALSE(h.pressure->no_cache_borrowing());
  h.Cgroup(0.81);
  EXPECT_TRUE(h.pressure->no_cache_borrowing());
  EXPECT_TRUE(h.pressure->Stats().no_cache_borrowing);
  h.Cgroup(0.77);
  EXPECT_EQ(h.pressure->pressure_scale(), 1);
  EXPECT_TRUE(h.pressure->no_cache_borrowing());
  h.Cgroup(0.74);
  EXPECT_FALSE(h.pressure->no_cache_borrowing());
}

TEST(MemoryPressure, TheHighestSourceDrives) {
  node::config::MemoryPressureConfig c = Defaults();
  c.set_rss_limit_bytes(uint64_t{1} << 30);
  Harness h(c);
  h.source->sample.rss_bytes = uint64_t{1} << 29;  // 0.5
  h.source->sample.psi_some_avg10 = 36;            // 36 / 40 = 0.9
  ASSERT_TRUE(h.pressure->Update().ok());
  EXPECT_DOUBLE_EQ(h.pressure->pressure(), 0.9);
  EXPECT_EQ(h.pressure->Stats().driven_by, "psi");
  h.source->sample.rss_bytes = uint64_t{1} << 30;  // 1.0
  ASSERT_TRUE(h.pressure->Update().ok());
  EXPECT_EQ(h.pressure->Stats().driven_by, "rss");
  EXPECT_TRUE(h.pressure->refuse_clients());
  EXPECT_THAT(h.pressure->RefusalMessage(), HasSubstr("rss: 1.00 GiB of 1.00 GiB"));
}

TEST(MemoryPressure, TheMemoryDividedStaysWithinAShareOfAKnownLimit) {
  Harness h;
  h.pressure->SetDividedBytes(uint64_t{4} << 30);  // memory_bytes 4 GiB in a 1 GiB group
  h.Cgroup(0.1);
  EXPECT_DOUBLE_EQ(h.pressure->pool_scale(), kDividedShareOfLimit / 4);
  EXPECT_FALSE(h.pressure->refuse_clients()) << "no pressure: only the division is bounded";
  EXPECT_EQ(h.pressure->pressure_scale(), 1) << "the pressure's own scale: no pressure";
  h.Cgroup(0.9);  // halfway from shrink_pools_at (0.8) to 1: halfway down to 0.25
  EXPECT_NEAR(h.pressure->pressure_scale(), 0.625, 1e-6);
  EXPECT_DOUBLE_EQ(h.pressure->pool_scale(), kDividedShareOfLimit / 4);
  h.pressure->SetDividedBytes(uint64_t{64} << 20);  // well inside the limit: untouched
  h.Cgroup(0.1);
  EXPECT_EQ(h.pressure->pool_scale(), 1);
}

TEST(MemoryPressure, IgnoredPsiAndDisabledAreNotJudged) {
  node::config::MemoryPressureConfig c = Defaults();
  c.set_ignore_psi(true);
  Harness h(c);
  h.source->sample.psi_some_avg10 = 90;
  ASSERT_TRUE(h.pressure->Update().ok());
  EXPECT_EQ(h.pressure->pressure(), 0);
  EXPECT_EQ(h.pressure->Stats().sample.psi_some_avg10, 90) << "still shown";

  c = Defaults();
  c.set_disabled(true);
  Harness off(c);
  off.Cgroup(0.99);
  EXPECT_FALSE(off.pressure->refuse_clients());
  EXPECT_EQ(off.pressure->pool_scale(), 1);
}

TEST(MemoryPressure, AFailedReadKeepsTheActionsAndSaysWhy) {
  Harness h;
  h.Cgroup(0.97);
  h.source->error = absl::UnavailableError("cannot read /proc/self/statm");
  EXPECT_FALSE(h.pressure->Update().ok());
  EXPECT_TRUE(h.pressure->refuse_clients());
  EXPECT_EQ(h.pressure->Stats().error, "cannot read /proc/self/statm");
  h.source->error = absl::OkStatus();
  h.Cgroup(0.5);
  EXPECT_EQ(h.pressure->Stats().error, "");
  EXPECT_FALSE(h.pressure->refuse_clients());
}

TEST(PoolScaleAt, IsLinearBetweenTheThresholdAndOne) {
  EXPECT_EQ(PoolScaleAt(0.5, 0.8, 0.25), 1);
  EXPECT_EQ(PoolScaleAt(0.8, 0.8, 0.25), 1);
  EXPECT_NEAR(PoolScaleAt(0.85, 0.8, 0.25), 0.8125, 1e-9);
  EXPECT_EQ(PoolScaleAt(1.0, 0.8, 0.25), 0.25);
  EXPECT_EQ(PoolScaleAt(7.0, 0.8, 0.25), 0.25);
  EXPECT_EQ(PoolScaleAt(1.0, 1.0, 0.5), 1) << "at the threshold: not yet";
  EXPECT_EQ(PoolScaleAt(1.5, 1.0, 0.5), 0.5);
}

// A fake /proc and cgroup root laid out like the real ones.
class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/memory_pressure_tree_" + std::to_string(getpid());
    std::filesystem::remove_all(root_);
    Write("proc/self/statm", "1000 250 10 1 0 100 0\n");
    Write("proc/pressure/memory",
          "some avg10=1.50 avg60=0.50 avg300=0.10 total=123\n"
          "full avg10=0.20 avg60=0.00 avg300=0.00 total=4\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& rel, const std::string& text) {
    const std::string path = root_ + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  ProcMemorySource Source() { return ProcMemorySource(root_ + "/proc", root_ + "/cg"); }
  std::string root_;
};

TEST_F(FakeTree, CgroupV2WithALimitAndItsOwnPressure) {
  Write("proc/self/cgroup", "0::/svc/noded\n");
  Write("cg/svc/noded/memory.current", "104857600\n");
  Write("cg/svc/noded/memory.max", "209715200\n");
  Write("cg/svc/noded/memory.pressure", "some avg10=12.25 avg60=1 avg300=0 total=9\n");
  ProcMemorySource src = Source();
  EXPECT_EQ(src.cgroup_version(), 2);
  absl::StatusOr<MemorySample> s = src.Sample();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rss_bytes, 250u * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(s->cgroup_current_bytes, 104857600u);
  EXPECT_EQ(s->cgroup_max_bytes, 209715200u);
  EXPECT_EQ(s->psi_some_avg10, 12.25) << "the cgroup's own PSI first";
  EXPECT_THAT(src.Describe(), HasSubstr("cgroup v2"));
}

TEST_F(FakeTree, CgroupV2WithoutALimitAndAHybridMount) {
  Write("proc/self/cgroup", "1:name=systemd:/x\n0::/x\n");
  Write("cg/unified/x/memory.current", "1000\n");
  Write("cg/unified/x/memory.max", "max\n");
  ProcMemorySource src = Source();
  ASSERT_EQ(src.cgroup_version(), 2);
  absl::StatusOr<MemorySample> s = src.Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cgroup_current_bytes, 1000u);
  EXPECT_FALSE(s->cgroup_max_bytes.has_value());
  EXPECT_EQ(s->psi_some_avg10, 1.5) << "no cgroup PSI: the machine's";
}

TEST_F(FakeTree, CgroupV1MemoryController) {
  // A hybrid machine whose v2 hierarchy has no memory controller: the v1 one is used.
  Write("proc/self/cgroup", "4:memory:/job/7\n1:cpu:/\n0::/\n");
  Write("cg/unified/cgroup.procs", "");
  Write("cg/memory/job/7/memory.usage_in_bytes", "5000\n");
  Write("cg/memory/job/7/memory.limit_in_bytes", "10000\n");
  ProcMemorySource src = Source();
  ASSERT_EQ(src.cgroup_version(), 1);
  absl::StatusOr<MemorySample> s = src.Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cgroup_current_bytes, 5000u);
  EXPECT_EQ(s->cgroup_max_bytes, 10000u);
  // v1's "no limit" is a huge number, not a limit.
  Write("cg/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n");
  s = src.Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->cgroup_max_bytes.has_value());
}

TEST_F(FakeTree, TheWorkingSetLeavesOutInactiveFileCacheAndAMoveIsFollowed) {
  Write("proc/self/cgroup", "0::/a\n");
  Write("cg/a/memory.current", "900\n");
  Write("cg/a/memory.max", "1000\n");
  Write("cg/a/memory.stat", "anon 300\nfile 600\ninactive_file 500\nactive_file 100\n");
  node::config::MemoryPressureConfig c = Defaults();
  c.set_ignore_psi(true);
  MemoryPressure pressure(c, std::make_unique<ProcMemorySource>(root_ + "/proc", root_ + "/cg"));
  ASSERT_TRUE(pressure.Update().ok());
  EXPECT_DOUBLE_EQ(pressure.pressure(), 0.4) << "(900 - 500 inactive file) / 1000";
  EXPECT_EQ(CgroupWorkingSet(pressure.Stats().sample), 400u);
  // The process is moved to another group after it started: the next sample reads that one.
  Write("cg/b/memory.current", "950\n");
  Write("cg/b/memory.max", "1000\n");
  Write("proc/self/cgroup", "0::/b\n");
  ASSERT_TRUE(pressure.Update().ok());
  EXPECT_DOUBLE_EQ(pressure.pressure(), 0.95);
  EXPECT_TRUE(pressure.refuse_clients());
}

TEST_F(FakeTree, NoCgroupAndNoPsiStillGivesRss) {
  std::filesystem::remove(root_ + "/proc/pressure/memory");
  ProcMemorySource src = Source();
  EXPECT_EQ(src.cgroup_version(), 0);
  absl::StatusOr<MemorySample> s = src.Sample();
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->rss_bytes, 0u);
  EXPECT_FALSE(s->psi_some_avg10.has_value());
  std::filesystem::remove(root_ + "/proc/self/statm");
  EXPECT_EQ(src.Sample().status().code(), absl::StatusCode::kUnavailable);
}

TEST(ProcMemorySourceReal, ReadsThisProcess) {
  ProcMemorySource src;
  absl::StatusOr<MemorySample> s = src.Sample();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->rss_bytes, uint64_t{1} << 20);
  std::cout << "this machine: " << src.Describe() << "\n";
}

// ---- A real memory cgroup ------------------------------------------------------------------

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// Runs in the forked child, inside `dir`: exit 0 when the source sees the group and its limit,
// and the pressure rises as the child fills it; another code names the first check that failed.
[[noreturn]] void ChildInGroup(const std::string& dir, int version, uint64_t limit) {
  if (!WriteFile(dir + "/cgroup.procs", std::to_string(getpid()))) _exit(10);
  ProcMemorySource src;
  if (src.cgroup_version() != version) _exit(11);
  if (std::filesystem::path(src.cgroup_dir()).filename() != std::filesystem::path(dir).filename()) {
    _exit(12);
  }
  absl::StatusOr<MemorySample> before = src.Sample();
  if (!before.ok() || before->cgroup_max_bytes != limit) _exit(13);
  node::config::MemoryPressureConfig c = Defaults();
  c.set_ignore_psi(true);  // the machine's PSI is not this test's
  MemoryPressure pressure(c, std::make_unique<ProcMemorySource>());
  if (!pressure.Update().ok()) _exit(14);
  // Fill 7/8 of the limit: pressure ~0.875, past shrink_pools_at, below drop_forwarded_at.
  const size_t fill = static_cast<size_t>(limit / 8 * 7);
  char* block = static_cast<char*>(malloc(fill));
  if (block == nullptr) _exit(15);
  memset(block, 1, fill);
  if (!pressure.Update().ok()) _exit(16);
  const MemoryPressureStats st = pressure.Stats();
  if (st.driven_by != "cgroup" || st.pressure < 0.80 || st.pressure > 1.0) _exit(17);
  if (!(st.pool_scale < 1) || st.refuse_clients) _exit(18);
  free(block);
  _exit(0);
}

TEST(MemoryPressureCgroup, RealGroupWithALimit) {
  ProcMemorySource self;
  if (self.cgroup_version() == 0) {
    GTEST_SKIP() << "this process is in no memory cgroup this test can read (" << self.Describe()
                 << ")";
  }
  const int version = self.cgroup_version();
  const std::string dir = absl::StrCat(self.cgroup_dir(), "/noded_memory_pressure_test_", getpid());
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec)) {
    GTEST_SKIP() << "cannot create a cgroup under " << self.cgroup_dir() << " (" << ec.message()
                 << "): the machine does not delegate one to this user";
  }
  const uint64_t limit = uint64_t{128} << 20;
  const std::string limit_file = version == 2 ? "/memory.max" : "/memory.limit_in_bytes";
  if (!WriteFile(dir + limit_file, std::to_string(limit))) {
    std::filesystem::remove(dir, ec);
    GTEST_SKIP() << "cannot set " << dir << limit_file
                 << " (v2: the parent may not enable the memory controller for children)";
  }
  std::cout << "memory cgroup v" << version << " " << dir << ", limit 128 MiB\n";
  const pid_t child = fork();
  ASSERT_GE(child, 0) << strerror(errno);
  if (child == 0) ChildInGroup(dir, version, limit);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::filesystem::remove(dir, ec);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status)
                                 << " (the OOM killer if 9)";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10 join, 11 version, 12 group found, 13 limit read, 14/16 update, 15 malloc, "
         "17 pressure, 18 actions";
}

}  // namespace
}  // namespace flowctl
