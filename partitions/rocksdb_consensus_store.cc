#include "partitions/rocksdb_consensus_store.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "flowctl/status_macros.h"
#include "partitions/pbft_certs.h"
#include "partitions/rocksdb_logger.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace partitions {
namespace {

using ::node::consensus::PersistedConsensus;
using ::node::consensus::PersistedView;
using ::node::consensus::StableCheckpointRecord;

constexpr char kViewKey[] = "v";
constexpr char kCheckpointKey[] = "c";
constexpr char kLogPrefix = 'l';
constexpr char kLogEnd[] = "m";  // first key after every "l..." key
constexpr size_t kLogKeySize = 1 + 8 + 8;

void PutBe64(uint64_t v, std::string* out) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

uint64_t GetBe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string LogKey(uint64_t seq, uint64_t counter) {
  std::string key(1, kLogPrefix);
  PutBe64(seq, &key);
  PutBe64(counter, &key);
  return key;
}

// Log key parts, or DataLoss naming the key if it is not one.
absl::StatusOr<std::pair<uint64_t, uint64_t>> ParseLogKey(const rocksdb::Slice& key,
                                                          const std::string& dir) {
  if (key.size() != kLogKeySize || key[0] != kLogPrefix) {
    return absl::DataLossError(
        absl::StrCat("consensus store ", dir, ": malformed log key 0x",
                     absl::BytesToHexString(absl::string_view(key.data(), key.size()))));
  }
  return std::make_pair(GetBe64(key.data() + 1), GetBe64(key.data() + 9));
}

std::string KeyName(const rocksdb::Slice& key) {
  if (key.size() == kLogKeySize && key[0] == kLogPrefix) {
    return absl::StrCat("l/", GetBe64(key.data() + 1), "/", GetBe64(key.data() + 9));
  }
  return key.ToString();
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what, const std::string& dir) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg =
      absl::StrCat("consensus store ", dir, ": ", what, ": rocksdb: ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);  // a full disk
  return absl::UnavailableError(msg);
}

// Parses the value under `key` into `msg`; `*found` says whether the key exists (absent keys
// leave the field unset in Load, as in the in-memory store).
template <typename Message>
absl::Status ReadProto(rocksdb::DB* db, const std::string& key, const std::string& dir,
                       Message* msg, bool* found) {
  std::string value;
  const rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key, &value);
  *found = !s.IsNotFound();
  if (!*found) return absl::OkStatus();
  RETURN_IF_ERROR(FromRocks(s, absl::StrCat("read ", key), dir));
  if (!msg->ParseFromString(value)) {
    return absl::DataLossError(
        absl::StrCat("consensus store ", dir, ": corrupt value under key ", key));
  }
  return absl::OkStatus();
}

// Writes `batch` with sync, so it is durable when this returns (as ConsensusStore requires).
absl::Status WriteSynced(rocksdb::DB* db, rocksdb::WriteBatch* batch, absl::string_view what,
                         const std::string& dir) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db->Write(wo, batch), what, dir);
}

// Calls fn(seq, key, value) for every log entry, in key order (seq, then append counter).
template <typename Fn>
absl::Status ForEachLogEntry(rocksdb::DB* db, const std::string& dir, Fn fn) {
  const rocksdb::Slice upper(kLogEnd);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(std::string(1, kLogPrefix)); it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(auto parts, ParseLogKey(it->key(), dir));
    RETURN_IF_ERROR(fn(parts, it->key(), it->value()));
  }
  return FromRocks(it->status(), "scan log", dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbConsensusStore>> RocksDbConsensusStore::Open(
    const std::string& dir, ConsensusStoreOptions store_options) {
  if (store_options.write_buffer_bytes < (64 << 10)) {
    return absl::InvalidArgumentError(absl::StrCat("consensus store ", dir,
                                                   ": write_buffer_bytes must be >= 65536, got ",
                                                   store_options.write_buffer_bytes));
  }
  // RocksDB creates only the last path component; errors surface from DB::Open below.
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  rocksdb::Options options;
  // A small database: the log is bounded by the watermark window. The table sizes are RocksDB's
  // OptimizeForSmallDb's; unlike it, no 16 MiB block cache per database (a node opens one store
  // per partition and passes one cache for all) and a smaller write buffer. Up to four memtables
  // (one filling, three waiting for their flush): a burst (a view change's certificates) does not
  // stop the log's writes while the process's one flush thread works on a ledger's memtable.
  options.max_file_opening_threads = 1;
  options.write_buffer_size = store_options.write_buffer_bytes;
  options.max_write_buffer_number = 4;
  options.target_file_size_base = 2 << 20;
  options.max_bytes_for_level_base = 10 << 20;
  std::shared_ptr<rocksdb::Cache> own_cache;
  rocksdb::BlockBasedTableOptions table;
  if (store_options.block_cache != nullptr) {
    table.block_cache = store_options.block_cache;
  } else {
    own_cache = rocksdb::NewLRUCache(store_options.own_cache_bytes, /*num_shard_bits=*/0);
    table.block_cache = own_cache;
  }
  // Index and filter blocks in the cache too, so the cache bounds what reading tables takes.
  table.cache_index_and_filter_blocks = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.info_log = NewGlogRocksDbLogger("consensus store " + dir);
  rocksdb::DB* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, dir, &raw), "open", dir));
  std::unique_ptr<RocksDbConsensusStore> store(
      new RocksDbConsensusStore(std::unique_ptr<rocksdb::DB>(raw), std::move(own_cache), dir));
  RETURN_IF_ERROR(store->Recover());
  return store;
}

