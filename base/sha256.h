// SHA-256 (OpenSSL), the hash of transactions, blocks and batches. Thread-safe, stateless.
//
//   base::Digest d = base::Sha256(signed_tx_bytes);
//   std::string hex = base::DigestToHex(d);
#ifndef BASE_SHA256_H_
#define BASE_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace base {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(absl::string_view data);
// The digest as a 32-byte std::string (for protobuf `bytes` fields and map keys).
std::string Sha256Bytes(absl::string_view data);
std::string DigestToHex(const Digest& d);
std::string BytesToHex(absl::string_view bytes);

}  // namespace base

#endif  // BASE_SHA256_H_
