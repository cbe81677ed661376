// Ed25519 keys, signatures and PEM files (OpenSSL): node identity and transaction signing.
//
// PublicKey verifies; PrivateKey signs and knows its public key. Both are immutable after
// creation, so one object may be used from many threads at once. Keys are 32 raw bytes;
// signatures are 64 bytes.
//
//   ASSIGN_OR_RETURN(base::PrivateKey key, base::PrivateKey::Generate());
//   std::string sig = key.Sign(message);
//   bool ok = key.public_key().Verify(message, sig);
//   RETURN_IF_ERROR(key.WritePemFile("/etc/noded/node.key"));
#ifndef BASE_ED25519_H_
#define BASE_ED25519_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace base {

inline constexpr size_t kEd25519KeyBytes = 32;
inline constexpr size_t kEd25519SignatureBytes = 64;

namespace internal {
struct PkeyDeleter {
  void operator()(EVP_PKEY* p) const;
};
using PkeyPtr = std::shared_ptr<EVP_PKEY>;
}  // namespace internal

class PublicKey {
 public:
  // InvalidArgument unless `raw` is exactly 32 bytes forming a valid key.
  static absl::StatusOr<PublicKey> FromBytes(absl::string_view raw);

  // True iff `signature` is a valid Ed25519 signature of `message` by this key. Thread-safe.
  bool Verify(absl::string_view message, absl::string_view signature) const;

  // The 32 raw bytes.
  const std::string& bytes() const { return raw_; }

 private:
  PublicKey(internal::PkeyPtr key, std::string raw) : key_(std::move(key)), raw_(std::move(raw)) {}
  internal::PkeyPtr key_;
  std::string raw_;
};

class PrivateKey {
 public:
  static absl::StatusOr<PrivateKey> Generate();
  // From the 32-byte seed. InvalidArgument on a wrong length.
  static absl::StatusOr<PrivateKey> FromSeed(absl::string_view seed);
  // PKCS#8 PEM ("-----BEGIN PRIVATE KEY-----"). InvalidArgument if not an Ed25519 key.
  static absl::StatusOr<PrivateKey> FromPem(absl::string_view pem);
  // NotFound / PermissionDenied / InvalidArgument naming the file.
  static absl::StatusOr<PrivateKey> ReadPemFile(const std::string& path);

  // The 64-byte signature of `message`. Thread-safe.
  std::string Sign(absl::string_view message) const;

  std::string ToPem() const;
  // Writes the PEM with mode 0600 (through a temporary file and rename).
  absl::Status WritePemFile(const std::string& path) const;

  const PublicKey& public_key() const { return public_; }
  std::string seed() const;

 private:
  PrivateKey(internal::PkeyPtr key, PublicKey pub)
      : key_(std::move(key)), public_(std::move(pub)) {}
  static absl::StatusOr<PrivateKey> FromPkey(EVP_PKEY* owned);

  internal::PkeyPtr key_;
  PublicKey public_;
};

}  // namespace base

#endif  // BASE_ED25519_H_
