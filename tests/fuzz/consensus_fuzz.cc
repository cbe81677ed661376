// Fuzz target: every PBFT message handler of PbftReplica (partitions/pbft_replica.h).
//
// Replica 1 of a 4-replica partition (small checkpoint interval and window, so checkpoints,
// watermarks, view changes and block sync are all reached) is stepped with a sequence of events
// decoded from the input: structured messages from replicas 0, 2, 3 (and out-of-range 4) of every
// kind, with nested certificates built from earlier messages; replays of the replica's own
// messages as if other replicas echoed them (this is what reaches quorums); raw ConsensusMessage
// encodings; timers; batches; pool arrivals; and crash-restarts from the store.
// The crypto is permissive (any signature of another replica verifies; the replica's own must be
// genuine) because the node verifies envelopes before Step; consensus_envelope_fuzz covers that.
// Checked after every step: no crash; commits strictly in seq order, each once, with at least 2f+1
// certificate votes; sends go to other replicas; every message sent is signed by replica 1; the
// replica never halts (the in-memory store does not fail).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "partitions/pbft_certs.h"
#include "partitions/pbft_messages.h"
#include "partitions/pbft_replica.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/mocks/fake_consensus_store.h"
#include "tests/mocks/fake_pbft_crypto.h"
#include "tests/partitions/pbft_test_util.h"

namespace {

using node::consensus::CommittedBatch;
using partitions::ConsensusMessage;
using ::tests::SignedAs;

constexpr uint32_t kN = 4;
constexpr uint32_t kSelf = 1;
constexpr int kMaxOps = 300;
constexpr size_t kMaxHistory = 64;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consensus_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

class World {
 public:
  explicit World(tests::FuzzInput* in) : in_(*in) {
    config_.n = kN;
    config_.self = kSelf;
    if (in_.Bool()) {  // small: checkpoints, watermarks and sync within a few seqs
      config_.checkpoint_interval = 2;
      config_.window = 4;
      config_.max_inflight = 4;
      config_.sync_chunk = 2;
    }
    for (int i = 0; i < 4; ++i) txs_.push_back(partitions::testing::Tx(i));
    Start();
  }

  void Run() {
    for (int op = 0; op < kMaxOps && !in_.empty(); ++op) Op(in_.Byte() % 16);
  }

 private:
  void Start() {
    auto r = partitions::PbftReplica::Create(config_, {&crypto_, &pool_, &store_, &blocks_},
                                             {last_commit_, chain_digest_, root_});
    Require(r.ok(), "replica restarts from its store");
    replica_ = *std::move(r);
    Step(partitions::PbftStart{});
  }

  void Step(const partitions::PbftEvent& event) {
    std::vector<partitions::PbftExecuted> executed;
    for (partitions::PbftAction& a : replica_->Step(event)) {
      // The node's driver drops a vote PbftReplica::Redundant calls redundant before checking
      // its signature: stepped, such a vote must do nothing.
      Require(!redundant_step_ || std::holds_alternative<partitions::PbftSetTimer>(a) ||
                  std::holds_alternative<partitions::PbftCancelTimer>(a),
              "a redundant vote acts only on timers");
      if (auto* c = std::get_if<partitions::PbftCommit>(&a)) {
        Require(c->seq == last_commit_ + 1, "commits in seq order, each once");
        Require(c->certificate.size() >= config_.quorum(), "commit certificate has a quorum");
        last_commit_ = c->seq;
        chain_digest_ = c->chain_digest;
        CommittedBatch batch;
        batch.set_seq(c->seq);
        for (const std::string& h : c->tx_hashes) batch.add_tx_hashes(h);
        for (const ConsensusMessage& m : c->certificate) *batch.add_commit_certificate() = m;
        blocks_.batches[c->seq] = std::move(batch);
        digests_.push_back(c->chain_digest);
        root_ = partitions::testing::ModelRoot(c->chain_digest);
        if (c->report_state_root) executed.push_back({c->seq, root_});
      } else if (auto* s = std::get_if<partitions::PbftSend>(&a)) {
        Require(s->to < kN && s->to != kSelf, "send to another replica");
        Own(s->msg);
      } else if (auto* b = std::get_if<partitions::PbftBroadcast>(&a)) {
        Own(b->msg);
      }
    }
    // It halts only on finding itself DIVERGED: 2f+1 peers (all of them may be faulty here)
    // signed another state than its own at a checkpoint.
    Require(replica_->status().ok() || replica_->divergence().has_value(), "replica does not halt");
    Require(replica_->last_executed() == last_commit_, "last_executed follows the commits");
    for (const partitions::PbftExecuted& e : executed) Step(e);
  }

  void Own(const ConsensusMessage& m) {
    Require(m.sender() == kSelf, "own message has own sender");
    Require(crypto_.Verify(m), "own message is signed");
    Remember(m);
  }

