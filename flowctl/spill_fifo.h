// SpillFifo: the lossless FIFO of lossless mode. A bounded memory tier in front of append-only
// segment files on disk, strictly FIFO across both, with a persisted read position.
//
// Producers Append(record) and get its sequence number: seqs increase strictly, start at 1 and
// may jump (never repeat) across a reopen. One consumer reads Front() and consumes it with Pop().
//
// Tiers. While no record waits on disk, a record whose payload fits the memory budget
// (`memory_bytes`) is kept in memory; otherwise it is "spilled": readable only from disk. Once
// one record is spilled, every later record is spilled too until the consumer has drained the
// disk backlog, so the consumer reads memory (older) then disk (newer) and order is strict.
//
// Durability. The policy decides whether the memory tier is a write-through cache of the log:
//   kNone      memory-tier records live only in memory; spilled records are written to the
//              segment (OS page cache) but never fdatasync'ed. Process crash: memory-tier
//              records are lost, spilled records survive. Machine crash: anything may be lost.
//   kInterval  every record is written to the log before Append returns (memory tier = cache);
//              a group commit fdatasyncs the active segment at most every `sync_interval`
//              (default 10 ms). Process crash (SIGKILL): every acknowledged record survives.
//              Machine crash: records with seq <= durable_seq() survive; WaitDurable(seq) waits
//              for that (at most about one interval plus one fdatasync).
//   kEveryRecord  every record is written and fdatasync'ed before Append returns. Process or
//              machine crash: every acknowledged record survives.
// "Acknowledged" means Append returned OK (for kInterval's machine-crash guarantee: and
// WaitDurable(seq) returned OK). Consumed records are not kept: a segment is deleted once every
// record in it has been consumed and the read position covering them has been persisted.
//
// Crash and reopen. Open() on an existing directory resumes after the persisted read position.
// The position is persisted at least every `persist_every_bytes` consumed payload bytes (and
// every `persist_every_records` records) and before a segment is deleted, so a crash replays at
// most that much already-consumed data, with the original seqs: a consumer that remembers the
// last seq it processed drops seq <= that. A seq reservation kept in the manifest guarantees new
// records never reuse a seq handed out before the crash, even one that was lost.
//
// Disk budget. With `disk_budget_bytes` set (live with SetDiskBudget), an append that would
// take the segment files past it is refused with RESOURCE_EXHAUSTED and changes nothing: the
// files hold at most the budget (consumed records included, until their segment is deleted).
// Space comes back a segment at a time, once every record in it is consumed and the read
// position covering them is persisted (under a persist limit: once the limit passes them).
// BytesToDrainForRoom says how much must be consumed before a record fits, for a retry hint.
// The budget is at least two segments (or two of the largest records), so the active segment
// can always fill and rotate while the one before it is being drained.
//
// Corruption. Open() validates every frame (length, CRC32C, increasing seq). At the first bad or
// short frame of a segment everything before it is kept, the tail is moved to
// `<dir>/quarantine/<segment>.<offset>` and the segment truncated (later segments are kept, and
// appends go on in a new segment); recovery_status() returns a DataLossError naming the file and
// offset (Open itself succeeds) and stats() counts it. A record torn by a crash mid-write looks
// the same; it was never acknowledged.
//
// Thread-safety: Append, WaitDurable, Sync, stats and the accessors may be called from any
// thread; Front, Pop and PersistReadPosition from one consumer thread at a time. Producers
// serialize on a write lock while they write; the consumer takes only the short state lock, so a
// slow write or fdatasync never blocks it (it reads disk records through its own descriptor).
//
//   ASSIGN_OR_RETURN(auto fifo, flowctl::SpillFifo::Open({.dir = "/var/node/spill/p1"}));
//   ASSIGN_OR_RETURN(uint64_t seq, fifo->Append(bytes));
//   ASSIGN_OR_RETURN(const flowctl::SpillFifo::Record* r, fifo->Front());
//   if (r != nullptr && Send(r->data).ok()) RETURN_IF_ERROR(fifo->Pop());
#ifndef FLOWCTL_SPILL_FIFO_H_
#define FLOWCTL_SPILL_FIFO_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flowctl {

enum class SpillDurability { kNone, kInterval, kEveryRecord };

struct SpillFifoOptions {
  std::string dir;                       // created if missing (one level)
  uint64_t memory_bytes = 4 << 20;       // memory tier budget, payload bytes
  uint64_t segment_bytes = 64 << 20;     // rotate the active segment past this size
  uint32_t max_record_bytes = 16 << 20;  // larger appends are refused
  SpillDurability durability = SpillDurability::kInterval;
  absl::Duration sync_interval = absl::Milliseconds(10);  // kInterval group-commit period
  uint64_t persist_every_bytes = 1 << 20;  // replay bound after a crash, payload bytes
  uint64_t persist_every_records = 4096;   // replay bound after a crash, records
  // Most bytes in segment files; 0 = no budget. Else >= MinDiskBudget(options).
  uint64_t disk_budget_bytes = 0;
};

