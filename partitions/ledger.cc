#include "partitions/ledger.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "flowctl/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "partitions/block.h"
#include "partitions/rocksdb_logger.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace partitions {

struct PruneMarks {
  std::atomic<uint64_t> pruned_below{0};  // "p"
  std::atomic<uint64_t> history_from{0};  // "h"
};

namespace {

constexpr char kBlockPrefix = 'b';
constexpr char kReceiptPrefix = 'r';
constexpr char kTxIndexPrefix = 't';
constexpr char kStatePrefix = 's';
constexpr char kUndoPrefix = 'u';
constexpr char kMetaPrefix = 'c';
// The state's LtHash lanes after the last committed block (one key, rewritten by every commit).
constexpr absl::string_view kLanesKey = "l";
// The lowest height whose state GetStateAt can read: set when a ledger written before the undo
// records existed is upgraded (absent: every height).
constexpr absl::string_view kHistoryFromKey = "h";
// Which prefix the state uses ("s" if absent); the other one stages a snapshot being fetched.
constexpr absl::string_view kStatePrefixKey = "g";
// The height of the snapshot installed last, or the first block pruning kept (absent: 0).
constexpr absl::string_view kEarliestKey = "e";
// Blocks below it were pruned (absent: none).
constexpr absl::string_view kPrunedBelowKey = "p";
constexpr char kStagedPrefix = 'n';
constexpr char kUndoAbsent = '\0';
constexpr char kUndoPresent = '\1';

void PutBe(uint64_t v, int bytes, std::string* out) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetBe(absl::string_view s) {
  uint64_t v = 0;
  for (unsigned char c : s) v = (v << 8) | c;
  return v;
}

std::string BlockKey(uint64_t height) {
  std::string k(1, kBlockPrefix);
  PutBe(height, 8, &k);
  return k;
}

std::string Location(uint64_t height, uint32_t index) {
  std::string loc;
  PutBe(height, 8, &loc);
  PutBe(index, 4, &loc);
  return loc;
}

// "u" len32 key: every undo entry of one state key, contiguous whatever the other keys are.
std::string UndoKeyPrefix(absl::string_view state_key) {
  std::string k(1, kUndoPrefix);
  PutBe(state_key.size(), 4, &k);
  k.append(state_key.data(), state_key.size());
  return k;
}

std::string UndoKey(absl::string_view state_key, uint64_t height) {
  std::string k = UndoKeyPrefix(state_key);
  PutBe(height, 8, &k);
  return k;
}

std::string Prefixed(char prefix, absl::string_view rest) {
  std::string k(1, prefix);
  k.append(rest.data(), rest.size());
  return k;
}

// Deletes every key starting with `prefix` in `batch` (one range tombstone).
// REQUIRES: prefix is not empty and does not end in 0xff.
void DeletePrefix(std::string prefix, rocksdb::WriteBatch* batch) {
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  batch->DeleteRange(prefix, end);
}

void PutMark(absl::string_view key, uint64_t height, rocksdb::WriteBatch* batch) {
  std::string v;
  PutBe(height, 8, &v);
  batch->Put(rocksdb::Slice(key.data(), key.size()), v);
}

}  // namespace

// The records of one commit, put into the WriteBatch in key order. RocksDB's memtable is a skip
// list that starts each insert from where the previous one went in: a key next to the previous
// one descends only from the level where the two part. In the order a block's records are
// produced, each receipt sits between two tx index entries (random hashes), so every one of
// those inserts descended from near the top. A `perf record` of bench_state at 1M keys: 34% of
// the process in MemTable::Add before, 25% with the records in order. The record kinds have
// distinct prefixes and each kind's keys are distinct but for two: a tx index key is put twice
// when a block refuses a tx and then commits it (AddBlock), and a caller could pass one
// consensus meta key twice. The sort is stable, so the last put wins, as the tx index needs.
class SortedPuts {
 public:
  // `value` must stay valid until Flush.
  void Put(std::string key, absl::string_view value) {
    entries_.push_back({std::move(key), value});
  }
  // Keeps `value` until Flush.
  void PutOwned(std::string key, std::string value) {
    Put(std::move(key), owned_.emplace_back(std::move(value)));
  }
  void Flush(rocksdb::WriteBatch* batch) {
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.key < b.key; });
    for (const Entry& e : entries_) {
      batch->Put(e.key, rocksdb::Slice(e.value.data(), e.value.size()));
    }
    entries_.clear();
    owned_.clear();
  }

 private:
  struct Entry {
    std::string key;
    absl::string_view value;
  };
  std::vector<Entry> entries_;
  std::deque<std::string> owned_;  // a deque: growing it does not move the strings
};

namespace {

// Drops, as RocksDB compacts, the records pruning made useless and left in place because their
// keys are not ordered by height: undo records at or below the history mark (reads at a height h
// >= the mark seek records above h) and tx index entries pointing at a pruned block. Until then
// the ledger ignores them.
class PrunedRecordFilter : public rocksdb::CompactionFilter {
 public:
  explicit PrunedRecordFilter(std::shared_ptr<const PruneMarks> marks) : marks_(std::move(marks)) {}

  bool Filter(int /*level*/, const rocksdb::Slice& key, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    if (key.empty()) return false;
    if (key[0] == kUndoPrefix && key.size() >= 13) {
      const uint64_t history_from = marks_->history_from.load(std::memory_order_acquire);
      return GetBe(absl::string_view(key.data() + key.size() - 8, 8)) <= history_from;
    }
    if (key[0] == kTxIndexPrefix && value.size() == 12) {
      return GetBe(absl::string_view(value.data(), 8)) <
             marks_->pruned_below.load(std::memory_order_acquire);
    }
    return false;
  }
  const char* Name() const override { return "noded.PrunedRecordFilter"; }

