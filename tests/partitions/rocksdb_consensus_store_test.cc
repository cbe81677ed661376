// Tests for RocksDbConsensusStore: the FakeConsensusStore's semantics, kept across closing
// and re-opening the database (round trip, checkpoint GC, log order, skipped stale appends),
// error mapping (unusable dir, corrupt values), and a PbftReplica restarted from it restoring
// the same state as one restarted from the in-memory store; what it holds in memory (its write
// buffer bounding its memtables, a block cache shared among stores).
#include "partitions/rocksdb_consensus_store.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "partitions/pbft_replica.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::node::consensus::PersistedConsensus;
using ::node::consensus::PersistedView;
using ::node::consensus::StableCheckpointRecord;
using testing::MakeCheckpoint;
using testing::MakeCommit;
using testing::MakePrepare;
using testing::MakePrePrepare;
using testing::Sent;
using testing::Tx;

class RocksDbConsensusStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cstore_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/partition/consensus";  // parents are created by Open
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<RocksDbConsensusStore> OpenStore() {
    auto store = RocksDbConsensusStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  PersistedConsensus LoadOk(const ConsensusStore& store) {
    auto loaded = store.Load();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *loaded : PersistedConsensus();
  }

  std::string root_;
  std::string dir_;
};

std::vector<uint64_t> Seqs(const PersistedConsensus& p) {
  std::vector<uint64_t> out;
  for (const auto& m : p.log()) out.push_back(MessageSeq(m));
  return out;
}

StableCheckpointRecord Checkpoint(uint64_t seq) {
  StableCheckpointRecord r;
  r.set_seq(seq);
  const std::string chain = Tx(static_cast<int>(seq));
  r.set_state_digest(testing::CkptDigest(chain));
  for (uint32_t s : {1u, 2u, 3u}) *r.add_proof() = MakeCheckpoint(seq, chain, s);
  return r;
}

TEST_F(RocksDbConsensusStoreTest, FreshStoreLoadsDefault) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  tests::FakeConsensusStore memory;
  EXPECT_TRUE(MessageDifferencer::Equals(LoadOk(*store), LoadOk(memory)));
}

TEST_F(RocksDbConsensusStoreTest, RoundTripAcrossReopenMatchesInMemory) {
  tests::FakeConsensusStore memory;
  PersistedView view;
  view.set_view(3);
  view.set_installed(false);
  ConsensusMessage vc;
  vc.mutable_view_change()->set_new_view(3);
  *view.mutable_own_view_change() = tests::SignedAs(1, vc);
  const std::vector<ConsensusMessage> first = {MakePrePrepare(2, 3, {Tx(1)}, 2),
                                               MakePrepare(2, 3, BatchDigest({Tx(1)}), 1)};
  const std::vector<ConsensusMessage> second = {MakeCommit(2, 4, BatchDigest({Tx(2)}), 1)};
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (ConsensusStore* s : std::vector<ConsensusStore*>{store.get(), &memory}) {
      ASSERT_TRUE(s->AppendLog(first).ok());
      ASSERT_TRUE(s->PutStableCheckpoint(Checkpoint(2)).ok());
      ASSERT_TRUE(s->PutView(view).ok());
      ASSERT_TRUE(s->AppendLog(second).ok());
    }
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const PersistedConsensus loaded = LoadOk(*store);
  EXPECT_TRUE(MessageDifferencer::Equals(loaded, LoadOk(memory))) << loaded.DebugString();
  EXPECT_EQ(loaded.view().view(), 3u);
  EXPECT_EQ(loaded.stable_checkpoint().proof_size(), 3);
  EXPECT_EQ(Seqs(loaded), (std::vector<uint64_t>{3, 3, 4}));
}

TEST_F(RocksDbConsensusStoreTest, CheckpointGcSurvivesReopenAndSkipsStaleAppends) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    std::vector<ConsensusMessage> log;
    for (uint64_t seq = 1; seq <= 6; ++seq) {
      log.push_back(MakePrepare(0, seq, BatchDigest({Tx(1)}), 1));
      log.push_back(MakeCommit(0, seq, BatchDigest({Tx(1)}), 1));
    }
    ASSERT_TRUE(store->AppendLog(log).ok());
    ASSERT_TRUE(store->PutStableCheckpoint(Checkpoint(4)).ok());
    EXPECT_EQ(Seqs(LoadOk(*store)), (std::vector<uint64_t>{5, 5, 6, 6}));
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Seqs(LoadOk(*store)), (std::vector<uint64_t>{5, 5, 6, 6}));
  EXPECT_EQ(LoadOk(*store).stable_checkpoint().seq(), 4u);
  // The recovered stable seq still filters appends at or below it, as in memory.
  ASSERT_TRUE(store->AppendLog({MakeCommit(0, 4, "d", 1), MakeCommit(0, 7, "d", 1)}).ok());
  EXPECT_EQ(Seqs(LoadOk(*store)), (std::vector<uint64_t>{5, 5, 6, 6, 7}));
  // A later checkpoint drops everything up to and including its seq.
  ASSERT_TRUE(store->PutStableCheckpoint(Checkpoint(6)).ok());
  EXPECT_EQ(Seqs(LoadOk(*store)), (std::vector<uint64_t>{7}));
}

