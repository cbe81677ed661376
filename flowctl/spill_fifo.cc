#include "flowctl/spill_fifo.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "flowctl/crc32c.h"
#include "flowctl/spill_segment.h"
#include "flowctl/status_macros.h"
#include "flowctl/thread_name.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

absl::Status ValidateOptions(const SpillFifoOptions& o) {
  if (o.dir.empty()) return absl::InvalidArgumentError("spill fifo: dir must be set");
  if (o.segment_bytes == 0) {
    return absl::InvalidArgumentError("spill fifo: segment_bytes must be > 0");
  }
  if (o.max_record_bytes == 0 || o.max_record_bytes > (1u << 30)) {
    return absl::InvalidArgumentError("spill fifo: max_record_bytes must be in (0, 1 GiB]");
  }
  if (o.durability == SpillDurability::kInterval && o.sync_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("spill fifo: sync_interval must be > 0 for kInterval");
  }
  if (o.persist_every_bytes == 0 || o.persist_every_records == 0) {
    return absl::InvalidArgumentError(
        "spill fifo: persist_every_bytes and persist_every_records must be > 0");
  }
  if (o.disk_budget_bytes != 0 && o.disk_budget_bytes < SpillFifo::MinDiskBudget(o)) {
    return absl::InvalidArgumentError(absl::StrCat("spill fifo: disk_budget_bytes ",
                                                   o.disk_budget_bytes, " is below the minimum ",
                                                   SpillFifo::MinDiskBudget(o)));
  }
  return absl::OkStatus();
}

}  // namespace

struct SpillFifo::ActiveFile {
  ActiveFile(int fd, uint64_t id, std::string path) : fd(fd), id(id), path(std::move(path)) {}
  ~ActiveFile() { close(fd); }
  const int fd;
  const uint64_t id;
  const std::string path;
};

SpillFifo::SpillFifo(SpillFifoOptions options)
    : options_(std::move(options)), write_through_(options_.durability != SpillDurability::kNone) {
  absl::MutexLock l(&mu_);
  disk_budget_ = options_.disk_budget_bytes;
  memory_budget_ = options_.memory_bytes;
}

uint64_t SpillFifo::MinDiskBudget(const SpillFifoOptions& options) {
  return 2 * std::max<uint64_t>(options.segment_bytes,
                                spill::kFrameHeaderBytes + uint64_t{options.max_record_bytes});
}

absl::StatusOr<std::unique_ptr<SpillFifo>> SpillFifo::Open(SpillFifoOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (mkdir(options.dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return spill::ErrnoError("mkdir", options.dir, errno);
  }
  auto fifo = absl::WrapUnique(new SpillFifo(std::move(options)));
  const std::string lock_path = absl::StrCat(fifo->options_.dir, "/", spill::kLockName);
  fifo->lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fifo->lock_fd_ < 0) return spill::ErrnoError("open", lock_path, errno);
  if (flock(fifo->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("spill fifo: ", fifo->options_.dir, " is held by another SpillFifo"));
    }
    return spill::ErrnoError("flock", lock_path, errno);
  }
  RETURN_IF_ERROR(fifo->Recover());
  if (fifo->options_.durability == SpillDurability::kInterval) {
    SpillFifo* f = fifo.get();
    fifo->sync_thread_ = std::thread([f] {
      NameThisThread("spill-sync");
      f->SyncLoop();
    });
  }
  return fifo;
}

