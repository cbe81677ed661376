#include "partitions/tx_pool.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace partitions {

absl::Status ValidateTxPoolLimits(const TxPoolLimits& l) {
  if (l.max_txs < 1) return absl::InvalidArgumentError("tx pool max_txs must be >= 1");
  if (l.max_bytes < 1) return absl::InvalidArgumentError("tx pool max_bytes must be >= 1");
  if (l.max_per_sender < 1) {
    return absl::InvalidArgumentError("tx pool max_per_sender must be >= 1");
  }
  if (!(l.forward_reserve >= 0 && l.forward_reserve < 1)) {
    return absl::InvalidArgumentError("tx pool forward_reserve must be in [0, 1)");
  }
  if (!(l.high_water > 0 && l.high_water <= 1)) {
    return absl::InvalidArgumentError("tx pool high_water must be in (0, 1]");
  }
  if (l.ttl <= absl::ZeroDuration()) return absl::InvalidArgumentError("tx pool ttl must be > 0");
  return absl::OkStatus();
}

TxPool::TxPool(const TxPoolLimits& limits, const flowctl::Clock* clock, NextNonceFn next_nonce)
    : clock_(clock), next_nonce_(std::move(next_nonce)), limits_(limits) {
  absl::MutexLock lock(&mu_);
  UpdateHighWater();
}

