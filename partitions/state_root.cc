#include "partitions/state_root.h"

#include <openssl/evp.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "base/sha256.h"

namespace partitions {
namespace {

using Lanes = std::array<uint16_t, StateRoot::kLanes>;

// A cipher context set up for `cipher` once; each use only re-keys it.
class CipherContext {
 public:
  explicit CipherContext(const EVP_CIPHER* cipher)
      : ctx_(EVP_CIPHER_CTX_new()),
        ready_(ctx_ != nullptr && cipher != nullptr &&
               EVP_EncryptInit_ex2(ctx_.get(), cipher, nullptr, nullptr, nullptr) == 1) {}
  bool ready() const { return ready_; }
  EVP_CIPHER_CTX* get() const { return ctx_.get(); }

 private:
  struct Free {
    void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  };
  const std::unique_ptr<EVP_CIPHER_CTX, Free> ctx_;
  const bool ready_;
};

// The entry's lane vector: AES-256-CTR keystream (zero IV) under the key
// SHA-256(len32le(key) || key || value). The length prefix keeps ("ab", "c") and ("a", "bc")
// apart. A hash-seeded AES-CTR PRG stands in for the XOF (BLAKE2x) of the LtHash paper: with
// AES-NI and SHA-NI it expands 2 KiB about 10x faster than SHAKE128, and state-root updates are
// the largest CPU cost of executing a block.
void ExpandEntry(absl::string_view key, absl::string_view value, Lanes* out) {
  std::string seed_input;
  seed_input.reserve(4 + key.size() + value.size());
  const uint32_t n = static_cast<uint32_t>(key.size());
  for (int i = 0; i < 4; ++i) seed_input.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  seed_input.append(key.data(), key.size());
  seed_input.append(value.data(), value.size());
  const base::Digest seed = base::Sha256(seed_input);

  static const unsigned char kZeros[StateRoot::kLanes * 2] = {};
  static constexpr unsigned char kIv[16] = {};
  // One context per thread, set to the cipher once and only re-keyed per entry: naming the
  // cipher on every call made OpenSSL look its implementation up and reset the context each
  // time, which cost about as much as the expansion.
  static EVP_CIPHER* const kAes256Ctr = EVP_CIPHER_fetch(nullptr, "AES-256-CTR", nullptr);
  thread_local const CipherContext c(kAes256Ctr);
  unsigned char buf[StateRoot::kLanes * 2];
  int len = 0;
  const bool ok = c.ready() &&
                  EVP_EncryptInit_ex2(c.get(), nullptr, seed.data(), kIv, nullptr) == 1 &&
                  EVP_EncryptUpdate(c.get(), buf, &len, kZeros, sizeof(kZeros)) == 1 &&
                  len == static_cast<int>(sizeof(buf));
  if (!ok) std::abort();  // only on allocation failure inside OpenSSL
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out->data(), buf, sizeof(buf));
  } else {
    for (int i = 0; i < StateRoot::kLanes; ++i) {
      (*out)[i] = static_cast<uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8));
    }
  }
}

}  // namespace

void StateRoot::Add(absl::string_view key, absl::string_view value) {
  Lanes h;
  ExpandEntry(key, value, &h);
  for (int i = 0; i < kLanes; ++i) lanes_[i] = static_cast<uint16_t>(lanes_[i] + h[i]);
}

void StateRoot::Merge(const StateRoot& other) {
  for (int i = 0; i < kLanes; ++i) lanes_[i] = static_cast<uint16_t>(lanes_[i] + other.lanes_[i]);
}

void StateRoot::Remove(absl::string_view key, absl::string_view value) {
  Lanes h;
  ExpandEntry(key, value, &h);
  for (int i = 0; i < kLanes; ++i) lanes_[i] = static_cast<uint16_t>(lanes_[i] - h[i]);
}

std::string StateRoot::Serialize() const {
  std::string bytes(kLanes * 2, '\0');
  for (int i = 0; i < kLanes; ++i) {
    bytes[2 * i] = static_cast<char>(lanes_[i] & 0xff);
    bytes[2 * i + 1] = static_cast<char>(lanes_[i] >> 8);
  }
  return bytes;
}

std::optional<StateRoot> StateRoot::Parse(absl::string_view bytes) {
  if (bytes.size() != kLanes * 2) return std::nullopt;
  StateRoot out;
  for (int i = 0; i < kLanes; ++i) {
    out.lanes_[i] = static_cast<uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                          (static_cast<unsigned char>(bytes[2 * i + 1]) << 8));
  }
  return out;
}

std::string StateRoot::Root() const { return base::Sha256Bytes(Serialize()); }

}  // namespace partitions