 private:
  const std::shared_ptr<const PruneMarks> marks_;
};

class PrunedRecordFilterFactory : public rocksdb::CompactionFilterFactory {
 public:
  explicit PrunedRecordFilterFactory(std::shared_ptr<const PruneMarks> marks)
      : marks_(std::move(marks)) {}
  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& /*context*/) override {
    return std::make_unique<PrunedRecordFilter>(marks_);
  }
  const char* Name() const override { return "noded.PrunedRecordFilterFactory"; }

 private:
  const std::shared_ptr<const PruneMarks> marks_;
};

// OUT_OF_RANGE if the tx index entry `loc` points below `pruned_below` (the compaction filter
// has not dropped it yet).
absl::Status CheckNotPruned(absl::string_view tx_hash, absl::string_view loc,
                            uint64_t pruned_below) {
  if (loc.size() < 8 || GetBe(loc.substr(0, 8)) >= pruned_below) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("tx ", base::BytesToHex(tx_hash), " is in block ",
                                            GetBe(loc.substr(0, 8)), ", pruned (blocks from ",
                                            pruned_below, " are kept)"));
}

// Views of the `txs` (field 3) of an encoded node::chain::Block, in order, found by walking its
// wire format: no message is built and nothing is copied. DATA_LOSS naming `height` if the
// encoding is malformed.
absl::StatusOr<std::vector<absl::string_view>> BlockTxViews(absl::string_view block,
                                                            uint64_t height) {
  using google::protobuf::internal::WireFormatLite;
  constexpr int kTxsField = node::chain::Block::kTxsFieldNumber;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(block.data()),
                                            static_cast<int>(block.size()));
  std::vector<absl::string_view> txs;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    if (WireFormatLite::GetTagFieldNumber(tag) == kTxsField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.Skip(static_cast<int>(length))) {
        return absl::DataLossError(absl::StrCat("block ", height, " does not parse"));
      }
      // Skip succeeded, so the payload is inside the buffer and ends where the reader is now.
      const int end = in.CurrentPosition();
      txs.push_back(block.substr(static_cast<size_t>(end) - length, length));
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::DataLossError(absl::StrCat("block ", height, " does not parse"));
    }
  }
  if (in.CurrentPosition() != static_cast<int>(block.size())) {
    return absl::DataLossError(absl::StrCat("block ", height, " does not parse"));
  }
  return txs;
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("ledger ", what, ": rocksdb: ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  // A full disk (ENOSPC, a quota): the operator frees space and restarts.
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path, uint32_t partition,
                                                     const LedgerOptions& options) {
  // RocksDB creates only the last path component (and reports the missing one as an error).
  std::error_code ignored;
  std::filesystem::create_directories(path, ignored);
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.paranoid_checks = true;
  if (options.env != nullptr) db_options.env = options.env;
  db_options.info_log = NewGlogRocksDbLogger("ledger " + path);
  // State reads that miss the executor's cache come here: a bloom filter answers "absent" without
  // a disk read, and index and filter blocks count against the (bounded) block cache rather than
  // growing with the state. They are partitioned into small blocks: a whole-table filter of a
  // large table outgrows a cache shard, is never kept, and is then read and checksummed on every
  // lookup (the first profile of bench_state spent 90% there).
  rocksdb::BlockBasedTableOptions table;
  // Four shards: the partition's memory share may shrink the cache to a few MiB (1 MiB at
  // least), and an LRU shard does not keep an entry larger than itself, so a block record (up to
  // consensus.batch_max_bytes, 1 MiB) stays cacheable down to 4 MiB; the ledger's readers (its
  // commit path, client reads, peers' fetches) are few for more shards to pay.
  std::shared_ptr<rocksdb::Cache> block_cache =
      rocksdb::NewLRUCache(options.block_cache_bytes, /*num_shard_bits=*/2);
  table.block_cache = block_cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  table.metadata_block_size = 4096;
  table.cache_index_and_filter_blocks = true;
  table.pin_top_level_index_and_filter = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // And a bloom filter over the memtable's keys: "is this tx committed?" is asked for every tx a
  // replica waits for, each time a batch of txs arrives, and is mostly answered "no"; without it
  // each such lookup searches the memtable's skip list (14% of a saturated backup's CPU).
  // 0.5% of the write buffer: ~40 KiB per ledger at 8 MiB (resources.ledger_write_buffer_bytes).
  db_options.memtable_prefix_bloom_size_ratio = 0.005;
  db_options.memtable_whole_key_filtering = true;
  if (options.write_buffer_bytes > 0) db_options.write_buffer_size = options.write_buffer_bytes;
  // No preallocation (RocksDB reserves 1.1x the write buffer for each WAL file, and table files'
  // sizes while they are written): a full disk fails the ledger's next synced write, which halts
  // the partition, instead of being absorbed by a reservation the disk-full fault cannot see; and
  // many partitions do not reserve a WAL's worth of disk each. Six alternated pairs of
  // bench_chain's synced 500-tx commits: 8.68 ms median without, 8.41 ms with (within their
  // spread).
  db_options.allow_fallocate = false;
  auto marks = std::make_shared<PruneMarks>();
  db_options.compaction_filter_factory = std::make_shared<PrunedRecordFilterFactory>(marks);
  rocksdb::DB* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(db_options, path, &raw), "open " + path));
  std::unique_ptr<Ledger> ledger(new Ledger(std::unique_ptr<rocksdb::DB>(raw),
                                            std::move(block_cache), std::move(marks), partition,
                                            options));
  RETURN_IF_ERROR(ledger->LoadTip());
  return ledger;
}

