#include "p2p/handshake.h"

#include <openssl/rand.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace p2p {
namespace {

void AppendField(std::string* out, absl::string_view field) {
  const uint32_t n = static_cast<uint32_t>(field.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<char>((n >> shift) & 0xff));
  out->append(field.data(), field.size());
}

bool IsNodeId(absl::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckClientHelloShape(const node::p2p::ClientHello& hello) {
  if (hello.public_key().size() != 32) {
    return absl::PermissionDeniedError(absl::StrCat(
        "malformed handshake: public_key must be 32 bytes, got ", hello.public_key().size()));
  }
  if (hello.nonce().size() != kHandshakeNonceBytes) {
    return absl::PermissionDeniedError(absl::StrCat("malformed handshake: nonce must be ",
                                                    kHandshakeNonceBytes, " bytes, got ",
                                                    hello.nonce().size()));
  }
  if (!IsNodeId(hello.node_id())) {
    return absl::PermissionDeniedError(
        absl::StrCat("malformed handshake: node_id must be 32 lowercase hex characters, got ",
                     hello.node_id().size(), " bytes"));
  }
  if (!IsNodeId(hello.expected_peer_id())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "malformed handshake: expected_peer_id must be 32 lowercase hex characters, got ",
        hello.expected_peer_id().size(), " bytes"));
  }
  return absl::OkStatus();
}

std::string HandshakeTranscript(HandshakeRole signer, const NodeId& client_id,
                                const NodeId& server_id, absl::string_view client_nonce,
                                absl::string_view server_nonce) {
  std::string t;
  AppendField(&t, "node.p2p.handshake.v1");
  AppendField(&t, signer == HandshakeRole::kClient ? "client" : "server");
  AppendField(&t, client_id);
  AppendField(&t, server_id);
  AppendField(&t, client_nonce);
  AppendField(&t, server_nonce);
  return t;
}

std::string NewHandshakeNonce() {
  std::string nonce(kHandshakeNonceBytes, '\0');
  CHECK_EQ(RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), nonce.size()), 1);
  return nonce;
}

absl::Status VerifyHandshake(HandshakeRole signer, absl::string_view raw_key,
                             const NodeId& claimed_id, const NodeId& client_id,
                             const NodeId& server_id, absl::string_view client_nonce,
                             absl::string_view server_nonce, absl::string_view signature) {
  absl::StatusOr<base::PublicKey> key = base::PublicKey::FromBytes(raw_key);
  if (!key.ok()) return absl::PermissionDeniedError("handshake: malformed public key");
  if (NodeIdFromPublicKey(raw_key) != claimed_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("handshake: node id ", claimed_id, " does not match its public key"));
  }
  if (client_nonce.size() != kHandshakeNonceBytes || server_nonce.size() != kHandshakeNonceBytes) {
    return absl::PermissionDeniedError("handshake: bad nonce length");
  }
  const std::string t =
      HandshakeTranscript(signer, client_id, server_id, client_nonce, server_nonce);
  if (!key->Verify(t, signature)) {
    return absl::PermissionDeniedError(
        absl::StrCat("handshake: bad signature from ", claimed_id,
                     " (it does not hold the key of the id it claims)"));
  }
  return absl::OkStatus();
}

}  // namespace p2p
