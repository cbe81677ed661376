#include "p2p/network.h"

#include <string>
#include <utility>

#include "base/sha256.h"

namespace p2p {

std::ostream& operator<<(std::ostream& os, PeerEvent e) {
  return os << (e == PeerEvent::kUp ? "up" : "down");
}

namespace {
thread_local DeferredSends* active_deferred_sends = nullptr;
}  // namespace

DeferredSends::DeferredSends() : outermost_(active_deferred_sends == nullptr) {
  if (outermost_) active_deferred_sends = this;
}

DeferredSends::~DeferredSends() {
  if (!outermost_) return;
  active_deferred_sends = nullptr;
  for (auto& [key, release] : releases_) release();
}

bool DeferredSends::Defer(const void* key, std::function<void()> release) {
  DeferredSends* scope = active_deferred_sends;
  if (scope == nullptr) return false;
  for (const auto& [k, r] : scope->releases_) {
    if (k == key) return true;
  }
  scope->releases_.emplace_back(key, std::move(release));
  return true;
}

NodeId NodeIdFromPublicKey(absl::string_view raw_public_key) {
  const std::string digest = base::Sha256Bytes(raw_public_key);
  return base::BytesToHex(absl::string_view(digest).substr(0, 16));
}

}  // namespace p2p
