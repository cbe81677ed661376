// Fuzz target: transaction decoding and verification (base/transaction.h).
//
// Input: byte 0 picks the receiving partition (low 2 bits) and tight or default limits; the rest
// is a SignedTransaction encoding. DecodeSignedTx must refuse or return a transaction that obeys
// every limit, whose hash is SHA-256 of the input, whose views (tx_bytes, signature) are inside
// the input, and that re-encodes to exactly the input bytes (one transaction, one encoding, one
// hash). VerifySignature must not crash. A decoded transaction re-signed with a fixed key must
// decode and verify.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/ed25519.h"
#include "base/sha256.h"
#include "base/transaction.h"
#include "proto/chain.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tx_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

const base::PrivateKey& ResignKey() {
  static const base::PrivateKey* key =
      new base::PrivateKey(*base::PrivateKey::FromSeed(std::string(32, '\x07')));
  return *key;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  if (size == 0) return 0;
  base::TxLimits limits;
  limits.partition = data[0] & 3;
  if (data[0] & 4) {
    limits.max_tx_bytes = 200;
    limits.max_key_bytes = 8;
    limits.max_memo_bytes = 8;
  }
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<base::DecodedTx> tx = base::DecodeSignedTx(bytes, limits);
  if (!tx.ok()) return 0;

  Require(bytes.size() <= limits.max_tx_bytes, "size limit");
  Require(tx->tx.partition() == limits.partition, "partition");
  Require(tx->nonce() != 0, "nonce");
  Require(tx->sender().size() == base::kEd25519KeyBytes, "sender size");
  Require(tx->tx.memo().size() <= limits.max_memo_bytes, "memo limit");
  Require(tx->tx.has_put() || tx->tx.has_transfer(), "operation set");
  if (tx->tx.has_put()) {
    Require(!tx->tx.put().key().empty() && tx->tx.put().key().size() <= limits.max_key_bytes,
            "key limit");
  }
  Require(tx->signed_bytes == bytes, "signed_bytes are the input");
  Require(tx->hash == base::Sha256Bytes(bytes), "hash is SHA-256 of the input");
  Require(tx->size() == bytes.size(), "size");
  Require(tx->tx_offset + tx->tx_size + 2 + base::kEd25519SignatureBytes == bytes.size(),
          "tx view inside the input");

  // Round trip: the parsed transaction re-encodes to the signed bytes, and the envelope too.
  std::string tx_bytes;
  Require(tx->tx.SerializeToString(&tx_bytes), "serialize tx");
  Require(tx_bytes == tx->tx_bytes(), "tx re-encodes to the same bytes");
  node::chain::SignedTransaction envelope;
  envelope.set_tx(tx_bytes);
  envelope.set_signature(std::string(tx->signature()));
  Require(envelope.SerializeAsString() == bytes, "envelope re-encodes to the input");

  (void)base::VerifySignature(*tx);

  // Re-signed with a known key, the same transaction decodes and verifies.
  const std::string resigned = base::SignTx(tx->tx, ResignKey());
  base::TxLimits loose = limits;
  loose.max_tx_bytes = resigned.size();
  absl::StatusOr<base::DecodedTx> again = base::DecodeSignedTx(resigned, loose);
  Require(again.ok(), "re-signed transaction decodes");
  Require(base::VerifySignature(*again).ok(), "re-signed transaction verifies");
  Require(again->nonce() == tx->nonce(), "re-signed nonce");
  return 0;
}
