#include "flowctl/proc_files.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace flowctl {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<double> ParsePsiSomeAvg10(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "some ")) continue;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      if (absl::ConsumePrefix(&field, "avg10=")) {
        double v = 0;
        if (absl::SimpleAtod(field, &v)) return v;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> CgroupV2Path(const std::string& proc) {
  std::optional<std::string> cgroups = ReadSmallFile(proc + "/self/cgroup");
  if (!cgroups) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*cgroups, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path; the unified hierarchy is "0::path".
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() == 3 && parts[0] == "0" && parts[1].empty()) return std::string(parts[2]);
  }
  return std::nullopt;
}

}  // namespace flowctl
