// Small readers for /proc and cgroup files, shared by the pressure sources
// (flowctl/memory_pressure.h, flowctl/cpu_pressure.h).
#ifndef FLOWCTL_PROC_FILES_H_
#define FLOWCTL_PROC_FILES_H_

#include <optional>
#include <string>

namespace flowctl {

// The whole of a small file, or nullopt when it cannot be read.
std::optional<std::string> ReadSmallFile(const std::string& path);

// "some avg10=1.23 avg60=... total=..." (a PSI file: /proc/pressure/*, a cgroup's *.pressure)
// -> 1.23 (percent); nullopt when there is no such field.
std::optional<double> ParsePsiSomeAvg10(const std::string& text);

// The path of this process's cgroup v2 group ("/user.slice/..."), from <proc>/self/cgroup's
// "0::" line; nullopt on a machine without the unified hierarchy.
std::optional<std::string> CgroupV2Path(const std::string& proc);

}  // namespace flowctl

#endif  // FLOWCTL_PROC_FILES_H_
