#include "p2p/egress_scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace p2p {
namespace {

constexpr double kTxBurstChunks = 8;
// A partition limit's burst, in chunks (or chunk times of the rate, whichever is more): enough
// that waiting a few chunks for its round-robin turn or the global bucket costs the partition no
// rate, few enough that the ceiling is tight over any interval.
constexpr double kLimitBurstChunks = 4;

bool IsUnlimited(double cap) { return cap == 0 || std::isinf(cap); }

double CapOrUnlimited(double cap) {
  return IsUnlimited(cap) ? flowctl::TokenBucket::kUnlimited : cap;
}

// The burst of a partition limit of `rate` bytes/s (finite, > 0): kLimitBurstChunks x the larger
// of one chunk time of the rate and one of the partition's chunks (cost, header included).
double LimitBurstBytes(double rate, int64_t chunk_time_nanos) {
  const double chunk_cost =
      static_cast<double>(ChunkBytesForCap(rate, chunk_time_nanos) + kFrameOverheadBytes);
  const double chunk_time_bytes = rate * (static_cast<double>(chunk_time_nanos) / 1e9);
  return std::min(flowctl::TokenBucket::kMaxTokens,
                  kLimitBurstChunks * std::max(chunk_time_bytes, chunk_cost));
}

}  // namespace

const ChannelEgressStats& EgressStats::channel(Channel c) const {
  auto it = std::find_if(channels.begin(), channels.end(),
                         [c](const ChannelEgressStats& s) { return s.channel == c; });
  CHECK(it != channels.end()) << "no egress stats for channel " << static_cast<int>(c);
  return *it;
}

size_t ChunkBytesForCap(double cap_bytes_per_second, int64_t chunk_time_nanos) {
  if (IsUnlimited(cap_bytes_per_second)) return kMaxChunkBytes;
  const double bytes = cap_bytes_per_second * static_cast<double>(chunk_time_nanos) / 1e9;
  return static_cast<size_t>(
      std::clamp(bytes, static_cast<double>(kMinChunkBytes), static_cast<double>(kMaxChunkBytes)));
}

EgressScheduler::EgressScheduler(const EgressOptions& options, const flowctl::Clock* clock)
    : options_(options),
      clock_(clock),
      derived_(options_.channels.derived_rate_index()),
      cap_(CapOrUnlimited(options.cap_bytes_per_second)),
      floor_(std::max(0.0, options.tx_forward_floor_bytes_per_second)),
      chunk_bytes_(ChunkBytesForCap(options.cap_bytes_per_second, options.chunk_time_nanos)),
      tx_rate_(cap_),
      global_bucket_(cap_, static_cast<double>(chunk_bytes_ + kFrameOverheadBytes), clock),
      tx_bucket_(cap_, static_cast<double>(chunk_bytes_ + kFrameOverheadBytes), clock) {
  absl::MutexLock l(&mu_);
  for (int i = 0; i < kNumChannels; ++i) {
    channels_[i].desc = &options_.channels.by_priority()[i];
    channels_[i].stats.channel = channels_[i].desc->channel;
  }
  slot_start_ = clock_->NowNanos();
  UpdateDerivedRate();
}

void EgressScheduler::SetWakeup(std::function<void()> wakeup) {
  absl::MutexLock l(&wakeup_mu_);
  wakeup_ = std::move(wakeup);
}

void EgressScheduler::Wake() {
  absl::ReaderMutexLock l(&wakeup_mu_);
  if (wakeup_) wakeup_();
}

