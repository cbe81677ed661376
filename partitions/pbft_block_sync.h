// BlockSync: a PBFT replica's block sync, both sides: catching up on committed batches from peers,
// and serving them.
//
// A replica that learns of a stable checkpoint it has not executed is recovering until it has
// executed up to it (the target). It asks one peer at a time, round robin, for a chunk of
// committed batches after its last executed seq; a response's batches are verified (2f+1 signed
// commits each, through PbftValidator) and held until the replica executes them. The replica
// owns execution; BlockSync only tells what is there to execute.
//
// Invariants: held batches are verified, above the last executed seq when they were accepted,
// and at most max(window, sync_chunk) ahead of it; requests go to every other replica in turn,
// never to self; in_flight() is true from a request until the next response (a lost request is
// replaced by the next one the replica makes on its retransmit timer).
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica. Serve and Answer are const.
//
//   BlockSync sync(config, last_executed);
//   sync.RecoverTo(stable_seq);
//   sync.Ask(last_executed, stable_seq, /*ahead=*/{}, out);  // the next peer in turn
//   if (sync.Accept(msg.sync_response(), last_executed, validator)) ++dropped_invalid;
//   while (auto commit = sync.Batch(last_executed + 1)) Execute(*commit);
#ifndef PARTITIONS_PBFT_BLOCK_SYNC_H_
#define PARTITIONS_PBFT_BLOCK_SYNC_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_outbox.h"
#include "partitions/pbft_types.h"

namespace partitions {

class BlockSync {
 public:
  struct Request {
    uint32_t peer = 0;
    ConsensusMessage msg;  // a SyncRequest, unsigned
  };

  // `last_executed`: where the ledger stands (starts the stall detection of TickStalled).
  BlockSync(const PbftConfig& config, uint64_t last_executed);

  // Recovering: executing up to a stable checkpoint that the log no longer holds.
  bool recovering() const { return recovering_; }
  void RecoverTo(uint64_t seq);
  // Ends recovery once `last_executed` reached the target.
  void NoteExecuted(uint64_t last_executed);
  // Recovering, with no batch held and no request in flight: time to ask again.
  bool WantsRequest() const { return recovering_ && batches_.empty() && !in_flight_; }

  // The next request, for the chunk after `last_executed` and the batches held after it;
  // marks it in flight. It goes to the peer that served the previous request well (asked, it
  // answered first and before the next retransmit tick with the batches asked for, a whole chunk
  // or all there is as far as this replica knew; once per such answer, so a peer that stops
  // serving is left at once), else to the next of `ahead` in turn when `ahead` names at least
  // f+1 other replicas (peers that sent beyond this one's window: up, and one of them correct,
  // so a request does not wait a retransmit period on a peer that is down), else to the next
  // peer in turn. It names `stable_seq`, the
  // requester's stable checkpoint, so a peer with a later one sends it along. nullopt for a
  // replica without peers (n = 1), and while the held batches fill the horizon (Accept).
  std::optional<Request> NextRequest(uint64_t last_executed, uint64_t stable_seq,
                                     const std::set<uint32_t>& ahead);
  // Sends the NextRequest, signed, on the sync channel (nothing without peers).
  void Ask(uint64_t last_executed, uint64_t stable_seq, const std::set<uint32_t>& ahead,
           PbftOutbox& out);
  bool in_flight() const { return in_flight_; }
  // The highest last_executed a peer's SyncResponse reported (0: none yet): a replica that
  // reached its target by a snapshot still has the batches after it to fetch.
  uint64_t peer_executed() const { return peer_executed_; }
  // Called once per retransmit period: true if `last_executed` did not move since the previous
  // call (or since construction).
  bool TickStalled(uint64_t last_executed);

  // Peer `from`'s SyncResponse: holds its batches in (last_executed, last_executed + max(window,
  // sync_chunk)] in order, stopping at the first invalid one. Clears the in-flight request.
  // Returns true if an invalid batch was found (the rest of the response is dropped).
  bool Accept(const node::consensus::SyncResponse& resp, uint32_t from, uint64_t last_executed,
              const PbftValidator& validator);
  // The held batch for `seq` as a commit (all but chain_digest filled); nullopt if none.
  std::optional<PbftCommit> Batch(uint64_t seq) const;
  // The held batches, by seq (verified, not executed yet).
  const std::map<uint64_t, node::consensus::CommittedBatch>& held() const { return batches_; }
  // The last seq of the run of held batches from `last_executed` + 1 (`last_executed` if none).
  uint64_t HeldThrough(uint64_t last_executed) const;
  // Forgets the held batches up to `seq` (executed).
  void DropThrough(uint64_t seq);

  // Answers a peer's SyncRequest from this replica's ledger: at most sync_chunk batches from
  // from_seq on, none above `last_executed`, stopping at the first the ledger lacks. When
  // `stable` (this replica's stable checkpoint) is above the request's known_stable_seq, the
  // answer carries it: it moves the requester's low watermark, and tells a requester whose
  // from_seq this ledger lacks (pruned, or below an installed snapshot) where to fetch the state.
  // Unsigned.
  ConsensusMessage Serve(const node::consensus::SyncRequest& req, uint64_t last_executed,
                         const PbftBlockSource& blocks,
                         const node::consensus::StableCheckpointRecord& stable) const;
  // Sends the Serve answer to `request` (a SyncRequest envelope), signed, to its sender.
  void Answer(const ConsensusMessage& request, uint64_t last_executed,
              const PbftBlockSource& blocks, const node::consensus::StableCheckpointRecord& stable,
              PbftOutbox& out) const;

 private:
  // How far above the last executed seq batches are held: max(window, sync_chunk).
  uint64_t Horizon() const { return std::max<uint64_t>(config_.window, config_.sync_chunk); }

  const PbftConfig config_;
  bool recovering_ = false;
  uint64_t target_ = 0;
  std::map<uint64_t, node::consensus::CommittedBatch> batches_;  // verified, not yet executed
  bool in_flight_ = false;
  uint64_t peer_executed_ = 0;
  uint32_t next_peer_ = 0;  // round robin over the other replicas
  // The last request: to whom, from which seq, whether that peer answered it, and whether a
  // retransmit tick came since.
  uint32_t asked_peer_ = 0;
  uint64_t asked_from_ = 0;
  bool asked_answered_ = true;
  bool ticked_since_ask_ = false;
  // The peer that served the last request well (see NextRequest): asked next, once.
  std::optional<uint32_t> serving_peer_;
  uint64_t executed_at_last_tick_ = 0;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_BLOCK_SYNC_H_
