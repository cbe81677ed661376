#include "runtime/commit_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "partitions/block.h"
#include "proto/client.pb.h"

namespace runtime {
namespace {

// Protobuf framing of one length-delimited field: a tag byte and up to 5 length bytes.
constexpr size_t kFieldOverhead = 6;
// A receipt without its error text: status, heights, index, 32-byte hash and framing.
constexpr size_t kReceiptBytes = 56;

int VariantIndex(bool include_txs, bool include_receipts) {
  return (include_txs ? 1 : 0) + (include_receipts ? 2 : 0);
}

}  // namespace

// ---- WatchedBlock ----

WatchedBlock::WatchedBlock(node::chain::Block block, std::string block_hash,
                           std::vector<node::chain::Receipt> receipts)
    : block_(std::move(block)), block_hash_(std::move(block_hash)), receipts_(std::move(receipts)) {
  base_bytes_ = 2 * kFieldOverhead + block_hash_.size() + block_.header().ByteSizeLong() +
                static_cast<size_t>(block_.tx_hashes_size()) * (32 + kFieldOverhead);
  for (const std::string& tx : block_.txs()) txs_bytes_ += tx.size() + kFieldOverhead;
  for (const node::chain::Receipt& r : receipts_) {
    receipts_bytes_ += kReceiptBytes + r.error().size();
  }
}

size_t WatchedBlock::PinnedBytes() const {
  return 2 * (base_bytes_ + txs_bytes_ + receipts_bytes_);
}

std::shared_ptr<const std::string> WatchedBlock::Encoded(bool include_txs,
                                                         bool include_receipts) const {
  const int variant = VariantIndex(include_txs, include_receipts);
  {
    absl::MutexLock lock(&mu_);
    if (encoded_[variant] != nullptr) return encoded_[variant];
  }
  // Encoded outside the lock: two streams wanting the same variant at once both encode and the
  // first one's copy is kept; neither waits for the other.
  node::client::WatchCommitsResponse message;
  message.set_height(height());
  message.set_block_hash(block_hash_);
  node::chain::Block* block = message.mutable_block();
  *block->mutable_header() = block_.header();
  *block->mutable_tx_hashes() = block_.tx_hashes();
  if (include_txs) *block->mutable_txs() = block_.txs();
  if (include_receipts) {
    message.mutable_receipts()->Reserve(static_cast<int>(receipts_.size()));
    for (const node::chain::Receipt& r : receipts_) *message.add_receipts() = r;
  }
  auto encoded = std::make_shared<const std::string>(message.SerializeAsString());
  absl::MutexLock lock(&mu_);
  if (encoded_[variant] == nullptr) encoded_[variant] = std::move(encoded);
  return encoded_[variant];
}

// ---- CommitWatcher ----

CommitWatcher::CommitWatcher(std::shared_ptr<CommitStreamHub> hub, Options options,
                             absl::AnyInvocable<void()> wake)
    : hub_(std::move(hub)),
      options_(options),
      wake_(std::move(wake)),
      next_height_(options.from_height) {}

CommitWatcher::~CommitWatcher() { Close(); }

CommitWatcher::Step CommitWatcher::WriteStep(const WatchedBlockPtr& block) const {
  Step step;
  step.kind = Step::kWrite;
  step.height = block->height();
  step.message = block->Encoded(options_.include_txs, options_.include_receipts);
  return step;
}

CommitWatcher::Step CommitWatcher::Next() {
  uint64_t height = 0;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (end_.has_value()) return Step::End(*end_);
    if (!buffer_.empty()) {
      WatchedBlockPtr block = std::move(buffer_.front());
      buffer_.pop_front();
      buffered_bytes_ -= block->PinnedBytes();
      next_height_ = block->height() + 1;
      lock.Release();
      return WriteStep(block);
    }
    if (live_) {
      waiting_ = true;
      return Step::Wait();
    }
    // Catching up. The hand-over happens here, under both locks: past the hub's last delivered
    // height, the watcher joins the live list and every later block comes through Push.
    height = next_height_;
    absl::Status closed;
    if (hub_->JoinIfCaughtUp(shared_from_this(), height, &closed)) {
      live_ = true;
      waiting_ = true;
      return Step::Wait();
    }
    if (!closed.ok()) {
      EndLocked(closed);
      return Step::End(*end_);
    }
  }
  // Outside the locks: a ledger read must not hold up OnCommit's Push.
  absl::StatusOr<WatchedBlockPtr> block = hub_->ReadBlock(height, options_);
  absl::ReleasableMutexLock lock(&mu_);
  if (end_.has_value()) return Step::End(*end_);
  if (!block.ok()) {
    EndLocked(block.status());
    return Step::End(*end_);
  }
  next_height_ = height + 1;
  lock.Release();
  return WriteStep(*block);
}

