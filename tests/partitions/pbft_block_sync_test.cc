// Unit tests for BlockSync: recovery target, round-robin requests, accepting verified batches
// (horizon, stop at the first invalid one), handing them to execution, serving requests.
#include "partitions/pbft_block_sync.h"

#include <set>

#include "gtest/gtest.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::tests::SignedAs;

using ::node::consensus::CommittedBatch;
using ::node::consensus::SyncRequest;
using ::node::consensus::SyncResponse;
using testing::MakeCommit;
using testing::TestBlocks;
using testing::Tx;

// A batch at `seq` committed in `view` with a certificate from replicas 0, 2 and 3.
CommittedBatch Batch(uint64_t seq, uint64_t view = 0) {
  CommittedBatch b;
  b.set_seq(seq);
  const std::vector<std::string> txs = {Tx(static_cast<int>(seq))};
  for (const std::string& h : txs) b.add_tx_hashes(h);
  for (uint32_t r : {0u, 2u, 3u}) {
    *b.add_commit_certificate() = MakeCommit(view, seq, BatchDigest(txs), r);
  }
  return b;
}

SyncResponse Response(const std::vector<CommittedBatch>& batches, uint64_t last_executed = 0) {
  SyncResponse resp;
  resp.set_last_executed(last_executed);
  for (const CommittedBatch& b : batches) *resp.add_batches() = b;
  return resp;
}

class BlockSyncTest : public ::testing::Test {
 protected:
  BlockSyncTest() : crypto_(1), validator_(config_, &crypto_) {}

  // n = 4, self = 1, window 8, chunk 4.
  PbftConfig config_{.n = 4, .self = 1, .checkpoint_interval = 4, .window = 8, .sync_chunk = 4};
  ::tests::FakePbftCrypto crypto_;
  PbftValidator validator_;
};

TEST_F(BlockSyncTest, RecoversUpToTheHighestTarget) {
  BlockSync sync(config_, 0);
  EXPECT_FALSE(sync.recovering());
  sync.RecoverTo(8);
  sync.RecoverTo(4);  // never lowers the target
  EXPECT_TRUE(sync.recovering());
  sync.NoteExecuted(7);
  EXPECT_TRUE(sync.recovering());
  sync.NoteExecuted(8);
  EXPECT_FALSE(sync.recovering());
}

TEST_F(BlockSyncTest, RequestsGoRoundRobinToTheOthers) {
  BlockSync sync(config_, 0);
  EXPECT_FALSE(sync.in_flight());
  std::vector<uint32_t> peers;
  for (int i = 0; i < 4; ++i) {
    const auto req = sync.NextRequest(10, 8, {});
    ASSERT_TRUE(req.has_value());
    peers.push_back(req->peer);
    EXPECT_EQ(req->msg.sync_request().from_seq(), 11u);
    EXPECT_EQ(req->msg.sync_request().to_seq(), 14u);
    EXPECT_EQ(req->msg.sync_request().known_stable_seq(), 8u);
    EXPECT_TRUE(req->msg.signature().empty());
  }
  EXPECT_EQ(peers, (std::vector<uint32_t>{2, 3, 0, 2}));
  EXPECT_TRUE(sync.in_flight());

  BlockSync alone(PbftConfig{.n = 1, .self = 0}, 0);
  EXPECT_FALSE(alone.NextRequest(0, 0, {}).has_value());
  EXPECT_FALSE(alone.in_flight());
}

