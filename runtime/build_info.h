// What this binary was built from: the project version (CMakeLists.txt `project(... VERSION)`,
// equal to kNodeVersion, checked by a test) and the git commit of the source tree ("unknown"
// outside a checkout, "-dirty" when tracked files had changes). Generated at build time by
// cmake/BuildInfo.cmake into the build tree (library noded_build_info).
#ifndef RUNTIME_BUILD_INFO_H_
#define RUNTIME_BUILD_INFO_H_

namespace runtime {

extern const char kBuildVersion[];
extern const char kBuildCommit[];

}  // namespace runtime

#endif  // RUNTIME_BUILD_INFO_H_
