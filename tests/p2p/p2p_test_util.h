// Helpers shared by the p2p tests that run real transports on loopback.
#ifndef TESTS_P2P_P2P_TEST_UTIL_H_
#define TESTS_P2P_P2P_TEST_UTIL_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "glog/logging.h"

namespace p2p::testing {

inline constexpr absl::Duration kWait = absl::Seconds(15);

// A deterministic key: the 32-byte seed is `b` repeated.
inline base::PrivateKey KeyFromByte(char b) {
  absl::StatusOr<base::PrivateKey> k = base::PrivateKey::FromSeed(std::string(32, b));
  CHECK(k.ok());
  return *std::move(k);
}

// Polls `cond` until true or kWait passes (waiting for a condition, not ordering by sleep).
template <typename F>
bool Eventually(F cond) {
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return cond();
}

}  // namespace p2p::testing

#endif  // TESTS_P2P_P2P_TEST_UTIL_H_
