#include "runtime/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace runtime {
namespace {

using node::config::TlsConfig;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// PEM files are a few KiB; the bound keeps a config naming /dev/zero or a huge file (config_fuzz
// can write one) from eating memory.
constexpr uintmax_t kMaxPemFileBytes = 1 << 20;

// The file's contents, or a message saying why it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  if (!ec && !regular && std::filesystem::exists(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  if (regular && std::filesystem::file_size(path, ec) > kMaxPemFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than ", kMaxPemFileBytes, " bytes; not a PEM file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate in `pem`, or null.
X509Ptr FirstCert(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

PkeyPtr PrivateKeyOf(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return key;
}

// Reads and checks every file; appends problems; fills `out` as far as it gets.
void Check(const TlsConfig& tls, std::vector<ConfigProblem>* problems, TlsMaterial* out) {
  if (!TlsEnabled(tls)) return;
  auto fail = [&](const std::string& field, std::string message) {
    problems->push_back({absl::StrCat("tls.", field), std::move(message)});
  };
  std::vector<std::string> on;
  if (tls.client()) on.push_back("client");
  if (tls.admin()) on.push_back("admin");
  if (tls.p2p()) on.push_back("p2p");
  const std::string why =
      absl::StrCat("is required when TLS is on (", absl::StrJoin(on, ", "), ")");

  X509Ptr cert;
  if (tls.cert_file().empty()) {
    fail("cert_file", why);
  } else if (absl::StatusOr<std::string> pem = ReadFile(tls.cert_file()); !pem.ok()) {
    fail("cert_file", std::string(pem.status().message()));
  } else if (cert = FirstCert(*pem); cert == nullptr) {
    fail("cert_file", absl::StrCat(tls.cert_file(), " holds no PEM certificate"));
  } else {
    out->cert_chain_pem = *std::move(pem);
  }

  PkeyPtr key;
  if (tls.key_file().empty()) {
    fail("key_file", why);
  } else if (absl::StatusOr<std::string> pem = ReadFile(tls.key_file()); !pem.ok()) {
    fail("key_file", std::string(pem.status().message()));
  } else if (key = PrivateKeyOf(*pem); key == nullptr) {
    fail("key_file", absl::StrCat(tls.key_file(), " holds no PEM private key"));
  } else {
    out->private_key_pem = *std::move(pem);
  }
  if (cert != nullptr && key != nullptr && X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    fail("key_file",
         absl::StrCat(tls.key_file(), " is not the key of the certificate in ", tls.cert_file()));
  }

  if (tls.ca_file().empty()) {
    if (tls.p2p()) fail("ca_file", "is required with tls.p2p (peers are verified against it)");
  } else if (absl::StatusOr<std::string> pem = ReadFile(tls.ca_file()); !pem.ok()) {
    fail("ca_file", std::string(pem.status().message()));
  } else if (FirstCert(*pem) == nullptr) {
    fail("ca_file", absl::StrCat(tls.ca_file(), " holds no PEM certificate"));
  } else {
    out->ca_pem = *std::move(pem);
  }
}

}  // namespace

bool TlsEnabled(const TlsConfig& tls) { return tls.client() || tls.admin() || tls.p2p(); }

std::vector<ConfigProblem> ValidateTlsConfig(const TlsConfig& tls) {
  std::vector<ConfigProblem> problems;
  TlsMaterial ignored;
  Check(tls, &problems, &ignored);
  return problems;
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsConfig& tls) {
  std::vector<ConfigProblem> problems;
  TlsMaterial material;
  Check(tls, &problems, &material);
  if (problems.empty()) return material;
  std::vector<std::string> lines;
  for (const ConfigProblem& p : problems) lines.push_back(absl::StrCat(p.path, ": ", p.message));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "; "));
}

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const TlsMaterial& tls,
                                                              bool require_client_cert) {
  grpc::SslServerCredentialsOptions options(
      require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (require_client_cert) options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.private_key_pem, tls.cert_chain_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsPeerChannelCredentials(const TlsMaterial& tls) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_private_key = tls.private_key_pem;
  options.pem_cert_chain = tls.cert_chain_pem;
  return grpc::SslCredentials(options);
}

}  // namespace runtime