absl::Status EgressScheduler::Enqueue(const NodeId& peer, PartitionId partition, Channel channel,
                                      std::shared_ptr<const std::string> payload, bool wake) {
  const int idx = options_.channels.PriorityIndex(channel);
  if (idx < 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid channel ", static_cast<int>(channel)));
  }
  const size_t size = payload->size();
  {
    absl::MutexLock l(&mu_);
    if (size > options_.max_frame_bytes) {
      ++oversized_refused_;
      return absl::InvalidArgumentError(
          absl::StrCat("frame of ", size, " bytes on ", ChannelName(channel),
                       " exceeds max_frame_bytes ", options_.max_frame_bytes));
    }
    ChannelState& cs = channels_[idx];
    if (!blocked_.empty() && blocked_.contains(peer) && !MakeRoomForBlockedPeer(peer, size)) {
      // Like a full writer queue before: frames for a peer that does not drain are lost to it
      // (PBFT retransmits and block sync cover consensus). Counted, not an error for the caller.
      ++blocked_peer_drops_;
      ++cs.stats.messages_dropped;
      cs.stats.bytes_dropped += size;
      LOG_EVERY_N(WARNING, 1000) << "egress: peer " << peer << " blocked with "
                                 << options_.blocked_peer_bytes << " bytes queued; dropped a "
                                 << ChannelName(channel) << " message (" << blocked_peer_drops_
                                 << " so far)";
      return absl::OkStatus();
    }
    const size_t limit = cs.desc->queue_bytes;
    if (cs.queued_bytes + size > limit) {
      if (cs.desc->overflow == OverflowPolicy::kRefuseNew) {
        ++cs.stats.messages_refused;
        LOG_EVERY_N(WARNING, 100) << "egress " << ChannelName(channel) << " queue full ("
                                  << cs.queued_bytes << " bytes queued, limit " << limit
                                  << "): message refused, " << cs.stats.messages_refused
                                  << " refused so far";
        return absl::ResourceExhaustedError(
            absl::StrCat("egress ", ChannelName(channel), " queue full"));
      }
      if (size > limit) {
        ++cs.stats.messages_dropped;
        cs.stats.bytes_dropped += size;
        return absl::ResourceExhaustedError(absl::StrCat("message of ", size, " bytes exceeds the ",
                                                         ChannelName(channel), " queue bound"));
      }
      // Drop oldest first; if only messages already on the wire remain, overshoot by one.
      while (cs.queued_bytes + size > limit && DropOldest(cs)) {
      }
    }
    Message m;
    m.id = next_id_++;
    m.peer = peer;
    m.partition = partition;
    m.channel = channel;
    m.data = std::move(payload);
    m.enqueued_at = clock_->NowNanos();
    if (options_.fifo_mode) {
      fifo_.push_back(std::move(m));
    } else {
      auto [it, inserted] = cs.partitions.try_emplace(partition);
      if (inserted) cs.active.push_back(partition);
      it->second.messages.push_back(std::move(m));
    }
    cs.queued_bytes += size;
    ++cs.queued_messages;
    ++cs.stats.messages_enqueued;
    peer_bytes_[peer] += size;
  }
  if (wake) Wake();
  return absl::OkStatus();
}

size_t EgressScheduler::ChunkBytesFor(PartitionId partition) const {
  if (limits_.empty()) return chunk_bytes_;
  auto it = limits_.find(partition);
  if (it == limits_.end() || it->second.bucket == nullptr) return chunk_bytes_;
  return std::min(chunk_bytes_, ChunkBytesForCap(it->second.rate, options_.chunk_time_nanos));
}

size_t EgressScheduler::ChunkCost(const Message& m) const {
  const size_t chunk = m.started() ? m.chunk_size : ChunkBytesFor(m.partition);
  return std::min(chunk, m.data->size() - m.offset) + kFrameOverheadBytes;
}

size_t EgressScheduler::Eligible(const PartitionQueue& pq) const {
  if (blocked_.empty()) return 0;
  for (size_t i = 0; i < pq.messages.size(); ++i) {
    if (!blocked_.contains(pq.messages[i].peer)) return i;
  }
  return kNone;
}

bool EgressScheduler::HeldByLimit(const Message& m, int64_t now, std::vector<PartitionId>* held,
                                  int64_t* wait) {
  if (limits_.empty()) return false;
  if (std::find(held->begin(), held->end(), m.partition) != held->end()) return true;
  auto it = limits_.find(m.partition);
  if (it == limits_.end() || it->second.bucket == nullptr) return false;
  PartitionLimit& limit = it->second;
  const int64_t until = limit.bucket->NanosUntilAt(static_cast<double>(ChunkCost(m)), now);
  if (until == 0) return false;
  held->push_back(m.partition);
  *wait = std::min(*wait, until);
  const std::pair<uint64_t, uint32_t> chunk = {m.id, m.next_chunk};
  if (chunk != limit.last_held) {
    limit.last_held = chunk;
    ++limit.waits;
  }
  return true;
}

void EgressScheduler::ChargeLimit(PartitionId partition, size_t cost, int64_t now) {
  if (limits_.empty()) return;
  auto it = limits_.find(partition);
  if (it == limits_.end() || it->second.bucket == nullptr) return;
  it->second.bucket->ConsumeAt(static_cast<double>(cost), now);
}

