#include "partitions/client_admission.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace partitions {

// One client request (a single tx or a batch) on its way through the client lane. Whatever
// happens to it (verified, dropped by a full lane, discarded by Stop), `done` runs exactly once:
// the destructor answers UNAVAILABLE for a job that was never finished.
struct ClientAdmission::Job {
  struct Item {
    int slot = 0;  // index in results
    base::DecodedTx tx;
    flowctl::Admission admission;  // holds (in-flight permits) until the item is finished
    bool reserved = false;         // admitted on a retry ticket (TxOrigin::kClientReserved)
  };
  std::vector<Item> items;
  std::vector<SubmitResult> results;
  SubmitOptions options;
  int64_t arrival_nanos = 0;
  bool single = false;
  // The ledger's height when the pool took the (single) tx, read under the pool's lock: a refusal
  // at or below it answered an earlier inclusion (whose copy had left the pool), not this one
  // (which no batch could select yet).
  uint64_t pooled_at_height = 0;
  SubmitDone single_done;
  BatchDone batch_done;
  bool finished = false;

  ~Job() {
    if (finished) return;
    for (SubmitResult& r : results) {
      if (r.status.ok() && !r.spilled) {
        r.status =
            absl::UnavailableError("partition is shutting down; the request was not applied");
      }
    }
    Finish();
  }

  // Runs the callback with `results` (no-op when already finished).
  void Finish() {
    if (finished) return;
    finished = true;
    for (Item& item : items) item.admission.Finish();
    if (single) {
      if (single_done) single_done(std::move(results[0]));
    } else if (batch_done) {
      batch_done(std::move(results));
    }
  }
};

ClientAdmission::ClientAdmission(Deps deps) : deps_(std::move(deps)) {}