absl::Status TxPool::SetLimits(const TxPoolLimits& limits) {
  if (absl::Status s = ValidateTxPoolLimits(limits); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  limits_ = limits;
  UpdateHighWater();
  return absl::OkStatus();
}

TxPoolLimits TxPool::limits() const {
  absl::MutexLock lock(&mu_);
  return limits_;
}

absl::Status TxPool::Add(base::DecodedTx tx, TxOrigin origin) {
  return Add(std::make_shared<const base::DecodedTx>(std::move(tx)), origin);
}

absl::StatusOr<TxPool::Sender*> TxPool::GetSender(const std::string& sender) {
  if (auto it = senders_.find(sender); it != senders_.end()) return &it->second;
  uint64_t next = 1;
  if (next_nonce_) {
    absl::StatusOr<uint64_t> n = next_nonce_(sender);
    if (!n.ok()) return n.status();
    next = *n;
  }
  Sender& s = senders_[sender];
  s.next_nonce = next;
  s.select_from = next;
  return &s;
}

void TxPool::EraseSenderIfEmpty(const std::string& sender) {
  auto it = senders_.find(sender);
  if (it != senders_.end() && it->second.by_nonce.empty()) senders_.erase(it);
}

absl::Status TxPool::Add(TxPtr tx, TxOrigin origin) {
  return Add(std::move(tx), origin, [] {});
}

absl::Status TxPool::Add(TxPtr tx, TxOrigin origin, absl::FunctionRef<void()> on_added) {
  absl::MutexLock lock(&mu_);
  if (by_hash_.contains(tx->hash)) {
    ++counters_.rejected_duplicate;
    return absl::AlreadyExistsError(
        absl::StrCat("duplicate transaction: ", base::BytesToHex(tx->hash), " is already pooled"));
  }
  const std::string& sender_key = tx->sender();
  absl::StatusOr<Sender*> found = GetSender(sender_key);
  if (!found.ok()) return found.status();
  Sender& s = **found;
  const uint64_t nonce = tx->nonce();
  const bool client = origin == TxOrigin::kClient || origin == TxOrigin::kClientReserved;
  absl::Status refusal;
  if (nonce < s.next_nonce) {
    ++counters_.rejected_replayed;
    refusal = absl::AlreadyExistsError(absl::StrCat("replayed nonce: ", nonce,
                                                    " already used by this sender (next expected ",
                                                    s.next_nonce, ")"));
  } else if (s.by_nonce.contains(nonce)) {
    ++counters_.rejected_replayed;
    refusal = absl::AlreadyExistsError(absl::StrCat(
        "replayed nonce: another transaction with nonce ", nonce, " of this sender is pooled"));
  } else if (nonce - s.next_nonce > limits_.max_nonce_gap) {
    ++counters_.rejected_gap;
    refusal = absl::FailedPreconditionError(
        absl::StrCat("nonce gap: nonce ", nonce, " is more than ", limits_.max_nonce_gap,
                     " ahead of the next expected ", s.next_nonce));
  } else if (client && s.client_txs >= limits_.max_per_sender) {
    ++counters_.rejected_quota;
    refusal = absl::ResourceExhaustedError(
        absl::StrCat("sender quota: sender already has ", s.client_txs,
                     " pooled transactions (limit ", limits_.max_per_sender, ")"));
  } else if (origin != TxOrigin::kFetched) {
    // Client txs must leave the reserve free (half of it, one whose room a retry ticket held);
    // forwarded ones may fill the pool.
    const double keep = origin == TxOrigin::kClient           ? limits_.forward_reserve
                        : origin == TxOrigin::kClientReserved ? limits_.forward_reserve / 2
                                                              : 0.0;
    const size_t cap_txs =
        limits_.max_txs - static_cast<size_t>(static_cast<double>(limits_.max_txs) * keep);
    const size_t cap_bytes =
        limits_.max_bytes - static_cast<size_t>(static_cast<double>(limits_.max_bytes) * keep);
    if (by_hash_.size() >= cap_txs || bytes_ + tx->size() > cap_bytes) {
      ++counters_.rejected_full;
      refusal = absl::ResourceExhaustedError(absl::StrCat(
          "pool full: ", by_hash_.size(), " txs / ", bytes_, " bytes pooled, ",
          client ? "client" : "forwarded", " limit is ", cap_txs, " txs / ", cap_bytes, " bytes"));
    }
  }
  if (!refusal.ok()) {
    EraseSenderIfEmpty(sender_key);
    return refusal;
  }

  const size_t size = tx->size();
  fifo_.push_back(Entry{tx, clock_->NowNanos(), client ? TxOrigin::kClient : origin});
  auto it = std::prev(fifo_.end());
  by_hash_.emplace(tx->hash, it);
  s.by_nonce.emplace(nonce, it);
  if (client) {
    ++s.client_txs;
    added_client_.fetch_add(1, std::memory_order_relaxed);
  } else if (origin == TxOrigin::kForwarded) {
    added_forwarded_.fetch_add(1, std::memory_order_relaxed);
  }
  if (nonce == s.select_from + s.run) ExtendRun(s);
  bytes_ += size;
  ++counters_.added;
  UpdateHighWater();
  on_added();
  return absl::OkStatus();
}

void TxPool::ExtendRun(Sender& s) {
  for (auto it = s.by_nonce.find(s.select_from + s.run);
       it != s.by_nonce.end() && it->first == s.select_from + s.run; ++it) {
    const size_t size = it->second->tx->size();
    ++s.run;
    s.run_bytes += size;
    ++ready_txs_;
    ready_bytes_ += size;
  }
}

void TxPool::Recount(Sender& s) {
  ready_txs_ -= s.run;
  ready_bytes_ -= s.run_bytes;
  s.run = 0;
  s.run_bytes = 0;
  ExtendRun(s);
}

void TxPool::RemoveEntry(EntryList::iterator it) {
  const TxPtr tx = it->tx;  // keep alive: the maps' keys point into it
  auto sit = senders_.find(tx->sender());
  if (sit != senders_.end()) {
    Sender& s = sit->second;
    s.by_nonce.erase(tx->nonce());
    if (it->origin == TxOrigin::kClient) --s.client_txs;
    // Removing a nonce inside the run cuts the run there.
    if (tx->nonce() >= s.select_from && tx->nonce() < s.select_from + s.run) Recount(s);
    if (s.by_nonce.empty()) senders_.erase(sit);
  }
  if (it->proposed) --counters_.proposed;
  by_hash_.erase(tx->hash);
  bytes_ -= tx->size();
  fifo_.erase(it);
}

std::vector<TxPtr> TxPool::SelectBatch(size_t max_txs, size_t max_bytes) {
  absl::MutexLock lock(&mu_);
  struct Cursor {
    Sender* sender;
    std::map<uint64_t, EntryList::iterator>::iterator it;
  };
  std::vector<Cursor> cursors;
  for (auto& [name, s] : senders_) {
    auto it = s.by_nonce.find(s.select_from);
    if (it != s.by_nonce.end()) cursors.push_back({&s, it});
  }
  std::vector<TxPtr> out;
  if (cursors.empty() || max_txs == 0) return out;
  std::rotate(cursors.begin(),
              cursors.begin() + static_cast<ptrdiff_t>(rr_offset_ % cursors.size()), cursors.end());
  size_t bytes_left = max_bytes;
  while (out.size() < max_txs && !cursors.empty()) {
    size_t kept = 0;
    for (size_t i = 0; i < cursors.size(); ++i) {
      Cursor c = cursors[i];
      bool keep = out.size() < max_txs;
      if (keep) {
        Entry& e = *c.it->second;
        if (e.tx->size() > bytes_left) {
          keep = false;  // this sender's later nonces cannot go before this one
        } else {
          bytes_left -= e.tx->size();
          e.proposed = true;
          ++counters_.proposed;
          out.push_back(e.tx);
          // The run starts at select_from, so the taken tx is its first.
          --c.sender->run;
          c.sender->run_bytes -= e.tx->size();
          --ready_txs_;
          ready_bytes_ -= e.tx->size();
          c.sender->select_from = c.it->first + 1;
          ++c.it;
          keep = c.it != c.sender->by_nonce.end() && c.it->first == c.sender->select_from;
        }
      }
      if (keep) cursors[kept++] = c;
    }
    cursors.resize(kept);
  }
  rr_offset_ += out.size();
  return out;
}

TxPool::ReadyCount TxPool::CountReady(size_t limit) const {
  absl::MutexLock lock(&mu_);
  return {.txs = std::min(ready_txs_, limit), .bytes = ready_bytes_};
}

void TxPool::UnmarkFrom(Sender& s, uint64_t nonce) {
  for (auto it = s.by_nonce.lower_bound(nonce); it != s.by_nonce.end(); ++it) {
    if (it->second->proposed) {
      it->second->proposed = false;
      --counters_.proposed;
    }
  }
  s.select_from = std::max(s.next_nonce, std::min(s.select_from, nonce));
  Recount(s);
}

void TxPool::ReleaseProposed(absl::Span<const std::string> hashes) {
  absl::MutexLock lock(&mu_);
  for (const std::string& h : hashes) {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end() || !it->second->proposed) continue;
    auto sit = senders_.find(it->second->tx->sender());
    if (sit != senders_.end()) UnmarkFrom(sit->second, it->second->tx->nonce());
  }
}