std::pair<EgressScheduler::PartitionQueue*, size_t> EgressScheduler::SelectPartition(
    ChannelState& cs, int64_t now, std::vector<PartitionId>* held, int64_t* wait) {
  // Deficit round robin. Each visit without enough deficit grants one quantum, and the quantum is
  // at least the current chunk cost, so this ends within a few rounds (a message whose chunk size
  // was fixed under a larger cap may need several quanta). Partitions whose messages all wait on
  // blocked peers, and partitions held by their limit, are passed over; once every partition
  // was, there is nothing to send.
  size_t passed = 0;
  for (;;) {
    const PartitionId p = cs.active.front();
    PartitionQueue& pq = cs.partitions.at(p);
    size_t pos = Eligible(pq);
    if (pos != kNone && HeldByLimit(pq.messages[pos], now, held, wait)) pos = kNone;
    if (pos == kNone) {
      if (++passed >= cs.active.size()) return {nullptr, kNone};
      pq.quantum_given = false;
      cs.active.pop_front();
      cs.active.push_back(p);
      continue;
    }
    passed = 0;
    const int64_t cost = static_cast<int64_t>(ChunkCost(pq.messages[pos]));
    if (pq.deficit >= cost) return {&pq, pos};
    if (!pq.quantum_given) {
      auto w = weights_.find(p);
      const int64_t weight = w == weights_.end() ? 1 : w->second;
      pq.deficit += weight * static_cast<int64_t>(chunk_bytes_ + kFrameOverheadBytes);
      pq.quantum_given = true;
      continue;
    }
    pq.quantum_given = false;
    cs.active.pop_front();
    cs.active.push_back(p);
  }
}

EgressFrame EgressScheduler::CutChunk(Message& m, int64_t now) {
  ChannelState& cs = channels_[options_.channels.PriorityIndex(m.channel)];
  const size_t total = m.data->size();
  if (!m.started()) {
    m.chunk_size = static_cast<uint32_t>(ChunkBytesFor(m.partition));
    cs.delay.Record(now - m.enqueued_at);
  }
  const uint32_t count =
      total == 0 ? 1 : static_cast<uint32_t>((total + m.chunk_size - 1) / m.chunk_size);
  EgressFrame f;
  f.peer = m.peer;
  f.partition = m.partition;
  f.channel = m.channel;
  f.message_id = m.id;
  f.message_length = static_cast<uint32_t>(total);
  f.chunk_index = m.next_chunk;
  f.chunk_count = count;
  f.data = m.data;
  f.offset = m.offset;
  f.length = std::min<size_t>(m.chunk_size, total - m.offset);
  f.enqueued_at = m.enqueued_at;
  m.offset += f.length;
  ++m.next_chunk;
  cs.queued_bytes -= f.length;
  if (auto pb = peer_bytes_.find(m.peer); pb != peer_bytes_.end()) {
    pb->second -= std::min<uint64_t>(pb->second, f.length);
    if (pb->second == 0) peer_bytes_.erase(pb);
  }
  if (m.next_chunk == count) --cs.queued_messages;
  return f;
}

void EgressScheduler::Account(const EgressFrame& f, int64_t now) {
  const int idx = options_.channels.PriorityIndex(f.channel);
  ChannelState& cs = channels_[idx];
  const size_t wire = f.wire_bytes();
  cs.stats.bytes_sent += wire;
  ++cs.stats.frames_sent;
  PartitionEgressStats& ps = partition_stats_[{f.partition, f.channel}];
  ps.bytes_sent += wire;
  ++ps.frames_sent;
  if (idx < derived_) usage_slots_[usage_slot_] += wire;
}

void EgressScheduler::RemovePartitionIfEmpty(ChannelState& cs, PartitionId p) {
  auto it = cs.partitions.find(p);
  if (it == cs.partitions.end() || !it->second.messages.empty()) return;
  cs.partitions.erase(it);
  cs.active.erase(std::find(cs.active.begin(), cs.active.end(), p));
}

