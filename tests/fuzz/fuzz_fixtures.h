// Deterministic fixtures shared by the fuzz targets and the seed-corpus generator
// (make_corpus.cc): fixed keys and signed transactions, so seeds made once stay valid.
// Ed25519 signatures are deterministic, so these bytes never change. Thread-compatible.
#ifndef TESTS_FUZZ_FUZZ_FIXTURES_H_
#define TESTS_FUZZ_FUZZ_FIXTURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/ed25519.h"
#include "base/transaction.h"
#include "proto/chain.pb.h"

namespace tests {

// The key whose 32-byte seed is `c` repeated.
inline base::PrivateKey FixedKey(char c) { return *base::PrivateKey::FromSeed(std::string(32, c)); }

// A signed transaction on `partition`: a Put when `key` is non-empty, else a Transfer.
inline std::string FixedTx(char signer, uint32_t partition, uint64_t nonce, const std::string& key,
                           const std::string& memo = "") {
  node::chain::Transaction tx;
  tx.set_partition(partition);
  tx.set_nonce(nonce);
  if (!key.empty()) {
    tx.mutable_put()->set_key(key);
    tx.mutable_put()->set_value("v" + std::to_string(nonce));
  } else {
    tx.mutable_transfer()->set_to(FixedKey('T').public_key().bytes());
    tx.mutable_transfer()->set_amount(nonce * 10);
  }
  if (!memo.empty()) tx.set_memo(memo);
  return base::SignTx(tx, FixedKey(signer));
}

// What partition_message_fuzz's pool holds before each input (partition 1).
inline const std::vector<std::string>& PrefilledTxs() {
  static const auto* txs = new std::vector<std::string>{
      FixedTx('P', 1, 1, "k1"), FixedTx('P', 1, 2, ""), FixedTx('Q', 1, 1, "k2", "memo")};
  return *txs;
}

}  // namespace tests

#endif  // TESTS_FUZZ_FUZZ_FIXTURES_H_