SpillFifo::~SpillFifo() {
  if (sync_thread_.joinable()) {
    {
      absl::MutexLock l(&mu_);
      stop_sync_ = true;
    }
    sync_thread_.join();
  }
  bool opened;
  {
    absl::MutexLock l(&manifest_mu_);
    opened = seq_limit_ != 0;  // Recover finished
  }
  if (opened) {
    if (absl::Status s = Sync(); !s.ok()) LOG(WARNING) << s;
    if (absl::Status s = PersistReadPosition(); !s.ok()) LOG(WARNING) << s;
  }
  if (reader_fd_ >= 0) close(reader_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

std::string SpillFifo::PathOf(uint64_t id) const {
  return absl::StrCat(options_.dir, "/", spill::SegmentFileName(id));
}

absl::Status SpillFifo::RotateLocked(uint64_t first_seq) {
  if (active_ != nullptr) {
    if (write_through_ && fdatasync(active_->fd) != 0) {
      const absl::Status s = spill::ErrnoError("fdatasync", active_->path, errno);
      absl::MutexLock l(&mu_);
      write_error_ = s;
      return s;
    }
    absl::MutexLock l(&mu_);
    for (Segment& seg : segments_) {
      if (seg.id == active_->id) seg.sealed = true;
    }
    if (write_through_) durable_seq_ = std::max(durable_seq_, last_written_seq_);
    active_.reset();
  }
  const std::string path = PathOf(first_seq);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return spill::ErrnoError("create", path, errno);
  active_ = std::make_shared<ActiveFile>(fd, first_seq, path);
  active_size_ = 0;
  if (write_through_) RETURN_IF_ERROR(spill::SyncDir(options_.dir));
  absl::MutexLock l(&mu_);
  segments_.push_back(Segment{first_seq, 0, 0, 0, false});
  return absl::OkStatus();
}

absl::Status SpillFifo::ReserveSeqsLocked(uint64_t seq) {
  absl::MutexLock ml(&manifest_mu_);
  uint64_t consumed;
  {
    absl::MutexLock l(&mu_);
    consumed = persisted_seq_;  // the consumer persists its own progress
  }
  const uint64_t limit = seq + kSeqReservation;
  RETURN_IF_ERROR(spill::WriteManifest(options_.dir, {consumed, limit}, write_through_));
  seq_limit_ = limit;
  seq_limit_cached_ = limit;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SpillFifo::Append(absl::string_view data) {
  if (data.size() > options_.max_record_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("spill fifo: record of ", data.size(),
                                                   " bytes exceeds max_record_bytes ",
                                                   options_.max_record_bytes));
  }
  const uint32_t size = static_cast<uint32_t>(data.size());
  const uint32_t payload_crc = Crc32c(data);  // outside the locks: producers checksum in parallel
  uint64_t seq;
  {
    absl::MutexLock wl(&write_mu_);
    bool spill;
    bool rotate_first;
    {
      absl::MutexLock l(&mu_);
      if (!write_error_.ok()) return write_error_;
      seq = next_seq_;
      // Only the consumer changes these concurrently, and only downwards, so a memory decision
      // stays valid; a stale spill decision merely sends one record to disk early.
      spill = disk_records_ > 0 || memory_bytes_ + size > memory_budget_;
      if ((write_through_ || spill) && disk_budget_ > 0) {
        // Only producers add bytes, and they hold write_mu_: the check holds until the write.
        const uint64_t held = DiskBytesLocked();
        if (held + spill::kFrameHeaderBytes + size > disk_budget_) {
          ++counters_.refused;
          return absl::ResourceExhaustedError(
              absl::StrCat(kDiskBudgetFull, ": segment files hold ", held, " of ", disk_budget_,
                           " bytes; the record waits for the drain"));
        }
      }
      rotate_first = spill && rotate_before_spill_;
      if (rotate_first) rotate_before_spill_ = false;
    }
    if (seq >= seq_limit_cached_) RETURN_IF_ERROR(ReserveSeqsLocked(seq));
    uint64_t offset = 0;
    uint64_t segment = 0;
    const uint64_t frame = spill::kFrameHeaderBytes + size;
    if (write_through_ || spill) {
      if (active_ == nullptr ||
          (active_size_ > 0 && (rotate_first || active_size_ + frame > options_.segment_bytes))) {
        RETURN_IF_ERROR(RotateLocked(seq));
      }
      char header[spill::kFrameHeaderBytes];
      spill::EncodeFrameHeader(seq, size, payload_crc, header);
      absl::Status s = spill::PwriteAll(active_->fd, active_->path, header, sizeof(header),
                                        data.data(), size, active_size_);
      if (!s.ok()) {
        // Cut a partial frame so the next append starts on a frame boundary.
        if (ftruncate(active_->fd, static_cast<off_t>(active_size_)) != 0) {
          absl::MutexLock l(&mu_);
          write_error_ = s;
        }
        return s;
      }
      if (options_.durability == SpillDurability::kEveryRecord && fdatasync(active_->fd) != 0) {
        s = spill::ErrnoError("fdatasync", active_->path, errno);
        absl::MutexLock l(&mu_);
        write_error_ = s;
        return s;
      }
      offset = active_size_;
      segment = active_->id;
      active_size_ += frame;
      last_written_seq_ = seq;
    }
    std::optional<Record> in_memory;
    if (!spill) in_memory.emplace(Record{seq, std::string(data)});  // allocate outside mu_

    absl::MutexLock l(&mu_);
    next_seq_ = seq + 1;
    ++counters_.appended;
    if (write_through_ || spill) {
      Segment& seg = segments_.back();
      CHECK_EQ(seg.id, segment);
      seg.size = offset + frame;
      ++seg.records;
      seg.last_seq = seq;
    }
    if (options_.durability == SpillDurability::kEveryRecord) durable_seq_ = seq;
    if (spill) {
      if (disk_records_ == 0) {
        read_segment_ = segment;
        read_offset_ = offset;
      }
      ++disk_records_;
      disk_record_bytes_ += size;
      ++counters_.spilled;
    } else {
      memory_.push_back(std::move(*in_memory));
      ++memory_records_;
      memory_bytes_ += size;
    }
  }
  return seq;
}

uint64_t SpillFifo::durable_seq() const {
  absl::MutexLock l(&mu_);
  return durable_seq_;
}

absl::Status SpillFifo::WaitDurable(uint64_t seq) {
  if (!write_through_) {
    return absl::FailedPreconditionError("spill fifo: durability kNone has no durable records");
  }
  absl::MutexLock l(&mu_);
  if (seq >= next_seq_) {
    return absl::InvalidArgumentError(absl::StrCat("spill fifo: seq ", seq, " not appended"));
  }
  auto done = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return durable_seq_ >= seq || !write_error_.ok() || stop_sync_;
  };
  mu_.Await(absl::Condition(&done));
  if (!write_error_.ok()) return write_error_;
  if (durable_seq_ < seq) return absl::CancelledError("spill fifo: closing");
  return absl::OkStatus();
}

absl::Status SpillFifo::Sync() { return write_through_ ? SyncOnce() : absl::OkStatus(); }

absl::Status SpillFifo::SyncOnce() {
  std::shared_ptr<ActiveFile> file;
  uint64_t target;
  {
    absl::MutexLock wl(&write_mu_);
    file = active_;
    target = last_written_seq_;
  }
  {
    absl::MutexLock l(&mu_);
    if (!write_error_.ok()) return write_error_;
    if (target <= durable_seq_) return absl::OkStatus();
  }
  // Records up to `target` are in `file` or in segments fdatasync'ed when they were sealed. The
  // shared_ptr keeps the descriptor open even if a producer rotates meanwhile.
  if (file != nullptr && fdatasync(file->fd) != 0) {
    const absl::Status s = spill::ErrnoError("fdatasync", file->path, errno);
    absl::MutexLock l(&mu_);
    write_error_ = s;
    return s;
  }
  absl::MutexLock l(&mu_);
  durable_seq_ = std::max(durable_seq_, target);
  return absl::OkStatus();
}

void SpillFifo::SyncLoop() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_sync_), options_.sync_interval);
      if (stop_sync_) return;
    }
    // Errors are sticky in write_error_; Append and WaitDurable report them.
    SyncOnce().IgnoreError();
  }
}