uint64_t CommitWatcher::resume_height() const {
  absl::MutexLock lock(&mu_);
  return next_height_;
}

bool CommitWatcher::EndLocked(absl::Status status) {
  if (end_.has_value()) return false;
  end_ = absl::Status(status.code(),
                      absl::StrCat(status.message(), "; resume from height ", next_height_));
  buffer_.clear();
  buffered_bytes_ = 0;
  if (!waiting_ || closed_) return false;
  waiting_ = false;
  ++wake_calls_;
  return true;
}

void CommitWatcher::CallWake() {
  wake_();
  absl::MutexLock lock(&mu_);
  --wake_calls_;
}

void CommitWatcher::End(const absl::Status& status) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    wake = EndLocked(status);
  }
  if (wake) CallWake();
}

void CommitWatcher::Push(const WatchedBlockPtr& block) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (end_.has_value() || closed_) return;
    const uint64_t expected = next_height_ + buffer_.size();
    if (block->height() < expected) return;  // joined past it (the ledger was ahead of the hub)
    if (block->height() > expected) {
      // The hub hands every height in order; a gap would be a bug, and a silent one for the
      // client. End the stream so that it resumes from the ledger.
      LOG(ERROR) << "partition " << hub_->name_ << ": commit stream expected block " << expected
                 << ", got " << block->height();
      wake = EndLocked(absl::InternalError(
          absl::StrCat("commit stream missed block ", expected, " (got ", block->height(), ")")));
    } else {
      const size_t bytes = block->PinnedBytes();
      const CommitStreamLimits& limits = hub_->limits_;
      // One block alone always fits, however large: the stream sends it as soon as it can.
      const bool full = !buffer_.empty() && (buffer_.size() >= limits.max_buffered_blocks ||
                                             buffered_bytes_ + bytes > limits.max_buffered_bytes);
      if (full) {
        hub_->cut_slow_.fetch_add(1, std::memory_order_relaxed);
        wake = EndLocked(absl::ResourceExhaustedError(
            absl::StrCat("client reads committed blocks of partition ", hub_->name_,
                         " too slowly: ", buffer_.size(), " blocks (", buffered_bytes_,
                         " bytes) waited for it, the limit is watch.max_buffered_blocks ",
                         limits.max_buffered_blocks, " / watch.max_buffered_bytes ",
                         limits.max_buffered_bytes)));
      } else {
        buffer_.push_back(block);
        buffered_bytes_ += bytes;
        if (waiting_) {
          waiting_ = false;
          ++wake_calls_;
          wake = true;
        }
      }
    }
  }
  if (wake) CallWake();
}

void CommitWatcher::Close() {
  bool was_live = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    waiting_ = false;
    buffer_.clear();
    buffered_bytes_ = 0;
    was_live = live_;
    live_ = false;
    // A wake call running now may still touch the stream; the stream goes only after it.
    mu_.Await(absl::Condition(
        +[](int* calls) { return *calls == 0; }, &wake_calls_));
  }
  hub_->Leave(this, was_live);
}

// ---- CommitStreamHub ----

CommitStreamHub::CommitStreamHub(std::string partition_name, const partitions::Ledger* ledger,
                                 CommitStreamLimits limits)
    : name_(std::move(partition_name)),
      limits_(limits),
      ledger_(ledger),
      delivered_(ledger->last_height()) {}

CommitStreamHub::~CommitStreamHub() = default;

void CommitStreamHub::NoteCommittedHeader(const node::chain::BlockHeader& header) {
  absl::MutexLock lock(&mu_);
  if (header.height() > delivered_) headers_.emplace(header.height(), header);
}

