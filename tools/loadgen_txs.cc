#include "tools/loadgen_txs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/transaction.h"
#include "proto/chain.pb.h"

namespace loadgen {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

absl::StatusOr<std::vector<base::PrivateKey>> MakeSenderKeys(uint64_t seed, int count) {
  std::vector<base::PrivateKey> keys;
  keys.reserve(count);
  for (int i = 0; i < count; ++i) {
    uint64_t state = seed * 0x100000001b3ULL + static_cast<uint64_t>(i) + 0x6c6f616467656eULL;
    std::string raw(32, '\0');
    for (int w = 0; w < 4; ++w) {
      uint64_t v = SplitMix64(state);
      for (int b = 0; b < 8; ++b) raw[w * 8 + b] = static_cast<char>((v >> (8 * b)) & 0xff);
    }
    absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(raw);
    if (!key.ok()) return key.status();
    keys.push_back(*std::move(key));
  }
  return keys;
}

OfferTx TxFactory::Make(uint32_t sender, const base::PrivateKey& key, uint64_t nonce) const {
  node::chain::Transaction tx;
  tx.set_partition(id_);
  tx.set_sender(key.public_key().bytes());
  tx.set_nonce(nonce);
  tx.mutable_put()->set_key(key_per_sender_ ? absl::StrCat("lg/", name_, "/", sender)
                                            : absl::StrCat("lg/", name_, "/", sender, "/", nonce));
  // SignedTransaction = tx (2-3 byte header) + 64-byte signature (2 byte header); the value's
  // length prefix grows with the value, so adjust twice to land on tx_bytes (or just above
  // when the key and headers alone exceed it).
  std::string signed_bytes;
  for (int round = 0; round < 3; ++round) {
    signed_bytes = base::SignTx(tx, key);
    if (signed_bytes.size() == tx_bytes_) break;
    int64_t diff = static_cast<int64_t>(tx_bytes_) - static_cast<int64_t>(signed_bytes.size());
    int64_t want = static_cast<int64_t>(tx.put().value().size()) + diff;
    if (want < 0) want = 0;
    if (static_cast<size_t>(want) == tx.put().value().size()) break;
    tx.mutable_put()->set_value(std::string(static_cast<size_t>(want), 'x'));
  }
  OfferTx out;
  out.sender = sender;
  out.nonce = nonce;
  out.hash = base::TxHash(signed_bytes);
  out.bytes = std::move(signed_bytes);
  return out;
}

SenderBook::SenderBook(std::vector<uint64_t> next_nonces) : num_senders_(next_nonces.size()) {
  senders_.resize(next_nonces.size());
  for (size_t i = 0; i < next_nonces.size(); ++i) {
    senders_[i].next_nonce_to_sign = std::max<uint64_t>(1, next_nonces[i]);
  }
}

std::optional<OfferTx> SenderBook::Take(size_t group, size_t groups, int64_t now_nanos,
                                        bool* held) {
  absl::MutexLock l(&mu_);
  if (held != nullptr) *held = false;
  if (groups == 0 || group >= groups || group >= senders_.size()) return std::nullopt;
  if (cursors_.size() < groups) cursors_.resize(groups, 0);
  const size_t members = (senders_.size() - group + groups - 1) / groups;
  size_t& cursor = cursors_[group];
  bool skipped_held = false;
  for (size_t tried = 0; tried < members; ++tried) {
    Sender& s = senders_[group + (cursor % members) * groups];
    cursor = (cursor + 1) % members;
    if (!s.rejected.empty()) {
      if (s.rejected.begin()->second.not_before_nanos > now_nanos) {
        skipped_held = true;  // its lowest rejected nonce waits for its hint
        continue;
      }
      OfferTx tx = std::move(s.rejected.begin()->second);
      s.rejected.erase(s.rejected.begin());
      --pending_;
      return tx;
    }
    if (!s.fresh.empty()) {
      OfferTx tx = std::move(s.fresh.front());
      s.fresh.pop_front();
      --buffered_;
      return tx;
    }
  }
  if (held != nullptr) *held = skipped_held;
  return std::nullopt;
}

void SenderBook::ReturnRejected(OfferTx tx, bool reoffer, int64_t not_before_nanos) {
  if (!reoffer) return;
  absl::MutexLock l(&mu_);
  if (tx.sender >= senders_.size()) return;
  Sender& s = senders_[tx.sender];
  tx.not_before_nanos = not_before_nanos;
  if (s.rejected.emplace(tx.nonce, std::move(tx)).second) ++pending_;
}

uint64_t SenderBook::ReserveNonces(uint32_t sender, uint64_t count) {
  absl::MutexLock l(&mu_);
  uint64_t first = senders_[sender].next_nonce_to_sign;
  senders_[sender].next_nonce_to_sign += count;
  return first;
}

void SenderBook::AddSigned(uint32_t sender, std::vector<OfferTx> txs) {
  absl::MutexLock l(&mu_);
  buffered_ += txs.size();
  for (OfferTx& tx : txs) senders_[sender].fresh.push_back(std::move(tx));
}

uint64_t SenderBook::buffered() const {
  absl::MutexLock l(&mu_);
  return buffered_;
}

uint64_t SenderBook::buffered(uint32_t sender) const {
  absl::MutexLock l(&mu_);
  return senders_[sender].fresh.size();
}

uint64_t SenderBook::pending_reoffers() const {
  absl::MutexLock l(&mu_);
  return pending_;
}

std::vector<uint64_t> SenderBook::PendingNoncesForTest(uint32_t sender) const {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> out;
  for (const auto& [nonce, tx] : senders_[sender].rejected) out.push_back(nonce);
  return out;
}

void SignMore(const TxFactory& factory, const base::PrivateKey& key, uint32_t sender,
              uint64_t count, SenderBook* book) {
  if (count == 0) return;
  const uint64_t first = book->ReserveNonces(sender, count);
  std::vector<OfferTx> txs;
  txs.reserve(count);
  for (uint64_t k = 0; k < count; ++k) txs.push_back(factory.Make(sender, key, first + k));
  book->AddSigned(sender, std::move(txs));
}

void CommitTracker::Sent(const std::string& hash, int64_t sent_nanos) {
  absl::MutexLock l(&mu_);
  sent_[hash] = sent_nanos;
}

void CommitTracker::Forget(const std::string& hash) {
  absl::MutexLock l(&mu_);
  sent_.erase(hash);
}

std::optional<int64_t> CommitTracker::Committed(const std::string& hash) {
  absl::MutexLock l(&mu_);
  auto it = sent_.find(hash);
  if (it == sent_.end()) return std::nullopt;
  int64_t t = it->second;
  sent_.erase(it);
  return t;
}

size_t CommitTracker::outstanding() const {
  absl::MutexLock l(&mu_);
  return sent_.size();
}

}  // namespace loadgen