absl::StatusOr<const SpillFifo::Record*> SpillFifo::Front() {
  if (front_.has_value()) return &*front_;
  {
    absl::MutexLock l(&mu_);
    if (!memory_.empty()) {
      front_ = std::move(memory_.front());
      memory_.pop_front();
      front_on_disk_ = false;
      return &*front_;
    }
    if (disk_records_ == 0) return nullptr;
  }
  RETURN_IF_ERROR(ReadDiskFront());
  return &*front_;
}

absl::Status SpillFifo::ReadDiskFront() {
  uint64_t segment;
  uint64_t offset;
  {
    absl::MutexLock l(&mu_);
    // Move the cursor past ends of sealed segments (and past segments already deleted).
    while (true) {
      auto it = std::find_if(segments_.begin(), segments_.end(),
                             [&](const Segment& s) { return s.id >= read_segment_; });
      if (it == segments_.end()) {
        return absl::InternalError("spill fifo: disk backlog without a segment");
      }
      if (it->id != read_segment_) {
        read_segment_ = it->id;
        read_offset_ = 0;
      }
      if (read_offset_ < it->size) break;
      if (!it->sealed) return absl::InternalError("spill fifo: disk backlog past the log end");
      read_segment_ = it->id + 1;
    }
    segment = read_segment_;
    offset = read_offset_;
  }
  const std::string path = PathOf(segment);
  if (reader_fd_ < 0 || reader_segment_ != segment) {
    if (reader_fd_ >= 0) close(reader_fd_);
    reader_fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (reader_fd_ < 0) return spill::ErrnoError("open", path, errno);
    reader_segment_ = segment;
  }
  Record r;
  uint64_t next = 0;
  RETURN_IF_ERROR(spill::ReadFrameAt(reader_fd_, path, offset, options_.max_record_bytes, &r.seq,
                                     &r.data, &next));
  front_ = std::move(r);
  front_on_disk_ = true;
  front_segment_ = segment;
  front_next_offset_ = next;
  return absl::OkStatus();
}