absl::StatusOr<std::shared_ptr<CommitWatcher>> CommitStreamHub::Watch(
    const CommitWatcher::Options& options, absl::AnyInvocable<void()> wake) {
  uint64_t tip = 0;
  uint64_t earliest = 0;
  {
    absl::ReaderMutexLock lock(&ledger_mu_);
    if (ledger_ != nullptr) {
      tip = ledger_->last_height();
      earliest = ledger_->earliest_height();
    }
  }
  CommitWatcher::Options o = options;
  std::shared_ptr<CommitWatcher> watcher;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.has_value()) return *closed_;
    // The ledger may be a block ahead of the hub (written, not yet delivered): either counts.
    tip = std::max(tip, delivered_);
    if (o.from_height == 0) o.from_height = delivered_ + 1;
    if (o.from_height > tip + 1) {
      return absl::OutOfRangeError(absl::StrCat("from_height ", o.from_height,
                                                " is beyond the tip of partition ", name_, " (",
                                                tip, "); the next block is ", tip + 1));
    }
    if (o.from_height < earliest) {
      return absl::OutOfRangeError(
          absl::StrCat("from_height ", o.from_height, " is below the earliest block partition ",
                       name_, " keeps (", earliest, "; older ones were pruned or never fetched)"));
    }
    if (open_.size() >= limits_.max_watchers) {
      return absl::ResourceExhaustedError(
          absl::StrCat("partition ", name_, " has ", open_.size(),
                       " commit streams open, its limit (watch.max_watchers); retry later"));
    }
    watcher.reset(new CommitWatcher(shared_from_this(), o, std::move(wake)));
    open_.emplace(watcher.get(), watcher);
  }
  return watcher;
}

bool CommitStreamHub::JoinIfCaughtUp(const std::shared_ptr<CommitWatcher>& watcher,
                                     uint64_t next_height, absl::Status* closed) {
  absl::MutexLock lock(&mu_);
  if (closed_.has_value()) {
    *closed = *closed_;
    return false;
  }
  if (next_height <= delivered_) return false;
  live_.push_back(watcher);
  live_size_.store(live_.size(), std::memory_order_relaxed);
  return true;
}

void CommitStreamHub::Leave(const CommitWatcher* watcher, bool was_live) {
  std::shared_ptr<CommitWatcher> last_ref;  // released after the lock
  absl::MutexLock lock(&mu_);
  open_.erase(watcher);
  if (!was_live) return;
  auto it = std::find_if(live_.begin(), live_.end(),
                         [watcher](const auto& w) { return w.get() == watcher; });
  if (it != live_.end()) {
    last_ref = std::move(*it);
    live_.erase(it);
    live_size_.store(live_.size(), std::memory_order_relaxed);
  }
}

absl::StatusOr<WatchedBlockPtr> CommitStreamHub::ReadBlock(
    uint64_t height, const CommitWatcher::Options& options) const {
  absl::ReaderMutexLock lock(&ledger_mu_);
  if (ledger_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("partition ", name_, " is shutting down"));
  }
  absl::StatusOr<node::chain::Block> block = ledger_->GetBlock(height);
  if (!block.ok()) return block.status();
  std::vector<node::chain::Receipt> receipts;
  if (options.include_receipts) {
    absl::StatusOr<std::vector<node::chain::Receipt>> r = ledger_->GetBlockReceipts(height);
    if (!r.ok()) return r.status();
    receipts = *std::move(r);
  }
  if (!options.include_txs) block->clear_txs();
  std::string hash = partitions::BlockHash(block->header());
  return std::make_shared<const WatchedBlock>(*std::move(block), std::move(hash),
                                              std::move(receipts));
}