// Within one seq the order is append order (what Restore relies on: later replaces earlier),
// also across a reopen where the append counter must resume above every stored key.
TEST_F(RocksDbConsensusStoreTest, LoadOrdersBySeqThenAppendOrder) {
  const ConsensusMessage a = MakePrepare(0, 5, "a", 1);
  const ConsensusMessage b = MakePrepare(0, 3, "b", 1);
  const ConsensusMessage c = MakePrepare(0, 5, "c", 1);
  const ConsensusMessage d = MakePrepare(0, 3, "d", 1);
  const ConsensusMessage e = MakePrepare(0, 3, "e", 1);
  tests::FakeConsensusStore memory;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AppendLog({a, b}).ok());
    ASSERT_TRUE(store->AppendLog({c}).ok());
    ASSERT_TRUE(memory.AppendLog({a, b}).ok());
    ASSERT_TRUE(memory.AppendLog({c}).ok());
  }
  // The highest counter (c's) is not under the last key (a, c sort after b): reopen must scan.
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->AppendLog({d, e}).ok());
  ASSERT_TRUE(memory.AppendLog({d, e}).ok());
  std::vector<std::string> got;
  const PersistedConsensus loaded = LoadOk(*store);
  for (const auto& m : loaded.log()) got.push_back(m.prepare().digest());
  EXPECT_EQ(got, (std::vector<std::string>{"b", "d", "e", "a", "c"}));
  // Same per-seq order as the in-memory store (which keeps global append order).
  std::vector<std::string> mem_seq3;
  const PersistedConsensus in_memory = LoadOk(memory);
  for (const auto& m : in_memory.log()) {
    if (MessageSeq(m) == 3) mem_seq3.push_back(m.prepare().digest());
  }
  EXPECT_EQ(mem_seq3, (std::vector<std::string>{"b", "d", "e"}));
}

TEST_F(RocksDbConsensusStoreTest, OpenFailsOnUnusablePathAndWhileLocked) {
  const std::string file = root_ + "/not_a_dir";
  std::ofstream(file) << "x";
  auto on_file = RocksDbConsensusStore::Open(file);
  ASSERT_FALSE(on_file.ok());
  EXPECT_EQ(on_file.status().code(), absl::StatusCode::kUnavailable) << on_file.status();
  EXPECT_FALSE(RocksDbConsensusStore::Open(file + "/consensus").ok());

  auto held = OpenStore();
  ASSERT_NE(held, nullptr);
  EXPECT_FALSE(RocksDbConsensusStore::Open(dir_).ok());  // RocksDB's LOCK file
}

TEST_F(RocksDbConsensusStoreTest, CorruptValuesAreDataLossNamingTheKey) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AppendLog({MakeCommit(0, 9, "d", 1)}).ok());
  }
  auto write_raw = [&](const std::string& key, const std::string& value) {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
  };
  // A log value whose seq does not match its key (or does not parse) is corrupt.
  std::string log_key = "l";
  for (int i = 0; i < 8; ++i) log_key.push_back(i == 7 ? '\x09' : '\0');
  log_key.append(8, '\0');
  write_raw(log_key, MakeCommit(0, 8, "d", 1).SerializeAsString());
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto loaded = store->Load();
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(loaded.status().message().find("l/9/0"), std::string::npos) << loaded.status();
  }
  write_raw(log_key, MakeCommit(0, 9, "d", 1).SerializeAsString());
  write_raw("v", "\xff\xff\xff");
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto loaded = store->Load();
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(loaded.status().message().find("key v"), std::string::npos) << loaded.status();
  }
  // A corrupt checkpoint is found already at Open (its seq filters appends).
  write_raw("c", "\xff\xff\xff");
  auto reopened = RocksDbConsensusStore::Open(dir_);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kDataLoss);
}

// ---- A replica restarted from the store ----

