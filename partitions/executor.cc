#include "partitions/executor.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "base/sha256.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"

namespace partitions {
namespace {

void PutLe64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe64(absl::string_view s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

// Per-entry memory of the cache beyond the key and value bytes: the list node (the entry's
// strings and links), the index slot, and the allocator's rounding of the two heap strings.
constexpr size_t kCacheEntryOverhead = 160;

// Fills `a` from a stored account value (nothing when absent); DATA_LOSS if it is not one.
absl::Status DecodeStoredAccount(absl::string_view address, const std::optional<std::string>& v,
                                 node::chain::Account* a) {
  if (v.has_value() && !DecodeAccount(*v, a)) {
    return absl::DataLossError(
        absl::StrCat("state: account ", base::BytesToHex(address), " is not 16 bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

// The state one block sees: the committed state plus the block's own writes so far. Remembers
// what it read, so the state root update finds each changed key's old value without a re-read.
// Used only inside Execute, which holds a reader lock of the executor's mu_.
class Executor::Overlay {
 public:
  explicit Overlay(const Executor& exec) : exec_(exec) {}

  absl::StatusOr<std::optional<std::string>> Find(const std::string& key) {
    if (auto it = writes_.find(key); it != writes_.end()) return it->second;
    return Base(key);
  }
  // The committed value (before this block).
  absl::StatusOr<std::optional<std::string>> Base(const std::string& key) {
    if (auto it = reads_.find(key); it != reads_.end()) return it->second;
    ASSIGN_OR_RETURN(std::optional<std::string> v, exec_.Read(key));
    reads_.emplace(key, v);
    return v;
  }
  absl::StatusOr<node::chain::Account> Account(absl::string_view address) {
    node::chain::Account a;
    ASSIGN_OR_RETURN(std::optional<std::string> v, Find(AccountKey(address)));
    RETURN_IF_ERROR(DecodeStoredAccount(address, v, &a));
    return a;
  }
  void SetAccount(absl::string_view address, const node::chain::Account& a) {
    writes_[AccountKey(address)] = EncodeAccount(a.balance(), a.nonce());
  }
  void Set(std::string key, std::string value) { writes_[std::move(key)] = std::move(value); }
  WriteSet& writes() { return writes_; }

 private:
  const Executor& exec_;
  WriteSet writes_;
  absl::flat_hash_map<std::string, std::optional<std::string>> reads_;
};

std::string AccountKey(absl::string_view address) { return absl::StrCat("a", address); }
std::string ValueKey(absl::string_view key) { return absl::StrCat("k", key); }

std::string EncodeAccount(uint64_t balance, uint64_t nonce) {
  std::string out;
  out.reserve(16);
  PutLe64(balance, &out);
  PutLe64(nonce, &out);
  return out;
}

bool DecodeAccount(absl::string_view value, node::chain::Account* out) {
  if (value.size() != 16) return false;
  out->set_balance(GetLe64(value.substr(0, 8)));
  out->set_nonce(GetLe64(value.substr(8, 8)));
  return true;
}

absl::StatusOr<StateMap> GenesisState(const node::chain::GenesisConfig& genesis) {
  StateMap state;
  uint64_t total = 0;
  for (int i = 0; i < genesis.allocations_size(); ++i) {
    const auto& alloc = genesis.allocations(i);
    const std::string& hex = alloc.address_hex();
    bool hex_ok = hex.size() == 2 * base::kEd25519KeyBytes;
    for (char c : hex) hex_ok = hex_ok && absl::ascii_isxdigit(static_cast<unsigned char>(c));
    if (!hex_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("genesis.allocations[", i, "].address_hex must be ",
                       2 * base::kEd25519KeyBytes, " hex characters, got \"", hex, "\""));
    }
    const std::string key = AccountKey(absl::HexStringToBytes(hex));
    if (state.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("genesis.allocations[", i, "].address_hex duplicates an earlier one"));
    }
    if (alloc.balance() > UINT64_MAX - total) {
      return absl::InvalidArgumentError(
          absl::StrCat("genesis.allocations[", i, "].balance: total supply overflows uint64"));
    }
    total += alloc.balance();
    state[key] = EncodeAccount(alloc.balance(), 0);
  }
  return state;
}

absl::StatusOr<std::optional<std::string>> MemoryStateStore::GetState(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = state_.find(key);
  if (it == state_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

void MemoryStateStore::Write(const WriteSet& writes) {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, value] : writes) state_[key] = value;
}

StateMap MemoryStateStore::Copy() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

StateRoot HashState(const StateMap& state) {
  StateRoot root;
  for (const auto& [k, v] : state) root.Add(k, v);
  return root;
}

Executor::Executor(uint32_t partition, StateMap state)
    : partition_(partition),
      owned_store_(std::make_unique<MemoryStateStore>(std::move(state))),
      store_(owned_store_.get()),
      root_(HashState(owned_store_->Copy())),
      cache_capacity_(0) {}

Executor::Executor(uint32_t partition, const StateStore* store, const StateRoot& root,
                   size_t cache_bytes)
    : partition_(partition), store_(store), root_(root), cache_capacity_(cache_bytes) {}

absl::StatusOr<std::unique_ptr<Executor>> Executor::FromGenesis(
    uint32_t partition, const node::chain::GenesisConfig& genesis) {
  absl::StatusOr<StateMap> state = GenesisState(genesis);
  if (!state.ok()) return state.status();
  return std::make_unique<Executor>(partition, *std::move(state));
}

absl::StatusOr<std::optional<std::string>> Executor::Read(absl::string_view key) const {
  {
    absl::MutexLock lock(&cache_mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->value;
    }
    ++misses_;
    if (ghosts_.contains(absl::HashOf(key))) ++evicted_misses_;
  }
  ASSIGN_OR_RETURN(std::optional<std::string> value, store_->GetState(key));
  absl::MutexLock lock(&cache_mu_);
  CachePut(key, value);
  return value;
}

void Executor::CachePut(absl::string_view key, std::optional<std::string> value) const {
  if (cache_capacity_ == 0) return;
  const size_t charge = key.size() + (value.has_value() ? value->size() : 0) + kCacheEntryOverhead;
  if (auto it = index_.find(key); it != index_.end()) {
    cache_bytes_ -= it->second->charge;
    it->second->value = std::move(value);
    it->second->charge = charge;
    cache_bytes_ += charge;
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.push_front(CacheEntry{std::string(key), std::move(value), charge});
    index_.emplace(lru_.front().key, lru_.begin());
    cache_bytes_ += charge;
  }
  EvictToCapacity();
}

void Executor::EvictToCapacity() const {
  while (cache_bytes_ > cache_capacity_ && !lru_.empty()) {
    CacheEntry& last = lru_.back();
    cache_bytes_ -= last.charge;
    const uint64_t ghost = absl::HashOf(absl::string_view(last.key));
    ++ghosts_[ghost];
    ghost_order_.push_back(ghost);
    index_.erase(last.key);
    lru_.pop_back();
  }
  const size_t keep = std::min(kGhostKeys, std::max<size_t>(lru_.size(), 1024));
  while (ghost_order_.size() > keep) {
    auto it = ghosts_.find(ghost_order_.front());
    if (it != ghosts_.end() && --it->second == 0) ghosts_.erase(it);
    ghost_order_.pop_front();
  }
}

void Executor::SetCacheCapacity(size_t bytes) {
  absl::MutexLock lock(&cache_mu_);
  cache_capacity_ = bytes;
  EvictToCapacity();
}

StateCacheStats Executor::cache_stats() const {
  absl::MutexLock lock(&cache_mu_);
  return StateCacheStats{.hits = hits_,
                         .misses = misses_,
                         .entries = lru_.size(),
                         .bytes = cache_bytes_,
                         .capacity_bytes = cache_capacity_,
                         .evicted_misses = evicted_misses_};
}

absl::StatusOr<BlockExecution> Executor::Execute(uint64_t height,
                                                 absl::Span<const TxPtr> txs) const {
  absl::ReaderMutexLock lock(&mu_);
  BlockExecution result;
  result.height = height;
  result.base_version = version_;
  result.receipts.reserve(txs.size());
  Overlay view(*this);
  for (size_t i = 0; i < txs.size(); ++i) {
    const base::DecodedTx& d = *txs[i];
    const node::chain::Transaction& tx = d.tx;
    node::chain::Receipt& r = result.receipts.emplace_back();
    r.set_block_height(height);
    r.set_tx_index(static_cast<uint32_t>(i));
    r.set_tx_hash(d.hash);
    if (tx.partition() != partition_) {
      r.set_status(node::chain::Receipt::REJECTED);
      r.set_error(absl::StrCat("wrong partition: transaction is for ", tx.partition(),
                               ", this is partition ", partition_));
      continue;
    }
    ASSIGN_OR_RETURN(node::chain::Account sender, view.Account(tx.sender()));
    const uint64_t expected = sender.nonce() + 1;
    if (tx.nonce() != expected) {
      r.set_status(node::chain::Receipt::REJECTED);
      r.set_error(tx.nonce() < expected
                      ? absl::StrCat("replayed nonce: ", tx.nonce(), " already used (next is ",
                                     expected, ")")
                      : absl::StrCat("nonce gap: got ", tx.nonce(), ", next is ", expected));
      continue;
    }
    sender.set_nonce(tx.nonce());  // consumed from here on, whatever the outcome
    r.set_status(node::chain::Receipt::SUCCESS);
    if (tx.has_transfer()) {
      const uint64_t amount = tx.transfer().amount();
      const std::string& to = tx.transfer().to();
      if (amount > sender.balance()) {
        r.set_status(node::chain::Receipt::FAILED);
        r.set_error(absl::StrCat("insufficient funds: balance ", sender.balance(), ", transfer of ",
                                 amount));
        view.SetAccount(tx.sender(), sender);
      } else if (to == tx.sender()) {
        view.SetAccount(tx.sender(), sender);
      } else {
        sender.set_balance(sender.balance() - amount);
        view.SetAccount(tx.sender(), sender);
        ASSIGN_OR_RETURN(node::chain::Account recipient, view.Account(to));
        // Cannot overflow: balances sum to the genesis total, which fits in a uint64.
        recipient.set_balance(recipient.balance() + amount);
        view.SetAccount(to, recipient);
      }
    } else if (tx.has_put()) {
      view.SetAccount(tx.sender(), sender);
      view.Set(ValueKey(tx.put().key()), tx.put().value());
    } else {
      // DecodeSignedTx refuses this; a block could only carry it through a bug elsewhere.
      r.set_status(node::chain::Receipt::FAILED);
      r.set_error("malformed transaction: no operation");
      view.SetAccount(tx.sender(), sender);
    }
  }
  if (height != 0 && height == planted_height_.load(std::memory_order_relaxed)) {
    view.Set(ValueKey("noded/test/planted"), "written by one replica only");
  }
  StateDelta& delta = result.delta;
  delta.accumulator = root_;
  for (const auto& [key, value] : view.writes()) {
    ASSIGN_OR_RETURN(std::optional<std::string> before, view.Base(key));
    if (before.has_value()) {
      if (*before == value) continue;
      delta.accumulator.Remove(key, *before);
    }
    delta.accumulator.Add(key, value);
    delta.previous.emplace(key, std::move(before));
  }
  delta.writes = std::move(view.writes());
  result.state_root = delta.accumulator.Root();
  return result;
}

void Executor::Apply(const BlockExecution& result) {
  absl::MutexLock lock(&mu_);
  CHECK_EQ(result.base_version, version_)
      << "BlockExecution applied to a state it was not computed against";
  if (owned_store_ != nullptr) owned_store_->Write(result.delta.writes);
  {
    absl::MutexLock cache_lock(&cache_mu_);
    for (const auto& [key, value] : result.delta.writes) CachePut(key, value);
  }
  root_ = result.delta.accumulator;
  ++version_;
}

void Executor::Reset(const StateRoot& root) {
  absl::MutexLock lock(&mu_);
  CHECK(owned_store_ == nullptr) << "Reset of an in-memory executor";
  {
    absl::MutexLock cache_lock(&cache_mu_);
    index_.clear();  // views into lru_'s keys: first
    lru_.clear();
    cache_bytes_ = 0;
  }
  root_ = root;
  ++version_;
}

std::string Executor::state_root() const {
  absl::ReaderMutexLock lock(&mu_);
  return root_.Root();
}

StateRoot Executor::accumulator() const {
  absl::ReaderMutexLock lock(&mu_);
  return root_;
}

absl::StatusOr<node::chain::Account> Executor::GetAccount(absl::string_view address) const {
  node::chain::Account a;
  a.set_address(std::string(address));
  absl::ReaderMutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::optional<std::string> v, Read(AccountKey(address)));
  RETURN_IF_ERROR(DecodeStoredAccount(address, v, &a));
  return a;
}

absl::StatusOr<uint64_t> Executor::NextNonce(absl::string_view address) const {
  ASSIGN_OR_RETURN(node::chain::Account a, GetAccount(address));
  return a.nonce() + 1;
}

absl::StatusOr<std::optional<std::string>> Executor::GetValue(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  return Read(ValueKey(key));
}

std::map<std::string, std::string> Executor::SnapshotForTest() const {
  CHECK(owned_store_ != nullptr) << "SnapshotForTest of an executor over an outside store";
  absl::ReaderMutexLock lock(&mu_);
  const StateMap state = owned_store_->Copy();
  return std::map<std::string, std::string>(state.begin(), state.end());
}

}  // namespace partitions
