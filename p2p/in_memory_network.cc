#include "p2p/in_memory_network.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"

namespace p2p {

struct InMemoryHub::Slot {
  // Held while a handler runs, so that destroying the node waits for it.
  absl::Mutex delivery_mu;
  bool alive ABSL_GUARDED_BY(delivery_mu) = true;

  absl::Mutex mu;
  Network::MessageHandler on_message ABSL_GUARDED_BY(mu);
  Network::PeerEventHandler on_peer ABSL_GUARDED_BY(mu);
};

namespace {
std::pair<NodeId, NodeId> LinkKey(const NodeId& a, const NodeId& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}
}  // namespace

InMemoryHub::InMemoryHub(const flowctl::Clock* clock, size_t max_frame_bytes)
    : clock_(clock), max_frame_bytes_(max_frame_bytes) {}

InMemoryHub::~InMemoryHub() {
  StopDeliveryThread();
  absl::MutexLock l(&mu_);
  CHECK(nodes_.empty()) << "InMemoryHub destroyed before its nodes";
}

std::unique_ptr<InMemoryNetwork> InMemoryHub::AddNode(const NodeId& id) {
  CHECK(!id.empty());
  auto slot = std::make_shared<Slot>();
  {
    absl::MutexLock l(&mu_);
    CHECK(nodes_.emplace(id, slot).second) << "duplicate node id " << id;
  }
  return std::unique_ptr<InMemoryNetwork>(new InMemoryNetwork(this, id, slot));
}

void InMemoryHub::RemoveNode(const NodeId& id) {
  absl::MutexLock l(&mu_);
  nodes_.erase(id);
}

bool InMemoryHub::LinkUpLocked(const NodeId& a, const NodeId& b) const {
  return cut_links_.count(LinkKey(a, b)) == 0;
}

void InMemoryHub::FireEvents(
    std::vector<std::pair<std::shared_ptr<Slot>, std::pair<NodeId, PeerEvent>>> events) {
  for (auto& [slot, ev] : events) {
    absl::MutexLock dl(&slot->delivery_mu);
    if (!slot->alive) continue;
    Network::PeerEventHandler handler;
    {
      absl::MutexLock l(&slot->mu);
      handler = slot->on_peer;
    }
    if (handler) handler(ev.first, ev.second);
  }
}

void InMemoryHub::SetLinkUp(const NodeId& a, const NodeId& b, bool up) {
  std::vector<std::pair<std::shared_ptr<Slot>, std::pair<NodeId, PeerEvent>>> events;
  {
    absl::MutexLock l(&mu_);
    const auto key = LinkKey(a, b);
    const bool was_up = cut_links_.count(key) == 0;
    if (was_up == up) return;
    if (up) {
      cut_links_.erase(key);
    } else {
      cut_links_.insert(key);
    }
    const PeerEvent ev = up ? PeerEvent::kUp : PeerEvent::kDown;
    if (auto it = nodes_.find(a); it != nodes_.end()) events.push_back({it->second, {b, ev}});
    if (auto it = nodes_.find(b); it != nodes_.end()) events.push_back({it->second, {a, ev}});
  }
  FireEvents(std::move(events));
}

void InMemoryHub::SetNodeUp(const NodeId& id, bool up) {
  std::vector<NodeId> others;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [other, slot] : nodes_) {
      if (other != id) others.push_back(other);
    }
  }
  for (const NodeId& other : others) SetLinkUp(id, other, up);
}

void InMemoryHub::SetFaultHook(FaultHook hook) {
  absl::MutexLock l(&mu_);
  hook_ = std::move(hook);
}

absl::Status InMemoryHub::Enqueue(const NodeId& from, const NodeId& to, PartitionId partition,
                                  Channel channel, std::string payload) {
  if (!IsValidChannel(channel)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid channel ", static_cast<int>(channel)));
  }
  if (payload.size() > max_frame_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame of ", payload.size(), " bytes exceeds max_frame_bytes ", max_frame_bytes_));
  }
  absl::MutexLock l(&mu_);
  if (to == from || nodes_.count(to) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown peer ", to));
  }
  if (!LinkUpLocked(from, to)) return absl::UnavailableError(absl::StrCat("peer ", to, " down"));
  Envelope env;
  env.seq = next_seq_++;
  env.deliver_at = clock_->NowNanos();
  env.from = from;
  env.to = to;
  env.partition = partition;
  env.channel = channel;
  env.payload = std::move(payload);
  if (hook_) {
    const FaultDecision d = hook_(env);
    if (d.action == FaultDecision::Action::kDrop) {
      ++dropped_;
      return absl::OkStatus();  // a lost message looks sent to the sender
    }
    if (d.action == FaultDecision::Action::kDelay)
      env.deliver_at += std::max<int64_t>(0, d.delay_nanos);
  }
  const auto key = std::make_pair(env.deliver_at, env.seq);
  queue_.emplace(key, std::move(env));
  return absl::OkStatus();
}

absl::Status InMemoryHub::BroadcastFrom(const NodeId& from, PartitionId partition, Channel channel,
                                        std::string payload) {
  for (const NodeId& to : PeersOf(from, /*connected_only=*/true)) {
    absl::Status s = Enqueue(from, to, partition, channel, payload);
    // A link cut between PeersOf and Enqueue is the same as a peer that was down: skipped.
    if (!s.ok() && !absl::IsUnavailable(s)) return s;
  }
  return absl::OkStatus();
}

