#include "runtime/partition_registry.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"

namespace runtime {
namespace {

using node::config::LivePartitions;
using node::config::PartitionConfig;

absl::Status PosixError(absl::string_view op, const std::string& path) {
  return absl::InternalError(
      absl::StrCat("live partitions: ", op, " ", path, ": ", std::strerror(errno)));
}

bool Contains(const google::protobuf::RepeatedField<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::string LivePartitionsPath(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/live_partitions.textproto");
}

absl::StatusOr<LivePartitions> ReadLivePartitions(const std::string& path) {
  LivePartitions live;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return live;
  std::ifstream in(path);
  if (!in) {
    return absl::UnavailableError(
        absl::StrCat("live partitions: cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &live)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": does not parse as node.config.LivePartitions (it is written by the admin API's "
        "partition calls; restore it or remove it to run the config file's partitions)"));
  }
  return live;
}

absl::Status WriteLivePartitions(const std::string& path, const LivePartitions& live) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(live, &text)) {
    return absl::InternalError("live partitions: cannot print the record");
  }
  text = absl::StrCat(
      "# Written by noded: partitions created, stopped and removed through the admin API.\n"
      "# Applied over the config file's partitions at startup (runtime/partition_registry.h).\n",
      text);
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return PosixError("open", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = PosixError("write", tmp);
      close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status s = PosixError("fsync", tmp);
    close(fd);
    return s;
  }
  if (close(fd) != 0) return PosixError("close", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return PosixError("rename", tmp);
  const std::string dir = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  const int dfd = open(path.rfind('/') == std::string::npos ? "." : dir.c_str(),
                       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return PosixError("open", dir);
  const bool synced = fsync(dfd) == 0;
  absl::Status s = synced ? absl::OkStatus() : PosixError("fsync", dir);
  close(dfd);
  return s;
}

absl::StatusOr<PartitionPlan> PlanPartitions(const node::config::NodeConfig& file_config,
                                             const LivePartitions& live,
                                             const std::string& live_path) {
  PartitionPlan plan;
  plan.live = live;
  plan.live.clear_removed();
  plan.live.clear_stopped();
  absl::flat_hash_set<uint32_t> file_ids;
  for (const PartitionConfig& pc : file_config.partitions()) file_ids.insert(pc.id());
  for (uint32_t id : live.removed()) {
    if (file_ids.contains(id) && !Contains(plan.live.removed(), id)) plan.live.add_removed(id);
  }
  absl::flat_hash_set<uint32_t> ids;
  absl::flat_hash_set<std::string> names;
  for (const PartitionConfig& pc : file_config.partitions()) {
    if (Contains(plan.live.removed(), pc.id())) {
      plan.warnings.push_back(absl::StrCat("partition ", pc.name(), " (", pc.id(),
                                           ") was removed through the admin API (", live_path,
                                           ") and is not run; take it out of the config file"));
      continue;
    }
    ids.insert(pc.id());
    names.insert(pc.name());
    plan.partitions.push_back({.config = pc, .stopped = Contains(live.stopped(), pc.id())});
  }
  for (const PartitionConfig& pc : live.created()) {
    if (ids.contains(pc.id()) || names.contains(pc.name())) {
      return absl::InvalidArgumentError(absl::StrCat(
          live_path, ": partition ", pc.name(), " (", pc.id(),
          ") was created through the admin API, and the config file or an earlier created "
          "partition uses its ",
          ids.contains(pc.id()) ? absl::StrCat("id ", pc.id()) : absl::StrCat("name ", pc.name()),
          "; remove one of the two"));
    }
    ids.insert(pc.id());
    names.insert(pc.name());
    plan.partitions.push_back(
        {.config = pc, .stopped = Contains(live.stopped(), pc.id()), .created_live = true});
  }
  // Stopped marks of ids no longer planned are dropped, so a partition that takes such an id
  // later does not start stopped.
  for (const PlannedPartition& p : plan.partitions) {
    if (p.stopped) plan.live.add_stopped(p.config.id());
  }
  return plan;
}

}  // namespace runtime
