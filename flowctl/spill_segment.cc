#include "flowctl/spill_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "flowctl/crc32c.h"

namespace flowctl::spill {
namespace {

constexpr char kSegmentPrefix[] = "seg-";
constexpr char kSegmentSuffix[] = ".log";
constexpr char kManifestMagic[8] = {'S', 'P', 'I', 'L', 'L', 'M', 'F', '1'};
constexpr size_t kManifestBytes = 8 + 8 + 8 + 4;

void PutLe32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// CRC of a frame whose payload CRC is known: extends it with the 12 header bytes it covers.
uint32_t FrameCrc(uint32_t payload_crc, const char* header) {
  return Crc32cExtend(Crc32cExtend(payload_crc, header, 4), header + 8, 8);
}

// Reads exactly n bytes at offset; returns the count read (short at end of file).
absl::StatusOr<size_t> PreadFull(int fd, const std::string& path, char* buf, size_t n,
                                 uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pread", path, errno);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

absl::Status WriteWholeFile(const std::string& path, absl::string_view data, bool sync) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open", path, errno);
  absl::Status s = PwriteAll(fd, path, data.data(), data.size(), nullptr, 0, 0);
  if (s.ok() && sync && fdatasync(fd) != 0) s = ErrnoError("fdatasync", path, errno);
  close(fd);
  return s;
}

}  // namespace

absl::Status ErrnoError(absl::string_view op, absl::string_view path, int err) {
  std::string msg = absl::StrCat("spill fifo: ", op, " ", path, ": ", strerror(err));
  // A full disk, a quota or a file size limit: the client is told to come back later, the
  // operator to free space.
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    return absl::ResourceExhaustedError(std::move(msg));
  }
  return absl::InternalError(std::move(msg));
}

void EncodeFrameHeader(uint64_t seq, uint32_t payload_size, uint32_t payload_crc,
                       char header[kFrameHeaderBytes]) {
  PutLe32(header, payload_size);
  PutLe64(header + 8, seq);
  PutLe32(header + 4, FrameCrc(payload_crc, header));
}

std::string SegmentFileName(uint64_t id) {
  return absl::StrFormat("%s%020d%s", kSegmentPrefix, id, kSegmentSuffix);
}

bool ParseSegmentFileName(absl::string_view name, uint64_t* id) {
  if (!absl::ConsumePrefix(&name, kSegmentPrefix) || !absl::ConsumeSuffix(&name, kSegmentSuffix) ||
      name.size() != 20) {
    return false;
  }
  return absl::SimpleAtoi(name, id);
}

absl::StatusOr<SegmentScan> ScanSegment(const std::string& path, uint64_t after_seq,
                                        uint64_t consumed_seq, uint32_t max_record_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoError("fstat", path, err);
  }
  SegmentScan scan;
  scan.file_bytes = static_cast<uint64_t>(st.st_size);
  std::string payload;
  uint64_t offset = 0;
  uint64_t prev_seq = after_seq;
  while (offset < scan.file_bytes) {
    uint64_t seq = 0;
    uint64_t next = 0;
    absl::Status s = ReadFrameAt(fd, path, offset, max_record_bytes, &seq, &payload, &next);
    if (s.ok() && seq <= prev_seq) {
      s = absl::DataLossError(
          absl::StrFormat("spill fifo: %s at offset %d: sequence %d does not follow %d", path,
                          offset, seq, prev_seq));
    }
    if (!s.ok()) {
      if (!absl::IsDataLoss(s)) {
        close(fd);
        return s;
      }
      scan.corruption = s;
      break;
    }
    if (scan.records == 0) scan.first_seq = seq;
    ++scan.records;
    scan.last_seq = seq;
    prev_seq = seq;
    if (seq > consumed_seq) {
      if (scan.unconsumed_records == 0) scan.unconsumed_offset = offset;
      ++scan.unconsumed_records;
      scan.unconsumed_bytes += payload.size();
    }
    offset = next;
  }
  scan.valid_bytes = offset;
  close(fd);
  return scan;
}

