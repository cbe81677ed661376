#include "runtime/peer_refusals.h"

namespace runtime {

const char* PeerRefusals::ReasonName(Reason r) {
  switch (r) {
    case kUnknownPartition:
      return "unknown_partition";
    case kMalformed:
      return "malformed";
    case kWrongChannel:
      return "wrong_channel";
    case kBadSignature:
      return "bad_signature";
    case kBadTx:
      return "bad_tx";
    case kBadFrame:
      return "bad_frame";
    case kStoppedPartition:
      return "stopped_partition";
    case kNumReasons:
      break;
  }
  return "unknown";
}

PeerRefusals::PeerRefusals(const std::vector<p2p::NodeId>& peers) {
  for (const p2p::NodeId& id : peers) {
    auto counters = std::make_unique<Counters>();
    for (auto& c : *counters) c.store(0, std::memory_order_relaxed);
    counters_.emplace(id, std::move(counters));
  }
}

void PeerRefusals::Count(const p2p::NodeId& peer, Reason reason, uint64_t n) {
  auto it = counters_.find(peer);
  if (it == counters_.end() || reason >= kNumReasons) return;
  (*it->second)[reason].fetch_add(n, std::memory_order_relaxed);
}

uint64_t PeerRefusals::count(const p2p::NodeId& peer, Reason reason) const {
  auto it = counters_.find(peer);
  if (it == counters_.end() || reason >= kNumReasons) return 0;
  return (*it->second)[reason].load(std::memory_order_relaxed);
}

}  // namespace runtime