// Where requests go: to the peer that served the last request well (asked, in time, from the
// seq asked for, a whole chunk or all it has), once; else to peers that sent beyond the asker's
// window if at least f+1 did (f could be faulty and never answer), in turn; else round robin. A
// peer that is down costs a retransmit period; a faulty one must not capture the requests.
TEST_F(BlockSyncTest, RequestsGoToAPeerThatServedWellThenToPeersKnownAhead) {
  BlockSync sync(config_, 0);  // n = 4, self = 1, f = 1, chunks of 4
  auto peers = [&sync](const std::set<uint32_t>& ahead) {
    std::vector<uint32_t> out;
    for (int i = 0; i < 3; ++i) out.push_back(sync.NextRequest(0, 0, ahead)->peer);
    return out;
  };
  EXPECT_EQ(peers({3}), (std::vector<uint32_t>{2, 3, 0})) << "f of them: plain round robin";
  EXPECT_EQ(peers({1, 3}), (std::vector<uint32_t>{2, 3, 0})) << "self does not count";
  EXPECT_EQ(peers({0, 3}), (std::vector<uint32_t>{3, 0, 3}));
  // Peer 3, asked last, answers in time with seq 1, all it has: asked next, once.
  EXPECT_FALSE(sync.Accept(Response({Batch(1)}, /*last_executed=*/1), 3, 0, validator_));
  EXPECT_EQ(peers({}), (std::vector<uint32_t>{3, 0, 2}));
  // Held batches are not asked for again.
  EXPECT_EQ(sync.HeldThrough(0), 1u);
  EXPECT_EQ(sync.NextRequest(0, 0, {})->msg.sync_request().from_seq(), 2u);  // to 3
  // Not served well: an answer after a retransmit tick; one short of what the peer has; an
  // answer from a peer not asked.
  sync.TickStalled(0);
  EXPECT_FALSE(sync.Accept(Response({Batch(2)}, 2), 3, 0, validator_));
  EXPECT_EQ(peers({}), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_FALSE(sync.Accept(Response({Batch(3)}, 9), 3, 0, validator_));
  EXPECT_EQ(peers({}), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_FALSE(sync.Accept(Response({Batch(4)}, 4), 0, 0, validator_));
  EXPECT_EQ(peers({}), (std::vector<uint32_t>{0, 2, 3}));
  // Peer 3, asked, claims to have executed only the one batch it sends, while peers said 9
  // before: not all there is, not preferred. A second answer to one request does not count.
  EXPECT_FALSE(sync.Accept(Response({Batch(5)}, 5), 3, 0, validator_));
  EXPECT_EQ(peers({}), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_FALSE(sync.Accept(Response({}, 9), 3, 0, validator_));
  EXPECT_FALSE(
      sync.Accept(Response({Batch(6), Batch(7), Batch(8), Batch(9)}, 9), 3, 0, validator_));
  // Batches held up to the horizon (max(window, sync_chunk) = 8 above the last executed): no
  // answer could bring anything kept, so no request.
  EXPECT_EQ(sync.HeldThrough(0), 8u);
  EXPECT_FALSE(sync.NextRequest(0, 0, {}).has_value());
  // 1-4 executed: the next request goes round robin (the second answer did not count), from 9.
  const auto next = sync.NextRequest(4, 0, {});
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->peer, 0u);
  EXPECT_EQ(next->msg.sync_request().from_seq(), 9u);
}

TEST_F(BlockSyncTest, WantsARequestWhenRecoveringIdle) {
  BlockSync sync(config_, 0);
  EXPECT_FALSE(sync.WantsRequest());
  sync.RecoverTo(4);
  EXPECT_TRUE(sync.WantsRequest());
  sync.NextRequest(0, 0, {});
  EXPECT_FALSE(sync.WantsRequest());  // in flight
  EXPECT_FALSE(sync.Accept(Response({Batch(1)}), 2, 0, validator_));
  EXPECT_FALSE(sync.in_flight());
  EXPECT_FALSE(sync.WantsRequest());  // a batch waits for execution
  sync.DropThrough(1);
  EXPECT_TRUE(sync.WantsRequest());
}

TEST_F(BlockSyncTest, AcceptsVerifiedBatchesWithinTheHorizon) {
  BlockSync sync(config_, 0);
  // Horizon: last executed 2 + max(window 8, chunk 4) = 10.
  EXPECT_FALSE(sync.Accept(Response({Batch(2), Batch(3), Batch(4), Batch(10), Batch(11)}), 2, 2,
                           validator_));
  EXPECT_FALSE(sync.Batch(2).has_value());  // executed already
  EXPECT_TRUE(sync.Batch(3).has_value());
  EXPECT_TRUE(sync.Batch(10).has_value());
  EXPECT_FALSE(sync.Batch(11).has_value());
  // The highest tip peers reported is remembered (what to fetch after a snapshot).
  EXPECT_EQ(sync.peer_executed(), 0u);
  sync.Accept(Response({}, 40), 2, 2, validator_);
  sync.Accept(Response({}, 30), 2, 2, validator_);
  EXPECT_EQ(sync.peer_executed(), 40u);
}

TEST_F(BlockSyncTest, StopsAtTheFirstInvalidBatch) {
  BlockSync sync(config_, 0);
  CommittedBatch forged = Batch(2);
  forged.mutable_commit_certificate()->RemoveLast();  // 2 commits of the 3 needed
  EXPECT_TRUE(sync.Accept(Response({Batch(1), forged, Batch(3)}), 2, 0, validator_));
  EXPECT_TRUE(sync.Batch(1).has_value());
  EXPECT_FALSE(sync.Batch(2).has_value());
  EXPECT_FALSE(sync.Batch(3).has_value());
}

TEST_F(BlockSyncTest, HandsBatchesToExecutionAsCommits) {
  BlockSync sync(config_, 0);
  sync.Accept(Response({Batch(1, /*view=*/3), Batch(2)}), 2, 0, validator_);
  const std::optional<PbftCommit> c = sync.Batch(1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->seq, 1u);
  EXPECT_EQ(c->view, 3u);
  EXPECT_EQ(c->tx_hashes, std::vector<std::string>{Tx(1)});
  EXPECT_EQ(c->digest, BatchDigest(c->tx_hashes));
  EXPECT_EQ(c->certificate.size(), 3u);
  EXPECT_TRUE(c->chain_digest.empty());
  sync.DropThrough(1);
  EXPECT_FALSE(sync.Batch(1).has_value());
  EXPECT_TRUE(sync.Batch(2).has_value());
}

TEST_F(BlockSyncTest, DetectsAStallBetweenTicks) {
  BlockSync sync(config_, 5);
  EXPECT_TRUE(sync.TickStalled(5));
  EXPECT_FALSE(sync.TickStalled(6));
  EXPECT_TRUE(sync.TickStalled(6));
}

TEST_F(BlockSyncTest, ServesAChunkOfTheLedger) {
  BlockSync sync(config_, 0);
  TestBlocks blocks;
  for (uint64_t s = 1; s <= 9; ++s) blocks.batches[s] = Batch(s);
  blocks.batches.erase(7);
  auto serve = [&](uint64_t from, uint64_t to, uint64_t last_executed) {
    SyncRequest req;
    req.set_from_seq(from);
    req.set_to_seq(to);
    const ConsensusMessage m = sync.Serve(req, last_executed, blocks, {});
    EXPECT_EQ(m.sync_response().last_executed(), last_executed);
    EXPECT_FALSE(m.sync_response().has_stable());
    std::vector<uint64_t> seqs;
    for (const CommittedBatch& b : m.sync_response().batches()) seqs.push_back(b.seq());
    return seqs;
  };
  EXPECT_EQ(serve(1, 100, 9), (std::vector<uint64_t>{1, 2, 3, 4}));  // at most a chunk
  EXPECT_EQ(serve(2, 3, 9), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(serve(2, 5, 3), (std::vector<uint64_t>{2, 3}));  // not above last executed
  EXPECT_EQ(serve(5, 8, 9), (std::vector<uint64_t>{5, 6}));  // stops at the gap
  EXPECT_TRUE(serve(0, 4, 9).empty());                       // malformed
  EXPECT_TRUE(serve(4, 3, 9).empty());
}

TEST_F(BlockSyncTest, AnswersCarryTheStableCheckpointWhenTheAskerKnowsAnEarlierOne) {
  BlockSync sync(config_, 0);
  TestBlocks blocks;  // pruned below 9: holds 9..12
  for (uint64_t s = 9; s <= 12; ++s) blocks.batches[s] = Batch(s);
  node::consensus::StableCheckpointRecord stable;
  stable.set_seq(8);
  stable.set_state_digest(std::string(32, 'd'));
  *stable.add_proof() = SignedAs(1, ConsensusMessage());
  auto serve = [&](uint64_t from, uint64_t known_stable) {
    SyncRequest req;
    req.set_from_seq(from);
    req.set_to_seq(from + 3);
    req.set_known_stable_seq(known_stable);
    return sync.Serve(req, /*last_executed=*/12, blocks, stable).sync_response();
  };
  // Asked for seq 3, which it executed and no longer holds: where to fetch the state instead.
  node::consensus::SyncResponse pruned = serve(3, 0);
  EXPECT_EQ(pruned.batches_size(), 0);
  ASSERT_TRUE(pruned.has_stable());
  EXPECT_EQ(pruned.stable().seq(), 8u);
  EXPECT_EQ(pruned.stable().proof_size(), 1);
  // What it holds, it serves; with the checkpoint if the asker's is earlier (it missed the
  // votes and would keep its old window), without it if the asker knows it or a later one.
  node::consensus::SyncResponse kept = serve(9, 4);
  EXPECT_EQ(kept.batches_size(), 4);
  ASSERT_TRUE(kept.has_stable());
  EXPECT_EQ(kept.stable().seq(), 8u);
  EXPECT_FALSE(serve(9, 8).has_stable());
  EXPECT_FALSE(serve(3, 8).has_stable());
  EXPECT_FALSE(serve(9, 12).has_stable());
  // Nothing stable but genesis: nothing to carry.
  EXPECT_FALSE(sync.Serve(SyncRequest(), 12, blocks, {}).sync_response().has_stable());
}

TEST_F(BlockSyncTest, AsksAndAnswersSigned) {
  ::tests::FakeConsensusStore store;
  PbftOutbox out(config_, &crypto_, &store);
  BlockSync sync(config_, 0);
  sync.Ask(2, 0, {}, out);
  TestBlocks blocks;
  blocks.batches[1] = Batch(1);
  ConsensusMessage request;
  request.mutable_sync_request()->set_from_seq(1);
  request.mutable_sync_request()->set_to_seq(4);
  request = SignedAs(3, request);
  sync.Answer(request, 1, blocks, {}, out);

  const std::vector<PbftSend> sends = testing::ActionsOf<PbftSend>(out.Take());
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[0].to, 2u);
  EXPECT_EQ(sends[0].channel, PbftChannel::kSync);
  EXPECT_EQ(sends[0].msg.sync_request().from_seq(), 3u);
  EXPECT_TRUE(crypto_.Verify(sends[0].msg));
  EXPECT_TRUE(sync.in_flight());
  EXPECT_EQ(sends[1].to, 3u);
  EXPECT_EQ(sends[1].msg.sync_response().batches_size(), 1);
  EXPECT_TRUE(crypto_.Verify(sends[1].msg));

  BlockSync alone(PbftConfig{.n = 1, .self = 0}, 0);
  alone.Ask(0, 0, {}, out);
  EXPECT_TRUE(out.Take().empty());
}

}  // namespace
}  // namespace partitions
