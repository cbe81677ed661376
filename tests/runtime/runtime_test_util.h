// Helpers shared by the runtime tests that run real nodes on loopback.
#ifndef TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_
#define TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "glog/logging.h"
#include "proto/chain.pb.h"

namespace runtime::testing {

// A deterministic Ed25519 key: the 32-byte seed is `seed` repeated.
inline base::PrivateKey TestKey(char seed) {
  absl::StatusOr<base::PrivateKey> k = base::PrivateKey::FromSeed(std::string(32, seed));
  CHECK(k.ok());
  return *std::move(k);
}

// A signed Put of key "k<nonce>" by the account of TestKey(account).
inline std::string SignedPut(uint32_t partition, char account, uint64_t nonce) {
  node::chain::Transaction tx;
  tx.set_partition(partition);
  tx.set_nonce(nonce);
  tx.mutable_put()->set_key(absl::StrCat("k", nonce));
  tx.mutable_put()->set_value("value");
  return base::SignTx(std::move(tx), TestKey(account));
}

// A port on 127.0.0.1 that was free a moment ago (for configs that must name their peers'
// ports before the peers start; the window in which another process could take it is tiny).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  CHECK_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// Polls `cond` every 10 ms until it holds or `timeout` passes; returns its last value. For
// conditions reached by real threads and sockets: the poll bounds the wait, it orders nothing.
inline bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

}  // namespace runtime::testing

#endif  // TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_