std::vector<NodeId> InMemoryHub::PeersOf(const NodeId& id, bool connected_only) const {
  absl::MutexLock l(&mu_);
  std::vector<NodeId> out;
  for (const auto& [other, slot] : nodes_) {
    if (other == id) continue;
    if (connected_only && !LinkUpLocked(id, other)) continue;
    out.push_back(other);
  }
  return out;
}

void InMemoryHub::Deliver(Envelope env) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock l(&mu_);
    auto it = nodes_.find(env.to);
    if (it == nodes_.end() || !LinkUpLocked(env.from, env.to)) {
      ++dropped_;
      return;
    }
    slot = it->second;
    ++delivered_;
  }
  absl::MutexLock dl(&slot->delivery_mu);
  if (!slot->alive) return;
  Network::MessageHandler handler;
  {
    absl::MutexLock l(&slot->mu);
    handler = slot->on_message;
  }
  if (handler) handler(env.from, env.partition, env.channel, std::move(env.payload));
}

bool InMemoryHub::DeliverNext() {
  Envelope env;
  {
    absl::MutexLock l(&mu_);
    if (queue_.empty() || queue_.begin()->first.first > clock_->NowNanos()) return false;
    env = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
  }
  Deliver(std::move(env));
  return true;
}

size_t InMemoryHub::DeliverAll(size_t max) {
  size_t n = 0;
  while (n < max && DeliverNext()) ++n;
  return n;
}

bool InMemoryHub::DeliverBySeq(uint64_t seq) {
  Envelope env;
  {
    absl::MutexLock l(&mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [seq](const auto& kv) { return kv.second.seq == seq; });
    if (it == queue_.end()) return false;
    env = std::move(it->second);
    queue_.erase(it);
  }
  Deliver(std::move(env));
  return true;
}

int64_t InMemoryHub::NextDeliveryTime() const {
  absl::MutexLock l(&mu_);
  return queue_.empty() ? kNever : queue_.begin()->first.first;
}

size_t InMemoryHub::pending() const {
  absl::MutexLock l(&mu_);
  return queue_.size();
}

std::vector<Envelope> InMemoryHub::PendingForTest() const {
  absl::MutexLock l(&mu_);
  std::vector<Envelope> out;
  for (const auto& [key, env] : queue_) out.push_back(env);
  return out;
}

uint64_t InMemoryHub::delivered() const {
  absl::MutexLock l(&mu_);
  return delivered_;
}

uint64_t InMemoryHub::dropped() const {
  absl::MutexLock l(&mu_);
  return dropped_;
}

void InMemoryHub::StartDeliveryThread() {
  absl::MutexLock tl(&thread_mu_);
  if (thread_) return;
  {
    absl::MutexLock l(&mu_);
    stop_thread_ = false;
  }
  thread_ = std::make_unique<std::thread>([this] { DeliveryLoop(); });
}

void InMemoryHub::StopDeliveryThread() {
  absl::MutexLock tl(&thread_mu_);
  if (!thread_) return;
  {
    absl::MutexLock l(&mu_);
    stop_thread_ = true;
  }
  thread_->join();
  thread_.reset();
}

void InMemoryHub::DeliveryLoop() {
  for (;;) {
    DeliverAll(1024);
    absl::MutexLock l(&mu_);
    if (stop_thread_) return;
    const int64_t now = clock_->NowNanos();
    const bool ready = !queue_.empty() && queue_.begin()->first.first <= now;
    if (ready) continue;
    // Wake on a new envelope, on stop, or (bounded) when the earliest delayed one is due.
    int64_t wait = queue_.empty() ? 10'000'000 : queue_.begin()->first.first - now;
    wait = std::min<int64_t>(wait, 10'000'000);
    const size_t size_before = queue_.size();
    auto changed = [this, size_before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_thread_ || queue_.size() != size_before;
    };
    mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Nanoseconds(wait));
    if (stop_thread_) return;
  }
}

// ---- InMemoryNetwork ----

InMemoryNetwork::~InMemoryNetwork() {
  {
    absl::MutexLock dl(&slot_->delivery_mu);
    slot_->alive = false;
  }
  hub_->RemoveNode(id_);
}

std::vector<NodeId> InMemoryNetwork::peers() const {
  return hub_->PeersOf(id_, /*connected_only=*/false);
}

std::vector<NodeId> InMemoryNetwork::connected_peers() const {
  return hub_->PeersOf(id_, /*connected_only=*/true);
}

absl::Status InMemoryNetwork::Send(const NodeId& peer, PartitionId partition, Channel channel,
                                   std::string payload) {
  return hub_->Enqueue(id_, peer, partition, channel, std::move(payload));
}

absl::Status InMemoryNetwork::Broadcast(PartitionId partition, Channel channel,
                                        std::string payload) {
  return hub_->BroadcastFrom(id_, partition, channel, std::move(payload));
}

void InMemoryNetwork::SetHandlers(MessageHandler on_message, PeerEventHandler on_peer_event) {
  absl::MutexLock l(&slot_->mu);
  slot_->on_message = std::move(on_message);
  slot_->on_peer = std::move(on_peer_event);
}

}  // namespace p2p
