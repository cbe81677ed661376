#include "partitions/executor.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
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

// The state one block sees: the committed state plus the block's own writes so far.
class Overlay {
 public:
  explicit Overlay(const StateMap& base) : base_(base) {}

  const std::string* Find(const std::string& key) const {
    if (auto it = writes_.find(key); it != writes_.end()) return &it->second;
    if (auto it = base_.find(key); it != base_.end()) return &it->second;
    return nullptr;
  }
  node::chain::Account Account(absl::string_view address) const {
    node::chain::Account a;
    if (const std::string* v = Find(AccountKey(address))) DecodeAccount(*v, &a);
    return a;
  }
  void SetAccount(absl::string_view address, const node::chain::Account& a) {
    writes_[AccountKey(address)] = EncodeAccount(a.balance(), a.nonce());
  }
  void Set(std::string key, std::string value) { writes_[std::move(key)] = std::move(value); }
  WriteSet& writes() { return writes_; }

 private:
  const StateMap& base_;
  WriteSet writes_;
};

}  // namespace

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

Executor::Executor(uint32_t partition, StateMap state)
    : partition_(partition), state_(std::move(state)) {
  for (const auto& [k, v] : state_) root_.Add(k, v);
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::FromGenesis(
    uint32_t partition, const node::chain::GenesisConfig& genesis) {
  absl::StatusOr<StateMap> state = GenesisState(genesis);
  if (!state.ok()) return state.status();
  return std::make_unique<Executor>(partition, *std::move(state));
}

BlockExecution Executor::Execute(uint64_t height, absl::Span<const TxPtr> txs) const {
  absl::ReaderMutexLock lock(&mu_);
  BlockExecution result;
  result.height = height;
  result.base_version = version_;
  result.receipts.reserve(txs.size());
  Overlay view(state_);
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
    node::chain::Account sender = view.Account(tx.sender());
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
        node::chain::Account recipient = view.Account(to);
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
  result.writes = std::move(view.writes());
  result.accumulator = root_;
  for (const auto& [key, value] : result.writes) {
    auto it = state_.find(key);
    if (it != state_.end()) {
      if (it->second == value) continue;
      result.accumulator.Remove(key, it->second);
    }
    result.accumulator.Add(key, value);
  }
  result.state_root = result.accumulator.Root();
  return result;
}

void Executor::Apply(const BlockExecution& result) {
  absl::MutexLock lock(&mu_);
  CHECK_EQ(result.base_version, version_)
      << "BlockExecution applied to a state it was not computed against";
  for (const auto& [key, value] : result.writes) state_[key] = value;
  root_ = result.accumulator;
  ++version_;
}

std::string Executor::state_root() const {
  absl::ReaderMutexLock lock(&mu_);
  return root_.Root();
}

node::chain::Account Executor::GetAccount(absl::string_view address) const {
  node::chain::Account a;
  a.set_address(std::string(address));
  absl::ReaderMutexLock lock(&mu_);
  if (auto it = state_.find(AccountKey(address)); it != state_.end()) DecodeAccount(it->second, &a);
  return a;
}

uint64_t Executor::NextNonce(absl::string_view address) const {
  return GetAccount(address).nonce() + 1;
}

std::optional<std::string> Executor::GetValue(absl::string_view key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = state_.find(ValueKey(key));
  if (it == state_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, std::string> Executor::SnapshotForTest() const {
  absl::ReaderMutexLock lock(&mu_);
  return std::map<std::string, std::string>(state_.begin(), state_.end());
}

}  // namespace partitions