// Replica 1's world; the store is passed in so the same run can use either store.
struct World {
  World() : crypto(1) {
    config.self = 1;
    config.checkpoint_interval = 2;
    config.window = 4;
    config.max_inflight = 4;
    for (int i = 1; i <= 4; ++i) pool.have.insert(Tx(i));
  }
  std::unique_ptr<PbftReplica> Start(ConsensusStore* store, PbftReplica::LedgerPosition pos,
                                     std::vector<PbftAction>* start_actions) {
    auto r = PbftReplica::Create(config, {&crypto, &pool, store, &blocks}, pos);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return nullptr;
    *start_actions = (*r)->Step(PbftStart{});
    return std::move(*r);
  }
  PbftConfig config;
  tests::FakePbftCrypto crypto;
  testing::TestPool pool;
  testing::TestBlocks blocks;
};

// Commits seqs 1-2 (stable checkpoint at 2), prepares seq 3, accepts seq 4, then times out into
// a view change to view 1.
void Drive(PbftReplica& r) {
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    const std::vector<std::string> batch = {Tx(static_cast<int>(seq))};
    const std::string d = BatchDigest(batch);
    r.Step(PbftMessage{MakePrePrepare(0, seq, batch, 0)});
    if (seq == 4) break;
    for (uint32_t from : {2u, 3u}) r.Step(PbftMessage{MakePrepare(0, seq, d, from)});
    if (seq == 3) continue;
    for (uint32_t from : {0u, 2u, 3u}) {
      testing::StepAndReport(r, PbftMessage{MakeCommit(0, seq, d, from)});
    }
  }
  for (uint32_t from : {2u, 3u}) {
    r.Step(PbftMessage{MakeCheckpoint(2, r.chain_digest(), from)});
  }
  r.Step(PbftPendingRequests{1});
  r.Step(PbftTimerFired{PbftTimer::kRequest});
}

TEST_F(RocksDbConsensusStoreTest, ReplicaRestartsToTheSameStateAsWithTheInMemoryStore) {
  World mem_world, rocks_world;
  tests::FakeConsensusStore memory;
  std::vector<PbftAction> ignored;
  PbftReplica::LedgerPosition pos;
  {
    auto before = mem_world.Start(&memory, {}, &ignored);
    ASSERT_NE(before, nullptr);
    Drive(*before);
    ASSERT_EQ(before->last_executed(), 2u);
    ASSERT_EQ(before->low_watermark(), 2u);
    ASSERT_EQ(before->view(), 1u);
    pos = {before->last_executed(), before->chain_digest(),
           testing::ModelRoot(before->chain_digest())};
  }
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    auto before = rocks_world.Start(store.get(), {}, &ignored);
    ASSERT_NE(before, nullptr);
    Drive(*before);
    ASSERT_TRUE(before->status().ok()) << before->status();
    EXPECT_EQ(pos.chain_digest, before->chain_digest());
    const std::vector<uint64_t> seqs = Seqs(LoadOk(*store));
    ASSERT_FALSE(seqs.empty());
    EXPECT_EQ(seqs.front(), 3u);  // seqs 1-2 collected at the stable checkpoint
  }                               // replica, then store, destroyed: the process "crashed"

  std::vector<PbftAction> mem_start, rocks_start;
  auto mem_after = mem_world.Start(&memory, pos, &mem_start);
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto rocks_after = rocks_world.Start(store.get(), pos, &rocks_start);
  ASSERT_NE(mem_after, nullptr);
  ASSERT_NE(rocks_after, nullptr);

  EXPECT_EQ(rocks_after->view(), 1u);
  EXPECT_EQ(rocks_after->state(), ConsensusState::kViewChange);
  EXPECT_EQ(rocks_after->view(), mem_after->view());
  EXPECT_EQ(rocks_after->state(), mem_after->state());
  EXPECT_EQ(rocks_after->low_watermark(), mem_after->low_watermark());
  EXPECT_EQ(rocks_after->last_executed(), mem_after->last_executed());
  EXPECT_EQ(rocks_after->chain_digest(), mem_after->chain_digest());
  // The re-broadcast own view change carries the same stable checkpoint and prepared seq 3.
  const auto rocks_vc = Sent(rocks_start, ConsensusMessage::kViewChange);
  const auto mem_vc = Sent(mem_start, ConsensusMessage::kViewChange);
  ASSERT_EQ(rocks_vc.size(), 1u);
  ASSERT_EQ(mem_vc.size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals(rocks_vc[0], mem_vc[0]));
  ASSERT_EQ(rocks_vc[0].view_change().prepared_size(), 1);
  EXPECT_EQ(rocks_vc[0].view_change().prepared(0).pre_prepare().pre_prepare().seq(), 3u);
  EXPECT_EQ(rocks_start.size(), mem_start.size());
}