struct SpillFifoStats {
  uint64_t appended = 0;             // records appended since Open
  uint64_t consumed = 0;             // records popped since Open
  uint64_t spilled = 0;              // appended records that went to the disk tier
  uint64_t memory_records = 0;       // memory tier now
  uint64_t memory_bytes = 0;         // memory tier now, payload bytes
  uint64_t disk_records = 0;         // disk tier backlog now (unconsumed, readable only from disk)
  uint64_t disk_record_bytes = 0;    // disk tier backlog now, payload bytes
  uint64_t disk_bytes = 0;           // bytes in segment files now (includes consumed records)
  uint64_t segments = 0;             // segment files now
  uint64_t next_seq = 0;             // seq the next Append will get
  uint64_t consumed_seq = 0;         // highest consumed seq (0 = none)
  uint64_t persisted_seq = 0;        // consumed_seq as last persisted (replay starts after it)
  uint64_t durable_seq = 0;          // see durable_seq()
  uint64_t recovered_records = 0;    // unconsumed records found on disk by Open
  uint64_t corruptions = 0;          // corrupt segment tails found by Open
  uint64_t quarantined_bytes = 0;    // bytes moved to quarantine by Open
  uint64_t disk_budget_bytes = 0;    // the budget now (0 = none)
  uint64_t memory_budget_bytes = 0;  // the memory tier's budget now
  uint64_t refused = 0;              // appends refused by the disk budget since Open
};

class SpillFifo {
 public:
  struct Record {
    uint64_t seq = 0;
    std::string data;
  };

  // Opens (creating or recovering) the FIFO in options.dir, which no other SpillFifo may hold
  // (a LOCK file is flock'ed; FailedPrecondition when taken). InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<SpillFifo>> Open(SpillFifoOptions options);

  // Stops the group-commit thread, syncs (unless kNone) and persists the read position.
  ~SpillFifo();

  SpillFifo(const SpillFifo&) = delete;
  SpillFifo& operator=(const SpillFifo&) = delete;

  // In the message of every disk-budget refusal (and no other error's).
  static constexpr absl::string_view kDiskBudgetFull = "spill fifo: disk budget full";

  // The smallest disk budget `options` allow: two segments or two of the largest records.
  static uint64_t MinDiskBudget(const SpillFifoOptions& options);

  // Appends a record; returns its seq once it is acknowledged under the policy (see above).
  // InvalidArgument when larger than max_record_bytes; ResourceExhausted, changing nothing, when
  // it would take the segment files past the disk budget; an I/O error leaves the FIFO unchanged,
  // and a failed fdatasync makes every later Append fail (the page cache can no longer be
  // trusted). Thread-safe.
  absl::StatusOr<uint64_t> Append(absl::string_view data);

  // Highest seq such that every record with seq <= it survives a machine crash (0 under kNone).
  uint64_t durable_seq() const;
  // Blocks until durable_seq() >= seq. FailedPrecondition under kNone; the write error, if any.
  absl::Status WaitDurable(uint64_t seq);
  // fdatasyncs the active segment now (no-op under kNone).
  absl::Status Sync();

  // The oldest unconsumed record, or nullptr when the FIFO is empty. The pointer stays valid
  // until Pop(). DataLossError (file, offset) if a disk record fails its checksum. Consumer only.
  absl::StatusOr<const Record*> Front();
  // Consumes the record Front() returns (reading it first if needed). FailedPrecondition when
  // empty. May persist the read position and delete consumed segments; if that I/O fails the
  // record is still consumed and the error returned (the next persist retries). Consumer only.
  absl::Status Pop();
  // Persists the read position now and deletes fully consumed segments. Consumer only.
  absl::Status PersistReadPosition();
  // PersistReadPosition if that would delete a segment (its records all consumed, and the
  // persist limit past them); else nothing. A consumer that has emptied the FIFO calls it while
  // idle: a limit moved by a later commit then frees space without another Pop. Consumer only.
  absl::Status PersistIfReclaimable();

  // Changes the disk budget live (0 = none). InvalidArgument below MinDiskBudget. Lowering it
  // below what the files hold refuses appends until enough is drained; nothing is dropped.
  absl::Status SetDiskBudget(uint64_t bytes);
  uint64_t disk_budget() const;
  // Changes the memory tier's budget live (the arbiter's memory share). Records already in
  // memory stay there until consumed (nothing moves, nothing is lost); appends that do not fit
  // the new budget go to the disk tier. An append deciding concurrently may use the old budget.
  void SetMemoryBudget(uint64_t bytes);
  // Payload bytes still to be consumed (oldest first) before a record of `record_bytes` fits the
  // disk budget: 0 when it fits now. An estimate within a segment (by seq, not offset); a caller
  // divides it by the drain rate for a retry hint.
  uint64_t BytesToDrainForRoom(uint64_t record_bytes) const;
  // Caps what PersistReadPosition records as consumed (default: no cap). A consumer whose
  // records are not safe until some later step (e.g. a transaction's commit) keeps the cap at
  // its last safe seq: after a crash, replay starts right after it, so nothing past the cap is
  // lost (it may be delivered again). Any thread; takes effect at the next persist.
  void SetPersistLimit(uint64_t seq);