bool EgressScheduler::DropOldest(ChannelState& cs) {
  const Channel channel = cs.desc->channel;
  Message victim;
  if (options_.fifo_mode) {
    auto it = std::find_if(fifo_.begin(), fifo_.end(), [channel](const Message& m) {
      return m.channel == channel && !m.started();
    });
    if (it == fifo_.end()) return false;
    victim = std::move(*it);
    fifo_.erase(it);
  } else {
    // The oldest message not yet on the wire, across partitions (ids grow with enqueue time).
    PartitionQueue* best = nullptr;
    size_t best_pos = 0;
    for (auto& [p, pq] : cs.partitions) {
      // Started messages (on the wire) stay; with blocked peers one may be past the front.
      size_t pos = 0;
      while (pos < pq.messages.size() && pq.messages[pos].started()) ++pos;
      if (pos >= pq.messages.size()) continue;
      if (best == nullptr || pq.messages[pos].id < best->messages[best_pos].id) {
        best = &pq;
        best_pos = pos;
      }
    }
    if (best == nullptr) return false;
    victim = std::move(best->messages[best_pos]);
    best->messages.erase(best->messages.begin() + best_pos);
    RemovePartitionIfEmpty(cs, victim.partition);
  }
  Forget(cs, victim);
  return true;
}

void EgressScheduler::Forget(ChannelState& cs, const Message& m) {
  const size_t left = m.data->size() - m.offset;
  cs.queued_bytes -= left;
  --cs.queued_messages;
  ++cs.stats.messages_dropped;
  cs.stats.bytes_dropped += left;
  if (auto pb = peer_bytes_.find(m.peer); pb != peer_bytes_.end()) {
    pb->second -= std::min<uint64_t>(pb->second, left);
    if (pb->second == 0) peer_bytes_.erase(pb);
  }
}

bool EgressScheduler::MakeRoomForBlockedPeer(const NodeId& peer, size_t size) {
  const size_t bound = options_.blocked_peer_bytes;
  auto over = [&] {
    auto pb = peer_bytes_.find(peer);
    return (pb == peer_bytes_.end() ? 0 : pb->second) + size > bound;
  };
  // Droppable channels only, lowest priority first (BULK, then TX_FORWARD), oldest first within a
  // partition's queue.
  for (int i = kNumChannels - 1; i >= 0 && over(); --i) {
    ChannelState& cs = channels_[i];
    if (cs.desc->overflow != OverflowPolicy::kDropOldest) continue;
    std::vector<PartitionId> parts;
    for (auto& [p, pq] : cs.partitions) {
      for (size_t j = 0; j < pq.messages.size() && over();) {
        if (pq.messages[j].peer == peer && !pq.messages[j].started()) {
          Forget(cs, pq.messages[j]);
          ++blocked_peer_drops_;
          pq.messages.erase(pq.messages.begin() + j);
        } else {
          ++j;
        }
      }
      parts.push_back(p);
    }
    for (PartitionId p : parts) RemovePartitionIfEmpty(cs, p);
  }
  return !over();
}

void EgressScheduler::SetPeerBlocked(const NodeId& peer, bool blocked) {
  bool wake = false;
  {
    absl::MutexLock l(&mu_);
    if (options_.fifo_mode) return;
    if (blocked) {
      if (blocked_.insert(peer).second) ++peer_block_events_;
    } else {
      wake = blocked_.erase(peer) > 0;
    }
  }
  if (wake) Wake();
}

size_t EgressScheduler::DropPeer(const NodeId& peer) {
  absl::MutexLock l(&mu_);
  size_t dropped = 0;
  auto drop = [&](Message& m) {
    Forget(channels_[options_.channels.PriorityIndex(m.channel)], m);
    ++dropped;
  };
  auto is_peer = [&](const Message& m) { return m.peer == peer; };
  for (Message& m : fifo_) {
    if (is_peer(m)) drop(m);
  }
  std::erase_if(fifo_, is_peer);
  for (ChannelState& cs : channels_) {
    std::vector<PartitionId> parts;
    for (auto& [p, pq] : cs.partitions) {
      for (Message& m : pq.messages) {
        if (is_peer(m)) drop(m);
      }
      std::erase_if(pq.messages, is_peer);
      parts.push_back(p);
    }
    for (PartitionId p : parts) RemovePartitionIfEmpty(cs, p);
  }
  peer_bytes_.erase(peer);
  blocked_.erase(peer);
  return dropped;
}

void EgressScheduler::AdvanceUsageWindow(int64_t now) {
  const int64_t slot_len = std::max<int64_t>(1, options_.usage_window_nanos / kUsageSlots);
  if (now - slot_start_ < slot_len) return;
  const int64_t slots = (now - slot_start_) / slot_len;
  for (int64_t i = 0; i < std::min<int64_t>(slots, kUsageSlots); ++i) {
    usage_slot_ = (usage_slot_ + 1) % kUsageSlots;
    usage_slots_[usage_slot_] = 0;
  }
  slot_start_ += slots * slot_len;
  UpdateDerivedRate();
}