  void Remember(const ConsensusMessage& m) {
    history_.push_back(m);
    if (history_.size() > kMaxHistory) history_.pop_front();
  }

  void Deliver(ConsensusMessage m) {
    Remember(m);
    if (replica_->Redundant(m)) {
      const partitions::ConsensusState state = replica_->state();
      const uint64_t view = replica_->view();
      redundant_step_ = true;
      Step(partitions::PbftMessage{std::move(m)});
      redundant_step_ = false;
      Require(replica_->state() == state && replica_->view() == view,
              "a redundant vote changes neither state nor view");
      return;
    }
    Step(partitions::PbftMessage{std::move(m)});
  }

  // ---- Values ----
  uint32_t Sender() {  // envelope senders: never self (the node checks sender == peer)
    const uint8_t b = in_.Byte() % 8;
    return b == 7 ? kN : std::vector<uint32_t>{0, 2, 3}[b % 3];
  }
  uint32_t AnyReplica() { return static_cast<uint32_t>(in_.Below(kN)); }
  uint64_t View() { return in_.Byte() % 16 == 15 ? in_.Uint(8) : in_.Below(4); }
  uint64_t Seq() { return in_.Byte() % 16 == 15 ? in_.Uint(8) : in_.Below(12); }
  std::vector<std::string> TxSet() {
    std::vector<std::string> out;
    const uint8_t mask = in_.Byte();
    for (int i = 0; i < 4; ++i) {
      if (mask & (1 << i)) out.push_back(txs_[i]);
    }
    if (mask & 0x80) out.push_back(in_.Blob(40));  // maybe not a hash at all
    return out;
  }
  std::string Digest(const std::vector<std::string>& txs) {
    switch (in_.Byte() % 8) {
      case 0:
        return in_.Blob(40);
      case 1:
        return partitions::BatchDigest(std::vector<std::string>{});
      default:
        return partitions::BatchDigest(txs);
    }
  }
  std::string StateDigest() {
    const uint8_t b = in_.Byte();
    if (b % 4 == 0 || digests_.empty()) return b % 8 == 0 ? in_.Blob(40) : chain_digest_;
    return digests_[in_.Below(digests_.size())];
  }
  // Up to `max` earlier messages of one body kind.
  std::vector<ConsensusMessage> Earlier(ConsensusMessage::BodyCase body, size_t max) {
    std::vector<ConsensusMessage> out;
    const size_t want = in_.Below(max + 1);
    for (auto it = history_.rbegin(); it != history_.rend() && out.size() < want; ++it) {
      if (it->body_case() == body && in_.Byte() % 4 != 0) out.push_back(*it);
    }
    return out;
  }

