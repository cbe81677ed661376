#include "partitions/snapshot_sync.h"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"
#include "tests/partitions/chain_test_util.h"

namespace partitions {
namespace {

using ::node::partition::PartitionMessage;
using ::node::partition::SnapshotChunk;
using ::node::partition::SnapshotManifest;

constexpr uint32_t kPartition = 3;

// A chain of `blocks` seeded blocks, plus `puts` large values written in block 1 (so the state
// spans several chunks).
absl::StatusOr<Chain> BuildChain(const std::string& dir, uint64_t blocks, int puts,
                                 const std::vector<base::PrivateKey>& keys) {
  absl::StatusOr<Chain> chain = OpenChain(dir, kPartition, chaintest::Genesis(keys, 1'000'000));
  if (!chain.ok()) return chain.status();
  std::vector<TxPtr> big;
  for (int i = 0; i < puts; ++i) {
    big.push_back(chaintest::Put(keys[0], static_cast<uint64_t>(i) + 1, "big" + std::to_string(i),
                                 std::string(40'000, static_cast<char>('a' + i % 26)), kPartition));
  }
  if (absl::Status s = chaintest::CommitTxs(*chain, big); !s.ok()) return s;
  for (uint64_t h = 2; h <= blocks; ++h) {
    if (absl::Status s =
            chaintest::CommitTxs(*chain, chaintest::SeededBlockTxs(7, h, *chain->executor, keys));
        !s.ok()) {
      return s;
    }
  }
  return chain;
}

std::map<std::string, std::string> StateAt(const Ledger& ledger, uint64_t height) {
  std::map<std::string, std::string> state;
  absl::Status s = ledger.ScanStateAt(height, "", [&](absl::string_view k, absl::string_view v) {
    state.emplace(std::string(k), std::string(v));
    return true;
  });
  EXPECT_TRUE(s.ok()) << s;
  return state;
}

SnapshotTarget TargetOf(const Ledger& ledger, uint64_t seq) {
  absl::StatusOr<node::chain::Block> block = ledger.GetBlock(seq);
  CHECK(block.ok()) << block.status();
  return {
      .seq = seq, .chain_digest = std::string(32, 'c'), .state_root = block->header().state_root()};
}

class SnapshotSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    keys_ = chaintest::Keys(4);
    // Three peers with the same chain (replicas 0..2); the joiner is replica 3.
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<Chain> chain =
          BuildChain(chaintest::FreshDir("snap_peer" + std::to_string(i)), 40, 30, keys_);
      ASSERT_TRUE(chain.ok()) << chain.status();
      peers_.push_back(std::make_unique<Chain>(*std::move(chain)));
      servers_.push_back(std::make_unique<SnapshotServer>(peers_.back()->ledger.get(), &clock_,
                                                          SnapshotServer::Options{}));
    }
    OpenJoiner();
  }

  void OpenJoiner() {
    joiner_.reset();
    absl::StatusOr<Chain> chain =
        OpenChain(joiner_dir_, kPartition, chaintest::Genesis(keys_, 1'000'000));
    ASSERT_TRUE(chain.ok()) << chain.status();
    joiner_ = std::make_unique<Chain>(*std::move(chain));
  }

  // Delivers `sends` and every answer they cause until nothing is in flight. `tamper` may change
  // a peer's answer.
  void Run(SnapshotFetcher& fetcher, std::vector<SnapshotFetcher::Send> sends,
           const std::function<void(uint32_t, PartitionMessage&)>& tamper = nullptr,
           int max_messages = 100000) {
    std::deque<SnapshotFetcher::Send> queue(sends.begin(), sends.end());
    while (!queue.empty() && max_messages-- > 0) {
      SnapshotFetcher::Send send = std::move(queue.front());
      queue.pop_front();
      ASSERT_LT(send.to, 3u);
      ASSERT_TRUE(send.msg.has_snapshot_request());
      PartitionMessage answer = servers_[send.to]->Answer(3, send.msg.snapshot_request());
      if (tamper) tamper(send.to, answer);
      std::vector<SnapshotFetcher::Send> more;
      absl::Status s =
          answer.has_snapshot_manifest()
              ? fetcher.OnManifest(send.to, answer.snapshot_manifest(), clock_.NowNanos(), &more)
              : fetcher.OnChunk(send.to, answer.snapshot_chunk(), clock_.NowNanos(), &more);
      ASSERT_TRUE(s.ok()) << s;
      for (auto& m : more) queue.push_back(std::move(m));
    }
  }

  tests::FakeClock clock_;
  std::vector<base::PrivateKey> keys_;
  std::vector<std::unique_ptr<Chain>> peers_;
  std::vector<std::unique_ptr<SnapshotServer>> servers_;
  std::string joiner_dir_ = chaintest::FreshDir("snap_joiner");
  std::unique_ptr<Chain> joiner_;
};

TEST_F(SnapshotSyncTest, ScanStateAtReadsAnOlderHeightWhileTheTipMovesOn) {
  const Ledger& ledger = *peers_[0]->ledger;
  // A fresh chain replayed to 20 in memory is the state at 20.
  absl::StatusOr<std::unique_ptr<Executor>> mem =
      Executor::FromGenesis(kPartition, chaintest::Genesis(keys_, 1'000'000));
  ASSERT_TRUE(mem.ok());
  for (uint64_t h = 1; h <= 20; ++h) {
    absl::StatusOr<node::chain::Block> block = ledger.GetBlock(h);
    ASSERT_TRUE(block.ok());
    std::vector<TxPtr> txs;
    for (const std::string& body : block->txs()) txs.push_back(chaintest::Decode(body, kPartition));
    absl::StatusOr<BlockExecution> r = (*mem)->Execute(h, txs);
    ASSERT_TRUE(r.ok());
    (*mem)->Apply(*r);
  }
  const std::map<std::string, std::string> at20 = StateAt(ledger, 20);
  EXPECT_EQ(at20, (*mem)->SnapshotForTest());
  EXPECT_NE(at20, StateAt(ledger, 40));
  EXPECT_EQ(HashState(StateMap(at20.begin(), at20.end())).Root(),
            ledger.GetBlock(20)->header().state_root());
  EXPECT_TRUE(absl::IsOutOfRange(ledger.ScanStateAt(41, "", [](auto, auto) { return true; })));
}

TEST_F(SnapshotSyncTest, ManifestsAreTheSameOnEveryReplicaAndSumToTheRoot) {
  absl::StatusOr<SnapshotManifest> a = BuildSnapshotManifest(*peers_[0]->ledger, 32);
  absl::StatusOr<SnapshotManifest> b = BuildSnapshotManifest(*peers_[1]->ledger, 32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
  EXPECT_GE(a->chunks_size(), 3);  // 30 x 40 KB of puts, cut at 512 KiB
  const SnapshotTarget target = TargetOf(*peers_[0]->ledger, 32);
  EXPECT_TRUE(ValidateSnapshotManifest(*a, target, kPartition).ok());

  SnapshotTarget other = target;
  other.state_root = peers_[0]->ledger->GetBlock(31)->header().state_root();
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateSnapshotManifest(*a, other, kPartition)));
  // Lanes moved between two chunks still sum to the root, but the chunks then do not match.
  SnapshotManifest moved = *a;
  std::string l0 = moved.chunks(0).lanes();
  std::string l1 = moved.chunks(1).lanes();
  l0[0] = static_cast<char>(l0[0] + 1);
  l1[0] = static_cast<char>(l1[0] - 1);
  moved.mutable_chunks(0)->set_lanes(l0);
  moved.mutable_chunks(1)->set_lanes(l1);
  EXPECT_TRUE(ValidateSnapshotManifest(moved, target, kPartition).ok());
  PartitionMessage chunk = servers_[0]->Answer(3, [&] {
    node::partition::SnapshotRequest r;
    r.set_seq(32);
    r.set_chunk(0);
    r.set_first_key(a->chunks(0).first_key());
    r.set_entries(a->chunks(0).entries());
    return r;
  }());
  EXPECT_TRUE(ValidateSnapshotChunk(chunk.snapshot_chunk(), *a).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateSnapshotChunk(chunk.snapshot_chunk(), moved)));
  // One changed value, a missing entry, a reordering: refused.
  SnapshotChunk bad = chunk.snapshot_chunk();
  bad.set_values(0, bad.values(0) + "x");
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateSnapshotChunk(bad, *a)));
  bad = chunk.snapshot_chunk();
  bad.mutable_keys()->RemoveLast();
  bad.mutable_values()->RemoveLast();
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateSnapshotChunk(bad, *a)));
  bad = chunk.snapshot_chunk();
  if (bad.keys_size() >= 3) {
    bad.mutable_keys()->SwapElements(1, 2);
    bad.mutable_values()->SwapElements(1, 2);
    EXPECT_TRUE(absl::IsInvalidArgument(ValidateSnapshotChunk(bad, *a)));
  }
}