Ledger::Ledger(std::unique_ptr<rocksdb::DB> db, std::shared_ptr<rocksdb::Cache> block_cache,
               std::shared_ptr<PruneMarks> marks, uint32_t partition, const LedgerOptions& options)
    : db_(std::move(db)),
      block_cache_(std::move(block_cache)),
      marks_(std::move(marks)),
      partition_(partition),
      options_(options) {}

Ledger::~Ledger() = default;

absl::Status Ledger::LoadTip() {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(Prefixed(kBlockPrefix, std::string(8, '\xff')));
  RETURN_IF_ERROR(FromRocks(it->status(), "seek tip"));
  absl::MutexLock lock(&mu_);
  if (!it->Valid() || it->key().size() != 9 || it->key()[0] != kBlockPrefix) {
    empty_ = true;
    return absl::OkStatus();
  }
  node::chain::Block block;
  if (!block.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
    return absl::DataLossError("ledger: the last block record does not parse");
  }
  if (block.header().partition() != partition_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger belongs to partition ", block.header().partition(), ", not ", partition_));
  }
  empty_ = false;
  tip_ = block.header();
  tip_height_.store(tip_.height(), std::memory_order_release);
  tip_hash_ = BlockHash(tip_);
  ASSIGN_OR_RETURN(history_from_, ReadHeightMark(kHistoryFromKey, "history mark"));
  ASSIGN_OR_RETURN(earliest_, ReadHeightMark(kEarliestKey, "earliest-block mark"));
  ASSIGN_OR_RETURN(const uint64_t pruned_below, ReadHeightMark(kPrunedBelowKey, "pruning mark"));
  marks_->pruned_below.store(pruned_below, std::memory_order_release);
  marks_->history_from.store(history_from_, std::memory_order_release);
  std::string prefix;
  rocksdb::Status ps =
      db_->Get(rocksdb::ReadOptions(),
               rocksdb::Slice(kStatePrefixKey.data(), kStatePrefixKey.size()), &prefix);
  if (ps.ok()) {
    if (prefix.size() != 1 || (prefix[0] != kStatePrefix && prefix[0] != kStagedPrefix)) {
      return absl::DataLossError("ledger: the state prefix mark is corrupt");
    }
    state_prefix_.store(prefix[0], std::memory_order_release);
  } else if (!ps.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(ps, "read state prefix"));
  }
  return absl::OkStatus();
}

absl::Status Ledger::CheckBlock(const node::chain::Block& block,
                                absl::Span<const node::chain::Receipt> receipts) const {
  const node::chain::BlockHeader& h = block.header();
  const size_t n = static_cast<size_t>(block.tx_hashes_size());
  if (h.partition() != partition_) {
    return absl::InvalidArgumentError(
        absl::StrCat("block is for partition ", h.partition(), ", ledger is ", partition_));
  }
  if (h.tx_count() != n || static_cast<size_t>(block.txs_size()) != n || receipts.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block ", h.height(), ": tx_count ", h.tx_count(), ", ", n, " hashes, ", block.txs_size(),
        " bodies and ", receipts.size(), " receipts must all agree"));
  }
  if (h.tx_root() != TxRoot(block.tx_hashes())) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", h.height(), ": tx_root does not match its tx hashes"));
  }
  return absl::OkStatus();
}