double EgressScheduler::PriorityUsage() const {
  // The completed slots only; the current one is still filling.
  uint64_t sum = 0;
  for (int i = 0; i < kUsageSlots; ++i) {
    if (i != usage_slot_) sum += usage_slots_[i];
  }
  const double seconds =
      static_cast<double>(options_.usage_window_nanos / kUsageSlots * (kUsageSlots - 1)) / 1e9;
  return seconds > 0 ? static_cast<double>(sum) / seconds : 0;
}

void EgressScheduler::UpdateDerivedRate() {
  double rate = flowctl::TokenBucket::kUnlimited;
  if (!std::isinf(cap_)) rate = std::max(floor_, cap_ - PriorityUsage());
  // A few chunks of burst: with a single chunk, the two buckets waiting on each other lose
  // tokens and forwarding falls short of its derived rate. The global bucket still caps the sum.
  const double burst = kTxBurstChunks * static_cast<double>(chunk_bytes_ + kFrameOverheadBytes);
  if (rate != tx_rate_ || burst != tx_bucket_.burst()) {
    tx_rate_ = rate;
    CHECK(tx_bucket_.SetRate(rate, burst).ok());
  }
}

DequeueResult EgressScheduler::Dequeue() {
  absl::MutexLock l(&mu_);
  const int64_t now = clock_->NowNanos();
  AdvanceUsageWindow(now);
  return options_.fifo_mode ? DequeueFifo(now) : DequeuePriority(now);
}

DequeueResult EgressScheduler::DequeuePriority(int64_t now) {
  int64_t wait = kNever;
  // Partitions held by their limit in this pass: passed over in every channel below too, so a
  // partition's own lower channels do not take the tokens its higher one waits for.
  std::vector<PartitionId> held;
  for (int i = 0; i < kNumChannels; ++i) {
    ChannelState& cs = channels_[i];
    if (cs.active.empty()) continue;
    auto [pq, pos] = SelectPartition(cs, now, &held, &wait);
    if (pq == nullptr) continue;  // all of it waits on blocked peers or partition limits
    Message& m = pq->messages[pos];
    const size_t cost = ChunkCost(m);
    if (i == derived_ && tx_bucket_.NanosUntilAt(cost, now) > 0) {
      // Held to its derived rate; a lower channel may use the budget meanwhile.
      wait = std::min(wait, tx_bucket_.NanosUntilAt(cost, now));
      continue;
    }
    if (!global_bucket_.TryAcquireAt(cost, now)) {
      // Strict priority: nothing lower may take the budget this channel is waiting for.
      return {std::nullopt,
              std::min(wait, std::max<int64_t>(1, global_bucket_.NanosUntilAt(cost, now)))};
    }
    if (i == derived_) tx_bucket_.ConsumeAt(cost, now);
    ChargeLimit(m.partition, cost, now);
    pq->deficit -= static_cast<int64_t>(cost);
    EgressFrame f = CutChunk(m, now);
    if (m.next_chunk == f.chunk_count) {
      pq->messages.erase(pq->messages.begin() + static_cast<std::ptrdiff_t>(pos));
      RemovePartitionIfEmpty(cs, f.partition);
    }
    Account(f, now);
    return {std::move(f), 0};
  }
  return {std::nullopt, wait};
}

DequeueResult EgressScheduler::DequeueFifo(int64_t now) {
  if (fifo_.empty()) return {std::nullopt, kNever};
  Message& m = fifo_.front();
  const size_t cost = ChunkCost(m);
  std::vector<PartitionId> held;
  int64_t wait = kNever;
  if (HeldByLimit(m, now, &held, &wait)) return {std::nullopt, wait};  // head-of-line
  if (!global_bucket_.TryAcquireAt(cost, now)) {
    return {std::nullopt, std::max<int64_t>(1, global_bucket_.NanosUntilAt(cost, now))};
  }
  ChargeLimit(m.partition, cost, now);
  EgressFrame f = CutChunk(m, now);
  if (m.next_chunk == f.chunk_count) fifo_.pop_front();
  Account(f, now);
  return {std::move(f), 0};
}

