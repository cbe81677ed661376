// ClientAdmission: a partition's client path, from raw request bytes to a pooled transaction.
//
//   Submit (gRPC thread) --> gate (paused / stopping) --> interceptor chain on the raw size and
//     client address only (in-flight, health, pool, rate, ...; a rejection costs no decode and no
//     crypto) --> DecodeSignedTx (one SHA-256) --> one job on the dispatcher's client lane
//   HandleJob (worker pool, under the partition's CPU share) --> Ed25519 verify --> the chain's
//     request lifecycle (Admission::Pooled; Dropped if the pool refuses) --> TxTracker (admission
//     time) --> TxPool::Add --> Forwarder::Queue --> answer (or a commit waiter)
// A rejection's status comes from its typed kind (flowctl::RejectKind: overloaded ->
// RESOURCE_EXHAUSTED, unavailable -> UNAVAILABLE, invalid -> INVALID_ARGUMENT).
//
// Lossless mode (a SpillFifo is given): the rejecting stages are skipped; the decoded request is
// appended to the FIFO and acknowledged once durable under the FIFO's policy (`spilled`). The
// quota drain later calls DrainSink, which verifies and pools the record; the SpillCursor keeps
// the FIFO's persisted position below every drained record whose tx has not committed.
//
// Every submit's callback runs exactly once: inline when refused before the lane, on a worker
// when the job ran, or from the job's destructor (UNAVAILABLE) when the lane dropped it or the
// dispatcher stopped.
//
// Thread-safety: every method is thread-safe. Callbacks run with no lock of ours held and must
// not block.
//
//   ClientAdmission admission(deps);
//   admission.Submit({bytes}, {}, absl::OkStatus(), /*single=*/true,
//                    [](SubmitResult r) { ... }, nullptr);
//   // the dispatcher's client lane handler: admission.HandleJob(std::move(message));
#ifndef PARTITIONS_CLIENT_ADMISSION_H_
#define PARTITIONS_CLIENT_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "flowctl/dispatcher.h"
#include "flowctl/histogram.h"
#include "flowctl/spill_fifo.h"
#include "flowctl/stage_chain.h"
#include "partitions/commit_waiters.h"
#include "partitions/forwarder.h"
#include "partitions/ledger.h"
#include "partitions/spill_cursor.h"
#include "partitions/tx_pool.h"
#include "partitions/tx_tracker.h"
#include "proto/chain.pb.h"

namespace partitions {

// Retry-after of a pool refusal and of a full client lane when Deps give no measured hint.
inline constexpr absl::Duration kFixedPoolRetryAfter = absl::Milliseconds(100);
inline constexpr absl::Duration kFixedClientLaneRetryAfter = absl::Milliseconds(50);

// The outcome of one submitted transaction.
struct SubmitResult {
  absl::Status status;  // OK = admitted to the pool (or durably spilled in lossless mode)
  std::string tx_hash;  // 32 raw bytes; empty if the request did not decode
  // Set when the status is a flow-control rejection (the stage that said no).
  std::string rejected_by;
  absl::Duration retry_after = absl::ZeroDuration();
  // With a pool refusal: the ticket that holds room for the retry at retry_after (0 = none;
  // flowctl/retry_reservations.h). The client sends it back with the same tx.
  uint64_t retry_ticket = 0;
  bool spilled = false;                         // lossless mode: in the FIFO, not yet in the pool
  std::optional<node::chain::Receipt> receipt;  // wait_for_commit: the committed receipt
};

// Why every tx of a request is refused before the interceptor runs (the partition is stopping,
// paused or halted; the node is under memory pressure). An OK status: none. Built from a bare
// status where no stage name or hint applies.
struct SubmitGate {
  SubmitGate(absl::Status s = absl::OkStatus()) : status(std::move(s)) {}  // NOLINT: implicit
  SubmitGate(absl::Status s, std::string by, absl::Duration after)
      : status(std::move(s)), rejected_by(std::move(by)), retry_after(after) {}
  absl::Status status;
  std::string rejected_by;
  absl::Duration retry_after = absl::ZeroDuration();
};

struct SubmitOptions {
  bool wait_for_commit = false;
  absl::Duration wait_timeout = absl::Seconds(10);  // DEADLINE_EXCEEDED after it
  std::string client;                               // peer address, for stages that look at it
  // The retry ticket each tx carries, by index (0 or missing: none).
  std::vector<uint64_t> retry_tickets;
};

class ClientAdmission {
 public:
  using SubmitDone = absl::AnyInvocable<void(SubmitResult)>;
  using BatchDone = absl::AnyInvocable<void(std::vector<SubmitResult>)>;

