// Handshake: what each side of a peer stream signs to prove it holds the key of the id it claims.
//
// The transcript binds the signer's role, both node ids and both nonces, each length-prefixed,
// so a signature made for one stream, one direction or one pair of nodes is worthless for any
// other (no replay across streams, no reflection of the server's signature back to it).
// Stateless functions; thread-safe. The message exchange itself is in proto/p2p.proto; a dialer's
// first message is checked with CheckClientHelloShape before its key is looked up.
//
//   std::string t = HandshakeTranscript(HandshakeRole::kClient, client_id, server_id, nc, ns);
//   auth.set_signature(key.Sign(t));
//   ... peer_key.Verify(t, auth.signature())
#ifndef P2P_HANDSHAKE_H_
#define P2P_HANDSHAKE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/ed25519.h"
#include "p2p/network.h"
#include "proto/p2p.pb.h"

namespace p2p {

inline constexpr size_t kHandshakeNonceBytes = 32;

enum class HandshakeRole { kClient, kServer };

std::string HandshakeTranscript(HandshakeRole signer, const NodeId& client_id,
                                const NodeId& server_id, absl::string_view client_nonce,
                                absl::string_view server_nonce);

// kHandshakeNonceBytes random bytes (OpenSSL RAND_bytes).
std::string NewHandshakeNonce();

// OK iff `raw_key` is a valid Ed25519 key whose id is `claimed_id` and `signature` is its
// signature of the transcript for `signer`. PermissionDenied (naming what failed) otherwise.
absl::Status VerifyHandshake(HandshakeRole signer, absl::string_view raw_key,
                             const NodeId& claimed_id, const NodeId& client_id,
                             const NodeId& server_id, absl::string_view client_nonce,
                             absl::string_view server_nonce, absl::string_view signature);

// Shape of a ClientHello, checked before anything in it is looked up or logged: public_key 32
// bytes, nonce kHandshakeNonceBytes, node_id and expected_peer_id node ids (32 lowercase hex
// characters, so a hostile peer cannot put megabytes into our logs). PermissionDenied
// "malformed handshake: <field> ..." otherwise.
absl::Status CheckClientHelloShape(const node::p2p::ClientHello& hello);

}  // namespace p2p

#endif  // P2P_HANDSHAKE_H_
