// Helpers shared by the runtime tests that run real nodes on loopback.
#ifndef TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_
#define TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

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

// What a node's config names as a peer's address before that peer has started. The nodes of a
// test cluster all listen on port 0 (no port is picked first and bound later, a race with every
// other process on the machine) and learn each other's bound ports once they run: ConnectPeers.
// Port 0 is never reached, so a dialer only retries until it is told the real port.
inline constexpr char kPortNotYetKnown[] = "127.0.0.1:0";

// After every node started: tells each where each other one listens. `pubs[i]` is the hex public
// key of `nodes[i]` (a runtime::Node; a template so this header needs no node).
template <class Nodes>
void ConnectPeers(const Nodes& nodes, const std::vector<std::string>& pubs) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t j = 0; j < nodes.size(); ++j) {
      if (i == j) continue;
      const auto s =
          nodes[i]->SetPeerAddress(pubs[j], absl::StrCat("127.0.0.1:", nodes[j]->p2p_port()));
      CHECK(s.ok()) << s;
    }
  }
}

// Whether every node reports a link to each of the others (NodeStatus.peers_connected). A round
// run before then can lose a replica's votes to a link not yet up, and a replica that misses
// the first block of an idle partition catches up only at the next stable checkpoint.
template <class Nodes>
bool AllConnected(const Nodes& nodes) {
  for (const auto& n : nodes) {
    if (n->Status().peers_connected() + 1 != nodes.size()) return false;
  }
  return true;
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