// `n` prepares of about 1 KiB each (a digest padded out), seqs from `first`.
std::vector<ConsensusMessage> Prepares(uint64_t first, int n) {
  std::vector<ConsensusMessage> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(MakePrepare(0, first + static_cast<uint64_t>(i),
                              std::string(1000, static_cast<char>('a' + i % 26)), 1));
  }
  return out;
}

// 6 MiB of log through a store in writes of about 35 KiB: its memtables never hold more than
// four write buffers (RocksDB stops the writes while four wait for their flush), each at most
// one write and one arena block past the buffer. The control, a write buffer larger than the
// log, holds it all in memory (so the bound is the option's, not the workload's).
TEST_F(RocksDbConsensusStoreTest, TheWriteBufferBoundsTheMemtables) {
  constexpr int kBatch = 32;
  constexpr int kBatches = 192;
  // The most the memtables held, read after each write.
  auto peak_of = [](RocksDbConsensusStore& store) {
    uint64_t peak = 0;
    for (int b = 0; b < kBatches; ++b) {
      EXPECT_TRUE(store.AppendLog(Prepares(1 + kBatch * static_cast<uint64_t>(b), kBatch)).ok());
      peak = std::max(peak, store.Memory().memtable_bytes);
    }
    return peak;
  };
  auto bounded = RocksDbConsensusStore::Open(dir_);  // the default write buffer, 512 KiB
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  const uint64_t buffer = ConsensusStoreOptions::kDefaultWriteBufferBytes;
  const uint64_t peak = peak_of(**bounded);
  EXPECT_GT(peak, 0u);
  EXPECT_LE(peak, 4 * (buffer + kBatch * 1200 + buffer / 8));
  EXPECT_EQ(Seqs(LoadOk(**bounded)).size(), static_cast<size_t>(kBatch * kBatches));

  ConsensusStoreOptions large;
  large.write_buffer_bytes = 64 << 20;
  auto unbounded = RocksDbConsensusStore::Open(root_ + "/large", large);
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  EXPECT_GT(peak_of(**unbounded), uint64_t{5} << 20);
}

// Two stores given one cache both read through it (and hold entries in it at once), none of
// their own.
TEST_F(RocksDbConsensusStoreTest, StoresShareTheNodesBlockCache) {
  const std::vector<std::string> dirs = {dir_, root_ + "/other"};
  for (const std::string& dir : dirs) {  // 2 MiB of log each, flushed to tables
    auto store = RocksDbConsensusStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int b = 0; b < 64; ++b) {
      ASSERT_TRUE((*store)->AppendLog(Prepares(1 + 32 * static_cast<uint64_t>(b), 32)).ok());
    }
  }
  std::shared_ptr<rocksdb::Cache> shared = rocksdb::NewLRUCache(8 << 20, 1);
  ConsensusStoreOptions options;
  options.block_cache = shared;
  std::vector<std::unique_ptr<RocksDbConsensusStore>> open;
  size_t before = shared->GetUsage();
  for (const std::string& dir : dirs) {
    auto store = RocksDbConsensusStore::Open(dir, options);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(Seqs(LoadOk(**store)).size(), 2048u);
    EXPECT_GT(shared->GetUsage(), before) << dir;  // the first's entries still there
    EXPECT_EQ((*store)->Memory().own_cache_bytes, 0u);
    before = shared->GetUsage();
    open.push_back(*std::move(store));
  }
  EXPECT_LE(shared->GetUsage(), shared->GetCapacity());
  open.clear();
  // Without one, a store reads through a small cache of its own.
  auto own = RocksDbConsensusStore::Open(dir_);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(Seqs(LoadOk(**own)).size(), 2048u);
  EXPECT_GT((*own)->Memory().own_cache_bytes, 0u);
  EXPECT_LE((*own)->Memory().own_cache_bytes, ConsensusStoreOptions().own_cache_bytes);
}

// The store's write backpressure reads RocksDB's own figures: a reopened store has flushed what
// its WAL held into one level-0 table, and nothing stops its writes.
TEST_F(RocksDbConsensusStoreTest, ReportsItsWriteBackpressure) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->WriteStallNow().level0_files, 0u);
    ASSERT_TRUE(store->AppendLog(Prepares(1, 64)).ok());
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const RocksDbWriteStall stall = store->WriteStallNow();
  EXPECT_EQ(stall.level0_files, 1u);
  EXPECT_FALSE(stall.stopped);
  EXPECT_EQ(stall.delayed_write_rate, 0u);
}

TEST_F(RocksDbConsensusStoreTest, ATinyWriteBufferIsRefusedByName) {
  ConsensusStoreOptions options;
  options.write_buffer_bytes = 1000;
  auto store = RocksDbConsensusStore::Open(dir_, options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("write_buffer_bytes"), std::string::npos)
      << store.status();
}

}  // namespace
}  // namespace partitions