absl::Status Ledger::AddBlock(const node::chain::Block& block,
                              absl::Span<const node::chain::Receipt> receipts, SortedPuts* puts) {
  const node::chain::BlockHeader& h = block.header();
  puts->PutOwned(BlockKey(h.height()), block.SerializeAsString());
  // The tx index points at the inclusion that consumed the tx's nonce (SUCCESS or FAILED: there
  // is at most one, and it overrides any refusal), else at the latest refusal (a tx refused for a
  // nonce gap may be pooled and refused again; its latest answer is the one a client waits
  // for). Only a refused tx needs reads: the index, and the receipt it points at.
  absl::flat_hash_set<absl::string_view> indexed;
  for (size_t i = 0; i < receipts.size(); ++i) {
    std::string loc = Location(h.height(), static_cast<uint32_t>(i));
    puts->PutOwned(Prefixed(kReceiptPrefix, loc), receipts[i].SerializeAsString());
    const std::string& tx_hash = block.tx_hashes(static_cast<int>(i));
    std::string index_key = Prefixed(kTxIndexPrefix, tx_hash);
    if (ConsumedNonce(receipts[i])) {
      indexed.insert(tx_hash);
      puts->PutOwned(std::move(index_key), std::move(loc));  // after any refusal: it wins
      continue;
    }
    if (!indexed.insert(tx_hash).second) continue;
    // What the index answers now: nothing (NOT_FOUND) or an entry of a pruned block, on its way
    // out (OUT_OF_RANGE), gives way; so does a refusal. A receipt missing or corrupt below no
    // pruning mark (DATA_LOSS) keeps the entry as it is.
    absl::StatusOr<node::chain::Receipt> indexed = GetReceipt(tx_hash);
    if (!indexed.ok() && !absl::IsNotFound(indexed.status()) &&
        !absl::IsOutOfRange(indexed.status()) && !absl::IsDataLoss(indexed.status())) {
      return indexed.status();
    }
    const bool settled =
        indexed.ok() ? ConsumedNonce(*indexed) : absl::IsDataLoss(indexed.status());
    if (!settled) puts->PutOwned(std::move(index_key), std::move(loc));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Ledger::ReadHeightMark(absl::string_view key,
                                                absl::string_view what) const {
  ASSIGN_OR_RETURN(std::optional<std::string> v, Read(key));
  if (!v.has_value()) return 0;
  if (v->size() != 8) {
    return absl::DataLossError(absl::StrCat("ledger: the ", what, " is not 8 bytes"));
  }
  return GetBe(*v);
}

size_t LedgerWriteBufferBytes(uint64_t budget_bytes, size_t ledgers) {
  if (budget_bytes == 0) return 0;
  constexpr uint64_t kMin = uint64_t{1} << 20;
  constexpr uint64_t kMax = uint64_t{16} << 20;
  return static_cast<size_t>(
      std::clamp<uint64_t>(budget_bytes / (2 * std::max<uint64_t>(ledgers, 1)), kMin, kMax));
}

double LedgerWriteBufferScale(double current, double pressure_scale) {
  constexpr double kStep = 1.0 / 8;
  if (pressure_scale >= 1) return 1;
  if (std::abs(pressure_scale - current) < kStep) return current;
  // (Less a thousandth of a step, so that a scale a rounding error above a step is that step.)
  return std::clamp(std::ceil(pressure_scale / kStep - 1e-3) * kStep, kStep, 1.0);
}

absl::Status Ledger::SetWriteBufferBytes(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("ledger: a write buffer of 0 bytes");
  return FromRocks(db_->SetOptions({{"write_buffer_size", absl::StrCat(bytes)}}),
                   "set write_buffer_size");
}

size_t Ledger::WriteBufferBytes() const { return db_->GetOptions().write_buffer_size; }

uint64_t Ledger::IntProperty(const std::string& name) const {
  return RocksDbIntProperty(*db_, name);
}

uint64_t Ledger::MemtableBytes() const {
  return IntProperty(rocksdb::DB::Properties::kSizeAllMemTables);
}

absl::Status Ledger::SetBlockCacheCapacity(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("ledger: a block cache of 0 bytes");
  block_cache_->SetCapacity(bytes);
  return absl::OkStatus();
}

uint64_t Ledger::BlockCacheBytes() const { return block_cache_->GetUsage(); }
uint64_t Ledger::BlockCachePinnedBytes() const { return block_cache_->GetPinnedUsage(); }
uint64_t Ledger::BlockCacheCapacity() const { return block_cache_->GetCapacity(); }

Ledger::WriteStall Ledger::WriteStallNow() const { return ReadWriteStall(*db_); }

absl::Status Ledger::CommitBlock(const node::chain::Block& block,
                                 absl::Span<const node::chain::Receipt> receipts,
                                 const StateDelta& delta, const ConsensusMetaWrites& meta) {
  const node::chain::BlockHeader& h = block.header();
  RETURN_IF_ERROR(CheckBlock(block, receipts));
  if (h.state_root() != delta.accumulator.Root()) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", h.height(), ": state_root is not the root of the state delta"));
  }

  absl::MutexLock lock(&mu_);
  if (empty_ ? h.height() != 0 : h.height() != tip_.height() + 1) {
    return absl::FailedPreconditionError(absl::StrCat("block height ", h.height(),
                                                      " does not extend the ledger (next is ",
                                                      empty_ ? 0 : tip_.height() + 1, ")"));
  }
  if (!empty_ && h.parent_hash() != tip_hash_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block ", h.height(), ": parent_hash ", base::BytesToHex(h.parent_hash()),
        " is not the hash of block ", tip_.height(), " (", base::BytesToHex(tip_hash_), ")"));
  }

  SortedPuts puts;
  RETURN_IF_ERROR(AddBlock(block, receipts, &puts));
  for (const auto& [key, value] : delta.writes) puts.Put(StateKey(key), value);
  for (const auto& [key, before] : delta.previous) {
    std::string undo(1, before.has_value() ? kUndoPresent : kUndoAbsent);
    if (before.has_value()) undo.append(*before);
    puts.PutOwned(UndoKey(key, h.height()), std::move(undo));
  }
  puts.PutOwned(std::string(kLanesKey), delta.accumulator.Serialize());
  for (const auto& [key, value] : meta) puts.Put(Prefixed(kMetaPrefix, key), value);
  rocksdb::WriteBatch batch;
  puts.Flush(&batch);
  const uint64_t prune_below = AddPrune(h.height(), &batch);

  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), absl::StrCat("commit block ", h.height())));
  empty_ = false;
  tip_ = h;
  tip_height_.store(h.height(), std::memory_order_release);
  tip_hash_ = BlockHash(h);
  if (prune_below > 0) {
    earliest_ = std::max(earliest_, prune_below);
    history_from_ = std::max(history_from_, prune_below);
    marks_->pruned_below.store(prune_below, std::memory_order_release);
    marks_->history_from.store(history_from_, std::memory_order_release);
  }
  return absl::OkStatus();
}

uint64_t Ledger::AddPrune(uint64_t height, rocksdb::WriteBatch* batch) const {
  const uint64_t keep = options_.retain_blocks;
  if (keep == 0 || height + 1 <= keep) return 0;
  const uint64_t below = height + 1 - keep;
  const uint64_t pruned = marks_->pruned_below.load(std::memory_order_relaxed);
  if (below < pruned + std::max<uint64_t>(options_.prune_step, 1)) return 0;
  // From the last mark (everything below it is gone already; blocks a snapshot install left
  // below its base are above it), so the range tombstones do not pile up over one another.
  batch->DeleteRange(BlockKey(pruned), BlockKey(below));
  batch->DeleteRange(Prefixed(kReceiptPrefix, Location(pruned, 0)),
                     Prefixed(kReceiptPrefix, Location(below, 0)));
  for (const std::string& meta : options_.height_keyed_meta) {
    std::string from = Prefixed(kMetaPrefix, meta);
    std::string to = from;
    PutBe(pruned, 8, &from);
    PutBe(below, 8, &to);
    batch->DeleteRange(from, to);
  }
  PutMark(kPrunedBelowKey, below, batch);
  if (below > earliest_) PutMark(kEarliestKey, below, batch);
  if (below > history_from_) PutMark(kHistoryFromKey, below, batch);
  return below;
}