TEST_F(SnapshotSyncTest, AJoinerInstallsTheAgreedStateAndExecutesOnFromIt) {
  const SnapshotTarget target = TargetOf(*peers_[0]->ledger, 32);
  SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3});
  std::vector<SnapshotFetcher::Send> sends;
  ASSERT_TRUE(fetcher.Start(target, clock_.NowNanos(), &sends).ok());
  EXPECT_EQ(sends.size(), 3u);  // the manifest, of every peer
  Run(fetcher, std::move(sends));
  ASSERT_TRUE(fetcher.complete());
  // Before the switch the joiner still reads its own state.
  EXPECT_EQ(joiner_->ledger->last_height(), 0u);
  absl::StatusOr<StateRoot> lanes = fetcher.Install({{"chain_digest", target.chain_digest}});
  ASSERT_TRUE(lanes.ok()) << lanes.status();
  joiner_->executor->Reset(*lanes);

  EXPECT_EQ(joiner_->ledger->last_height(), 32u);
  EXPECT_EQ(joiner_->ledger->last_block_hash(),
            peers_[0]->ledger->GetBlock(32).ok()
                ? BlockHash(peers_[0]->ledger->GetBlock(32)->header())
                : "");
  EXPECT_EQ(joiner_->executor->state_root(), target.state_root);
  EXPECT_EQ(StateAt(*joiner_->ledger, 32), StateAt(*peers_[0]->ledger, 32));
  EXPECT_EQ(*joiner_->ledger->GetConsensusMeta("chain_digest"), target.chain_digest);
  EXPECT_TRUE(absl::IsFailedPrecondition(joiner_->ledger->GetStateAt("x", 31).status()));
  EXPECT_EQ(joiner_->ledger->GetBlockReceipts(32)->size(),
            peers_[0]->ledger->GetBlockReceipts(32)->size());

  // Blocks 33.. replay on the joiner to the peers' exact blocks.
  for (uint64_t h = 33; h <= 40; ++h) {
    absl::StatusOr<node::chain::Block> block = peers_[0]->ledger->GetBlock(h);
    ASSERT_TRUE(block.ok());
    std::vector<TxPtr> txs;
    for (const std::string& body : block->txs()) txs.push_back(chaintest::Decode(body, kPartition));
    absl::StatusOr<BlockExecution> r = joiner_->executor->Execute(h, txs);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->state_root, block->header().state_root()) << "height " << h;
    ASSERT_TRUE(joiner_->ledger->CommitBlock(*block, r->receipts, r->delta).ok());
    joiner_->executor->Apply(*r);
  }
  EXPECT_EQ(joiner_->ledger->last_block_hash(), peers_[0]->ledger->last_block_hash());

  // The installed state survives a reopen: the stored hash matches the tip, no staging left.
  const std::string root = joiner_->executor->state_root();
  joiner_.reset();
  absl::StatusOr<Chain> reopened =
      OpenChain(joiner_dir_, kPartition, chaintest::Genesis(keys_, 1'000'000),
                {.verify_state_on_open = true});
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(reopened->executor->state_root(), root);
  EXPECT_EQ(StateAt(*reopened->ledger, 40), StateAt(*peers_[0]->ledger, 40));
}