absl::StatusOr<WatchedBlockPtr> CommitStreamHub::LiveBlock(
    const partitions::CommitEvent& event, std::optional<node::chain::BlockHeader> header,
    bool with_txs, bool with_receipts) const {
  node::chain::Block block;
  if (header.has_value() && header->height() == event.height) {
    *block.mutable_header() = *std::move(header);
    block.mutable_tx_hashes()->Reserve(static_cast<int>(event.txs.size()));
    for (const partitions::TxPtr& tx : event.txs) block.add_tx_hashes(tx->hash);
    if (with_txs) {
      block.mutable_txs()->Reserve(static_cast<int>(event.txs.size()));
      for (const partitions::TxPtr& tx : event.txs) block.add_txs(tx->signed_bytes);
    }
  } else {
    // Not noted (a commit path without the hook): read the block once for all watchers.
    absl::ReaderMutexLock lock(&ledger_mu_);
    if (ledger_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("partition ", name_, " is shutting down"));
    }
    absl::StatusOr<node::chain::Block> stored = ledger_->GetBlock(event.height);
    if (!stored.ok()) return stored.status();
    block = *std::move(stored);
    if (!with_txs) block.clear_txs();
  }
  std::vector<node::chain::Receipt> receipts;
  if (with_receipts) receipts = event.receipts;
  return std::make_shared<const WatchedBlock>(std::move(block), event.block_hash,
                                              std::move(receipts));
}

void CommitStreamHub::OnSkip(uint64_t height) {
  std::vector<std::shared_ptr<CommitWatcher>> live;
  {
    absl::MutexLock lock(&mu_);
    if (height <= delivered_) return;
    delivered_ = height;
    headers_.erase(headers_.begin(), headers_.upper_bound(height));
    live.swap(live_);
    live_size_.store(0, std::memory_order_relaxed);
  }
  for (const auto& w : live) {
    w->End(absl::UnavailableError(
        absl::StrCat("partition ", name_, " installed a snapshot at height ", height,
                     " on this node; the blocks before it are not kept here: resume from height ",
                     height + 1, " or read them from another node")));
  }
}

void CommitStreamHub::OnCommit(const partitions::CommitEvent& event) {
  std::vector<std::shared_ptr<CommitWatcher>> live;
  std::optional<node::chain::BlockHeader> header;
  {
    absl::MutexLock lock(&mu_);
    if (event.height <= delivered_) return;
    delivered_ = event.height;
    auto it = headers_.find(event.height);
    if (it != headers_.end()) header = std::move(it->second);
    headers_.erase(headers_.begin(), headers_.upper_bound(event.height));
    if (live_.empty()) return;
    live = live_;
  }
  bool with_txs = false;
  bool with_receipts = false;
  for (const auto& w : live) {
    with_txs |= w->options_.include_txs;
    with_receipts |= w->options_.include_receipts;
  }
  absl::StatusOr<WatchedBlockPtr> block =
      LiveBlock(event, std::move(header), with_txs, with_receipts);
  for (const auto& w : live) {
    if (block.ok()) {
      w->Push(*block);
    } else {
      w->End(block.status());
    }
  }
  // Watchers that ended (cut, cancelled, shut down) leave the live list here or in Close.
  std::vector<std::shared_ptr<CommitWatcher>> gone;
  for (const auto& w : live) {
    absl::MutexLock lock(&w->mu_);
    if (w->end_.has_value()) gone.push_back(w);
  }
  if (gone.empty()) return;
  absl::MutexLock lock(&mu_);
  live_.erase(std::remove_if(live_.begin(), live_.end(),
                             [&](const auto& w) {
                               return std::find(gone.begin(), gone.end(), w) != gone.end();
                             }),
              live_.end());
  live_size_.store(live_.size(), std::memory_order_relaxed);
}

void CommitStreamHub::Close(const absl::Status& status) {
  std::vector<std::shared_ptr<CommitWatcher>> open;
  std::vector<std::shared_ptr<CommitWatcher>> live;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.has_value()) return;
    closed_ = status;
    for (const auto& entry : open_) {
      if (std::shared_ptr<CommitWatcher> w = entry.second.lock()) open.push_back(std::move(w));
    }
    live.swap(live_);
    live_size_.store(0, std::memory_order_relaxed);
    headers_.clear();
  }
  for (const auto& w : open) w->End(status);
  absl::MutexLock lock(&ledger_mu_);  // waits for reads in progress
  ledger_ = nullptr;
}

CommitStreamStats CommitStreamHub::stats() const {
  CommitStreamStats s;
  s.cut_slow = cut_slow_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  s.watchers = static_cast<uint32_t>(open_.size());
  s.delivered = delivered_;
  return s;
}

}  // namespace runtime