bool Ledger::empty() const {
  absl::MutexLock lock(&mu_);
  return empty_;
}

uint64_t Ledger::last_height() const {
  absl::MutexLock lock(&mu_);
  CHECK(!empty_) << "last_height() of an empty ledger";
  return tip_.height();
}

node::chain::BlockHeader Ledger::last_header() const {
  absl::MutexLock lock(&mu_);
  CHECK(!empty_) << "last_header() of an empty ledger";
  return tip_;
}

std::string Ledger::last_block_hash() const {
  absl::MutexLock lock(&mu_);
  CHECK(!empty_) << "last_block_hash() of an empty ledger";
  return tip_hash_;
}

absl::StatusOr<std::optional<std::string>> Ledger::Read(absl::string_view key,
                                                        const rocksdb::Snapshot* snapshot) const {
  std::string value;
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  rocksdb::Status s = db_->Get(ro, rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  RETURN_IF_ERROR(FromRocks(s, "read"));
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<node::chain::Block> Ledger::GetBlock(uint64_t height) const {
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, Read(BlockKey(height)));
  if (!bytes.has_value()) {
    if (const uint64_t pruned = pruned_below(); height < pruned) {
      return absl::OutOfRangeError(
          absl::StrCat("block ", height, " was pruned (blocks from ", pruned, " are kept)"));
    }
    return absl::NotFoundError(absl::StrCat("no block at height ", height));
  }
  node::chain::Block block;
  if (!block.ParseFromString(*bytes)) {
    return absl::DataLossError(absl::StrCat("block ", height, " does not parse"));
  }
  return block;
}

absl::StatusOr<node::chain::Receipt> Ledger::GetReceipt(absl::string_view tx_hash) const {
  ASSIGN_OR_RETURN(std::optional<std::string> loc, Read(Prefixed(kTxIndexPrefix, tx_hash)));
  if (!loc.has_value()) {
    return absl::NotFoundError(absl::StrCat("no committed tx ", base::BytesToHex(tx_hash)));
  }
  RETURN_IF_ERROR(CheckNotPruned(tx_hash, *loc, pruned_below()));
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, Read(Prefixed(kReceiptPrefix, *loc)));
  node::chain::Receipt receipt;
  if (!bytes.has_value()) {
    // Pruned since the check above?
    RETURN_IF_ERROR(CheckNotPruned(tx_hash, *loc, pruned_below()));
  }
  if (!bytes.has_value() || !receipt.ParseFromString(*bytes)) {
    return absl::DataLossError(
        absl::StrCat("receipt of tx ", base::BytesToHex(tx_hash), " missing or corrupt"));
  }
  return receipt;
}

absl::StatusOr<std::vector<node::chain::Receipt>> Ledger::GetBlockReceipts(uint64_t height) const {
  ASSIGN_OR_RETURN(node::chain::Block block, GetBlock(height));
  const size_t n = static_cast<size_t>(block.tx_hashes_size());
  std::vector<node::chain::Receipt> out;
  out.reserve(n);
  std::string prefix(1, kReceiptPrefix);
  PutBe(height, 8, &prefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix) && out.size() < n;
       it->Next()) {
    if (!out.emplace_back().ParseFromArray(it->value().data(),
                                           static_cast<int>(it->value().size())) ||
        out.back().tx_index() != out.size() - 1) {
      return absl::DataLossError(
          absl::StrCat("receipt ", out.size() - 1, " of block ", height, " is corrupt"));
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "read receipts"));
  if (out.size() != n && height < pruned_below()) {
    return absl::OutOfRangeError(absl::StrCat("block ", height, " was pruned while it was read"));
  }
  if (out.size() != n) {
    return absl::DataLossError(
        absl::StrCat("block ", height, " has ", n, " txs but ", out.size(), " stored receipts"));
  }
  return out;
}

absl::StatusOr<std::string> Ledger::GetTx(absl::string_view tx_hash) const {
  ASSIGN_OR_RETURN(std::optional<std::string> loc, Read(Prefixed(kTxIndexPrefix, tx_hash)));
  if (!loc.has_value() || loc->size() != 12) {
    return absl::NotFoundError(absl::StrCat("no committed tx ", base::BytesToHex(tx_hash)));
  }
  RETURN_IF_ERROR(CheckNotPruned(tx_hash, *loc, pruned_below()));
  const uint64_t height = GetBe(absl::string_view(*loc).substr(0, 8));
  const uint64_t index = GetBe(absl::string_view(*loc).substr(8, 4));
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, Read(BlockKey(height)));
  if (!bytes.has_value()) {
    RETURN_IF_ERROR(CheckNotPruned(tx_hash, *loc, pruned_below()));  // pruned since the check
    return absl::NotFoundError(absl::StrCat("no block at height ", height));  // as GetBlock
  }
  ASSIGN_OR_RETURN(std::vector<absl::string_view> txs, BlockTxViews(*bytes, height));
  if (index >= txs.size()) {
    return absl::DataLossError(absl::StrCat("tx index points past block ", height));
  }
  return std::string(txs[index]);
}