TEST_F(SnapshotSyncTest, ACorruptedChunkIsRefusedAndFetchedFromAnotherPeer) {
  const SnapshotTarget target = TargetOf(*peers_[0]->ledger, 32);
  SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3});
  std::vector<SnapshotFetcher::Send> sends;
  ASSERT_TRUE(fetcher.Start(target, clock_.NowNanos(), &sends).ok());
  int corrupted = 0;
  // Replica 1 flips a byte in every chunk it serves.
  Run(fetcher, std::move(sends), [&](uint32_t peer, PartitionMessage& m) {
    if (peer != 1 || !m.has_snapshot_chunk() || m.snapshot_chunk().values_size() == 0) return;
    std::string* v = m.mutable_snapshot_chunk()->mutable_values(0);
    (*v)[0] = static_cast<char>((*v)[0] ^ 1);
    ++corrupted;
  });
  ASSERT_TRUE(fetcher.complete());
  EXPECT_GE(corrupted, 1);
  EXPECT_EQ(fetcher.stats().bad_chunks, static_cast<uint64_t>(corrupted));
  ASSERT_TRUE(fetcher.Install({}).ok());
  EXPECT_EQ(StateAt(*joiner_->ledger, 32), StateAt(*peers_[0]->ledger, 32));
}

TEST_F(SnapshotSyncTest, OnePeersManifestIsNotEnoughAndABadOneIsRefused) {
  const SnapshotTarget target = TargetOf(*peers_[0]->ledger, 32);
  SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3});
  std::vector<SnapshotFetcher::Send> sends;
  ASSERT_TRUE(fetcher.Start(target, clock_.NowNanos(), &sends).ok());
  // Only replica 0 answers: f+1 = 2 identical manifests are needed.
  std::vector<SnapshotFetcher::Send> to0;
  for (auto& s : sends) {
    if (s.to == 0) to0.push_back(std::move(s));
  }
  Run(fetcher, std::move(to0));
  EXPECT_EQ(fetcher.stats().chunks_total, 0u);
  // Replica 1 sends a manifest whose block claims another state: refused, still one vote.
  PartitionMessage m1 = servers_[1]->Answer(3, sends[1].msg.snapshot_request());
  m1.mutable_snapshot_manifest()->mutable_block()->mutable_header()->set_state_root(
      std::string(32, 'x'));
  std::vector<SnapshotFetcher::Send> more;
  ASSERT_TRUE(fetcher.OnManifest(1, m1.snapshot_manifest(), clock_.NowNanos(), &more).ok());
  EXPECT_EQ(fetcher.stats().bad_manifests, 1u);
  EXPECT_EQ(fetcher.stats().chunks_total, 0u);
  // The retry asks replicas 1 and 2 again; replica 2's answer makes two.
  clock_.Advance(absl::Seconds(3));
  std::vector<SnapshotFetcher::Send> retries;
  fetcher.Tick(clock_.NowNanos(), &retries);
  std::vector<SnapshotFetcher::Send> to2;
  for (auto& s : retries) {
    if (s.to == 2) to2.push_back(std::move(s));
  }
  ASSERT_EQ(to2.size(), 1u);
  Run(fetcher, std::move(to2));
  EXPECT_TRUE(fetcher.complete());
}