void ClientAdmission::Submit(std::vector<std::string> txs, const SubmitOptions& options,
                             const SubmitGate& gate, bool single, SubmitDone single_done,
                             BatchDone batch_done) {
  auto job = std::make_shared<Job>();
  job->options = options;
  job->single = single;
  job->single_done = std::move(single_done);
  job->batch_done = std::move(batch_done);
  job->results.resize(txs.size());
  job->arrival_nanos = deps_.clock->NowNanos();

  const bool lossless = deps_.fifo != nullptr;
  uint64_t last_spill_seq = 0;
  // Lossless: once the disk budget refuses one tx of a batch, the rest are refused with it, so a
  // sender's later nonces never land in the FIFO ahead of a refused earlier one.
  absl::Status spill_refusal;
  absl::Duration spill_retry_after;
  for (size_t i = 0; i < txs.size(); ++i) {
    SubmitResult& r = job->results[i];
    if (!gate.status.ok()) {
      r.status = gate.status;
      r.rejected_by = gate.rejected_by;
      r.retry_after = gate.retry_after;
      continue;
    }
    flowctl::Admission admission;
    bool reserved = false;  // admitted on a retry ticket: its room was held
    if (!lossless) {
      // Flow control on the raw request: nothing parsed, nothing verified yet.
      // The first decision starts at the arrival reading: one clock read fewer per SubmitTx.
      const int64_t decide_start = i == 0 ? job->arrival_nanos : deps_.clock->NowNanos();
      flowctl::RetryTicket ticket{
          .presented = i < options.retry_tickets.size() ? options.retry_tickets[i] : 0};
      admission = deps_.interceptor->Admit({.partition = deps_.partition,
                                            .size_bytes = txs[i].size(),
                                            .peer = options.client,
                                            .arrival_nanos = job->arrival_nanos,
                                            .retry = &ticket});
      r.retry_ticket = ticket.issued;
      reserved = ticket.redeemed;
      decision_nanos_.Record(deps_.clock->NowNanos() - decide_start);
      if (!admission.admitted()) {
        const flowctl::Decision& d = admission.decision();
        r.status = d.ToStatus();
        if (d.reject_kind() == flowctl::RejectKind::kUnavailable) {
          r.status = absl::Status(
              r.status.code(),
              absl::StrCat(r.status.message(), " (consensus is ", deps_.consensus_state(), ")"));
        }
        r.rejected_by = std::string(d.stage());
        r.retry_after = d.retry_after();
        // A stage's refusal counts only while the pool has no room (a rate limit with room to
        // spare is policy, not want of room).
        if (absl::IsResourceExhausted(r.status)) CountRefused(/*for_room=*/PoolFull());
        continue;
      }
    }
    absl::StatusOr<base::DecodedTx> decoded = base::DecodeSignedTx(txs[i], deps_.tx_limits);
    if (!decoded.ok()) {
      r.status = decoded.status();
      continue;
    }
    r.tx_hash = decoded->hash;
    if (lossless) {
      // Lossless: the record is the acknowledgement; the drain verifies it later.
      absl::StatusOr<uint64_t> seq =
          spill_refusal.ok() ? deps_.fifo->Append(txs[i]) : absl::StatusOr<uint64_t>(spill_refusal);
      if (!seq.ok()) {
        r.status = seq.status();
        // The budget's refusal, not a full file system (also RESOURCE_EXHAUSTED, no hint).
        if (absl::IsResourceExhausted(r.status) &&
            absl::StrContains(r.status.message(), flowctl::SpillFifo::kDiskBudgetFull)) {
          if (spill_refusal.ok()) {
            spill_refusal = r.status;
            if (deps_.spill_retry_after) spill_retry_after = deps_.spill_retry_after(txs[i].size());
          }
          r.rejected_by = "spill_disk_budget";
          r.retry_after = spill_retry_after;
          CountRefused(/*for_room=*/true);
        }
        continue;
      }
      last_spill_seq = *seq;
      r.spilled = true;
      // GetTx answers PENDING while the record waits in the FIFO.
      deps_.tracker->NoteSpilled(r.tx_hash, *seq, job->arrival_nanos);
      continue;
    }
    job->items.push_back({.slot = static_cast<int>(i),
                          .tx = *std::move(decoded),
                          .admission = std::move(admission),
                          .reserved = reserved});
  }
  // Under kNone durability nothing is synced: the append is the acknowledgement.
  if (last_spill_seq > 0 && deps_.fifo->options().durability != flowctl::SpillDurability::kNone) {
    absl::Status durable = deps_.fifo->WaitDurable(last_spill_seq);
    if (!durable.ok()) {
      for (SubmitResult& r : job->results) {
        if (r.spilled) r.status = durable;
      }
    }
  }
  if (job->items.empty()) {
    job->Finish();
    return;
  }
  // The job travels as the message context; its bytes stay in the decoded txs, so the lane is
  // bounded by its message capacity (the interceptor's in-flight stage bounds the bytes).
  flowctl::Message m;
  m.context = job;
  flowctl::Dispatcher::OfferResult offered =
      deps_.dispatcher->Offer(deps_.client_lane, std::move(m));
  if (offered != flowctl::Dispatcher::OfferResult::kAccepted) {
    const absl::Duration retry_after = deps_.client_lane_retry_after
                                           ? deps_.client_lane_retry_after()
                                           : kFixedClientLaneRetryAfter;
    for (auto& item : job->items) {
      SubmitResult& r = job->results[item.slot];
      r.status = absl::ResourceExhaustedError(
          "rejected: the partition's signature-check lane is full; retry later");
      r.rejected_by = "client_lane";
      r.retry_after = retry_after;
    }
    CountRefused(/*for_room=*/offered != flowctl::Dispatcher::OfferResult::kStopped,
                 job->items.size());
    job->Finish();
  }
}