absl::StatusOr<std::vector<std::optional<std::string>>> Ledger::GetTxs(
    absl::Span<const std::string> tx_hashes) const {
  std::vector<std::optional<std::string>> out(tx_hashes.size());
  // (height, index in the block, position in `out`), sorted so each block is read once.
  std::vector<std::tuple<uint64_t, uint64_t, size_t>> wanted;
  wanted.reserve(tx_hashes.size());
  const uint64_t pruned = pruned_below();
  for (size_t i = 0; i < tx_hashes.size(); ++i) {
    ASSIGN_OR_RETURN(std::optional<std::string> loc, Read(Prefixed(kTxIndexPrefix, tx_hashes[i])));
    if (!loc.has_value() || loc->size() != 12) continue;
    const uint64_t height = GetBe(absl::string_view(*loc).substr(0, 8));
    if (height < pruned) continue;
    wanted.emplace_back(height, GetBe(absl::string_view(*loc).substr(8, 4)), i);
  }
  std::sort(wanted.begin(), wanted.end());
  std::optional<std::string> bytes;
  std::vector<absl::string_view> txs;
  uint64_t loaded = 0;  // the height `txs` views (0: none; genesis holds no tx)
  for (const auto& [height, index, pos] : wanted) {
    if (height != loaded) {
      ASSIGN_OR_RETURN(bytes, Read(BlockKey(height)));
      loaded = height;
      txs.clear();
      // No block there (pruned while we read): its txs answer nullopt, as GetTx's NOT_FOUND
      // or OUT_OF_RANGE.
      if (!bytes.has_value()) continue;
      ASSIGN_OR_RETURN(txs, BlockTxViews(*bytes, height));
    }
    if (!bytes.has_value()) continue;
    if (index >= txs.size()) {
      return absl::DataLossError(absl::StrCat("tx index points past block ", height));
    }
    out[pos] = std::string(txs[index]);
  }
  return out;
}

absl::StatusOr<std::optional<uint64_t>> Ledger::GetTxHeight(absl::string_view tx_hash) const {
  ASSIGN_OR_RETURN(std::optional<std::string> loc, Read(Prefixed(kTxIndexPrefix, tx_hash)));
  if (!loc.has_value() || loc->size() != 12) return std::optional<uint64_t>();
  RETURN_IF_ERROR(CheckNotPruned(tx_hash, *loc, pruned_below()));
  return std::optional<uint64_t>(GetBe(absl::string_view(*loc).substr(0, 8)));
}

absl::StatusOr<node::chain::Account> Ledger::GetAccount(absl::string_view address) const {
  ASSIGN_OR_RETURN(std::optional<std::string> v, Read(StateKey(AccountKey(address))));
  node::chain::Account account;
  account.set_address(std::string(address));
  if (v.has_value() && !DecodeAccount(*v, &account)) {
    return absl::DataLossError(absl::StrCat("account ", base::BytesToHex(address), " corrupt"));
  }
  return account;
}

absl::StatusOr<std::optional<std::string>> Ledger::GetValue(absl::string_view key) const {
  return Read(StateKey(ValueKey(key)));
}

absl::StatusOr<std::optional<std::string>> Ledger::GetValueAt(absl::string_view key,
                                                              uint64_t height) const {
  return GetStateAt(ValueKey(key), height);
}

absl::StatusOr<std::optional<std::string>> Ledger::GetState(absl::string_view key) const {
  return Read(StateKey(key));
}

std::string Ledger::StateKey(absl::string_view key) const {
  return Prefixed(state_prefix_.load(std::memory_order_acquire), key);
}

char Ledger::staging_prefix() const {
  return state_prefix_.load(std::memory_order_acquire) == kStatePrefix ? kStagedPrefix
                                                                       : kStatePrefix;
}

absl::StatusOr<Ledger::ReadView> Ledger::SnapshotAt(uint64_t height) const {
  // Taken under the commit lock: it holds every block up to the tip checked here, and the state
  // prefix that goes with them (a snapshot install switches both under it).
  absl::MutexLock lock(&mu_);
  if (empty_ || height > tip_.height()) {
    return absl::OutOfRangeError(absl::StrCat("height ", height, " is beyond the last block (",
                                              empty_ ? 0 : tip_.height(), ")"));
  }
  if (height < history_from_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the state before height ", history_from_, " is not kept"));
  }
  return ReadView{.snapshot = db_->GetSnapshot(),
                  .prefix = state_prefix_.load(std::memory_order_acquire),
                  .at_tip = height == tip_.height()};
}

absl::StatusOr<bool> Ledger::UndoValueAt(rocksdb::Iterator* it, absl::string_view key,
                                         uint64_t height, std::optional<std::string>* value) const {
  // The value at `height` is the value before the first change after it: the first undo entry
  // above `height`; with none, the key has not changed since, and the current value is it.
  const std::string prefix = UndoKeyPrefix(key);
  it->Seek(UndoKey(key, height + 1));
  RETURN_IF_ERROR(FromRocks(it->status(), "seek undo"));
  if (!it->Valid() || it->key().size() != prefix.size() + 8 || !it->key().starts_with(prefix)) {
    return false;
  }
  const rocksdb::Slice v = it->value();
  if (v.empty() || (v[0] != kUndoAbsent && v[0] != kUndoPresent)) {
    return absl::DataLossError(
        absl::StrCat("undo record of a state key at height ",
                     GetBe(absl::string_view(it->key().data() + prefix.size(), 8)), " is corrupt"));
  }
  if (v[0] == kUndoAbsent) {
    value->reset();
  } else {
    value->emplace(v.data() + 1, v.size() - 1);
  }
  return true;
}