void TxPool::ReleaseAllProposed() {
  absl::MutexLock lock(&mu_);
  for (auto& [name, s] : senders_) UnmarkFrom(s, s.next_nonce);
}

void TxPool::RemoveCommitted(absl::Span<const TxPtr> txs) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<std::string> affected;
  for (const TxPtr& tx : txs) {
    affected.insert(tx->sender());
    auto it = by_hash_.find(tx->hash);
    if (it == by_hash_.end()) continue;
    RemoveEntry(it->second);
    ++counters_.committed;
  }
  for (const std::string& sender : affected) ResyncSender(sender);
  UpdateHighWater();
}

void TxPool::Resync() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> senders;
  senders.reserve(senders_.size());
  for (const auto& [sender, s] : senders_) senders.push_back(sender);
  for (const std::string& sender : senders) ResyncSender(sender);
  UpdateHighWater();
}

void TxPool::ResyncSender(const std::string& sender) {
  auto sit = senders_.find(sender);
  if (sit == senders_.end()) return;  // no pooled txs left; re-read on next Add
  Sender& s = sit->second;
  if (next_nonce_) {
    // Unreadable state keeps the last known nonce; the next commit re-reads it.
    absl::StatusOr<uint64_t> next = next_nonce_(sender);
    if (next.ok()) s.next_nonce = *next;
  }
  s.select_from = std::max(s.select_from, s.next_nonce);
  Recount(s);
  // Txs below the next nonce can never execute: another tx consumed their nonce.
  std::vector<EntryList::iterator> stale;
  for (auto it = s.by_nonce.begin(); it != s.by_nonce.end() && it->first < s.next_nonce; ++it) {
    stale.push_back(it->second);
  }
  for (EntryList::iterator e : stale) {  // may erase `s`; do not touch it after
    if (track_dropped_) dropped_.push_back(e->tx->hash);
    RemoveEntry(e);
    ++counters_.stale;
  }
}

size_t TxPool::Expire(int64_t now_nanos) {
  absl::MutexLock lock(&mu_);
  const int64_t ttl = absl::ToInt64Nanoseconds(limits_.ttl);
  size_t n = 0;
  for (auto it = fifo_.begin(); it != fifo_.end() && it->added_nanos <= now_nanos - ttl;) {
    if (it->proposed) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    if (track_dropped_) dropped_.push_back(it->tx->hash);
    RemoveEntry(it);
    it = next;
    ++n;
  }
  counters_.expired += n;
  UpdateHighWater();
  return n;
}

void TxPool::TrackDropped(bool on) {
  absl::MutexLock lock(&mu_);
  track_dropped_ = on;
  if (!on) dropped_.clear();
}

std::vector<std::string> TxPool::TakeDropped() {
  absl::MutexLock lock(&mu_);
  return std::exchange(dropped_, {});
}

