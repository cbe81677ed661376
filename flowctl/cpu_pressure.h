// CpuPressureSource: how contended the CPU the node runs on is, as PSI's "some avg10" (percent of
// the last 10 s in which some runnable task waited for a CPU): the node's cgroup v2 cpu.pressure
// when there is one (it counts a CPU quota's throttling), else the machine's /proc/pressure/cpu.
// Node-wide admission (flowctl/node_admission.h) uses it to tell a node short of CPU, whose
// partitions' measured CPU is its capacity, from one with CPU to spare, whose capacity is its
// worker pool.
//
// Thread-compatibility: not thread-safe (one caller: the arbiter's tick).
#ifndef FLOWCTL_CPU_PRESSURE_H_
#define FLOWCTL_CPU_PRESSURE_H_

#include <optional>
#include <string>

namespace flowctl {

class CpuPressureSource {
 public:
  virtual ~CpuPressureSource() = default;
  // Percent in [0, 100]; nullopt when the kernel keeps no PSI (or the file cannot be read).
  virtual std::optional<double> SomeAvg10() = 0;
  // Where it reads from, for the log.
  virtual std::string Describe() const = 0;
};

class ProcCpuPressure final : public CpuPressureSource {
 public:
  explicit ProcCpuPressure(std::string proc = "/proc", std::string cgroup_root = "/sys/fs/cgroup");
  std::optional<double> SomeAvg10() override;
  std::string Describe() const override;

 private:
  // The file read: the group's cpu.pressure, else <proc>/pressure/cpu. Looked up once.
  std::string path_;
};

}  // namespace flowctl

#endif  // FLOWCTL_CPU_PRESSURE_H_