absl::StatusOr<std::optional<std::string>> Ledger::GetStateAt(absl::string_view key,
                                                              uint64_t height) const {
  // One snapshot, so a commit between the two reads below cannot mix two states.
  ASSIGN_OR_RETURN(const ReadView view, SnapshotAt(height));
  absl::Cleanup release = [&] { db_->ReleaseSnapshot(view.snapshot); };
  rocksdb::ReadOptions ro;
  ro.snapshot = view.snapshot;
  std::unique_ptr<rocksdb::Iterator> undo(db_->NewIterator(ro));
  std::optional<std::string> value;
  ASSIGN_OR_RETURN(bool changed, UndoValueAt(undo.get(), key, height, &value));
  if (!changed) {
    ASSIGN_OR_RETURN(value, Read(Prefixed(view.prefix, key), view.snapshot));
  }
  RETURN_IF_ERROR(CheckHistoryKept(height));
  return value;
}

absl::Status Ledger::CheckHistoryKept(uint64_t height) const {
  // The compaction filter ignores RocksDB snapshots: once pruning raised the history mark above
  // `height`, the undo records a read at `height` used may have been dropped under it.
  const uint64_t from = marks_->history_from.load(std::memory_order_acquire);
  if (height >= from) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the state before height ", from, " is not kept (pruned during the read)"));
}

absl::Status Ledger::ScanStateAt(uint64_t height, absl::string_view from,
                                 absl::FunctionRef<bool(absl::string_view, absl::string_view)> fn,
                                 uint64_t max_scanned, uint64_t* scanned) const {
  ASSIGN_OR_RETURN(const ReadView view, SnapshotAt(height));
  absl::Cleanup release = [&] { db_->ReleaseSnapshot(view.snapshot); };
  rocksdb::ReadOptions ro;
  ro.snapshot = view.snapshot;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::unique_ptr<rocksdb::Iterator> undo(db_->NewIterator(ro));
  const std::string prefix(1, view.prefix);
  std::optional<std::string> older;
  uint64_t visited = 0;
  absl::Cleanup report = [&] {
    if (scanned != nullptr) *scanned = visited;
  };
  // Keys are never deleted, so every key of the state at `height` is in the current state; a
  // key written after it has an "absent" undo record there and is skipped (but counted).
  for (it->Seek(Prefixed(view.prefix, from)); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (max_scanned > 0 && visited >= max_scanned) return CheckHistoryKept(height);
    visited += it->key().size() + it->value().size();
    const absl::string_view key(it->key().data() + 1, it->key().size() - 1);
    if (!view.at_tip) {
      ASSIGN_OR_RETURN(bool changed, UndoValueAt(undo.get(), key, height, &older));
      if (changed) {
        if (!older.has_value()) continue;
        if (!fn(key, *older)) return CheckHistoryKept(height);
        continue;
      }
    }
    if (!fn(key, absl::string_view(it->value().data(), it->value().size()))) {
      return CheckHistoryKept(height);
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "scan state"));
  return CheckHistoryKept(height);
}

absl::Status Ledger::ClearStaged(absl::string_view meta_prefix) {
  const char p = staging_prefix();
  rocksdb::WriteBatch batch;
  DeletePrefix(std::string(1, p), &batch);
  DeletePrefix(Prefixed(kMetaPrefix, meta_prefix), &batch);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Write(wo, &batch), "clear staged state");
}

absl::Status Ledger::StageState(absl::Span<const std::pair<std::string, std::string>> entries,
                                const ConsensusMetaWrites& meta) {
  const char p = staging_prefix();
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : entries) batch.Put(Prefixed(p, key), value);
  for (const auto& [key, value] : meta) batch.Put(Prefixed(kMetaPrefix, key), value);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Write(wo, &batch), "stage state");
}

absl::Status Ledger::InstallStagedState(const node::chain::Block& base,
                                        absl::Span<const node::chain::Receipt> receipts,
                                        const StateRoot& lanes, const ConsensusMetaWrites& meta,
                                        absl::string_view meta_prefix) {
  RETURN_IF_ERROR(CheckBlock(base, receipts));
  const node::chain::BlockHeader& h = base.header();
  if (h.state_root() != lanes.Root()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot block ", h.height(), ": state_root is not the root of the staged state"));
  }
  absl::MutexLock lock(&mu_);
  if (!empty_ && h.height() <= tip_.height()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot at height ", h.height(), " is not above the ledger's tip (", tip_.height(), ")"));
  }
  const char old_prefix = state_prefix_.load(std::memory_order_acquire);
  const char new_prefix = staging_prefix();
  SortedPuts puts;
  RETURN_IF_ERROR(AddBlock(base, receipts, &puts));
  rocksdb::WriteBatch batch;
  puts.Flush(&batch);
  DeletePrefix(std::string(1, kUndoPrefix), &batch);
  batch.Put(rocksdb::Slice(kLanesKey.data(), kLanesKey.size()), lanes.Serialize());
  PutMark(kHistoryFromKey, h.height(), &batch);
  PutMark(kEarliestKey, h.height(), &batch);
  batch.Put(rocksdb::Slice(kStatePrefixKey.data(), kStatePrefixKey.size()),
            rocksdb::Slice(&new_prefix, 1));
  DeletePrefix(Prefixed(kMetaPrefix, meta_prefix), &batch);
  for (const auto& [key, value] : meta) batch.Put(Prefixed(kMetaPrefix, key), value);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  RETURN_IF_ERROR(
      FromRocks(db_->Write(wo, &batch), absl::StrCat("install snapshot at ", h.height())));
  state_prefix_.store(new_prefix, std::memory_order_release);
  empty_ = false;
  tip_ = h;
  tip_height_.store(h.height(), std::memory_order_release);
  tip_hash_ = BlockHash(h);
  history_from_ = h.height();
  earliest_ = h.height();
  marks_->history_from.store(history_from_, std::memory_order_release);
  // The old state is garbage now; a crash before this delete leaves it where the next fetch
  // stages (ClearStaged drops it first).
  rocksdb::WriteBatch drop;
  DeletePrefix(std::string(1, old_prefix), &drop);
  if (absl::Status s = FromRocks(db_->Write(rocksdb::WriteOptions(), &drop), "drop old state");
      !s.ok()) {
    LOG(WARNING) << "ledger of partition " << partition_ << ": " << s;
  }
  return absl::OkStatus();
}

