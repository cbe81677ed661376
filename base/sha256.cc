#include "base/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <memory>

namespace base {

Digest Sha256(absl::string_view data) {
  // The algorithm fetched once and a context per thread: EVP_Digest would allocate a context and
  // look the implementation up in the provider on every call, which cost more than hashing a
  // short input (a tx, a state entry's seed).
  static EVP_MD* const kSha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(),
                                                                      EVP_MD_CTX_free);
  Digest d;
  unsigned int len = 0;
  if (kSha256 == nullptr || ctx == nullptr ||
      EVP_DigestInit_ex2(ctx.get(), kSha256, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), d.data(), &len) != 1 || len != d.size()) {
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
