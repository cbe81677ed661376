#include "p2p/network.h"

#include <string>

#include "base/sha256.h"

namespace p2p {

std::ostream& operator<<(std::ostream& os, PeerEvent e) {
  return os << (e == PeerEvent::kUp ? "up" : "down");
}

NodeId NodeIdFromPublicKey(absl::string_view raw_public_key) {
  const std::string digest = base::Sha256Bytes(raw_public_key);
  return base::BytesToHex(absl::string_view(digest).substr(0, 16));
}

}  // namespace p2p
