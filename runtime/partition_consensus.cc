// Partition: the peer path (lanes -> the consensus driver), ticks, and commit bookkeeping.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
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
  int lane = kBulkLane;
  switch (channel) {
    case p2p::Channel::CONSENSUS:
      lane = kConsensusLane;
      break;
    case p2p::Channel::SYNC:
      lane = kSyncLane;
      break;
    case p2p::Channel::TX_FORWARD:
      lane = kTxForwardLane;
      break;
    default:
      lane = kBulkLane;
  }
  // Full lanes drop and count (Dispatcher stats); PBFT retransmits what matters.
  flowctl::Message m;
  m.payload = std::move(payload);
  m.peer = it->second;
  dispatcher_->Offer(lane, std::move(m));
}

void Partition::Impl::HandlePeerMessage(flowctl::Message message) {
  node::partition::PartitionMessage msg;
  if (!msg.ParseFromString(message.payload)) {
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  switch (msg.body_case()) {
    case node::partition::PartitionMessage::kConsensus:
      driver_->OnConsensusMessage(message.peer, msg.consensus());
      return;
    case node::partition::PartitionMessage::kTxs:
      driver_->OnTxBatch(msg.txs());
      return;
    case node::partition::PartitionMessage::kFetch:
      driver_->OnFetch(message.peer, msg.fetch());
      return;
    default:
      dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Partition::Impl::OnCommit(const partitions::CommitEvent& event) {
  height_.store(event.height);
  for (const partitions::TrackedTx& t : event.tracked) {
    if (t.admitted_nanos > 0) commit_latency_.Record(event.commit_nanos - t.admitted_nanos);
  }
}

void Partition::Impl::ReleaseCommittedTicketsLocked(const partitions::CommitEvent& event) {
  // In the critical section that removed the txs from the pool, so the ticket sweep never takes
  // a committed tx for a dropped one.
  std::vector<flowctl::AdaptiveLimiter::Ticket> tickets;
  {
    absl::MutexLock lock(&wait_mu_);
    if (adaptive_tickets_.empty()) return;
    for (const auto& tx : event.txs) {
      if (auto it = adaptive_tickets_.find(tx->hash); it != adaptive_tickets_.end()) {
        tickets.push_back(std::move(it->second.ticket));
        adaptive_tickets_.erase(it);
      }
    }
  }
  // Latency samples for the adaptive stage (its lock is a leaf, taken after wait_mu_ is free).
  for (flowctl::AdaptiveLimiter::Ticket& t : tickets) t.Commit();
}

// ---- Ticks ----

void Partition::Impl::RequestTick() {
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
  env_.scheduler->ScheduleAt(tick_id_, next);
}

int64_t Partition::Impl::Tick(int64_t now) {
  forwarder_->Flush(/*release_all=*/stopping_.load(std::memory_order_relaxed));
  const int64_t wake = driver_->Tick(now, paused_.load(std::memory_order_relaxed));
  waiters_.Expire(now);
  return wake;
}

}  // namespace runtime
