// ReadHold: client reads that a partition's read chain refused for now, kept in arrival order
// until the chain admits them, instead of refused at once (PartitionConfig.read_hold).
//
// Why: a read refused at once costs the node its whole gRPC call (HTTP/2 framing, the callback,
// the parse) and lets the client send the next one at once, so refusing a flood saves only the
// lookup behind it. A read that waits instead keeps one of its client's calls in flight: a client
// that bounds its calls in flight (every SDK and loadgen does; HTTP/2's max_concurrent_streams
// makes the others) sends no more than the chain admits plus what waits. Beyond `max_waiting` per
// partition, or past its `max_wait`, a read is refused as before.
//
// Order: one queue per partition (keyed by its id); within it, each client's reads (the caller's
// client key: the connection's peer address) first in first out, and the clients in turn: the
// next admission goes to the next client with a read waiting, so a reader with one call in
// flight waits about one admission per waiting client, not behind a flood's whole queue. Only
// one head is tried again, when the refusing stage's retry-after has passed (a rate stage: when
// its next token is due), so a queue costs one wake-up per admitted read, not one per waiting
// read. While a queue holds reads (or a head is being tried), a new read of that partition joins
// its client's tail without trying the chain itself, so it cannot overtake them.
//
// Cancelled calls: a read whose client cancelled it leaves its queue at the next sweep of that
// queue (at most every kCancelSweepNanos: when the queue runs, or when a Hold finds it full), not
// only when it reaches its client's head, so cancelled calls do not hold places of max_waiting.
//
// Thread-safety: every method is thread-safe. HeldRead calls run on the hold's thread (or the
// caller of RunDue, Stop, EndOwner, EndQueue, or of a Hold that swept cancelled reads) without
// the hold's lock, one at a time per read (HeldRead::Cancelled excepted: under the lock); a
// HeldRead is destroyed without the lock too (it may hold the last reference to a partition).
//
//   runtime::ReadHold hold(flowctl::Clock::Real());
//   hold.Start();
//   if (hold.Hold(this, partition_id, peer, read, retry_after_ns, max_wait_ns, 1024) !=
//       runtime::ReadHold::HoldResult::kHeld)
//     ...  // refuse now
//   hold.Stop();  // every waiting read gets GiveUp(kShutdown)
#ifndef RUNTIME_READ_HOLD_H_
#define RUNTIME_READ_HOLD_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flowctl/clock.h"

namespace runtime {

// One waiting read, as the hold sees it.
class HeldRead {
 public:
  enum class GiveUpReason { kWaitOver, kShutdown, kPartitionStopped, kCancelled };
  enum class TryResult {
    kAdmitted,  // admitted; Answer() is called next (the admission is kept until then)
    kWait,      // still refused for now; `*retry_after_ns` is the refusing stage's hint
    kDone,      // answered already (the call is gone, the partition stopped, or the chain
                // now refuses it for good)
  };
  virtual ~HeldRead() = default;
  // Runs the read chain again at `now_ns`.
  virtual TryResult TryAdmit(int64_t now_ns, int64_t* retry_after_ns) = 0;
  // Answers the read admitted by TryAdmit.
  virtual void Answer() = 0;
  // The read will not be tried again: answers it with its last refusal (kWaitOver), as the server
  // stopping (kShutdown), as its partition stopping (kPartitionStopped) or as cancelled by its
  // client (kCancelled).
  virtual void GiveUp(GiveUpReason reason) = 0;
  // Whether its client has cancelled the call. Called with the hold's lock held, from any thread:
  // must be cheap and must not call the hold.
  virtual bool Cancelled() const { return false; }
};

struct ReadHoldCounters {
  uint64_t held = 0;      // reads that waited
  uint64_t answered = 0;  // of those, admitted and answered
  uint64_t expired = 0;   // of those, answered otherwise: the wait ran out, shutdown, cancelled
  uint64_t full = 0;      // reads refused at once because their queue was full
  uint64_t waiting = 0;   // now
};

class ReadHold {
 public:
  // The least and the most time between two tries of a queue's head (a stage hinting 0 or a
  // huge retry-after is tried again after these).
  static constexpr int64_t kMinRetryNanos = 1'000'000;
  static constexpr int64_t kMaxRetryNanos = 100'000'000;
  // How often a queue's waiting reads are checked for cancelled calls, at most.
  static constexpr int64_t kCancelSweepNanos = 100'000'000;