TEST_F(SnapshotSyncTest, AnInterruptedFetchResumesWithTheChunksItStaged) {
  const SnapshotTarget target = TargetOf(*peers_[0]->ledger, 32);
  uint64_t total = 0;
  {
    SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3, .max_in_flight = 1});
    std::vector<SnapshotFetcher::Send> sends;
    ASSERT_TRUE(fetcher.Start(target, clock_.NowNanos(), &sends).ok());
    // Manifests, then two chunks, then the "crash".
    Run(fetcher, std::move(sends), nullptr, /*max_messages=*/5);
    EXPECT_EQ(fetcher.stats().chunks_done, 2u);
    total = fetcher.stats().chunks_total;
    ASSERT_GT(total, 2u);
  }
  OpenJoiner();  // a restart
  SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3});
  std::vector<SnapshotFetcher::Send> sends;
  ASSERT_TRUE(fetcher.Start(target, clock_.NowNanos(), &sends).ok());
  EXPECT_EQ(fetcher.stats().chunks_resumed, 2u);
  for (const auto& s : sends) EXPECT_FALSE(s.msg.snapshot_request().manifest());
  Run(fetcher, std::move(sends));
  ASSERT_TRUE(fetcher.complete());
  ASSERT_TRUE(fetcher.Install({}).ok());
  EXPECT_EQ(StateAt(*joiner_->ledger, 32), StateAt(*peers_[0]->ledger, 32));
}

