// SHA-256 (OpenSSL), the hash of transactions, blocks and batches. Thread-safe, stateless.
//
//   p2p::Digest d = p2p::Sha256(signed_tx_bytes);
//   std::string hex = p2p::DigestToHex(d);
#ifndef P2P_SHA256_H_
#define P2P_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace p2p {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(absl::string_view data);
// The digest as a 32-byte std::string (for protobuf `bytes` fields and map keys).
std::string Sha256Bytes(absl::string_view data);
std::string DigestToHex(const Digest& d);
std::string BytesToHex(absl::string_view bytes);

}  // namespace p2p

#endif  // P2P_SHA256_H_
