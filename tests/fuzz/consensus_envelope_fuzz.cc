// Fuzz target: the consensus envelope path of a real node (runtime/partition_consensus.cc
// HandlePeerMessage): a PartitionMessage from peer P whose ConsensusMessage must be signed by P
// with the partition's Ed25519 keys (partitions/pbft_ed25519_crypto.h) before it reaches
// PbftReplica::Step, which also verifies every nested message with the same crypto.
//
// Input: byte 0 names the authenticated peer (replica index 0..4); the rest is a PartitionMessage.
// Replica keys are fixed seeds, so the seed corpus holds genuinely signed messages and mutations
// of them. Checked: Verify is deterministic, refuses senders outside the set and signatures of
// the wrong length; a verified envelope is stepped without crash; the body re-signed by its
// sender verifies, and does not verify on another partition.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/ed25519.h"
#include "partitions/pbft_ed25519_crypto.h"
#include "partitions/pbft_replica.h"
#include "proto/partition.pb.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/partitions/pbft_test_util.h"

namespace {

constexpr uint32_t kN = 4;
constexpr uint32_t kSelf = 1;
constexpr uint32_t kPartition = 1;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consensus_envelope_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

struct Keys {
  std::vector<base::PrivateKey> keys;
  std::vector<base::PublicKey> publics;
  // crypto[partition][replica]
  std::vector<std::unique_ptr<partitions::Ed25519PbftCrypto>> crypto, other_partition;
};

const Keys& TheKeys() {
  static const Keys* k = [] {
    auto* k = new Keys;
    for (uint32_t i = 0; i < kN; ++i) {
      k->keys.push_back(*base::PrivateKey::FromSeed(std::string(32, static_cast<char>('A' + i))));
      k->publics.push_back(k->keys.back().public_key());
    }
    for (uint32_t i = 0; i < kN; ++i) {
      k->crypto.push_back(
          *partitions::Ed25519PbftCrypto::Create(kPartition, i, k->keys[i], k->publics));
      k->other_partition.push_back(
          *partitions::Ed25519PbftCrypto::Create(kPartition + 1, i, k->keys[i], k->publics));
    }
    return k;
  }();
  return *k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  if (size == 0) return 0;
  const Keys& keys = TheKeys();
  const uint32_t peer = data[0] % (kN + 1);
  node::partition::PartitionMessage msg;
  if (!msg.ParseFromArray(data + 1, static_cast<int>(size - 1)) || !msg.has_consensus()) return 0;
  partitions::ConsensusMessage cm = msg.consensus();
  const partitions::Ed25519PbftCrypto& self = *keys.crypto[kSelf];

  const bool verified = self.Verify(cm);
  Require(verified == self.Verify(cm), "Verify is deterministic");
  if (verified) {
    Require(cm.sender() < kN, "verified sender is a replica");
    Require(cm.signature().size() == base::kEd25519SignatureBytes, "verified signature size");
    Require(!keys.other_partition[kSelf]->Verify(cm), "signature bound to the partition");
  }
  if (verified && cm.sender() == peer && peer != kSelf) {
    partitions::PbftConfig config;
    config.n = kN;
    config.self = kSelf;
    partitions::testing::TestPool pool;
    tests::FakeConsensusStore store;
    partitions::testing::TestBlocks blocks;
    // Step's crypto is the node's own (Sign needs the private key; Verify is the same).
    auto crypto =
        *partitions::Ed25519PbftCrypto::Create(kPartition, kSelf, keys.keys[kSelf], keys.publics);
    auto replica =
        partitions::PbftReplica::Create(config, {crypto.get(), &pool, &store, &blocks}, {});
    Require(replica.ok(), "replica created");
    (*replica)->Step(partitions::PbftStart{});
    (*replica)->Step(partitions::PbftMessage{cm});
    Require((*replica)->status().ok(), "replica does not halt");
  }

  // The body, re-signed by a replica, verifies here and not on another partition.
  const uint32_t signer = peer % kN;
  cm.set_sender(signer);
  cm.clear_signature();
  cm.set_signature(keys.crypto[signer]->Sign(cm));
  Require(self.Verify(cm), "re-signed message verifies");
  Require(!keys.other_partition[kSelf]->Verify(cm), "re-signed message bound to the partition");
  cm.set_sender(signer + kN);
  Require(!self.Verify(cm), "sender outside the replica set refused");
  return 0;
}
