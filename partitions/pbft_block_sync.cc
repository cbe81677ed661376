#include "partitions/pbft_block_sync.h"

#include <algorithm>
#include <utility>

namespace partitions {

using ::node::consensus::CommittedBatch;

BlockSync::BlockSync(const PbftConfig& config, uint64_t last_executed)
    : config_(config), executed_at_last_tick_(last_executed) {}

void BlockSync::RecoverTo(uint64_t seq) {
  recovering_ = true;
  target_ = std::max(target_, seq);
}

void BlockSync::NoteExecuted(uint64_t last_executed) {
  if (recovering_ && last_executed >= target_) recovering_ = false;
}

std::optional<BlockSync::Request> BlockSync::NextRequest(uint64_t last_executed,
                                                         uint64_t stable_seq,
                                                         const std::set<uint32_t>& ahead) {
  if (config_.n == 1) return std::nullopt;
  // Held batches are not asked for again (they may wait for their bodies); when they fill the
  // horizon, nothing an answer brings could be kept.
  const uint64_t from = HeldThrough(last_executed) + 1;
  if (from > last_executed + Horizon()) return std::nullopt;
  Request req;
  auto peer_at = [this](uint32_t turn) {
    return (config_.self + 1 + turn % (config_.n - 1)) % config_.n;
  };
  size_t others_ahead = 0;
  for (uint32_t p : ahead) others_ahead += p < config_.n && p != config_.self ? 1 : 0;
  if (serving_peer_) {
    req.peer = *serving_peer_;
    serving_peer_.reset();
  } else {
    // f of them could be faulty and never answer; with f+1 the turn reaches a correct one.
    uint32_t turn = next_peer_;
    for (uint32_t i = 0; others_ahead >= config_.f() + 1 && i + 1 < config_.n; ++i) {
      if (ahead.count(peer_at(next_peer_ + i)) > 0) {
        turn = next_peer_ + i;
        break;
      }
    }
    next_peer_ = turn + 1;
    req.peer = peer_at(turn);
  }
  req.msg.mutable_sync_request()->set_from_seq(from);
  req.msg.mutable_sync_request()->set_to_seq(from + config_.sync_chunk - 1);
  req.msg.mutable_sync_request()->set_known_stable_seq(stable_seq);
  in_flight_ = true;
  asked_peer_ = req.peer;
  asked_from_ = from;
  asked_answered_ = false;
  ticked_since_ask_ = false;
  return req;
}

uint64_t BlockSync::HeldThrough(uint64_t last_executed) const {
  uint64_t through = last_executed;
  for (auto it = batches_.upper_bound(last_executed);
       it != batches_.end() && it->first == through + 1; ++it) {
    through = it->first;
  }
  return through;
}

void BlockSync::Ask(uint64_t last_executed, uint64_t stable_seq, const std::set<uint32_t>& ahead,
                    PbftOutbox& out) {
  if (auto req = NextRequest(last_executed, stable_seq, ahead)) {
    out.Send(req->peer, out.Sign(std::move(req->msg)), PbftChannel::kSync);
  }
}

bool BlockSync::TickStalled(uint64_t last_executed) {
  ticked_since_ask_ = true;
  const bool stalled = last_executed == executed_at_last_tick_;
  executed_at_last_tick_ = last_executed;
  return stalled;
}

bool BlockSync::Accept(const node::consensus::SyncResponse& resp, uint32_t from,
                       uint64_t last_executed, const PbftValidator& validator) {
  // Served well: the first answer of the peer asked (not one nobody asked for), in time, from the
  // seq asked for, and a whole chunk or all there is: as far as the answer says, and as far as
  // this replica knew before it (what it recovers to, what peers said), so a peer cannot keep
  // the preference by claiming to have executed only what it sends. Only then is the peer asked
  // next; an answer nobody asked for changes no preference.
  const bool asked = from == asked_peer_ && !asked_answered_;
  if (asked) asked_answered_ = true;
  const uint64_t known = std::max({target_, peer_executed_, resp.last_executed(), asked_from_});
  const bool served = asked && !ticked_since_ask_ && resp.batches_size() > 0 &&
                      resp.batches(0).seq() == asked_from_ &&
                      (resp.batches_size() >= static_cast<int>(config_.sync_chunk) ||
                       resp.batches(resp.batches_size() - 1).seq() >=
                           std::min(asked_from_ + config_.sync_chunk - 1, known));
  in_flight_ = false;
  peer_executed_ = std::max(peer_executed_, resp.last_executed());
  const uint64_t horizon = last_executed + Horizon();
  for (const CommittedBatch& batch : resp.batches()) {
    if (batch.seq() <= last_executed || batches_.count(batch.seq()) > 0) continue;
    if (batch.seq() > horizon) break;
    if (!validator.ValidCommittedBatch(batch)) return true;
    batches_.emplace(batch.seq(), batch);
  }
  if (served && from != config_.self && from < config_.n) serving_peer_ = from;
  return false;
}

std::optional<PbftCommit> BlockSync::Batch(uint64_t seq) const {
  auto it = batches_.find(seq);
  if (it == batches_.end()) return std::nullopt;
  const CommittedBatch& batch = it->second;
  PbftCommit commit;
  commit.seq = seq;
  commit.view = batch.commit_certificate(0).commit().view();
  commit.tx_hashes.assign(batch.tx_hashes().begin(), batch.tx_hashes().end());
  commit.digest = BatchDigest(commit.tx_hashes);
  commit.certificate.assign(batch.commit_certificate().begin(), batch.commit_certificate().end());
  return commit;
}

void BlockSync::DropThrough(uint64_t seq) {
  batches_.erase(batches_.begin(), batches_.upper_bound(seq));
}

ConsensusMessage BlockSync::Serve(const node::consensus::SyncRequest& req, uint64_t last_executed,
                                  const PbftBlockSource& blocks,
                                  const node::consensus::StableCheckpointRecord& stable) const {
  ConsensusMessage msg;
  auto* resp = msg.mutable_sync_response();
  resp->set_last_executed(last_executed);
  if (req.from_seq() >= 1 && req.to_seq() >= req.from_seq()) {
    const uint64_t last =
        std::min({req.to_seq(), req.from_seq() + config_.sync_chunk - 1, last_executed});
    for (uint64_t s = req.from_seq(); s <= last; ++s) {
      std::optional<CommittedBatch> batch = blocks.GetCommitted(s);
      if (!batch) break;
      *resp->add_batches() = std::move(*batch);
    }
    // A later stable checkpoint than the requester knows (it checks the proof): its low
    // watermark, and, if nothing from from_seq is kept here, where to fetch the state instead.
    if (stable.seq() > req.known_stable_seq()) *resp->mutable_stable() = stable;
  }
  return msg;
}

void BlockSync::Answer(const ConsensusMessage& request, uint64_t last_executed,
                       const PbftBlockSource& blocks,
                       const node::consensus::StableCheckpointRecord& stable,
                       PbftOutbox& out) const {
  out.Send(request.sender(), out.Sign(Serve(request.sync_request(), last_executed, blocks, stable)),
           PbftChannel::kSync);
}

}  // namespace partitions