  enum class HoldResult { kHeld, kFull, kStopped };

  explicit ReadHold(const flowctl::Clock* clock);
  ~ReadHold();  // Stop()
  ReadHold(const ReadHold&) = delete;
  ReadHold& operator=(const ReadHold&) = delete;

  // Runs RunDue on a thread of its own, on the real time of the clock given. Optional: a test
  // with a fake clock calls RunDue itself.
  void Start();
  // Gives up every waiting read (kShutdown) and refuses later Holds. Idempotent.
  void Stop();
  // Gives up the waiting reads `owner` held (kShutdown) and refuses its later Holds: one server
  // of several on the node stopping. Idempotent.
  void EndOwner(const void* owner);
  // Gives up the reads waiting in `queue` (kPartitionStopped): its partition stopped. Later Holds
  // of the queue are taken (a partition started again under the same id).
  void EndQueue(uint64_t queue);

  // Whether reads of `queue` wait (or its head is being tried): a new read of it should Hold
  // without trying the chain.
  bool Waiting(uint64_t queue) const;
  // Appends `read` (from `owner`, sent by `client`) to `queue`. When it becomes the head, it is
  // tried
  // `retry_after_ns` after now at the earliest; it is given up (kWaitOver) `max_wait_ns` after
  // now. kFull (the queue holds `max_waiting` reads) or kStopped (the hold or the owner is
  // stopped): `read` is untouched and the caller answers it.
  HoldResult Hold(const void* owner, uint64_t queue, const std::string& client,
                  std::unique_ptr<HeldRead>& read, int64_t retry_after_ns, int64_t max_wait_ns,
                  size_t max_waiting);

  // Tries the heads that are due, gives up the reads whose wait ran out, and returns when the
  // next head is due (INT64_MAX: none waits).
  int64_t RunDue();

  // Counters of `queue` (waiting: now), and of all queues together.
  ReadHoldCounters Counters(uint64_t queue) const;
  ReadHoldCounters Totals() const;

 private:
  struct Entry {
    std::unique_ptr<HeldRead> read;
    int64_t deadline_ns = 0;
    const void* owner = nullptr;
  };
  struct ClientReads {
    std::deque<Entry> entries;  // arrival order
    bool in_turns = false;
  };
  struct Queue {
    // Each client's reads, and the clients with reads waiting in turn order (front: the one
    // whose head is tried next; a client is in `turns` at most once).
    std::map<std::string, ClientReads> clients;
    std::deque<std::string> turns;
    int64_t next_try_ns = 0;    // when the head is tried next
    bool busy = false;          // RunDue is trying a head
    int64_t last_sweep_ns = 0;  // the last check for cancelled reads
    ReadHoldCounters counters;  // counters.waiting: the reads in `clients`
  };
  // The earliest deadline of `q`'s reads (INT64_MAX: none waits).
  static int64_t EarliestDeadline(const Queue& q);
  // Drops from `q.turns` the clients with no read waiting, and forgets the clients that have
  // neither reads nor a turn.
  static void Tidy(Queue& q);
  // Takes `q`'s entries that `pred` selects out of it (the order of the rest kept).
  template <typename Pred>
  static void TakeIf(Queue& q, Pred pred, std::vector<std::unique_ptr<HeldRead>>* out);
  // Takes `q`'s reads whose calls were cancelled out of it, when kCancelSweepNanos have passed
  // since its last sweep at `now_ns` (counted as expired).
  static void SweepCancelled(Queue& q, int64_t now_ns, std::vector<std::unique_ptr<HeldRead>>* out);
  // Runs one queue's due work; called with mu_ held, releases it around HeldRead calls.
  void RunQueue(uint64_t key, int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  const flowctl::Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Queue> queues_ ABSL_GUARDED_BY(mu_);
  std::set<const void*> ended_owners_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // When RunDue next has work (as it last computed), and whether a Hold since wants it sooner.
  int64_t wake_ns_ ABSL_GUARDED_BY(mu_) = INT64_MAX;
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace runtime

#endif  // RUNTIME_READ_HOLD_H_
