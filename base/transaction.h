// Transactions as clients and nodes share them: signing, hashing, decoding and signature
// verification, as separate steps. Every function is pure: thread-safe, no shared state.
//
// A client (loadgen, an SDK) signs a node::chain::Transaction and keeps its hash, the identity
// it is later looked up by (GetTx, blocks):
//
//   std::string signed_tx = SignTx(tx, key);   // SignedTransaction bytes to submit
//   std::string hash = TxHash(signed_tx);      // 32 raw bytes
//
// The node decodes a request only after its admission stages let it in (DecodeSignedTx is cheap:
// no crypto but one SHA-256), and runs VerifySignature (the expensive Ed25519 check) on its
// worker pool:
//
//   TxLimits limits{.partition = 3};
//   ASSIGN_OR_RETURN(DecodedTx tx, DecodeSignedTx(request_bytes, limits));
//   RETURN_IF_ERROR(VerifySignature(tx));   // on a worker thread
//
// Every bad input has its own status code + message prefix, so clients and metrics can tell them
// apart (tests/base/transaction_test.cc checks each):
//
//   case                      code                 message starts with         found by
//   oversize                  OUT_OF_RANGE         "oversize transaction"      DecodeSignedTx
//   truncated / malformed     INVALID_ARGUMENT     "malformed transaction"     DecodeSignedTx
//   zero nonce                INVALID_ARGUMENT     "zero nonce"                DecodeSignedTx
//   wrong partition           FAILED_PRECONDITION  "wrong partition"           DecodeSignedTx
//   bad signature             UNAUTHENTICATED      "bad signature"             VerifySignature
//
// Checks that need account state (replayed nonce, ALREADY_EXISTS) and the pool's own refusals
// (duplicate, full, quota, nonce gap) belong to the node: partitions/tx_pool.h lists them.
#ifndef BASE_TRANSACTION_H_
#define BASE_TRANSACTION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/ed25519.h"
#include "proto/chain.pb.h"

namespace base {

// Limits checked by DecodeSignedTx. Plain values; copy freely.
struct TxLimits {
  // The receiving partition; transactions naming another one are refused.
  uint32_t partition = 0;
  // Maximum size of the whole SignedTransaction encoding, in bytes. Default 64 KiB.
  size_t max_tx_bytes = 64 * 1024;
  // Maximum Put key length in bytes. Keys must be non-empty.
  size_t max_key_bytes = 256;
  // Maximum memo length in bytes.
  size_t max_memo_bytes = 256;
};

// A transaction that decoded and passed every check that needs no crypto and no account state.
// The signature is NOT verified yet (see VerifySignature). Immutable once built.
struct DecodedTx {
  // SHA-256 of `signed_bytes` (32 raw bytes): the transaction's identity everywhere.
  std::string hash;
  // The SignedTransaction encoding exactly as received (forwarded and stored as is).
  std::string signed_bytes;
  // The parsed Transaction.
  node::chain::Transaction tx;

  const std::string& sender() const { return tx.sender(); }
  uint64_t nonce() const { return tx.nonce(); }
  // Bytes the transaction costs the pool (the wire size; resident memory is about twice that,
  // with the parsed `tx`).
  size_t size() const { return signed_bytes.size(); }
  // SignedTransaction.tx (the signed bytes) and .signature, as views into `signed_bytes`: the
  // encoding is canonical, so it is exactly tag, length, tx, tag, length, 64-byte signature.
  absl::string_view tx_bytes() const {
    return absl::string_view(signed_bytes).substr(tx_offset, tx_size);
  }
  absl::string_view signature() const {
    return absl::string_view(signed_bytes).substr(signed_bytes.size() - 64);
  }

  size_t tx_offset = 0;
  size_t tx_size = 0;
};

// Parses and checks `bytes` (a SignedTransaction). Errors as in the table above. Encodings must
// be canonical (no unknown fields, fields in order, no redundant bytes), so one signed
// transaction has exactly one encoding and hence one hash. Thread-safe.
absl::StatusOr<DecodedTx> DecodeSignedTx(absl::string_view bytes, const TxLimits& limits);

// UNAUTHENTICATED "bad signature: ..." unless tx.signature() is the sender's valid Ed25519
// signature of tx.tx_bytes(). Thread-safe; ~50 us of CPU (see bench_chain).
absl::Status VerifySignature(const DecodedTx& tx);

// Serializes and signs `tx` with `key`, returning SignedTransaction bytes. Overwrites tx.sender
// with the key's public key. For clients, loadgen and tests.
std::string SignTx(node::chain::Transaction tx, const PrivateKey& key);

// The transaction's identity: SHA-256 of its SignedTransaction bytes (32 raw bytes), as
// DecodedTx::hash and the node's GetTx and blocks use it.
std::string TxHash(absl::string_view signed_tx);

}  // namespace base

#endif  // BASE_TRANSACTION_H_