absl::Status SpillFifo::Pop() {
  if (!front_.has_value()) {
    ASSIGN_OR_RETURN(const Record* r, Front());
    if (r == nullptr) return absl::FailedPreconditionError("spill fifo: Pop on an empty FIFO");
  }
  bool persist;
  {
    absl::MutexLock l(&mu_);
    const uint64_t size = front_->data.size();
    if (front_on_disk_) {
      --disk_records_;
      disk_record_bytes_ -= size;
      read_segment_ = front_segment_;
      read_offset_ = front_next_offset_;
      // Without write-through the drained segment holds only consumed records: seal it at the
      // next spill so it can be deleted.
      if (disk_records_ == 0 && !write_through_) rotate_before_spill_ = true;
    } else {
      --memory_records_;
      memory_bytes_ -= size;
    }
    consumed_seq_ = front_->seq;
    ++counters_.consumed;
    unpersisted_bytes_ += size;
    ++unpersisted_records_;
    persist = unpersisted_bytes_ >= options_.persist_every_bytes ||
              unpersisted_records_ >= options_.persist_every_records || ReclaimableLocked();
  }
  front_.reset();
  return persist ? PersistReadPosition() : absl::OkStatus();
}

uint64_t SpillFifo::DiskBytesLocked() const {
  uint64_t bytes = unlinking_bytes_;
  for (const Segment& seg : segments_) bytes += seg.size;
  return bytes;
}

bool SpillFifo::ReclaimableLocked() const {
  // What PersistReadPosition would delete: a sealed oldest segment at or below the position it
  // would persist (which may already be persisted: a segment sealed after its records were).
  if (segments_.empty()) return false;
  const Segment& oldest = segments_.front();
  return oldest.sealed &&
         oldest.last_seq <= std::max(persisted_seq_, std::min(consumed_seq_, persist_limit_));
}

absl::Status SpillFifo::PersistIfReclaimable() {
  {
    absl::MutexLock l(&mu_);
    if (!ReclaimableLocked()) return absl::OkStatus();
  }
  return PersistReadPosition();
}

