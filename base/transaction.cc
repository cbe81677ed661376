#include "base/transaction.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/public_key_cache.h"
#include "base/sha256.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"

namespace base {
namespace {

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed transaction: ", why));
}

// True iff `msg` re-encodes to exactly `bytes` and carries no unknown fields. Messages here have
// no maps, so SerializeAsString is deterministic; a mismatch means reordered fields, explicit
// default values, redundant varint bytes or duplicated fields, any of which would let one
// transaction travel under several hashes.
bool NoUnknownFields(const google::protobuf::Message& msg) {
  return msg.GetReflection()->GetUnknownFields(msg).empty();
}

bool Canonical(const google::protobuf::Message& msg, absl::string_view bytes) {
  return NoUnknownFields(msg) && msg.SerializeAsString() == bytes;
}

}  // namespace

absl::StatusOr<DecodedTx> DecodeSignedTx(absl::string_view bytes, const TxLimits& limits) {
  if (bytes.size() > limits.max_tx_bytes) {
    return absl::OutOfRangeError(absl::StrCat("oversize transaction: ", bytes.size(),
                                              " bytes, limit is ", limits.max_tx_bytes));
  }
  if (bytes.empty()) return Malformed("empty request");
  node::chain::SignedTransaction signed_tx;
  if (!signed_tx.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Malformed("not a SignedTransaction encoding (truncated or corrupt)");
  }
  if (!Canonical(signed_tx, bytes)) {
    return Malformed("non-canonical SignedTransaction encoding or unknown fields");
  }
  if (signed_tx.signature().size() != kEd25519SignatureBytes) {
    return Malformed(absl::StrCat("signature must be ", kEd25519SignatureBytes, " bytes, got ",
                                  signed_tx.signature().size()));
  }
  if (signed_tx.tx().empty()) return Malformed("missing tx payload");

  DecodedTx out;
  if (!out.tx.ParseFromString(signed_tx.tx())) {
    return Malformed("tx payload is not a Transaction encoding (truncated or corrupt)");
  }
  const node::chain::Transaction& tx = out.tx;
  if (!Canonical(tx, signed_tx.tx()) || (tx.has_transfer() && !NoUnknownFields(tx.transfer())) ||
      (tx.has_put() && !NoUnknownFields(tx.put()))) {
    return Malformed("non-canonical Transaction encoding or unknown fields");
  }
  if (tx.sender().size() != kEd25519KeyBytes) {
    return Malformed(absl::StrCat("sender must be a ", kEd25519KeyBytes, "-byte public key, got ",
                                  tx.sender().size(), " bytes"));
  }
  if (tx.partition() != limits.partition) {
    return absl::FailedPreconditionError(absl::StrCat("wrong partition: transaction is for ",
                                                      tx.partition(), ", this is partition ",
                                                      limits.partition));
  }
  if (tx.nonce() == 0) {
    return absl::InvalidArgumentError("zero nonce: nonces start at 1");
  }
  switch (tx.operation_case()) {
    case node::chain::Transaction::kTransfer:
      if (tx.transfer().to().size() != kEd25519KeyBytes) {
        return Malformed(absl::StrCat("transfer recipient must be ", kEd25519KeyBytes,
                                      " bytes, got ", tx.transfer().to().size()));
      }
      break;
    case node::chain::Transaction::kPut:
      if (tx.put().key().empty() || tx.put().key().size() > limits.max_key_bytes) {
        return Malformed(absl::StrCat("put key must be 1..", limits.max_key_bytes, " bytes, got ",
                                      tx.put().key().size()));
      }
      break;
    case node::chain::Transaction::OPERATION_NOT_SET:
      return Malformed("no operation (transfer or put)");
  }
  if (tx.memo().size() > limits.max_memo_bytes) {
    return Malformed(
        absl::StrCat("memo is ", tx.memo().size(), " bytes, limit is ", limits.max_memo_bytes));
  }

  out.hash = TxHash(bytes);
  out.signed_bytes = std::string(bytes);
  // Canonical layout: 0x0a len(tx) tx 0x12 0x40 signature[64].
  out.tx_size = signed_tx.tx().size();
  out.tx_offset = bytes.size() - 2 - kEd25519SignatureBytes - out.tx_size;
  if (out.tx_bytes() != signed_tx.tx() || out.signature() != signed_tx.signature()) {
    return Malformed("unexpected SignedTransaction layout");  // unreachable if canonical
  }
  return out;
}

absl::Status VerifySignature(const DecodedTx& tx) {
  absl::StatusOr<PublicKey> key = PublicKeyCache::Default().Get(tx.sender());
  if (!key.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "bad signature: sender is not a valid Ed25519 key (", key.status().message(), ")"));
  }
  if (!key->Verify(tx.tx_bytes(), tx.signature())) {
    return absl::UnauthenticatedError(
        absl::StrCat("bad signature: does not verify against sender ", BytesToHex(tx.sender())));
  }
  return absl::OkStatus();
}

std::string SignTx(node::chain::Transaction tx, const PrivateKey& key) {
  tx.set_sender(key.public_key().bytes());
  node::chain::SignedTransaction signed_tx;
  signed_tx.set_tx(tx.SerializeAsString());
  signed_tx.set_signature(key.Sign(signed_tx.tx()));
  return signed_tx.SerializeAsString();
}

std::string TxHash(absl::string_view signed_tx) { return Sha256Bytes(signed_tx); }

}  // namespace base