absl::Status Ledger::ScanConsensusMeta(
    absl::string_view prefix,
    absl::FunctionRef<void(absl::string_view, absl::string_view)> fn) const {
  const std::string from = Prefixed(kMetaPrefix, prefix);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(from); it->Valid() && it->key().starts_with(from); it->Next()) {
    fn(absl::string_view(it->key().data() + from.size(), it->key().size() - from.size()),
       absl::string_view(it->value().data(), it->value().size()));
  }
  return FromRocks(it->status(), "scan consensus meta");
}

uint64_t Ledger::history_from() const {
  absl::MutexLock lock(&mu_);
  return history_from_;
}

uint64_t Ledger::earliest_height() const {
  absl::MutexLock lock(&mu_);
  return earliest_;
}

uint64_t Ledger::pruned_below() const {
  return marks_->pruned_below.load(std::memory_order_acquire);
}

absl::StatusOr<std::optional<StateRoot>> Ledger::LoadAccumulator() const {
  ASSIGN_OR_RETURN(std::optional<std::string> bytes, Read(kLanesKey));
  if (!bytes.has_value()) return std::optional<StateRoot>();
  std::optional<StateRoot> root = StateRoot::Parse(*bytes);
  if (!root.has_value()) {
    return absl::DataLossError(absl::StrCat("ledger: the stored state hash is ", bytes->size(),
                                            " bytes, not ", StateRoot::kLanes * 2));
  }
  return root;
}

absl::Status Ledger::UpgradeStateHistory(const StateRoot& root) {
  absl::MutexLock lock(&mu_);
  if (empty_) return absl::FailedPreconditionError("upgrade of an empty ledger");
  // The blocks so far wrote no undo records: the state is readable from the tip on.
  rocksdb::WriteBatch batch;
  batch.Put(rocksdb::Slice(kLanesKey.data(), kLanesKey.size()), root.Serialize());
  PutMark(kHistoryFromKey, tip_.height(), &batch);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "store state hash"));
  history_from_ = tip_.height();
  marks_->history_from.store(history_from_, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<StateMap> Ledger::LoadState() const {
  StateMap state;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, state_prefix_.load(std::memory_order_acquire));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    state.emplace(it->key().ToString().substr(1), it->value().ToString());
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "load state"));
  return state;
}

absl::Status Ledger::Compact() {
  return FromRocks(db_->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr), "compact");
}

absl::Status Ledger::PutConsensusMeta(absl::string_view key, absl::string_view value) {
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(
      db_->Put(wo, Prefixed(kMetaPrefix, key), rocksdb::Slice(value.data(), value.size())),
      "put consensus meta");
}

absl::StatusOr<std::string> Ledger::GetConsensusMeta(absl::string_view key) const {
  ASSIGN_OR_RETURN(std::optional<std::string> v, Read(Prefixed(kMetaPrefix, key)));
  if (!v.has_value()) {
    return absl::NotFoundError(absl::StrCat("no consensus meta under \"", key, "\""));
  }
  return *std::move(v);
}

absl::StatusOr<Chain> OpenChain(const std::string& path, uint32_t partition,
                                const node::chain::GenesisConfig& genesis,
                                const LedgerOptions& options) {
  Chain chain;
  ASSIGN_OR_RETURN(chain.ledger, Ledger::Open(path, partition, options));
  if (chain.ledger->empty()) {
    ASSIGN_OR_RETURN(StateMap state, GenesisState(genesis));
    StateDelta delta;
    for (auto& [key, value] : state) {
      delta.accumulator.Add(key, value);
      delta.writes.emplace(key, std::move(value));
    }
    node::chain::Block block;
    node::chain::BlockHeader* h = block.mutable_header();
    h->set_partition(partition);
    h->set_height(0);
    h->set_tx_root(TxRoot(block.tx_hashes()));
    h->set_state_root(delta.accumulator.Root());
    RETURN_IF_ERROR(chain.ledger->CommitBlock(block, {}, delta));
    chain.executor = std::make_unique<Executor>(partition, chain.ledger.get(), delta.accumulator,
                                                options.state_cache_bytes);
    return chain;
  }
  const node::chain::BlockHeader tip = chain.ledger->last_header();
  ASSIGN_OR_RETURN(std::optional<StateRoot> stored, chain.ledger->LoadAccumulator());
  StateRoot root;
  if (!stored.has_value() || options.verify_state_on_open) {
    // A ledger written before the state hash was stored (or a check asked for): hash the whole
    // state once, O(state).
    ASSIGN_OR_RETURN(StateMap state, chain.ledger->LoadState());
    root = HashState(state);
    if (stored.has_value() && !(*stored == root)) {
      return absl::DataLossError(absl::StrCat(
          "ledger ", path, ": the stored state hash does not match the stored state (block ",
          tip.height(), ")"));
    }
  } else {
    root = *stored;
  }
  if (root.Root() != tip.state_root()) {
    return absl::DataLossError(absl::StrCat(
        "ledger ", path, ": state does not match the state root of block ", tip.height(), " (",
        base::BytesToHex(root.Root()), " vs ", base::BytesToHex(tip.state_root()), ")"));
  }
  if (!stored.has_value()) RETURN_IF_ERROR(chain.ledger->UpgradeStateHistory(root));
  chain.executor =
      std::make_unique<Executor>(partition, chain.ledger.get(), root, options.state_cache_bytes);
  return chain;
}

}  // namespace partitions