RocksDbConsensusStore::RocksDbConsensusStore(std::unique_ptr<rocksdb::DB> db,
                                             std::shared_ptr<rocksdb::Cache> own_cache,
                                             std::string dir)
    : own_cache_(std::move(own_cache)), db_(std::move(db)), dir_(std::move(dir)) {}

ConsensusStoreMemory RocksDbConsensusStore::Memory() const {
  ConsensusStoreMemory m;
  m.memtable_bytes = RocksDbIntProperty(*db_, rocksdb::DB::Properties::kSizeAllMemTables);
  m.table_reader_bytes =
      RocksDbIntProperty(*db_, rocksdb::DB::Properties::kEstimateTableReadersMem);
  m.own_cache_bytes = own_cache_ != nullptr ? own_cache_->GetUsage() : 0;
  return m;
}

RocksDbConsensusStore::~RocksDbConsensusStore() = default;

absl::Status RocksDbConsensusStore::Recover() {
  absl::MutexLock lock(&mu_);
  StableCheckpointRecord record;
  bool found = false;
  RETURN_IF_ERROR(ReadProto(db_.get(), kCheckpointKey, dir_, &record, &found));
  stable_seq_ = record.seq();
  // Keys sort by seq first, so the highest counter may sit anywhere: scan the (bounded) log.
  return ForEachLogEntry(db_.get(), dir_,
                         [this](const std::pair<uint64_t, uint64_t>& parts, const rocksdb::Slice&,
                                const rocksdb::Slice&) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                           next_append_ = std::max(next_append_, parts.second + 1);
                           return absl::OkStatus();
                         });
}

absl::Status RocksDbConsensusStore::PutView(const PersistedView& view) {
  absl::MutexLock lock(&mu_);
  rocksdb::WriteBatch batch;
  RETURN_IF_ERROR(FromRocks(batch.Put(kViewKey, view.SerializeAsString()), "batch view", dir_));
  return WriteSynced(db_.get(), &batch, absl::StrCat("put view ", view.view()), dir_);
}

absl::Status RocksDbConsensusStore::PutStableCheckpoint(const StableCheckpointRecord& record) {
  absl::MutexLock lock(&mu_);
  rocksdb::WriteBatch batch;
  RETURN_IF_ERROR(
      FromRocks(batch.Put(kCheckpointKey, record.SerializeAsString()), "batch checkpoint", dir_));
  const std::string begin(1, kLogPrefix);
  const std::string end = record.seq() == std::numeric_limits<uint64_t>::max()
                              ? std::string(kLogEnd)
                              : LogKey(record.seq() + 1, 0);
  RETURN_IF_ERROR(FromRocks(batch.DeleteRange(begin, end), "batch log gc", dir_));
  RETURN_IF_ERROR(
      WriteSynced(db_.get(), &batch, absl::StrCat("put stable checkpoint ", record.seq()), dir_));
  stable_seq_ = record.seq();
  return absl::OkStatus();
}

absl::Status RocksDbConsensusStore::AppendLog(const std::vector<ConsensusMessage>& messages) {
  absl::MutexLock lock(&mu_);
  rocksdb::WriteBatch batch;
  for (const ConsensusMessage& m : messages) {
    const uint64_t seq = MessageSeq(m);
    if (seq <= stable_seq_) continue;
    // Counters are consumed even if the write fails: a key that might have reached disk is
    // never reused for a different message.
    RETURN_IF_ERROR(FromRocks(batch.Put(LogKey(seq, next_append_++), m.SerializeAsString()),
                              "batch log", dir_));
  }
  if (batch.Count() == 0) return absl::OkStatus();
  return WriteSynced(db_.get(), &batch, "append log", dir_);
}

absl::StatusOr<PersistedConsensus> RocksDbConsensusStore::Load() const {
  absl::MutexLock lock(&mu_);  // no write interleaves, so the three reads are one state
  PersistedConsensus out;
  PersistedView view;
  bool found = false;
  RETURN_IF_ERROR(ReadProto(db_.get(), kViewKey, dir_, &view, &found));
  if (found) *out.mutable_view() = std::move(view);
  StableCheckpointRecord record;
  RETURN_IF_ERROR(ReadProto(db_.get(), kCheckpointKey, dir_, &record, &found));
  if (found) *out.mutable_stable_checkpoint() = std::move(record);
  RETURN_IF_ERROR(ForEachLogEntry(
      db_.get(), dir_,
      [&](const std::pair<uint64_t, uint64_t>& parts, const rocksdb::Slice& key,
          const rocksdb::Slice& value) -> absl::Status {
        ConsensusMessage* m = out.add_log();
        if (!m->ParseFromArray(value.data(), static_cast<int>(value.size())) ||
            MessageSeq(*m) != parts.first) {
          return absl::DataLossError(
              absl::StrCat("consensus store ", dir_, ": corrupt value under key ", KeyName(key)));
        }
        return absl::OkStatus();
      }));
  return out;
}

}  // namespace partitions
