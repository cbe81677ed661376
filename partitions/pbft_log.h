// PbftLog: a PBFT replica's message log, one slot per seq inside the watermarks.
//
// A slot holds the current view's pre-prepare, prepares and commits for its seq, and what
// survives a view change: the best prepared certificate of any view, and the commit decision
// (committed-local: the batch with its 2f+1 matching commits). The log decides when a slot is
// prepared (pre-prepare, its txs, 2f matching prepares from backups) and committed (prepared, and
// 2f+1 matching commits); the replica decides what to sign, persist and send.
//
// Invariants: phase fields belong to the current view (ResetView clears them when a view is
// left, dropping slots that keep nothing); a slot's digest is its pre-prepare's; it holds at
// most one prepare and one commit per sender; `prepared` implies a certificate of the current
// view (cert_view); `committed` is never undone and its batch never changes. Messages must be
// signature-verified by the caller.
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   PbftLog log(config);
//   if (log.AddPrepare(msg, view, h) == PbftAdmission::kAdded) {
//     if (PbftLog::Slot* slot = log.TryPrepare(seq, view); slot && !slot->sent_commit) { ... }
//   }
//   log.TryCommit(seq, view);  // committed-local; execution still goes in seq order:
//   while (std::optional<PbftCommit> c = log.Decided(last_executed + 1)) Execute(*c);
#ifndef PARTITIONS_PBFT_LOG_H_
#define PARTITIONS_PBFT_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_types.h"

namespace partitions {

class PbftLog {
 public:
  struct Slot {
    std::optional<ConsensusMessage> pre_prepare;
    std::string digest;
    std::map<uint32_t, ConsensusMessage> prepares;  // by sender, current view, any digest
    std::map<uint32_t, ConsensusMessage> commits;   // by sender, current view, any digest
    bool waiting_txs = false;
    bool prepared = false;
    bool sent_commit = false;
    std::optional<node::consensus::PreparedCertificate> cert;
    uint64_t cert_view = 0;
    // Decision (view-independent): committed-local with its certificate.
    bool committed = false;
    std::string committed_digest;
    std::vector<std::string> committed_txs;
    uint64_t committed_view = 0;
    std::vector<ConsensusMessage> commit_cert;
  };

  explicit PbftLog(const PbftConfig& config);

  // The slot for `seq`, created empty if absent.
  Slot& At(uint64_t seq) { return slots_[seq]; }
  // The slot for `seq`, or nullptr.
  Slot* Find(uint64_t seq);
  const Slot* Find(uint64_t seq) const;
  bool HasPrePrepare(uint64_t seq) const;

  // Messages of the installed current view `view`, with the low watermark `h`. Only kAdded ones
  // are kept: a pre-prepare from the view's primary with a valid batch, the first for its seq
  // and not contradicting a decision; a prepare from a backup, a commit from anyone, the first
  // of their sender for the seq. Refused: kInvalid (wrong sender for its role, malformed digest
  // or batch), kOutsideWatermarks (seq not in (h, h + window]), kDuplicate (the sender's
  // message for the seq again) or kConflicting (another digest than the sender's earlier one,
  // or than the decision).
  PbftAdmission AddPrePrepare(const ConsensusMessage& msg, uint64_t view, uint64_t h,
                              const PbftValidator& validator);
  PbftAdmission AddPrepare(const ConsensusMessage& msg, uint64_t view, uint64_t h);
  PbftAdmission AddCommit(const ConsensusMessage& msg, uint64_t h);
  // True if `msg`, a prepare or commit of the installed current view `view`, could change
  // nothing here: a prepare for a slot already prepared in `view` with the message's digest and
  // whose commit is sent, or a commit for a slot already committed in `view` with its digest.
  // Adding it would only store it beside the certificate already built (a quorum needs no more), so
  // the caller may drop it without checking its signature (ConsensusDriver does). False for every
  // other message, including a different digest (which AddPrepare / AddCommit must see).
  bool Redundant(const ConsensusMessage& msg, uint64_t view) const;
  // A pre-prepare re-issued by an installed NewView (already checked): kAdded, or kConflicting
  // if the seq was decided for another batch.
  PbftAdmission AcceptPrePrepare(const ConsensusMessage& msg);

  // The slot for `seq` if it is prepared in `view` (now or before), building its certificate
  // from the pre-prepare and 2f matching prepares of backups; nullptr while it lacks any of them
  // or waits for txs.
  Slot* TryPrepare(uint64_t seq, uint64_t view);
  // True if the slot for `seq` has just become committed in `view`: prepared, and 2f+1 matching
  // commits (they become its certificate).
  bool TryCommit(uint64_t seq, uint64_t view);
  // The committed batch at `seq` as a commit (all but chain_digest filled); nullopt if none.
  std::optional<PbftCommit> Decided(uint64_t seq) const;

  // A view is left: clears every slot's current-view fields, and drops the slots that keep
  // neither a prepared certificate nor a decision.
  void ResetView();
  // Drops the slots up to `seq` (a stable checkpoint).
  void DropThrough(uint64_t seq);

  // True if a slot above `seq` has a pre-prepare or a decision.
  bool HasWorkAbove(uint64_t seq) const;
  // True if a slot above `seq` holds commits from at least `senders` replicas.
  bool CommitsAbove(uint64_t seq, size_t senders) const;
  // Seqs above `seq` whose slot waits for txs, in order.
  std::vector<uint64_t> WaitingForTxs(uint64_t seq) const;
  // Seqs with a pre-prepare, in order.
  std::vector<uint64_t> WithPrePrepare() const;
  // This replica's own pre-prepares, prepares and commits above `seq`, slot by slot in that
  // order (to re-send).
  std::vector<ConsensusMessage> OwnMessagesAbove(uint64_t seq) const;
  // The prepared certificates of the slots above `seq`, in seq order (for a ViewChange).
  std::vector<node::consensus::PreparedCertificate> CertificatesAbove(uint64_t seq) const;

  // After a restart, from the persisted log (own signed messages and the prepares kept with
  // prepared certificates): rebuilds each seq's best prepared certificate, and, if `view` is
  // installed, the slots' messages of `view`. Messages at or below `stable_seq` are skipped.
  // Returns the highest seq of an own pre-prepare of `view` (0 if none).
  uint64_t Restore(const google::protobuf::RepeatedPtrField<ConsensusMessage>& log,
                   uint64_t stable_seq, uint64_t view, bool installed);

 private:
  bool InWindow(uint64_t seq, uint64_t h) const { return seq > h && seq <= h + config_.window; }
  // The pre-prepare `pp` of a view whose primary is `primary`, with the first 2f prepares of
  // backups that match its digest; fewer than 2f when not prepared.
  node::consensus::PreparedCertificate Certificate(
      const ConsensusMessage& pp, const std::map<uint32_t, ConsensusMessage>& prepares,
      uint32_t primary) const;

  const PbftConfig config_;
  std::map<uint64_t, Slot> slots_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_LOG_H_
