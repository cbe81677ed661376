#include "flowctl/cpu_pressure.h"

#include <filesystem>
#include <utility>

#include "flowctl/proc_files.h"

namespace flowctl {

ProcCpuPressure::ProcCpuPressure(std::string proc, std::string cgroup_root) {
  path_ = proc + "/pressure/cpu";
  std::optional<std::string> group = CgroupV2Path(proc);
  if (!group || *group == "/") return;  // the root group has no cpu.pressure: the machine's
  std::error_code ec;
  const std::string in_group = cgroup_root + *group + "/cpu.pressure";
  if (std::filesystem::exists(in_group, ec)) path_ = in_group;
}

std::optional<double> ProcCpuPressure::SomeAvg10() {
  std::optional<std::string> text = ReadSmallFile(path_);
  if (!text) return std::nullopt;
  return ParsePsiSomeAvg10(*text);
}

std::string ProcCpuPressure::Describe() const { return path_; }

}  // namespace flowctl
