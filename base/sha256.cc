#include "base/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace base {

Digest Sha256(absl::string_view data) {
  Digest d;
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), d.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != d.size()) {
    std::abort();  // only on allocation failure inside OpenSSL
  }
  return d;
}

std::string Sha256Bytes(absl::string_view data) {
  const Digest d = Sha256(data);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string BytesToHex(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string DigestToHex(const Digest& d) {
  return BytesToHex(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

}  // namespace base
