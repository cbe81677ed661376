// PbftOutbox: the actions one Step of a PBFT replica returns, collected in order, with this
// replica's signature on what it sends and the durable writes those sends depend on.
//
// Writes go to the ConsensusStore at once, so everything written before a send is durable before
// the Step returns it. A failed write means what was signed may not be durable: the first failure
// (or an internal error) halts the replica for good; from then on nothing more is written (so the
// store never holds a record without what it depends on) and Take() returns nothing.
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica, used only inside Step.
//
//   PbftOutbox out(config, &crypto, &store);
//   slot.prepares[self] = out.Publish(PrepareMessage(view, seq, digest), {pre_prepare});
//   out.PutView(ViewChangeRecord(view, signed_view_change));
//   return out.Take();  // empty if a write failed
#ifndef PARTITIONS_PBFT_OUTBOX_H_
#define PARTITIONS_PBFT_OUTBOX_H_

#include <vector>

#include "absl/status/status.h"
#include "partitions/pbft_types.h"

namespace partitions {

class PbftOutbox {
 public:
  // `crypto` and `store` must outlive the outbox.
  PbftOutbox(const PbftConfig& config, PbftCrypto* crypto, ConsensusStore* store);

  // `msg` as sent by this replica: its sender set and signed.
  ConsensusMessage Sign(ConsensusMessage msg) const;
  // To every other replica (nothing when there is none).
  void Broadcast(const ConsensusMessage& msg, PbftChannel channel = PbftChannel::kConsensus);
  void Send(uint32_t to, const ConsensusMessage& msg,
            PbftChannel channel = PbftChannel::kConsensus);
  void Add(PbftAction action) { actions_.push_back(std::move(action)); }

  // Signs `msg`, appends `with` and then it to the store's log, and broadcasts it; returns it
  // signed.
  ConsensusMessage Publish(ConsensusMessage msg, std::vector<ConsensusMessage> with = {});

  // Durable writes; the first failure halts, and a halted outbox writes nothing.
  void AppendLog(const std::vector<ConsensusMessage>& messages);
  void PutView(const node::consensus::PersistedView& view);
  void PutStableCheckpoint(const node::consensus::StableCheckpointRecord& record);
  // An internal error (state diverged): halts, replacing any earlier error.
  void Halt(absl::Status status) { status_ = std::move(status); }
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }

  // Adds a PbftStateChanged if `state` is not the one reported last (kNormal at first).
  void ReportState(ConsensusState state);
  void set_reported_state(ConsensusState state) { reported_state_ = state; }

  // The actions collected since the last Take, in order; none once halted.
  std::vector<PbftAction> Take();

 private:
  void Persist(absl::Status status);

  const PbftConfig config_;
  PbftCrypto* const crypto_;
  ConsensusStore* const store_;
  std::vector<PbftAction> actions_;
  absl::Status status_;
  ConsensusState reported_state_ = ConsensusState::kNormal;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_OUTBOX_H_