TEST_F(SnapshotSyncTest, AnotherTargetDropsWhatWasStagedForTheFirst) {
  auto staged_chunks = [&] {
    int n = 0;
    EXPECT_TRUE(joiner_->ledger
                    ->ScanConsensusMeta(absl::StrCat(kSnapshotMetaPrefix, "chunk/"),
                                        [&](absl::string_view, absl::string_view) { ++n; })
                    .ok());
    return n;
  };
  {
    SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3, .max_in_flight = 1});
    std::vector<SnapshotFetcher::Send> sends;
    ASSERT_TRUE(fetcher.Start(TargetOf(*peers_[0]->ledger, 32), clock_.NowNanos(), &sends).ok());
    Run(fetcher, std::move(sends), nullptr, /*max_messages=*/5);
  }
  EXPECT_EQ(staged_chunks(), 2);
  SnapshotFetcher fetcher(joiner_->ledger.get(), {.n = 4, .self = 3});
  std::vector<SnapshotFetcher::Send> sends;
  ASSERT_TRUE(fetcher.Start(TargetOf(*peers_[0]->ledger, 36), clock_.NowNanos(), &sends).ok());
  EXPECT_EQ(fetcher.stats().chunks_resumed, 0u);
  EXPECT_EQ(staged_chunks(), 0) << "the first target's chunks are gone";
  Run(fetcher, std::move(sends));
  ASSERT_TRUE(fetcher.complete());
  ASSERT_TRUE(fetcher.Install({}).ok());
  EXPECT_EQ(StateAt(*joiner_->ledger, 36), StateAt(*peers_[0]->ledger, 36));
}

TEST_F(SnapshotSyncTest, TheServerRefusesWhatItCannotServeAndPastItsBudget) {
  node::partition::SnapshotRequest r;
  r.set_seq(99);
  r.set_manifest(true);
  EXPECT_NE(servers_[0]->Answer(3, r).snapshot_manifest().refused(), "");
  r.set_manifest(false);
  r.set_entries(kSnapshotChunkEntries + 1);
  EXPECT_NE(servers_[0]->Answer(3, r).snapshot_chunk().refused(), "");

  SnapshotServer slow(peers_[0]->ledger.get(), &clock_, {.serve_bytes_per_second = 100'000});
  r.set_seq(32);
  r.set_manifest(true);
  EXPECT_EQ(slow.Answer(3, r).snapshot_manifest().refused(), "");  // ~1.2 MB: into debt
  r.set_seq(31);                                                   // not cached
  EXPECT_NE(slow.Answer(3, r).snapshot_manifest().refused(), "");
  r.set_manifest(false);
  r.set_entries(1);
  EXPECT_NE(slow.Answer(3, r).snapshot_chunk().refused(), "") << "chunks too";
  // Another peer has its own budget: one peer cannot starve the others.
  r.set_manifest(true);
  EXPECT_EQ(slow.Answer(1, r).snapshot_manifest().refused(), "");
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(slow.Answer(3, r).snapshot_manifest().refused(), "");
  EXPECT_EQ(slow.stats().refused, 2u);
}

// A chunk at an old height whose range is mostly keys written after it is read (and charged)
// up to a bound, then refused rather than scanned without end.
TEST_F(SnapshotSyncTest, ScanningPastKeysWrittenLaterIsBoundedAndCounted) {
  uint64_t scanned = 0;
  int returned = 0;
  // At height 0 only genesis accounts exist: every "k..." key was written later.
  ASSERT_TRUE(peers_[0]
                  ->ledger
                  ->ScanStateAt(
                      0, "k",
                      [&](absl::string_view, absl::string_view) {
                        ++returned;
                        return true;
                      },
                      /*max_scanned=*/100'000, &scanned)
                  .ok());
  EXPECT_EQ(returned, 0);
  EXPECT_GE(scanned, 100'000u) << "skipped keys count";
  EXPECT_LT(scanned, 200'000u) << "and the scan stops near the bound";
}

}  // namespace
}  // namespace partitions
