// Partition: the peer path (lanes -> the consensus driver), ticks, and commit bookkeeping.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitions/partition_message_kind.h"
#include "runtime/partition_impl.h"

namespace runtime {

// ---- Peer path ----

void Partition::Impl::OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel,
                                    std::string payload) {
  if (stopping_.load(std::memory_order_relaxed)) return;
  auto it = index_of_.find(from);
  if (it == index_of_.end() || it->second == self_index_) {
    dropped_unknown_peer_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const int lane =
      p2p::IsValidChannel(channel) ? lane_of_channel_[static_cast<size_t>(channel)] : -1;
  if (lane < 0) {  // not a wire channel (the transport refuses those already)
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
    CountRefused(it->second, PeerRefusals::kMalformed);
    return;
  }
  // Under node memory pressure, gossip that consensus does not need goes first: forwarded txs
  // (a proposal's missing bodies are fetched) and bulk traffic.
  if (env_.memory_pressure != nullptr &&
      (channel == node::p2p::TX_FORWARD || channel == node::p2p::BULK) &&
      env_.memory_pressure->drop_forwarded()) {
    env_.memory_pressure->CountDroppedMessages(1);
    return;
  }
  // Full lanes drop and count (Dispatcher stats); PBFT retransmits what matters.
  const uint32_t replica = it->second;
  flowctl::Message m;
  m.payload = std::move(payload);
  m.peer = replica;
  m.tag = static_cast<uint32_t>(channel);
  const flowctl::Dispatcher::OfferResult offered = dispatcher_->Offer(lane, std::move(m));
  if ((offered == flowctl::Dispatcher::OfferResult::kLaneFull ||
       offered == flowctl::Dispatcher::OfferResult::kLaneBytesFull) &&
      channel == node::p2p::CONSENSUS) {
    // Rare and worth seeing: a quorum that needs every replica stalls while one of them drops
    // votes. The lane's counters (stats) have the totals.
    LOG_EVERY_T(WARNING, 1) << "partition " << name_ << ": consensus lane full, a message from "
                            << "replica " << replica << " dropped";
  }
}

void Partition::Impl::HandlePeerMessage(flowctl::Message message) {
  node::partition::PartitionMessage msg;
  if (!msg.ParseFromString(message.payload)) {
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
    CountRefused(message.peer, PeerRefusals::kMalformed);
    return;
  }
  absl::StatusOr<partitions::PartitionMessageKind> kind = partitions::KindOf(msg);
  if (!kind.ok()) {
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
    CountRefused(message.peer, PeerRefusals::kMalformed);
    return;
  }
  // Before any signature check: a message on a channel that may not carry it costs no crypto.
  const p2p::ChannelDescriptor* channel = channels_->Find(static_cast<p2p::Channel>(message.tag));
  if (absl::Status s = partitions::CheckChannelKind(*channel, *kind); !s.ok()) {
    dropped_wrong_channel_.fetch_add(1, std::memory_order_relaxed);
    CountRefused(message.peer, PeerRefusals::kWrongChannel);
    LOG_EVERY_N(WARNING, 100) << "partition " << name_ << ": from replica " << message.peer << ": "
                              << s.message();
    return;
  }
  switch (msg.body_case()) {
    case node::partition::PartitionMessage::kConsensus:
      if (!driver_->OnConsensusMessage(message.peer, msg.consensus())) {
        CountRefused(message.peer, PeerRefusals::kBadSignature);
      }
      return;
    case node::partition::PartitionMessage::kTxs:
      if (size_t bad = driver_->OnTxBatch(msg.txs()); bad > 0) {
        CountRefused(message.peer, PeerRefusals::kBadTx, bad);
      }
      return;
    case node::partition::PartitionMessage::kFetch:
      driver_->OnFetch(message.peer, msg.fetch());
      return;
    case node::partition::PartitionMessage::kSnapshotRequest:
    case node::partition::PartitionMessage::kSnapshotManifest:
    case node::partition::PartitionMessage::kSnapshotChunk:
      driver_->OnSnapshotMessage(message.peer, msg);
      return;
    case node::partition::PartitionMessage::kAdmission:
      if (const std::optional<double> f =
              flowctl::PeerAdmission::FromPpm(msg.admission().admit_ppm())) {
        peer_admission_->Observe(message.peer, *f, clock_->NowNanos());
        return;
      }
      [[fallthrough]];  // admit_ppm above one: malformed
    default:
      dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
      CountRefused(message.peer, PeerRefusals::kMalformed);
  }
}

void Partition::Impl::CountRefused(uint32_t replica, PeerRefusals::Reason reason, uint64_t n) {
  if (env_.refusals != nullptr && replica < env_.replica_ids.size()) {
    env_.refusals->Count(env_.replica_ids[replica], reason, n);
  }
}

void Partition::Impl::OnSkip(uint64_t height) {
  height_.store(height);
  LOG(INFO) << "partition " << name_ << ": at height " << height << " from a snapshot";
}

void Partition::Impl::OnCommit(const partitions::CommitEvent& event) {
  height_.store(event.height);
  blocks_committed_.fetch_add(1, std::memory_order_relaxed);
  for (const partitions::TrackedTx& t : event.tracked) {
    if (t.admitted_nanos > 0) commit_latency_.Record(event.commit_nanos - t.admitted_nanos);
  }
}

flowctl::PoolLevel Partition::Impl::PoolView::Level() const {
  const partitions::TxPoolStats stats = (*pool_)->stats();
  const partitions::TxPoolLimits limits = (*pool_)->limits();
  return {.txs = stats.txs,
          .high_water_txs = limits.high_water * static_cast<double>(limits.max_txs),
          .expired_total = stats.expired};
}

// ---- Ticks ----

void Partition::Impl::RequestTick() {
  // Before Start (e.g. a forwarded batch that arrives between Open and Start) nothing ticks:
  // Start asks for the first one.
  if (!ticking_.load(std::memory_order_acquire)) return;
  if (tick_queued_.exchange(true)) return;
  // The lane refuses only after Stop; a full lane cannot happen with one tick queued at a time.
  if (dispatcher_->Offer(kTickLane, flowctl::Message{}) !=
      flowctl::Dispatcher::OfferResult::kAccepted) {
    tick_queued_.store(false);
  }
}

void Partition::Impl::HandleTick() {
  // Cleared first: a request made while this tick runs queues the next one.
  tick_queued_.store(false);
  const int64_t now = clock_->NowNanos();
  const int64_t next = std::min(Tick(now), now + absl::ToInt64Nanoseconds(env_.tick));
  // By, not At: a deadline that arrived while this tick ran (WakeBy) is kept.
  env_.scheduler->ScheduleBy(tick_id_, next);
}

void Partition::Impl::WakeBy(int64_t when_nanos) {
  env_.scheduler->ScheduleBy(tick_id_, when_nanos);
}

int64_t Partition::Impl::Tick(int64_t now) {
  // Every Queue is followed by a tick request; held txs say when they are due.
  const int64_t forward_at =
      forwarder_->Flush(/*release_all=*/stopping_.load(std::memory_order_relaxed));
  const int64_t wake = driver_->Tick(now, paused_.load(std::memory_order_relaxed));
  return std::min({forward_at, wake, waiters_.Expire(now)});
}

}  // namespace runtime
