#include "base/ed25519.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace base {
namespace internal {
void PkeyDeleter::operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
}  // namespace internal

namespace {

internal::PkeyPtr Wrap(EVP_PKEY* p) { return internal::PkeyPtr(p, internal::PkeyDeleter()); }

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

}  // namespace

absl::StatusOr<PublicKey> PublicKey::FromBytes(absl::string_view raw) {
  if (raw.size() != kEd25519KeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ed25519 public key must be ", kEd25519KeyBytes, " bytes, got ", raw.size()));
  }
  EVP_PKEY* p = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  if (p == nullptr) return absl::InvalidArgumentError("ed25519 public key: not a valid key");
  return PublicKey(Wrap(p), std::string(raw));
}

bool PublicKey::Verify(absl::string_view message, absl::string_view signature) const {
  if (signature.size() != kEd25519SignatureBytes || key_ == nullptr) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return false;
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                          message.size()) == 1;
}

absl::StatusOr<PrivateKey> PrivateKey::FromPkey(EVP_PKEY* owned) {
  internal::PkeyPtr key = Wrap(owned);
  if (EVP_PKEY_get_base_id(owned) != EVP_PKEY_ED25519) {
    return absl::InvalidArgumentError("private key is not an Ed25519 key");
  }
  std::string raw(kEd25519KeyBytes, '\0');
  size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(owned, reinterpret_cast<unsigned char*>(raw.data()), &len) != 1 ||
      len != kEd25519KeyBytes) {
    return absl::InternalError("ed25519: cannot derive the public key");
  }
  absl::StatusOr<PublicKey> pub = PublicKey::FromBytes(raw);
  if (!pub.ok()) return pub.status();
  return PrivateKey(std::move(key), *std::move(pub));
}

absl::StatusOr<PrivateKey> PrivateKey::Generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  if (ctx == nullptr) return absl::InternalError("ed25519: EVP_PKEY_CTX_new_id failed");
  EVP_PKEY* p = nullptr;
  const bool ok = EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &p) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!ok || p == nullptr) return absl::InternalError("ed25519: key generation failed");
  return FromPkey(p);
}

absl::StatusOr<PrivateKey> PrivateKey::FromSeed(absl::string_view seed) {
  if (seed.size() != kEd25519KeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ed25519 seed must be ", kEd25519KeyBytes, " bytes, got ", seed.size()));
  }
  EVP_PKEY* p = EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(seed.data()), seed.size());
  if (p == nullptr) return absl::InvalidArgumentError("ed25519 seed: not a valid key");
  return FromPkey(p);
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  EVP_PKEY* p = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (p == nullptr) return absl::InvalidArgumentError("not a PEM private key");
  return FromPkey(p);
}

absl::StatusOr<PrivateKey> PrivateKey::ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string what = absl::StrCat("key file ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::UnavailableError(what);
  }
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<PrivateKey> key = FromPem(buf.str());
  if (!key.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key file ", path, ": ", key.status().message()));
  }
  return key;
}

std::string PrivateKey::Sign(absl::string_view message) const {
  std::string sig(kEd25519SignatureBytes, '\0');
  size_t len = sig.size();
  MdCtxPtr ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx != nullptr && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1 &&
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  // Signing with a valid in-memory key only fails on allocation failure.
  if (!ok || len != kEd25519SignatureBytes) std::abort();
  return sig;
}

std::string PrivateKey::seed() const {
  std::string raw(kEd25519KeyBytes, '\0');
  size_t len = raw.size();
  EVP_PKEY_get_raw_private_key(key_.get(), reinterpret_cast<unsigned char*>(raw.data()), &len);
  return raw;
}

std::string PrivateKey::ToPem() const {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status PrivateKey::WritePemFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("key file ", tmp, ": ", std::strerror(errno)));
  }
  const std::string pem = ToPem();
  const bool ok =
      ::write(fd, pem.data(), pem.size()) == static_cast<ssize_t>(pem.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("key file ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace base