absl::Status SpillFifo::SetDiskBudget(uint64_t bytes) {
  if (bytes != 0 && bytes < MinDiskBudget(options_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spill fifo: disk budget ", bytes, " is below the minimum ", MinDiskBudget(options_)));
  }
  absl::MutexLock l(&mu_);
  disk_budget_ = bytes;
  return absl::OkStatus();
}

void SpillFifo::SetMemoryBudget(uint64_t bytes) {
  absl::MutexLock l(&mu_);
  memory_budget_ = bytes;
}

uint64_t SpillFifo::disk_budget() const {
  absl::MutexLock l(&mu_);
  return disk_budget_;
}

uint64_t SpillFifo::BytesToDrainForRoom(uint64_t record_bytes) const {
  absl::MutexLock l(&mu_);
  if (disk_budget_ == 0) return 0;
  const uint64_t held = DiskBytesLocked();
  const uint64_t want = held + spill::kFrameHeaderBytes + record_bytes;
  if (want <= disk_budget_) return 0;
  // Segments free oldest first, whole: walk them until enough is freed, adding what each still
  // holds unconsumed (its payload's share of its seqs above the consumed one; a segment's id is
  // its first seq).
  // Records consumed but not yet safe (their commits pending, under a persist limit) still hold
  // their segment: they count as left to drain, since commits follow the drain.
  const uint64_t safe = std::max(persisted_seq_, std::min(consumed_seq_, persist_limit_));
  uint64_t freed = 0;
  uint64_t to_drain = 0;
  for (const Segment& seg : segments_) {
    if (seg.records > 0 && seg.last_seq > safe) {
      const uint64_t seqs = seg.last_seq - std::min(seg.last_seq, seg.id) + 1;
      const uint64_t left = std::min(seqs, seg.last_seq - safe);
      const uint64_t payload =
          seg.size - std::min(seg.size, seg.records * spill::kFrameHeaderBytes);
      to_drain += payload / seqs * left;
    }
    freed += seg.size;
    if (want - std::min(want, freed) <= disk_budget_) break;
  }
  return std::max<uint64_t>(to_drain, 1);
}

std::vector<std::pair<uint64_t, uint64_t>> SpillFifo::TakeDeletableLocked(uint64_t consumed) {
  std::vector<std::pair<uint64_t, uint64_t>> doomed;
  while (!segments_.empty() && segments_.front().sealed && segments_.front().last_seq <= consumed) {
    doomed.push_back({segments_.front().id, segments_.front().size});
    unlinking_bytes_ += segments_.front().size;  // on disk until unlinked
    segments_.pop_front();
  }
  return doomed;
}

void SpillFifo::SetPersistLimit(uint64_t seq) {
  absl::MutexLock l(&mu_);
  persist_limit_ = seq;
  // A commit may be what makes a consumed segment deletable: wake an idle consumer to free it
  // (PersistIfReclaimable) rather than leave a full disk budget to its next timeout.
  if (ReclaimableLocked()) wake_consumer_ = true;
}

absl::Status SpillFifo::PersistReadPosition() {
  std::vector<std::pair<uint64_t, uint64_t>> doomed;  // (segment id, bytes)
  {
    absl::MutexLock ml(&manifest_mu_);
    uint64_t consumed;
    {
      absl::MutexLock l(&mu_);
      consumed = std::max(persisted_seq_, std::min(consumed_seq_, persist_limit_));
    }
    RETURN_IF_ERROR(spill::WriteManifest(options_.dir, {consumed, seq_limit_}, write_through_));
    absl::MutexLock l(&mu_);
    persisted_seq_ = std::max(persisted_seq_, consumed);
    unpersisted_bytes_ = 0;
    unpersisted_records_ = 0;
    // The manifest now says these are consumed, so deleting them cannot lose anything.
    doomed = TakeDeletableLocked(consumed);
  }
  absl::Status first_error;
  for (const auto& [id, size] : doomed) {
    if (reader_fd_ >= 0 && reader_segment_ == id) {
      close(reader_fd_);
      reader_fd_ = -1;
    }
    const std::string path = PathOf(id);
    // A file that fails to go stays counted against the disk budget (it still takes the space);
    // one already gone (ENOENT) does not. The others in the list are still deleted.
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      if (first_error.ok()) first_error = spill::ErrnoError("unlink", path, errno);
      continue;
    }
    absl::MutexLock l(&mu_);
    unlinking_bytes_ -= size;
  }
  return first_error;
}

bool SpillFifo::WaitForRecords(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return memory_records_ + disk_records_ > 0 || wake_consumer_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  wake_consumer_ = false;
  return memory_records_ + disk_records_ > 0;
}

void SpillFifo::WakeConsumer() {
  absl::MutexLock l(&mu_);
  wake_consumer_ = true;
}

bool SpillFifo::empty() const {
  absl::MutexLock l(&mu_);
  return memory_records_ + disk_records_ == 0;
}

SpillFifoStats SpillFifo::stats() const {
  absl::MutexLock l(&mu_);
  SpillFifoStats s = counters_;
  s.memory_records = memory_records_;
  s.memory_bytes = memory_bytes_;
  s.disk_records = disk_records_;
  s.disk_record_bytes = disk_record_bytes_;
  s.disk_bytes = DiskBytesLocked();
  s.segments = segments_.size();
  s.next_seq = next_seq_;
  s.consumed_seq = consumed_seq_;
  s.persisted_seq = persisted_seq_;
  s.durable_seq = durable_seq_;
  s.disk_budget_bytes = disk_budget_;
  s.memory_budget_bytes = memory_budget_;
  return s;
}

absl::Status SpillFifo::recovery_status() const {
  absl::MutexLock l(&mu_);
  return recovery_status_;
}

}  // namespace flowctl
