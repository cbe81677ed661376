// On-disk format of a SpillFifo (flowctl/spill_fifo.h): segment files, record frames, manifest.
//
// A segment file `seg-<20-digit id>.log` is a run of record frames, appended only:
//
//   [u32 payload length][u32 crc][u64 seq][payload]         (little-endian, 16-byte header)
//   crc = CRC32C(payload || length || seq)
//
// The CRC covers the payload first so producers can checksum it outside the FIFO's write lock and
// fold in the sequence number (assigned under the lock) with a 12-byte extension. A segment's id
// is the sequence number it was created for; ids and the seqs inside segments only increase.
//
// The manifest `MANIFEST` holds the persisted read position (highest consumed seq) and the
// sequence reservation limit; it is replaced atomically (write MANIFEST.tmp, rename).
//
// These are plain functions over file descriptors and paths; thread-safety is the caller's.
#ifndef FLOWCTL_SPILL_SEGMENT_H_
#define FLOWCTL_SPILL_SEGMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flowctl::spill {

inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr char kLockName[] = "LOCK";
inline constexpr char kQuarantineDir[] = "quarantine";

// Fills `header` for the frame of (seq, payload) given payload_crc = Crc32c(payload).
void EncodeFrameHeader(uint64_t seq, uint32_t payload_size, uint32_t payload_crc,
                       char header[kFrameHeaderBytes]);

std::string SegmentFileName(uint64_t id);
bool ParseSegmentFileName(absl::string_view name, uint64_t* id);

// What a scan of one segment file found. Records are validated in order; the first bad one ends
// the valid prefix.
struct SegmentScan {
  uint64_t valid_bytes = 0;  // length of the valid prefix
  uint64_t file_bytes = 0;   // length of the file
  uint64_t records = 0;      // valid records
  uint64_t first_seq = 0;    // of the valid records; 0 when none
  uint64_t last_seq = 0;
  // Valid records with seq > the scan's `consumed_seq`: where the first one starts, how many.
  uint64_t unconsumed_offset = 0;
  uint64_t unconsumed_records = 0;
  uint64_t unconsumed_bytes = 0;  // payload bytes
  // OK, or DataLossError naming the file, the offset of the first bad frame and why.
  absl::Status corruption;
};

// Reads and validates the segment at `path`. Frames must have seq > `after_seq` and increasing
// seqs; a payload longer than `max_record_bytes` counts as corruption. I/O errors are returned;
// corruption is reported in the result.
absl::StatusOr<SegmentScan> ScanSegment(const std::string& path, uint64_t after_seq,
                                        uint64_t consumed_seq, uint32_t max_record_bytes);

// Reads the frame at `offset` of `fd` (the file `path`, named in errors). On success sets seq,
// payload and the offset of the next frame. DataLossError on a bad or short frame.
absl::Status ReadFrameAt(int fd, const std::string& path, uint64_t offset,
                         uint32_t max_record_bytes, uint64_t* seq, std::string* payload,
                         uint64_t* next_offset);

// Copies bytes [offset, end) of dir/name into dir/quarantine/name.<offset>, then truncates the
// segment to `offset`, so appends and scans can go on past a corrupt tail.
absl::Status QuarantineTail(const std::string& dir, const std::string& name, uint64_t offset);

struct Manifest {
  uint64_t consumed_seq = 0;  // every record with seq <= this was consumed
  uint64_t seq_limit = 0;     // no seq >= this was ever handed out
};
// NotFound when there is no manifest; DataLoss when it is unreadable.
absl::StatusOr<Manifest> ReadManifest(const std::string& dir);
// Atomic replace; with `sync` the new file and the directory are fdatasync'ed first.
absl::Status WriteManifest(const std::string& dir, const Manifest& m, bool sync);

absl::Status SyncDir(const std::string& dir);
// RESOURCE_EXHAUSTED for ENOSPC, EDQUOT and EFBIG (no room), INTERNAL otherwise; names op, path.
absl::Status ErrnoError(absl::string_view op, absl::string_view path, int err);
// pwrite of the whole buffer list, retrying short writes and EINTR.
absl::Status PwriteAll(int fd, const std::string& path, const char* a, size_t an, const char* b,
                       size_t bn, uint64_t offset);

}  // namespace flowctl::spill

#endif  // FLOWCTL_SPILL_SEGMENT_H_