  // ---- Events ----
  void Op(uint8_t op) {
    ConsensusMessage m;
    switch (op) {
      case 0: {
        std::vector<std::string> txs = TxSet();
        auto* pp = m.mutable_pre_prepare();
        pp->set_view(View());
        pp->set_seq(Seq());
        for (const auto& h : txs) pp->add_tx_hashes(h);
        pp->set_digest(Digest(txs));
        const uint32_t s = Sender();
        pp->set_proposer(in_.Byte() % 8 == 0 ? AnyReplica() : s);
        return Deliver(SignedAs(s, m));
      }
      case 1:
      case 2: {
        auto* body = op == 1 ? m.mutable_prepare() : nullptr;
        auto* commit = op == 2 ? m.mutable_commit() : nullptr;
        const uint64_t view = View(), seq = Seq();
        const std::string digest = Digest(TxSet());
        if (body) {
          body->set_view(view);
          body->set_seq(seq);
          body->set_digest(digest);
        }
        if (commit) {
          commit->set_view(view);
          commit->set_seq(seq);
          commit->set_digest(digest);
        }
        return Deliver(SignedAs(Sender(), m));
      }
      case 3: {
        // Mostly well formed (the model root of a chain digest, or another root), sometimes
        // with a digest that does not bind them.
        const uint64_t seq = Seq();
        const std::string chain = StateDigest();
        const uint8_t b = in_.Byte();
        m = partitions::CheckpointMessage(
            seq, chain, b % 4 == 0 ? in_.Blob(32) : partitions::testing::ModelRoot(chain));
        if (b % 8 == 1) m.mutable_checkpoint()->set_state_digest(in_.Blob(32));
        return Deliver(SignedAs(Sender(), m));
      }
      case 4: {
        auto* vc = m.mutable_view_change();
        vc->set_new_view(View());
        vc->set_stable_seq(Seq());
        vc->set_stable_digest(StateDigest());
        for (auto& c : Earlier(ConsensusMessage::kCheckpoint, 3)) *vc->add_checkpoint_proof() = c;
        if (vc->checkpoint_proof_size() > 0 && in_.Byte() % 2 == 0) {  // the proof's own digest
          vc->set_stable_seq(vc->checkpoint_proof(0).checkpoint().seq());
          vc->set_stable_digest(vc->checkpoint_proof(0).checkpoint().state_digest());
        }
        for (auto& pp : Earlier(ConsensusMessage::kPrePrepare, 2)) {
          auto* cert = vc->add_prepared();
          *cert->mutable_pre_prepare() = pp;
          for (auto& p : Earlier(ConsensusMessage::kPrepare, 3)) *cert->add_prepares() = p;
        }
        return Deliver(SignedAs(Sender(), m));
      }
      case 5: {
        auto* nv = m.mutable_new_view();
        nv->set_view(View());
        for (auto& v : Earlier(ConsensusMessage::kViewChange, 4)) *nv->add_view_changes() = v;
        for (auto& pp : Earlier(ConsensusMessage::kPrePrepare, 3)) *nv->add_pre_prepares() = pp;
        return Deliver(SignedAs(Sender(), m));
      }
      case 6:
        m.mutable_new_view_request()->set_min_view(View());
        return Deliver(SignedAs(Sender(), m));
      case 7:
        m.mutable_sync_request()->set_from_seq(Seq());
        m.mutable_sync_request()->set_to_seq(Seq());
        m.mutable_sync_request()->set_known_stable_seq(Seq());
        return Deliver(SignedAs(Sender(), m));
      case 8: {  // sync response: batches we committed, or made up from earlier commits
        auto* sr = m.mutable_sync_response();
        const size_t count = in_.Below(4);
        for (size_t i = 0; i < count; ++i) {
          CommittedBatch* b = sr->add_batches();
          auto it = blocks_.batches.find(Seq());
          if (it != blocks_.batches.end() && in_.Bool()) {
            *b = it->second;
          } else {
            b->set_seq(Seq());
            for (const auto& h : TxSet()) b->add_tx_hashes(h);
            for (auto& c : Earlier(ConsensusMessage::kCommit, 4)) *b->add_commit_certificate() = c;
          }
        }
        sr->set_last_executed(Seq());
        if (in_.Bool()) {  // a pruned peer's stable checkpoint: earlier votes as its "proof"
          auto* stable = sr->mutable_stable();
          std::vector<ConsensusMessage> votes = Earlier(ConsensusMessage::kCheckpoint, 4);
          stable->set_seq(votes.empty() || in_.Bool() ? Seq() : votes[0].checkpoint().seq());
          stable->set_state_digest(votes.empty() ? std::string(32, 'x')
                                                 : votes[0].checkpoint().state_digest());
          for (auto& v : votes) *stable->add_proof() = v;
        }
        return Deliver(SignedAs(Sender(), m));
      }
      case 9:
        return Step(partitions::PbftTimerFired{static_cast<partitions::PbftTimer>(in_.Below(3))});
      case 10:
        if (replica_->CanPropose()) Step(partitions::PbftBatchReady{TxSet()});
        return;
      case 11:
        return Step(partitions::PbftPendingRequests{in_.Below(100)});
      case 12: {
        std::vector<std::string> arrived = TxSet();
        for (const auto& h : arrived) pool_.have.insert(h);
        return Step(partitions::PbftTxsAvailable{std::move(arrived)});
      }
      case 13:  // raw encoding from a peer
        if (!m.ParseFromString(in_.Blob(512))) return;
        if (m.sender() == kSelf) return;  // the node drops these before Step
        return Deliver(std::move(m));
      case 14:
      case 15: {  // another replica echoes one of ours (or replays an earlier message)
        if (history_.empty()) return;
        m = history_[in_.Below(history_.size())];
        if (op == 15 && in_.Byte() % 8 == 0) {  // crash and restart from the store
          replica_.reset();
          return Start();
        }
        const uint32_t s = Sender();
        if (m.has_pre_prepare()) m.mutable_pre_prepare()->set_proposer(s);
        return Deliver(SignedAs(s, m));
      }
    }
  }

  tests::FuzzInput& in_;
  partitions::PbftConfig config_;
  // Others' signatures always verify; the replica's own must be real (nobody can forge them).
  tests::FakePbftCrypto crypto_{kSelf, tests::FakePbftCrypto::Trust::kOthers, kN};
  partitions::testing::TestPool pool_;
  tests::FakeConsensusStore store_;
  partitions::testing::TestBlocks blocks_;
  std::unique_ptr<partitions::PbftReplica> replica_;
  bool redundant_step_ = false;  // Deliver is stepping a vote PbftReplica::Redundant named
  std::vector<std::string> txs_;
  std::deque<ConsensusMessage> history_;
  std::vector<std::string> digests_;
  uint64_t last_commit_ = 0;
  std::string chain_digest_;
  std::string root_;  // the model state root after last_commit_ (ModelRoot of its chain digest)
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  tests::FuzzInput in(data, size);
  World world(&in);
  world.Run();
  return 0;
}