void ClientAdmission::HandleJob(flowctl::Message message) {
  auto job = std::static_pointer_cast<Job>(message.context);
  bool added = false;
  for (auto& item : job->items) {
    SubmitResult& r = job->results[item.slot];
    absl::Status s = base::VerifySignature(item.tx);
    if (s.ok()) {
      auto tx = std::make_shared<const base::DecodedTx>(std::move(item.tx));
      // Stages that follow requests (adaptive admission) learn of it before the pool sees it and
      // before the item's permits go, so a slot held until commit never dips.
      if (item.admission.admitted()) item.admission.Pooled(r.tx_hash);
      // Tracked before the pool sees it, so its commit always finds the admission time.
      deps_.tracker->NoteAdmitted(r.tx_hash, job->arrival_nanos);
      s = AdmitVerified(tx, &job->pooled_at_height, item.reserved);
      if (!s.ok()) {
        if (item.admission.admitted()) {
          item.admission.Dropped(r.tx_hash, flowctl::DropReason::kRefused);
        }
        if (s.code() != absl::StatusCode::kAlreadyExists) {
          deps_.tracker->ForgetAdmission(r.tx_hash, job->arrival_nanos);
        }
      }
      if (s.ok()) {
        added = true;
      } else if (s.code() == absl::StatusCode::kResourceExhausted) {
        CountRefused(/*for_room=*/PoolFull());  // not a sender's quota with room to spare
        r.rejected_by = "pool";
        // One per refused tx: measured hints queue each refusal behind the others.
        r.retry_after =
            deps_.pool_retry_after ? deps_.pool_retry_after(&r.retry_ticket) : kFixedPoolRetryAfter;
      }
    }
    r.status = s;
    item.admission.Finish();
  }
  if (added) deps_.request_tick();
  if (job->single && job->options.wait_for_commit && job->results[0].status.ok()) {
    // The waiter answers from now on. The tx may already have committed (a one-replica
    // partition commits on its tick at once): look at the ledger after registering.
    const std::string hash = job->results[0].tx_hash;
    // A tx refused before (a nonce gap) and pooled again waits for a new answer: the waiter
    // takes no refusal at or below the height at which it was pooled (commit_waiters.h).
    deps_.waiters->Add(
        hash, deps_.clock->NowNanos() + absl::ToInt64Nanoseconds(job->options.wait_timeout),
        [result = job->results[0],
         done = std::move(job->single_done)](absl::StatusOr<node::chain::Receipt> receipt) mutable {
          if (receipt.ok()) {
            result.receipt = *std::move(receipt);
          } else {
            result.status = receipt.status();
          }
          done(std::move(result));
        },
        job->pooled_at_height);
    job->finished = true;
    if (auto receipt = deps_.ledger->GetReceipt(hash); receipt.ok()) {
      deps_.waiters->Resolve(hash, *receipt);
    }
    return;
  }
  job->Finish();
}

absl::Status ClientAdmission::AdmitVerified(TxPtr tx, uint64_t* pooled_at_height, bool reserved) {
  TxPtr keep = tx;
  const TxOrigin origin = reserved ? TxOrigin::kClientReserved : TxOrigin::kClient;
  absl::Status s = deps_.pool->Add(std::move(tx), origin, [&] {
    if (pooled_at_height != nullptr) *pooled_at_height = deps_.ledger->tip_height();
  });
  if (s.ok()) deps_.forwarder->Queue(keep);
  return s;
}

absl::Status ClientAdmission::DrainSink(const flowctl::SpillFifo::Record& record) {
  absl::StatusOr<base::DecodedTx> decoded = base::DecodeSignedTx(record.data, deps_.tx_limits);
  if (!decoded.ok() || !base::VerifySignature(*decoded).ok()) {
    spill_dropped_invalid_.fetch_add(1, std::memory_order_relaxed);
    deps_.spill_cursor->Done(record.seq, decoded.ok() ? decoded->hash : std::string());
    // GetTx stops answering PENDING for it: it will never commit.
    if (decoded.ok())
      deps_.tracker->NoteDrained(decoded->hash, record.seq, deps_.clock->NowNanos());
    return absl::OkStatus();  // acknowledged but invalid: counted and dropped, never retried
  }
  auto tx = std::make_shared<const base::DecodedTx>(*std::move(decoded));
  const std::string hash = tx->hash;
  // Tracked before the pool sees it, so its commit cannot be missed.
  deps_.spill_cursor->Drained(record.seq, hash);
  deps_.tracker->NoteAdmitted(hash, deps_.clock->NowNanos());
  absl::Status s = AdmitVerified(std::move(tx));
  if (s.ok()) {
    // Pooled first, then out of the FIFO's mark: GetTx always finds it in one of the two.
    deps_.tracker->NoteDrained(hash, record.seq, deps_.clock->NowNanos());
    deps_.request_tick();
    return s;
  }
  if (s.code() != absl::StatusCode::kAlreadyExists &&
      s.code() != absl::StatusCode::kFailedPrecondition) {
    // Full pool, or the committed state could not be read (a disk error behind the sender's
    // nonce): keep the record and retry (that is the point of lossless mode).
    deps_.spill_cursor->Undrained(record.seq, hash);
    return s;
  }
  // Duplicate / replayed (already in the pool, whose commit still moves the cursor, or in the
  // ledger), or too far ahead of the sender's nonce: nothing to retry.
  deps_.spill_cursor->Done(record.seq, hash);
  deps_.tracker->NoteDrained(hash, record.seq, deps_.clock->NowNanos());
  return absl::OkStatus();
}

}  // namespace partitions
