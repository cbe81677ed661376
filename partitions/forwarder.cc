#include "partitions/forwarder.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "glog/logging.h"

namespace partitions {

Forwarder::Forwarder(PeerSender* sender, const flowctl::Clock* clock, Options options)
    : sender_(sender), clock_(clock), options_(options) {}

void Forwarder::Queue(const TxPtr& tx) {
  if (sender_->replicas() <= 1) return;
  bool flush = false;
  {
    absl::MutexLock lock(&mu_);
    if (holding_) {
      const int64_t now = clock_->NowNanos();
      if (held_.try_emplace(tx->hash, HeldTx{.tx = tx, .since = now}).second) {
        held_order_.emplace_back(now, tx->hash);
      }
      return;
    }
    queued_.push_back(tx->signed_bytes);
    queued_bytes_ += tx->signed_bytes.size();
    flush = queued_bytes_ >= options_.flush_bytes;
  }
  if (flush) Flush(/*release_all=*/false);
}

int64_t Forwarder::Flush(bool release_all) {
  std::vector<std::string> txs;
  int64_t next = std::numeric_limits<int64_t>::max();
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_->NowNanos();
    const bool release_held = release_all || !holding_;
    while (!held_order_.empty()) {
      const auto& [since, hash] = held_order_.front();
      auto it = held_.find(hash);
      if (it != held_.end() && it->second.since == since) {
        if (!release_held && now - since < options_.hold_nanos) break;
        txs.push_back(it->second.tx->signed_bytes);
        held_.erase(it);
      }
      held_order_.pop_front();  // forwarded now, or already proposed
    }
    // The front may be the record of a proposed tx: at worst one Flush too early.
    if (!held_order_.empty()) next = held_order_.front().first + options_.hold_nanos;
    if (!queued_.empty()) {
      const int64_t due = last_batch_nanos_ == std::numeric_limits<int64_t>::min()
                              ? now
                              : last_batch_nanos_ + options_.min_interval_nanos;
      // Queued txs go with held ones that go anyway; and at once while holding, where only
      // bodies given back (no pre-prepare followed, or it was refused) are queued: the next cut
      // may propose them again, and backups must not have to fetch them.
      if (release_all || holding_ || !txs.empty() || queued_bytes_ >= options_.flush_bytes ||
          now >= due) {
        txs.insert(txs.end(), std::make_move_iterator(queued_.begin()),
                   std::make_move_iterator(queued_.end()));
        queued_.clear();
        queued_bytes_ = 0;
        last_batch_nanos_ = now;
      } else {
        next = std::min(next, due);
      }
    }
  }
  if (!txs.empty()) {
    node::partition::PartitionMessage msg;
    for (std::string& t : txs) msg.mutable_txs()->add_signed_txs(std::move(t));
    sender_->Broadcast(p2p::Channel::TX_FORWARD, msg);
  }
  return next;
}

bool Forwarder::Reforward(uint32_t to, const std::vector<TxPtr>& txs) {
  if (txs.empty()) return true;
  node::partition::PartitionMessage msg;
  for (const TxPtr& tx : txs) msg.mutable_txs()->add_signed_txs(tx->signed_bytes);
  if (!sender_->Send(to, p2p::Channel::TX_FORWARD, msg)) return false;
  reforwarded_txs_.fetch_add(txs.size(), std::memory_order_relaxed);
  return true;
}

bool Forwarder::SetHolding(bool hold) {
  absl::MutexLock lock(&mu_);
  const bool stopped = holding_ && !hold;
  holding_ = hold;
  return stopped;
}

std::optional<node::partition::PartitionMessage> Forwarder::TakeBodies(
    const std::vector<TxPtr>& batch) {
  node::partition::PartitionMessage bodies;
  {
    absl::MutexLock lock(&mu_);
    if (held_.empty()) return std::nullopt;
    for (const TxPtr& tx : batch) {
      if (held_.erase(tx->hash) > 0) bodies.mutable_txs()->add_signed_txs(tx->signed_bytes);
    }
  }
  if (!bodies.has_txs()) return std::nullopt;
  return bodies;
}

bool Forwarder::SendBodies(node::partition::PartitionMessage bodies) {
  const int n = bodies.txs().signed_txs_size();
  if (!sender_->Broadcast(p2p::Channel::CONSENSUS, bodies)) {
    // Refused (e.g. the CONSENSUS queue is full): forward them; backups fetch what they miss.
    ReturnBodies(std::move(bodies));
    return false;
  }
  proposal_body_txs_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  return true;
}

void Forwarder::ReturnBodies(node::partition::PartitionMessage bodies) {
  absl::MutexLock lock(&mu_);
  for (std::string& t : *bodies.mutable_txs()->mutable_signed_txs()) {
    queued_bytes_ += t.size();
    queued_.push_back(std::move(t));
  }
}

size_t Forwarder::held() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

}  // namespace partitions
