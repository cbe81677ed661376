// The build info noded --version prints: the CMake project version, kept equal to kNodeVersion
// (what GetNodeStatus and the metrics report), and a commit.
#include "runtime/build_info.h"

#include <string>

#include "gtest/gtest.h"
#include "runtime/node.h"

namespace runtime {
namespace {

TEST(BuildInfoTest, VersionIsTheNodeVersionAndACommitIsNamed) {
  EXPECT_EQ(std::string(kBuildVersion), std::string(kNodeVersion))
      << "CMakeLists.txt project(VERSION) and runtime/node.h kNodeVersion disagree";
  EXPECT_FALSE(std::string(kBuildCommit).empty());
}

}  // namespace
}  // namespace runtime