std::vector<TxPtr> TxPool::TakeForReforward(int64_t added_by_nanos, uint64_t round, size_t max_txs,
                                            size_t max_bytes) {
  absl::MutexLock lock(&mu_);
  std::vector<TxPtr> out;
  size_t bytes = 0;
  for (Entry& e : fifo_) {
    if (e.added_nanos > added_by_nanos || out.size() >= max_txs) break;
    if (e.proposed || e.reforward_round == round + 1) continue;
    if (bytes + e.tx->size() > max_bytes) break;
    bytes += e.tx->size();
    e.reforward_round = round + 1;
    out.push_back(e.tx);
  }
  return out;
}

TxPtr TxPool::Get(absl::string_view hash) const {
  absl::MutexLock lock(&mu_);
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? nullptr : it->second->tx;
}

std::vector<std::string> TxPool::Missing(absl::Span<const std::string> hashes) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const std::string& h : hashes) {
    if (!by_hash_.contains(h)) out.push_back(h);
  }
  return out;
}

std::vector<std::string> TxPool::Gapped(absl::Span<const std::string> hashes) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const std::string& h : hashes) {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) continue;
    const base::DecodedTx& tx = *it->second->tx;
    auto sit = senders_.find(tx.sender());
    if (sit == senders_.end()) continue;
    const Sender& s = sit->second;
    // Pooled nonces are >= next_nonce (RemoveCommitted drops the rest), so the tx is ready iff
    // the pooled nonces before it are exactly next_nonce .. nonce - 1.
    const auto before =
        static_cast<uint64_t>(std::distance(s.by_nonce.begin(), s.by_nonce.find(tx.nonce())));
    if (tx.nonce() - s.next_nonce != before) out.push_back(h);
  }
  return out;
}

TxPoolStats TxPool::stats() const {
  absl::MutexLock lock(&mu_);
  TxPoolStats s = counters_;
  s.txs = by_hash_.size();
  s.bytes = bytes_;
  s.senders = senders_.size();
  return s;
}

absl::Duration PoolRetryAfter(uint64_t excess_txs, uint64_t excess_bytes, uint64_t pooled_txs,
                              uint64_t pooled_bytes, double commit_txs_per_second,
                              double blocks_per_second, const flowctl::RetryAfterBounds& bounds) {
  double txs = static_cast<double>(excess_txs);
  if (pooled_txs > 0 && pooled_bytes > 0) {
    const double mean_bytes = static_cast<double>(pooled_bytes) / static_cast<double>(pooled_txs);
    txs = std::max(txs, std::ceil(static_cast<double>(excess_bytes) / mean_bytes));
  }
  absl::Duration hint = flowctl::RetryAfterFor(txs, commit_txs_per_second, bounds);
  if (blocks_per_second > 0) {
    hint = std::max(hint, std::min(absl::Seconds(0.5 / blocks_per_second), bounds.max));
  }
  return hint;
}

void TxPool::UpdateHighWater() {
  const double txs = static_cast<double>(by_hash_.size());
  const double bytes = static_cast<double>(bytes_);
  const double mark_txs = limits_.high_water * static_cast<double>(limits_.max_txs);
  const double mark_bytes = limits_.high_water * static_cast<double>(limits_.max_bytes);
  // Above while txs >= mark: below again once txs < mark, i.e. after floor(txs - mark) + 1 leave.
  auto excess = [](double have, double mark) -> uint64_t {
    return have >= mark ? static_cast<uint64_t>(have - mark) + 1 : 0;
  };
  const uint64_t above_txs = excess(txs, mark_txs);
  const uint64_t above_bytes = excess(bytes, mark_bytes);
  // What a refused client tx waits for: below the mark, and below the client's cap (the pool less
  // its forwarding reserve), which may be the lower of the two.
  const double keep = 1 - limits_.forward_reserve;
  const double client_mark = std::min(mark_txs, keep * static_cast<double>(limits_.max_txs));
  excess_txs_.store(std::max(above_txs, excess(txs, client_mark)), std::memory_order_relaxed);
  excess_bytes_.store(
      std::max(above_bytes,
               excess(bytes, std::min(mark_bytes, keep * static_cast<double>(limits_.max_bytes)))),
      std::memory_order_relaxed);
  client_mark_txs_.store(client_mark, std::memory_order_relaxed);
  client_room_txs_.store(
      txs < client_mark ? static_cast<uint64_t>(std::ceil(client_mark - txs)) : 0,
      std::memory_order_relaxed);
  txs_now_.store(by_hash_.size(), std::memory_order_relaxed);
  bytes_now_.store(bytes_, std::memory_order_relaxed);
  above_high_water_.store(above_txs > 0 || above_bytes > 0, std::memory_order_relaxed);
}

}  // namespace partitions