absl::Status ReadFrameAt(int fd, const std::string& path, uint64_t offset,
                         uint32_t max_record_bytes, uint64_t* seq, std::string* payload,
                         uint64_t* next_offset) {
  char header[kFrameHeaderBytes];
  auto got = PreadFull(fd, path, header, sizeof(header), offset);
  if (!got.ok()) return got.status();
  if (*got < sizeof(header)) {
    return absl::DataLossError(
        absl::StrFormat("spill fifo: %s at offset %d: truncated record header (%d of %d bytes)",
                        path, offset, *got, kFrameHeaderBytes));
  }
  const uint32_t size = GetLe32(header);
  if (size > max_record_bytes) {
    return absl::DataLossError(
        absl::StrFormat("spill fifo: %s at offset %d: record length %d exceeds the maximum %d",
                        path, offset, size, max_record_bytes));
  }
  payload->resize(size);
  got = PreadFull(fd, path, payload->data(), size, offset + kFrameHeaderBytes);
  if (!got.ok()) return got.status();
  if (*got < size) {
    return absl::DataLossError(
        absl::StrFormat("spill fifo: %s at offset %d: truncated record (%d of %d payload bytes)",
                        path, offset, *got, size));
  }
  if (FrameCrc(Crc32c(*payload), header) != GetLe32(header + 4)) {
    return absl::DataLossError(
        absl::StrFormat("spill fifo: %s at offset %d: record checksum mismatch", path, offset));
  }
  *seq = GetLe64(header + 8);
  *next_offset = offset + kFrameHeaderBytes + size;
  return absl::OkStatus();
}

absl::Status QuarantineTail(const std::string& dir, const std::string& name, uint64_t offset) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string qdir = absl::StrCat(dir, "/", kQuarantineDir);
  if (mkdir(qdir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir", qdir, errno);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path, errno);
  std::string tail;
  struct stat st;
  absl::Status s;
  if (fstat(fd, &st) != 0) {
    s = ErrnoError("fstat", path, errno);
  } else if (static_cast<uint64_t>(st.st_size) > offset) {
    tail.resize(static_cast<uint64_t>(st.st_size) - offset);
    auto got = PreadFull(fd, path, tail.data(), tail.size(), offset);
    if (!got.ok()) s = got.status();
    if (s.ok()) {
      tail.resize(*got);
      s = WriteWholeFile(absl::StrCat(qdir, "/", name, ".", offset), tail, /*sync=*/true);
    }
    if (s.ok() && ftruncate(fd, static_cast<off_t>(offset)) != 0) {
      s = ErrnoError("ftruncate", path, errno);
    }
    if (s.ok() && fdatasync(fd) != 0) s = ErrnoError("fdatasync", path, errno);
  }
  close(fd);
  return s;
}

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kManifestName);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("spill fifo: no ", path));
    return ErrnoError("open", path, errno);
  }
  char buf[kManifestBytes + 1];
  auto got = PreadFull(fd, path, buf, sizeof(buf), 0);
  close(fd);
  if (!got.ok()) return got.status();
  if (*got != kManifestBytes || memcmp(buf, kManifestMagic, 8) != 0 ||
      Crc32c(buf, kManifestBytes - 4) != GetLe32(buf + kManifestBytes - 4)) {
    return absl::DataLossError(absl::StrCat("spill fifo: ", path, " at offset 0: bad manifest"));
  }
  return Manifest{GetLe64(buf + 8), GetLe64(buf + 16)};
}

absl::Status WriteManifest(const std::string& dir, const Manifest& m, bool sync) {
  char buf[kManifestBytes];
  memcpy(buf, kManifestMagic, 8);
  PutLe64(buf + 8, m.consumed_seq);
  PutLe64(buf + 16, m.seq_limit);
  PutLe32(buf + kManifestBytes - 4, Crc32c(buf, kManifestBytes - 4));
  const std::string tmp = absl::StrCat(dir, "/", kManifestName, ".tmp");
  const std::string path = absl::StrCat(dir, "/", kManifestName);
  if (absl::Status s = WriteWholeFile(tmp, absl::string_view(buf, sizeof(buf)), sync); !s.ok()) {
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename", tmp, errno);
  return sync ? SyncDir(dir) : absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", dir, errno);
  absl::Status s;
  if (fsync(fd) != 0) s = ErrnoError("fsync", dir, errno);
  close(fd);
  return s;
}

absl::Status PwriteAll(int fd, const std::string& path, const char* a, size_t an, const char* b,
                       size_t bn, uint64_t offset) {
  iovec iov[2] = {{const_cast<char*>(a), an}, {const_cast<char*>(b), bn}};
  int iovcnt = bn > 0 ? 2 : 1;
  iovec* v = iov;
  while (iovcnt > 0) {
    const ssize_t w = pwritev(fd, v, iovcnt, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("pwritev", path, errno);
    }
    offset += static_cast<uint64_t>(w);
    size_t left = static_cast<size_t>(w);
    while (iovcnt > 0 && left >= v->iov_len) {
      left -= v->iov_len;
      ++v;
      --iovcnt;
    }
    if (iovcnt > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  return absl::OkStatus();
}

}  // namespace flowctl::spill