absl::Status EgressScheduler::SetCap(double cap_bytes_per_second) {
  if (!(cap_bytes_per_second >= 0)) {
    return absl::InvalidArgumentError("egress cap must be >= 0 (0 = unlimited)");
  }
  {
    absl::MutexLock l(&mu_);
    cap_ = CapOrUnlimited(cap_bytes_per_second);
    chunk_bytes_ = ChunkBytesForCap(cap_bytes_per_second, options_.chunk_time_nanos);
    CHECK(
        global_bucket_.SetRate(cap_, static_cast<double>(chunk_bytes_ + kFrameOverheadBytes)).ok());
    UpdateDerivedRate();
  }
  Wake();
  return absl::OkStatus();
}

absl::Status EgressScheduler::SetTxForwardFloor(double floor_bytes_per_second) {
  if (!(floor_bytes_per_second >= 0) || std::isinf(floor_bytes_per_second)) {
    return absl::InvalidArgumentError("tx_forward floor must be finite and >= 0");
  }
  {
    absl::MutexLock l(&mu_);
    floor_ = floor_bytes_per_second;
    UpdateDerivedRate();
  }
  Wake();
  return absl::OkStatus();
}

absl::Status EgressScheduler::SetPartitionWeight(PartitionId partition, uint32_t weight) {
  if (weight == 0) return absl::InvalidArgumentError("partition weight must be >= 1");
  absl::MutexLock l(&mu_);
  weights_[partition] = weight;
  return absl::OkStatus();
}

absl::Status EgressScheduler::SetPartitionRateLimit(PartitionId partition,
                                                    double bytes_per_second) {
  if (!(bytes_per_second >= 0)) {  // also refuses NaN
    return absl::InvalidArgumentError(absl::StrCat("partition ", partition,
                                                   ": egress rate limit must be >= 0 bytes/s "
                                                   "(0 = none), got ",
                                                   bytes_per_second));
  }
  {
    absl::MutexLock l(&mu_);
    if (IsUnlimited(bytes_per_second)) {
      auto it = limits_.find(partition);
      if (it == limits_.end()) return absl::OkStatus();
      it->second.rate = 0;
      it->second.bucket.reset();
    } else {
      PartitionLimit& limit = limits_[partition];
      const double burst = LimitBurstBytes(bytes_per_second, options_.chunk_time_nanos);
      limit.rate = bytes_per_second;
      if (limit.bucket == nullptr) {
        limit.bucket = std::make_unique<flowctl::TokenBucket>(bytes_per_second, burst, clock_);
      } else {
        // Keeps the balance (clipped to the new burst) or the debt: no fresh burst.
        CHECK(limit.bucket->SetRate(bytes_per_second, burst).ok());
      }
    }
  }
  Wake();
  return absl::OkStatus();
}

EgressStats EgressScheduler::Stats() const {
  absl::MutexLock l(&mu_);
  EgressStats s;
  for (int i = 0; i < kNumChannels; ++i) {
    s.channels[i] = channels_[i].stats;
    s.channels[i].queued_bytes = channels_[i].queued_bytes;
    s.channels[i].queued_messages = channels_[i].queued_messages;
    s.channels[i].queue_delay_nanos = channels_[i].delay.Snapshot();
  }
  s.partitions = partition_stats_;
  for (const auto& [p, limit] : limits_) {
    PartitionLimitStats& ls = s.partition_limits[p];
    ls.limit_bytes_per_second = limit.rate;
    ls.burst_bytes = limit.bucket == nullptr ? 0 : limit.bucket->burst();
    ls.limit_waits = limit.waits;
  }
  s.oversized_refused = oversized_refused_;
  s.blocked_peers = blocked_.size();
  s.peer_block_events = peer_block_events_;
  s.blocked_peer_drops = blocked_peer_drops_;
  s.cap_bytes_per_second = cap_;
  s.tx_forward_rate = tx_rate_;
  s.priority_usage_bytes_per_second = PriorityUsage();
  s.chunk_bytes = chunk_bytes_;
  return s;
}

flowctl::EgressUsage SchedulerEgressAccounting::Usage() const {
  const EgressStats es = scheduler_->Stats();
  flowctl::EgressUsage u;
  u.cap_bytes_per_second = es.cap_bytes_per_second;
  for (const auto& [key, st] : es.partitions) u.bytes_sent[key.first] += st.bytes_sent;
  return u;
}

}  // namespace p2p
