#include "flowctl/peer_admission.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "glog/logging.h"

namespace flowctl {
namespace {

double Clamp01(double x) { return std::isnan(x) ? 1.0 : std::clamp(x, 0.0, 1.0); }

}  // namespace

PeerAdmission::PeerAdmission(uint32_t replicas, uint32_t self)
    : self_(self), f_((std::max<uint32_t>(replicas, 1) - 1) / 3), peers_(replicas) {
  CHECK_GE(replicas, 1u);
  CHECK_LT(self, replicas);
}

uint32_t PeerAdmission::ToPpm(double fraction) {
  return static_cast<uint32_t>(std::llround(kPpmOne * Clamp01(fraction)));
}

std::optional<double> PeerAdmission::FromPpm(uint32_t ppm) {
  if (ppm > kPpmOne) return std::nullopt;
  return static_cast<double>(ppm) / kPpmOne;
}

bool PeerAdmission::Observe(uint32_t replica, double fraction, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  if (replica == self_ || replica >= peers_.size()) return false;
  peers_[replica] = {.fraction = Clamp01(fraction), .at_nanos = now_nanos, .heard = true};
  return true;
}

bool PeerAdmission::LiveLocked(const Heard& h, int64_t now_nanos) const {
  return h.heard && now_nanos - h.at_nanos < absl::ToInt64Nanoseconds(kExpiry);
}

double PeerAdmission::AgreedLocked(double own, int64_t now_nanos) const {
  std::vector<double> all;
  all.reserve(peers_.size());
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    if (i == self_) {
      all.push_back(own);
    } else {
      all.push_back(LiveLocked(peers_[i], now_nanos) ? peers_[i].fraction : 1.0);
    }
  }
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(f_), all.end());
  return all[f_];
}

PeerAdmission::Decision PeerAdmission::Update(double own, double floor, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  floor = Clamp01(floor);
  own = std::max(Clamp01(own), floor);
  own_ = own;
  applied_ = std::max(std::min(own, AgreedLocked(own, now_nanos)), floor);
  const bool send = std::abs(own - sent_) >= kResendChange || (own < 1 && sent_ == 1) ||
                    (own == 1 && sent_ < 1) ||
                    (own < 1 && now_nanos - sent_at_nanos_ >= absl::ToInt64Nanoseconds(kKeepalive));
  return {.applied = applied_, .own = own, .send = send};
}

void PeerAdmission::Sent(double own, int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  sent_ = Clamp01(own);
  sent_at_nanos_ = now_nanos;
}

PeerAdmission::Snapshot PeerAdmission::snapshot(int64_t now_nanos) const {
  absl::MutexLock lock(&mu_);
  Snapshot s{.own = own_, .applied = applied_, .peers_cutting = 0};
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    if (i != self_ && LiveLocked(peers_[i], now_nanos) && peers_[i].fraction < 1) {
      ++s.peers_cutting;
    }
  }
  return s;
}

}  // namespace flowctl
