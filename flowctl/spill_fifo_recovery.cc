// SpillFifo::Recover: what Open does with an existing directory (flowctl/spill_fifo.h, "Crash
// and reopen" and "Corruption"). Kept apart from the steady-state paths in spill_fifo.cc.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/spill_segment.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"

namespace flowctl {

absl::Status SpillFifo::Recover() {
  const std::string& dir = options_.dir;
  unlink(absl::StrCat(dir, "/", spill::kManifestName, ".tmp").c_str());
  spill::Manifest manifest;
  absl::Status recovery;
  uint64_t corruptions = 0;
  uint64_t quarantined = 0;
  if (auto m = spill::ReadManifest(dir); m.ok()) {
    manifest = *m;
  } else if (absl::IsDataLoss(m.status())) {
    // Replaying everything on disk is safe (consumers drop duplicates by seq); losing is not.
    recovery = m.status();
    ++corruptions;
  } else if (!absl::IsNotFound(m.status())) {
    return m.status();
  }

  std::vector<uint64_t> ids;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return spill::ErrnoError("opendir", dir, errno);
  while (dirent* e = readdir(d)) {
    uint64_t id;
    if (spill::ParseSegmentFileName(e->d_name, &id)) ids.push_back(id);
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());

  // Scan into locals first: no other thread can reach the FIFO before Open returns, but the
  // guarded members are assigned below under their locks, in lock order.
  std::deque<Segment> segments;
  uint64_t disk_records = 0;
  uint64_t disk_record_bytes = 0;
  uint64_t read_segment = 0;
  uint64_t read_offset = 0;
  uint64_t last_seq = 0;
  for (uint64_t id : ids) {
    const std::string path = PathOf(id);
    ASSIGN_OR_RETURN(
        spill::SegmentScan scan,
        spill::ScanSegment(path, last_seq, manifest.consumed_seq, options_.max_record_bytes));
    if (!scan.corruption.ok()) {
      LOG(WARNING) << scan.corruption << "; keeping " << scan.records
                   << " records before it, quarantining the rest";
      if (recovery.ok()) recovery = scan.corruption;
      ++corruptions;
      quarantined += scan.file_bytes - scan.valid_bytes;
      RETURN_IF_ERROR(spill::QuarantineTail(dir, spill::SegmentFileName(id), scan.valid_bytes));
    }
    if (scan.records == 0 || scan.last_seq <= manifest.consumed_seq) {
      if (unlink(path.c_str()) != 0) return spill::ErrnoError("unlink", path, errno);
      continue;
    }
    if (write_through_) {
      // Records recovered from the page cache after a process crash are made durable now, so
      // durable_seq() can cover them.
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || fdatasync(fd) != 0) {
        const int err = errno;
        if (fd >= 0) close(fd);
        return spill::ErrnoError("fdatasync", path, err);
      }
      close(fd);
    }
    last_seq = scan.last_seq;
    segments.push_back(Segment{id, scan.valid_bytes, scan.records, scan.last_seq, true});
    if (scan.unconsumed_records > 0) {
      if (disk_records == 0) {
        read_segment = id;
        read_offset = scan.unconsumed_offset;
      }
      disk_records += scan.unconsumed_records;
      disk_record_bytes += scan.unconsumed_bytes;
    }
  }
  const uint64_t next_seq =
      std::max({last_seq + 1, manifest.consumed_seq + 1, manifest.seq_limit, uint64_t{1}});
  const uint64_t limit = next_seq + kSeqReservation;
  if (write_through_) RETURN_IF_ERROR(spill::SyncDir(dir));
  RETURN_IF_ERROR(spill::WriteManifest(dir, {manifest.consumed_seq, limit}, write_through_));

  absl::MutexLock wl(&write_mu_);
  absl::MutexLock ml(&manifest_mu_);
  absl::MutexLock l(&mu_);
  seq_limit_ = limit;
  seq_limit_cached_ = limit;
  segments_ = std::move(segments);
  disk_records_ = disk_records;
  disk_record_bytes_ = disk_record_bytes;
  read_segment_ = read_segment;
  read_offset_ = read_offset;
  counters_.recovered_records = disk_records;
  counters_.corruptions = corruptions;
  counters_.quarantined_bytes = quarantined;
  recovery_status_ = recovery;
  consumed_seq_ = persisted_seq_ = manifest.consumed_seq;
  next_seq_ = next_seq;
  durable_seq_ = write_through_ ? next_seq - 1 : 0;
  return absl::OkStatus();
}

}  // namespace flowctl