  // Blocks until the FIFO holds a record, WakeConsumer() is called (a call made before the wait
  // counts once), or `timeout` passes. Returns !empty(). Consumer only (e.g. a drain thread).
  bool WaitForRecords(absl::Duration timeout);
  // Wakes the consumer's current or next WaitForRecords. Thread-safe.
  void WakeConsumer();

  bool empty() const;
  SpillFifoStats stats() const;
  // OK, or the DataLossError of the first corruption Open found (file and offset).
  absl::Status recovery_status() const;
  const SpillFifoOptions& options() const { return options_; }

 private:
  struct Segment {
    uint64_t id = 0;
    uint64_t size = 0;  // bytes of complete frames
    uint64_t records = 0;
    uint64_t last_seq = 0;  // 0 when empty
    bool sealed = false;    // no more appends (not the active segment)
  };
  struct ActiveFile;  // the writer's descriptor, shared with the group-commit thread

  // Seqs handed out per manifest rewrite. A reopen skips to the reserved limit, so seqs lost in
  // a crash are never reused; 2^20 per reopen leaves room for ~10^13 reopens in a uint64.
  static constexpr uint64_t kSeqReservation = uint64_t{1} << 20;

  explicit SpillFifo(SpillFifoOptions options);
  absl::Status Recover();  // in spill_fifo_recovery.cc
  std::string PathOf(uint64_t id) const;

  absl::Status RotateLocked(uint64_t first_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status ReserveSeqsLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status SyncOnce() ABSL_LOCKS_EXCLUDED(write_mu_, mu_);
  void SyncLoop();
  absl::Status ReadDiskFront();
  // Segments whose records are all consumed up to `consumed`, as (id, bytes); removes them from
  // segments_ and counts their bytes in unlinking_bytes_ until the caller unlinks them.
  std::vector<std::pair<uint64_t, uint64_t>> TakeDeletableLocked(uint64_t consumed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A segment would be deleted by PersistReadPosition now.
  bool ReclaimableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t DiskBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const SpillFifoOptions options_;
  const bool write_through_;  // durability != kNone: every record goes to the log
  int lock_fd_ = -1;
  std::thread sync_thread_;

  // Lock order: write_mu_ before manifest_mu_ before mu_.
  // Producers' lock: held while a record is written (and fdatasync'ed under kEveryRecord).
  absl::Mutex write_mu_;
  std::shared_ptr<ActiveFile> active_ ABSL_GUARDED_BY(write_mu_);
  uint64_t active_size_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t last_written_seq_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t seq_limit_cached_ ABSL_GUARDED_BY(write_mu_) = 0;  // copy of seq_limit_

  // Serializes manifest rewrites so the persisted position only moves forward.
  absl::Mutex manifest_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  uint64_t seq_limit_ ABSL_GUARDED_BY(manifest_mu_) = 0;

  // State below is protected by mu_ (short critical sections only; no I/O under it).
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(manifest_mu_);
  std::deque<Record> memory_ ABSL_GUARDED_BY(mu_);    // memory tier, oldest first
  uint64_t memory_records_ ABSL_GUARDED_BY(mu_) = 0;  // includes a memory front_ not yet popped
  uint64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t disk_records_ ABSL_GUARDED_BY(mu_) = 0;  // includes a disk front_ not yet popped
  uint64_t disk_record_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Segment> segments_ ABSL_GUARDED_BY(mu_);  // by id; last one active unless sealed
  // Where the next disk-tier record starts; meaningful while disk_records_ > 0.
  uint64_t read_segment_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t read_offset_ ABSL_GUARDED_BY(mu_) = 0;
  bool rotate_before_spill_ ABSL_GUARDED_BY(mu_) = false;  // kNone: seal a drained segment
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t consumed_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t persisted_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t persist_limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  uint64_t unpersisted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unpersisted_records_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t durable_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t disk_budget_ ABSL_GUARDED_BY(mu_) = 0;      // 0 = none
  uint64_t memory_budget_ ABSL_GUARDED_BY(mu_) = 0;    // of the memory tier, payload bytes
  uint64_t unlinking_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // taken from segments_, not yet unlinked
  absl::Status write_error_ ABSL_GUARDED_BY(mu_);      // sticky: a failed fdatasync
  bool stop_sync_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_consumer_ ABSL_GUARDED_BY(mu_) = false;
  SpillFifoStats counters_ ABSL_GUARDED_BY(mu_);  // appended, consumed, spilled, recovery
  absl::Status recovery_status_ ABSL_GUARDED_BY(mu_);

  // Consumer-owned (only the consumer thread touches these).
  std::optional<Record> front_;
  bool front_on_disk_ = false;
  uint64_t front_segment_ = 0;  // disk front_: its segment and the offset after it
  uint64_t front_next_offset_ = 0;
  int reader_fd_ = -1;
  uint64_t reader_segment_ = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_SPILL_FIFO_H_