  struct Deps {
    uint32_t partition = 0;
    std::string name;
    const flowctl::Clock* clock = nullptr;
    flowctl::StageChainHolder* interceptor = nullptr;
    flowctl::Dispatcher* dispatcher = nullptr;
    int client_lane = 0;
    TxPool* pool = nullptr;
    TxTracker* tracker = nullptr;
    Forwarder* forwarder = nullptr;
    CommitWaiters* waiters = nullptr;
    Ledger* ledger = nullptr;
    flowctl::SpillFifo* fifo = nullptr;   // lossless only
    SpillCursor* spill_cursor = nullptr;  // lossless only
    base::TxLimits tx_limits;
    // For the health gate's message ("consensus is VIEW_CHANGE").
    std::function<std::string()> consensus_state;
    // Asks the partition for a tick soon (a batch may be ready).
    std::function<void()> request_tick;
    // Lossless: when a record of this many bytes may fit the FIFO's disk budget again (the
    // retry-after of a refusal). Null: no hint.
    std::function<absl::Duration(uint64_t)> spill_retry_after = {};
    // The retry-after of a pool refusal (full, sender quota), writing the refusal's retry ticket
    // (0: none) to its argument, and of a full client lane. Null: the fixed 100 ms and 50 ms.
    std::function<absl::Duration(uint64_t* ticket)> pool_retry_after = {};
    std::function<absl::Duration()> client_lane_retry_after = {};
  };

  explicit ClientAdmission(Deps deps);
  ClientAdmission(const ClientAdmission&) = delete;
  ClientAdmission& operator=(const ClientAdmission&) = delete;

  // Admits each tx on its own (one result per tx, in order); verification runs as one job.
  // A non-OK `gate` (paused, stopping, memory pressure) answers every tx with it. Calls
  // `single_done` when `single` (one tx), else `batch_done`.
  void Submit(std::vector<std::string> txs, const SubmitOptions& options, const SubmitGate& gate,
              bool single, SubmitDone single_done, BatchDone batch_done);
  // The client lane's handler.
  void HandleJob(flowctl::Message message);
  // The quota drain's sink (lossless): verifies and pools one FIFO record. ResourceExhausted
  // keeps the record in the FIFO (the pool is full); an invalid record is counted and dropped.
  absl::Status DrainSink(const flowctl::SpillFifo::Record& record);

  uint64_t spill_dropped_invalid() const {
    return spill_dropped_invalid_.load(std::memory_order_relaxed);
  }
  // Client txs refused for want of room since start: a full client lane, the spill's disk budget
  // full, or RESOURCE_EXHAUSTED from a stage or the pool while the pool has no room for client
  // txs (at its high-water mark or client cap). Not a rate limit or a sender's quota with room to
  // spare (policy), nor what the gate refused (the node's own shedding, memory pressure): demand
  // beyond what the partition can hold (flowctl/node_admission.h, "Contending partitions").
  uint64_t overload_refusals() const { return overload_refusals_.load(std::memory_order_relaxed); }
  // Time the interceptor chain took per decision (one per tx that reached it), nanoseconds of
  // deps.clock.
  flowctl::HistogramSnapshot decision_time() const { return decision_nanos_.Snapshot(); }

 private:
  struct Job;
  // Pools a verified client tx and queues it for forwarding; `pooled_at_height`, if given, gets
  // the ledger height at which the pool took it (TxPool::Add's on_added). `reserved`: admitted on
  // a retry ticket (TxOrigin::kClientReserved).
  absl::Status AdmitVerified(TxPtr tx, uint64_t* pooled_at_height = nullptr, bool reserved = false);

  // Counts `n` refused txs in overload_refusals() when `for_room` (see there).
  void CountRefused(bool for_room, uint64_t n = 1) {
    if (for_room) overload_refusals_.fetch_add(n, std::memory_order_relaxed);
  }
  bool PoolFull() const { return deps_.pool->ClientRoomTxs() == 0; }

  const Deps deps_;
  std::atomic<uint64_t> spill_dropped_invalid_{0};
  std::atomic<uint64_t> overload_refusals_{0};
  flowctl::Histogram decision_nanos_;  // lock-free
};

}  // namespace partitions

#endif  // PARTITIONS_CLIENT_ADMISSION_H_
