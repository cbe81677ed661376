#include "partitions/consensus_driver.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "p2p/network.h"
#include "partitions/pbft_certs.h"

namespace partitions {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// A fetch asks for at most this many txs; an answer is cut into messages of about this size.
constexpr size_t kMaxFetch = 10'000;
constexpr size_t kFetchReplyBytes = 1 << 20;
constexpr int64_t kExpireEveryNanos = 1'000'000'000;
// How often on_tick_locked runs (the adaptive stage's ticket sweep).
constexpr int64_t kHookEveryNanos = 100'000'000;
// Pipelining: proposals cut in one tick at most.
constexpr int kMaxCutsPerTick = 8;
// A backup re-forwards at most this much per round (ReforwardLocked).
constexpr size_t kMaxReforwardTxs = 1024;
constexpr size_t kMaxReforwardBytes = 1 << 20;
// A ready count that selected nothing (a race with commits) is looked at again after this.
constexpr int64_t kEmptyCutBackoffNanos = 1'000'000;
// A snapshot fetch without progress this long (and no newer one wanted) gives way to block sync.
constexpr int64_t kAbandonSnapshotNanos = 30'000'000'000;

p2p::Channel ChannelOf(PbftChannel c) {
  return c == PbftChannel::kSync ? p2p::Channel::SYNC : p2p::Channel::CONSENSUS;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConsensusDriver>> ConsensusDriver::Create(
    Deps deps, const PbftConfig& config, const PbftReplica::LedgerPosition& position) {
  if (deps.clock == nullptr || deps.crypto == nullptr || deps.store == nullptr ||
      deps.pool == nullptr || deps.tracker == nullptr || deps.forwarder == nullptr ||
      deps.sender == nullptr || deps.pipeline == nullptr || deps.feed == nullptr ||
      deps.ledger == nullptr || deps.batch_policy == nullptr || !deps.request_tick ||
      !deps.wake_by) {
    return absl::InvalidArgumentError("consensus driver: a dependency is missing");
  }
  auto driver = std::unique_ptr<ConsensusDriver>(new ConsensusDriver(std::move(deps)));
  absl::MutexLock lock(&driver->mu_);
  const Deps& d = driver->deps_;
  absl::StatusOr<std::unique_ptr<PbftReplica>> replica = PbftReplica::Create(
      config, {.crypto = d.crypto, .txs = d.pipeline, .store = d.store, .blocks = d.pipeline},
      position);
  if (!replica.ok()) return replica.status();
  driver->replica_ = *std::move(replica);
  if (config.snapshot_min_gap > 0 && d.executor == nullptr) {
    return absl::InvalidArgumentError("consensus driver: snapshot sync needs the executor");
  }
  driver->snapshot_ = std::make_unique<SnapshotFetcher>(
      d.ledger, SnapshotFetcher::Options{.n = config.n, .self = config.self});
  driver->state_.store(static_cast<int>(driver->replica_->state()));
  driver->view_.store(driver->replica_->view());
  driver->stable_checkpoint_.store(driver->replica_->low_watermark());
  // A divergence found before a restart stands: the ledger's state is still the wrong one.
  absl::StatusOr<std::string> diverged = d.ledger->GetConsensusMeta(kDivergedKey);
  if (diverged.ok()) {
    driver->HaltLocked(absl::StrCat(*diverged,
                                    " (found before a restart; this node's copy of "
                                    "the partition must be rebuilt from its peers)"),
                       static_cast<int>(ConsensusState::kDiverged));
  } else if (!absl::IsNotFound(diverged.status())) {
    return diverged.status();
  }
  return driver;
}

ConsensusDriver::ConsensusDriver(Deps deps)
    : deps_(std::move(deps)),
      snapshot_server_(deps_.ledger, deps_.clock,
                       {.serve_bytes_per_second = deps_.snapshot_serve_bytes_per_second}),
      rounds_({.slow_round_nanos = deps_.slow_round_nanos}) {}

void ConsensusDriver::Start() {
  WithLock([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { StepLocked(PbftStart{}); });
}

std::string ConsensusDriver::StateName() const {
  const int s = state();
  if (s == kHaltedState) return "HALTED";
  return ConsensusStateName(static_cast<ConsensusState>(s));
}

ConsensusDriver::Stats ConsensusDriver::stats() const {
  Stats s;
  s.dropped_bad_signature = dropped_bad_signature_.load(std::memory_order_relaxed);
  s.dropped_bad_tx = dropped_bad_tx_.load(std::memory_order_relaxed);
  s.redundant_votes = redundant_votes_.load(std::memory_order_relaxed);
  s.fetched_checked = fetched_checked_.load(std::memory_order_relaxed);
  s.fetched_certified = fetched_certified_.load(std::memory_order_relaxed);
  s.snapshot_serve = snapshot_server_.stats();
  s.rounds = rounds_.snapshot();
  absl::MutexLock lock(&mu_);
  s.snapshot_fetch = snapshot_->active() ? snapshot_->stats() : last_snapshot_;
  s.snapshots_installed = snapshots_installed_;
  return s;
}

// ---- Peer messages ----

bool ConsensusDriver::OnConsensusMessage(uint32_t from, const ConsensusMessage& msg) {
  // A vote whose quorum is already complete here changes nothing: dropped before its signature
  // check, which is most of a vote's cost. Of the six votes a replica of four receives per block,
  // one prepare and one commit are such surplus when they come last. Only when the lock is free:
  // a busy lock means another lane is stepping the replica, and the check outside it overlaps.
  if (msg.sender() == from && (msg.has_prepare() || msg.has_commit()) && mu_.TryLock()) {
    const bool redundant = replica_->Redundant(msg);
    mu_.Unlock();
    if (redundant) {
      redundant_votes_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  // The envelope must be signed by the replica the authenticated connection belongs to; checked
  // outside the lock (the expensive part).
  if (msg.sender() != from || !deps_.crypto->Verify(msg)) {
    dropped_bad_signature_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  WithLock([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (msg.has_pre_prepare()) StampPrePrepareLocked(msg);
    StepLocked(PbftMessage{msg});
  });
  return true;
}

size_t ConsensusDriver::OnTxBatch(const node::partition::TxBatch& batch) {
  size_t refused = 0;
  std::vector<base::DecodedTx> txs;
  txs.reserve(static_cast<size_t>(batch.signed_txs_size()));
  // A body twice in one batch is handled once. Views into `txs`, which never reallocates (its
  // capacity is the batch's size): no copy of each forwarded tx's hash.
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& bytes : batch.signed_txs()) {
    absl::StatusOr<base::DecodedTx> tx = base::DecodeSignedTx(bytes, deps_.tx_limits);
    if (!tx.ok()) {
      dropped_bad_tx_.fetch_add(1, std::memory_order_relaxed);
      ++refused;
      continue;
    }
    // Already pooled or already settled (a late forward, or a fetch answered twice): skip the
    // signature check, which is the expensive part. A tx only refused so far is checked again.
    if (deps_.pipeline->KnowsTx(tx->hash)) continue;
    txs.push_back(*std::move(tx));
    if (!seen.insert(txs.back().hash).second) txs.pop_back();
  }
  const std::vector<bool> certified = CertifiedFetches(txs);
  std::vector<std::string> added;
  for (size_t i = 0; i < txs.size(); ++i) {
    base::DecodedTx& tx = txs[i];
    if (!certified[i] && !base::VerifySignature(tx).ok()) {
      dropped_bad_tx_.fetch_add(1, std::memory_order_relaxed);
      ++refused;
      continue;
    }
    std::string hash = tx.hash;
    const TxOrigin origin =
        deps_.tracker->TakeWanted(hash) ? TxOrigin::kFetched : TxOrigin::kForwarded;
    // Refusals (replayed, full) are expected under load and for already-committed txs.
    if (!deps_.pool->Add(std::move(tx), origin).ok()) continue;
    added.push_back(std::move(hash));
    if (origin == TxOrigin::kFetched) {
      (certified[i] ? fetched_certified_ : fetched_checked_)
          .fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (added.empty()) return refused;
  WithLock([&]()
               ABSL_NO_THREAD_SAFETY_ANALYSIS { StepLocked(PbftTxsAvailable{std::move(added)}); });
  deps_.request_tick();
  return refused;
}

std::vector<bool> ConsensusDriver::CertifiedFetches(const std::vector<base::DecodedTx>& txs) {
  std::vector<bool> certified(txs.size(), false);
  std::vector<absl::string_view> hashes;
  hashes.reserve(txs.size());
  for (const base::DecodedTx& tx : txs) hashes.push_back(tx.hash);
  // Only bodies whose hash this replica is fetching (the fetch mark decides, not the channel a
  // body came on: a forwarded copy of a wanted tx qualifies too, being the same bytes): the seqs
  // of the batches that listed them, and which of those batches are certified here. Waits for
  // the consensus lock rather than checking: a fetch answer holds many bodies, whose checks
  // together cost more than the lock is held for a block's execution.
  const std::vector<uint64_t> seqs = deps_.tracker->WantedSeqs(hashes);
  absl::flat_hash_map<absl::string_view, size_t> fetched;
  std::vector<uint64_t> batches;
  for (size_t i = 0; i < txs.size(); ++i) {
    if (seqs[i] == 0) continue;
    fetched.emplace(hashes[i], i);
    batches.push_back(seqs[i]);
  }
  if (fetched.empty()) return certified;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  WithLock([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (uint64_t seq : batches) {
      replica_->ForEachCertifiedTx(seq, [&](const std::string& h) {
        if (auto it = fetched.find(h); it != fetched.end()) certified[it->second] = true;
      });
    }
  });
  return certified;
}

void ConsensusDriver::OnFetch(uint32_t from, const node::partition::TxFetch& fetch) {
  if (deps_.withhold) return;  // test failpoint: a faulty replica keeps its txs to itself
  const size_t n = std::min<size_t>(static_cast<size_t>(fetch.tx_hashes_size()), kMaxFetch);
  // Pooled txs first; the rest from the ledger in one call, which reads each block once (a
  // replica that fell behind asks for many txs of the same few committed blocks).
  std::vector<TxPtr> pooled(n);
  std::vector<std::string> stored_hashes;
  for (size_t i = 0; i < n; ++i) {
    pooled[i] = deps_.pool->Get(fetch.tx_hashes(static_cast<int>(i)));
    if (pooled[i] == nullptr) stored_hashes.push_back(fetch.tx_hashes(static_cast<int>(i)));
  }
  std::vector<std::optional<std::string>> stored;
  if (!stored_hashes.empty()) {
    absl::StatusOr<std::vector<std::optional<std::string>>> got =
        deps_.ledger->GetTxs(stored_hashes);
    if (got.ok()) {
      stored = *std::move(got);
    } else {
      LOG_EVERY_N(WARNING, 100) << "partition " << deps_.name
                                << ": a peer's tx fetch: " << got.status();
      stored.resize(stored_hashes.size());
    }
  }
  node::partition::PartitionMessage reply;
  size_t bytes = 0;
  size_t next_stored = 0;
  for (size_t i = 0; i < n; ++i) {
    std::string body;
    if (pooled[i] != nullptr) {
      body = pooled[i]->signed_bytes;
    } else if (std::optional<std::string>& s = stored[next_stored++]; s.has_value()) {
      body = *std::move(s);
    } else {
      continue;
    }
    bytes += body.size();
    reply.mutable_txs()->add_signed_txs(std::move(body));
    if (bytes >= kFetchReplyBytes) {
      deps_.sender->Send(from, p2p::Channel::SYNC, reply);
      reply.Clear();
      bytes = 0;
    }
  }
  if (reply.has_txs()) deps_.sender->Send(from, p2p::Channel::SYNC, reply);
}

void ConsensusDriver::OnSnapshotMessage(uint32_t from,
                                        const node::partition::PartitionMessage& msg) {
  if (msg.has_snapshot_request()) {
    // Reads the ledger (a manifest reads the whole state): never under the consensus lock.
    deps_.sender->Send(from, p2p::Channel::SYNC,
                       snapshot_server_.Answer(from, msg.snapshot_request()));
    return;
  }
  WithLock([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (halted_ || !snapshot_->active()) return;
    const int64_t now = deps_.clock->NowNanos();
    std::vector<SnapshotFetcher::Send> sends;
    absl::Status s = msg.has_snapshot_manifest()
                         ? snapshot_->OnManifest(from, msg.snapshot_manifest(), now, &sends)
                         : snapshot_->OnChunk(from, msg.snapshot_chunk(), now, &sends);
    if (!s.ok()) {
      HaltLocked(absl::StrCat("snapshot fetch failed: ", s.ToString()));
      return;
    }
    SendSnapshotLocked(std::move(sends));
    if (snapshot_->complete()) InstallSnapshotLocked();
  });
}

void ConsensusDriver::StartSnapshotLocked(const SnapshotTarget& target) {
  if (snapshot_->active()) {
    // A newer stable checkpoint while one is being fetched: keep fetching unless stalled (Tick).
    newest_snapshot_ = target;
    return;
  }
  LOG(INFO) << "partition " << deps_.name << ": " << target.seq - replica_->last_executed()
            << " blocks behind the stable checkpoint " << target.seq
            << ": fetching its state from peers";
  std::vector<SnapshotFetcher::Send> sends;
  absl::Status s = snapshot_->Start(target, deps_.clock->NowNanos(), &sends);
  if (!s.ok()) {
    HaltLocked(absl::StrCat("snapshot fetch failed: ", s.ToString()));
    return;
  }
  newest_snapshot_.reset();
  SendSnapshotLocked(std::move(sends));
  // A state without entries has nothing to fetch once the manifest is in; else the answers
  // drive it, and Tick re-asks what goes unanswered.
  deferred_.push_back([this] { deps_.request_tick(); });
}

void ConsensusDriver::TickSnapshotLocked(int64_t now, int64_t* wake) {
  if (halted_ || !snapshot_->active()) return;
  if (newest_snapshot_ && snapshot_->Stalled(now)) {
    // Nobody serves the older checkpoint any more (peers installed newer snapshots): the newer.
    LOG(INFO) << "partition " << deps_.name << ": the snapshot at " << snapshot_->target()->seq
              << " makes no progress; fetching the one at " << newest_snapshot_->seq;
    last_snapshot_ = snapshot_->stats();
    snapshot_->Abandon();
    StartSnapshotLocked(*std::exchange(newest_snapshot_, std::nullopt));
    return;
  }
  if (snapshot_->StalledFor(now) >= kAbandonSnapshotNanos) {
    // No peer set serves it (none newer is wanted): replay blocks instead, as before snapshots.
    LOG(WARNING) << "partition " << deps_.name << ": the snapshot at " << snapshot_->target()->seq
                 << " made no progress for " << kAbandonSnapshotNanos / 1'000'000'000
                 << " s; catching up by block sync";
    last_snapshot_ = snapshot_->stats();
    snapshot_->Abandon();
    StepLocked(PbftSnapshotAbandoned{});
    return;
  }
  std::vector<SnapshotFetcher::Send> sends;
  *wake = std::min(*wake, snapshot_->Tick(now, &sends));
  *wake = std::min(*wake, now + kAbandonSnapshotNanos);
  SendSnapshotLocked(std::move(sends));
  if (snapshot_->complete()) InstallSnapshotLocked();
}

void ConsensusDriver::SendSnapshotLocked(std::vector<SnapshotFetcher::Send> sends) {
  for (SnapshotFetcher::Send& send : sends) {
    deps_.sender->Send(send.to, p2p::Channel::SYNC, send.msg);
  }
}

void ConsensusDriver::InstallSnapshotLocked() {
  const SnapshotTarget target = *snapshot_->target();
  last_snapshot_ = snapshot_->stats();
  absl::StatusOr<StateRoot> lanes = snapshot_->Install({{kChainDigestKey, target.chain_digest}});
  if (!lanes.ok()) {
    HaltLocked(
        absl::StrCat("snapshot install at ", target.seq, " failed: ", lanes.status().ToString()));
    return;
  }
  newest_snapshot_.reset();
  deps_.executor->Reset(*lanes);
  // Pooled txs that committed in the skipped blocks would count as pending (and start the
  // request timer) until they expired.
  deps_.pool->Resync();
  ++snapshots_installed_;
  LOG(INFO) << "partition " << deps_.name << ": installed the state at " << target.seq << " ("
            << last_snapshot_.chunks_total << " chunks, " << last_snapshot_.bad_chunks
            << " refused as bad); replaying blocks from there";
  // Blocks replayed from here in this same step are published before this runs; the feed holds
  // them until the skip, then delivers them after it.
  deferred_.push_back([this, seq = target.seq] { deps_.feed->SkipTo(seq); });
  last_commit_nanos_ = deps_.clock->NowNanos();
  StepLocked(PbftSnapshotInstalled{.seq = target.seq, .chain_digest = target.chain_digest});
}

// ---- The replica ----

void ConsensusDriver::WithLock(absl::FunctionRef<void()> fn) {
  std::vector<absl::AnyInvocable<void()>> deferred;
  std::vector<CommitEvent> committed;
  {
    // The step's messages are queued under the lock and handed to the transport once it is free,
    // so a replica's other lanes do not wait on that.
    p2p::DeferredSends hold_sends;
    absl::MutexLock lock(&mu_);
    fn();
    deferred.swap(deferred_);
    committed.swap(committed_);
  }
  // The feed delivers in height order even when two threads publish at once.
  for (CommitEvent& e : committed) deps_.feed->Publish(std::move(e));
  for (auto& d : deferred) d();
}

void ConsensusDriver::HaltLocked(std::string why, int state) {
  LOG(ERROR) << "partition " << deps_.name << ": consensus "
             << (state == kHaltedState ? "halted" : "DIVERGED") << ": " << why;
  halted_ = true;
  // No timer fires any more: left here, a due one would make every Tick ask to run again at
  // once (a halted partition spinning a core).
  timers_.clear();
  {
    absl::MutexLock lock(&halt_mu_);
    halt_reason_ = std::move(why);
  }
  state_.store(state);
}

void ConsensusDriver::DivergedLocked(const PbftReplica::Divergence& divergence) {
  const std::string why = divergence.ToString();
  // Recorded so that a restart does not sign on over the same wrong state.
  if (absl::Status s = deps_.ledger->PutConsensusMeta(kDivergedKey, why); !s.ok()) {
    LOG(ERROR) << "partition " << deps_.name << ": could not record the divergence: " << s;
  }
  HaltLocked(why, static_cast<int>(ConsensusState::kDiverged));
}

void ConsensusDriver::EquivocateLocked(const node::partition::PartitionMessage& proposal,
                                       p2p::Channel channel) {
  node::partition::PartitionMessage other = proposal;
  node::consensus::PrePrepare* pp = other.mutable_consensus()->mutable_pre_prepare();
  pp->mutable_tx_hashes()->RemoveLast();
  pp->set_digest(BatchDigest(pp->tx_hashes()));
  other.mutable_consensus()->set_signature(deps_.crypto->Sign(other.consensus()));
  LOG(WARNING) << "partition " << deps_.name << ": TEST FAILPOINT equivocate: seq " << pp->seq()
               << " of view " << pp->view() << " proposed twice";
  bool first = true;
  for (uint32_t r = 0; r < deps_.sender->replicas(); ++r) {
    if (r == deps_.sender->self()) continue;
    deps_.sender->Send(r, channel, first ? proposal : other);
    first = false;
  }
}

std::string ConsensusDriver::halt_reason() const {
  absl::MutexLock lock(&halt_mu_);
  return halt_reason_;
}

void ConsensusDriver::StepLocked(const PbftEvent& event) {
  if (halted_) return;
  ApplyLocked(replica_->Step(event));
  if (replica_->status().ok() || halted_) return;
  if (replica_->divergence()) {
    DivergedLocked(*replica_->divergence());
  } else {
    HaltLocked(replica_->status().ToString());
  }
}

void ConsensusDriver::ApplyLocked(std::vector<PbftAction> actions) {
  // A commit frees the proposal window and takes txs out of the pool; a new state or view may
  // make this replica the proposer: either way the next batch may be cut now. (Also set when
  // proposal bodies went back to forwarding: the next tick flushes them.)
  bool cut_may_change = false;
  int64_t earliest_timer = std::numeric_limits<int64_t>::max();
  for (PbftAction& action : actions) {
    if (halted_) break;
    std::visit(Overloaded{
                   [&](PbftSend& a) {  // sync and NewView messages: no round to stamp
                     node::partition::PartitionMessage m;
                     *m.mutable_consensus() = std::move(a.msg);
                     deps_.sender->Send(a.to, ChannelOf(a.channel), m);
                   },
                   [&](PbftBroadcast& a) {
                     StampRoundLocked(a.msg);
                     // The bodies of a new proposal go first, on the same channel (forwarder.h).
                     if (proposal_bodies_ && a.msg.has_pre_prepare()) {
                       if (deps_.withhold) {
                         LOG(WARNING)
                             << "partition " << deps_.name << ": TEST FAILPOINT withhold: seq "
                             << a.msg.pre_prepare().seq() << " of view "
                             << a.msg.pre_prepare().view() << " proposed without its "
                             << proposal_bodies_->txs().signed_txs_size() << " bodies";
                       } else if (!deps_.forwarder->SendBodies(*std::move(proposal_bodies_))) {
                         // Refused: they went back to forwarding, which the next tick flushes.
                         cut_may_change = true;
                       }
                       proposal_bodies_.reset();
                     }
                     node::partition::PartitionMessage m;
                     *m.mutable_consensus() = std::move(a.msg);
                     if (deps_.equivocate && m.consensus().has_pre_prepare() &&
                         m.consensus().pre_prepare().tx_hashes_size() >= 2) {
                       EquivocateLocked(m, ChannelOf(a.channel));
                     } else {
                       deps_.sender->Broadcast(ChannelOf(a.channel), m);
                     }
                   },
                   [&](PbftCommit& a) {
                     cut_may_change = true;
                     absl::Status s = CommitLocked(a);
                     if (!s.ok()) {
                       HaltLocked(absl::StrCat("commit of seq ", a.seq, " failed: ", s.ToString()));
                     } else if (a.report_state_root) {
                       // The replica signs its checkpoint vote now, before the next commit: a
                       // crash can then lose the vote only with the ledger exactly at this seq,
                       // where a restart signs it (PbftReplica::OnStart).
                       absl::StatusOr<std::string> root = deps_.pipeline->StateRootAt(a.seq);
                       if (root.ok()) {
                         StepLocked(PbftExecuted{a.seq, *std::move(root)});
                       } else {
                         HaltLocked(absl::StrCat("state root of seq ", a.seq, ": ",
                                                 root.status().ToString()));
                       }
                     }
                   },
                   [&](PbftSetTimer& a) {
                     const int64_t at = deps_.clock->NowNanos() + a.delay_ms * 1'000'000;
                     timers_[a.timer] = at;
                     earliest_timer = std::min(earliest_timer, at);
                   },
                   [&](PbftCancelTimer& a) { timers_.erase(a.timer); },
                   [&](PbftFetchTxs& a) { FetchLocked(a); },
                   [&](PbftSnapshotWanted& a) {
                     StartSnapshotLocked({.seq = a.seq,
                                          .chain_digest = std::move(a.chain_digest),
                                          .state_root = std::move(a.state_root)});
                   },
                   [&](PbftStateChanged& a) {
                     cut_may_change = true;
                     const auto old = static_cast<ConsensusState>(state_.load());
                     state_.store(static_cast<int>(a.state));
                     LOG(INFO) << "partition " << deps_.name << ": consensus "
                               << ConsensusStateName(old) << " -> " << ConsensusStateName(a.state)
                               << " (view " << replica_->view() << ")";
                     if (a.state == ConsensusState::kViewChange) {
                       view_changes_.fetch_add(1);
                       // Proposals of the old view are abandoned: their txs become selectable again
                       // (a re-proposed one that commits twice gets a REJECTED receipt the second
                       // time).
                       deps_.pool->ReleaseAllProposed();
                       ready_since_ = 0;
                     }
                   },
               },
               action);
  }
  // A replica that did not time out itself joins a new view straight from NORMAL (no state
  // change to log): say so, for the operator and the fault runs.
  const uint64_t view = replica_->view();
  if (view_.exchange(view) != view) {
    rounds_.ForgetViewsBefore(view);
    if (replica_->state() == ConsensusState::kNormal) {
      LOG(INFO) << "partition " << deps_.name << ": consensus NORMAL -> NORMAL (view " << view
                << ")";
    }
  }
  observing_.store(replica_->observing());
  stable_checkpoint_.store(replica_->low_watermark(), std::memory_order_relaxed);
  UpdateHoldLocked();
  if (earliest_timer != std::numeric_limits<int64_t>::max()) {
    deferred_.push_back([this, earliest_timer] { deps_.wake_by(earliest_timer); });
  }
  if (cut_may_change) deferred_.push_back([this] { deps_.request_tick(); });
}

void ConsensusDriver::StampPrePrepareLocked(const ConsensusMessage& msg) {
  // Only what the replica could accept now: from the primary of its view, in NORMAL, within its
  // window (a faulty replica's pre-prepares must not fill the rounds kept; one of a view not
  // installed yet would time the view change).
  const auto& pp = msg.pre_prepare();
  const PbftConfig& config = replica_->config();
  const uint64_t low = replica_->low_watermark();
  if (pp.view() != replica_->view() || msg.sender() != config.PrimaryOf(pp.view()) ||
      replica_->state() != ConsensusState::kNormal || pp.seq() <= low ||
      pp.seq() > low + config.window) {
    return;
  }
  rounds_.PrePrepareSeen(pp.view(), pp.seq(), deps_.clock->NowNanos());
}

void ConsensusDriver::StampRoundLocked(const ConsensusMessage& msg) {
  switch (msg.body_case()) {
    case ConsensusMessage::kPrePrepare:
      rounds_.Proposed(msg.pre_prepare().view(), msg.pre_prepare().seq(), deps_.clock->NowNanos());
      break;
    case ConsensusMessage::kPrepare:
      rounds_.Proposed(msg.prepare().view(), msg.prepare().seq(), deps_.clock->NowNanos());
      break;
    case ConsensusMessage::kCommit:
      rounds_.Prepared(msg.commit().view(), msg.commit().seq(), deps_.clock->NowNanos());
      break;
    default:  // checkpoints, view changes: not part of a round
      break;
  }
}

void ConsensusDriver::FetchLocked(PbftFetchTxs& fetch) {
  node::partition::PartitionMessage m;
  bool repeat = true;
  const int64_t now = deps_.clock->NowNanos();
  // A fetch is retried every retransmit period while still needed; the tracker's bound forgets
  // the marks of txs that never arrive.
  for (std::string& h : fetch.tx_hashes) {
    if (m.fetch().tx_hashes_size() >= static_cast<int>(kMaxFetch)) break;
    repeat &= !deps_.tracker->NoteWanted(h, now, fetch.seq);
    m.mutable_fetch()->add_tx_hashes(std::move(h));
  }
  // The first ask goes to the primary, which proposed the batch and so holds its txs: one answer
  // instead of n-1 on the (prioritized) SYNC channel. A repeated ask (the primary did not answer
  // in a retransmit period, or a synced batch) goes to all.
  const uint32_t primary = replica_->config().PrimaryOf(replica_->view());
  if (!repeat && primary != deps_.sender->self()) {
    deps_.sender->Send(primary, p2p::Channel::SYNC, m);
  } else {
    deps_.sender->Broadcast(p2p::Channel::SYNC, m);
  }
}

void ConsensusDriver::UpdateHoldLocked() {
  const bool primary_normal = !halted_ && replica_->IsPrimary() &&
                              replica_->state() == ConsensusState::kNormal &&
                              deps_.sender->replicas() > 1;
  if (primary_normal == primary_normal_) return;
  primary_normal_ = primary_normal;
  // No longer proposing: the next tick forwards everything held, so the new primary gets it.
  if (deps_.forwarder->SetHolding(primary_normal)) {
    deferred_.push_back([this] { deps_.request_tick(); });
  }
}

absl::Status ConsensusDriver::CommitLocked(const PbftCommit& commit) {
  const int64_t start = deps_.clock->NowNanos();
  absl::StatusOr<std::optional<CommitEvent>> event = deps_.pipeline->Commit(commit);
  if (!event.ok()) return event.status();
  if (!event->has_value()) return absl::OkStatus();  // already in the ledger (restart)
  last_commit_nanos_ = deps_.clock->NowNanos();
  if (std::optional<std::string> slow = rounds_.Applied(commit.seq, start, last_commit_nanos_)) {
    LOG(WARNING) << "partition " << deps_.name << ": " << *slow;
  }
  if (deps_.on_commit_locked) deps_.on_commit_locked(**event);
  committed_.push_back(*std::move(*event));
  return absl::OkStatus();
}

// ---- Time ----

int64_t ConsensusDriver::Tick(int64_t now, bool paused) {
  int64_t wake = std::numeric_limits<int64_t>::max();
  WithLock([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Timers that are due, in deadline order.
    while (!halted_) {
      auto due = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second <= now && (due == timers_.end() || it->second < due->second)) due = it;
      }
      if (due == timers_.end()) break;
      const PbftTimer timer = due->first;
      timers_.erase(due);
      if (timer == PbftTimer::kViewChange) {
        // A view change that outlived its timer: how much support it has says why (the view
        // moves on only with 2f+1 ViewChanges; fewer means this replica is alone or cut off).
        LOG(INFO) << "partition " << deps_.name << ": view change to view " << replica_->view()
                  << " timed out with " << replica_->view_change_votes() << " of "
                  << replica_->config().quorum() << " ViewChanges";
      }
      StepLocked(PbftTimerFired{timer});
    }
    for (const auto& [timer, at] : timers_) wake = std::min(wake, at);
    if (now >= next_expire_) {
      deps_.pool->Expire(now);
      if (deps_.on_pool_dropped) {
        if (std::vector<std::string> dropped = deps_.pool->TakeDropped(); !dropped.empty()) {
          deps_.on_pool_dropped(std::move(dropped));
        }
      }
      deps_.tracker->Evict(now);
      next_expire_ = now + kExpireEveryNanos;
    }
    wake = std::min(wake, next_expire_);
    if (now >= next_hook_) {
      hook_wants_ticks_ = deps_.on_tick_locked && deps_.on_tick_locked(now);
      next_hook_ = now + kHookEveryNanos;
    }
    if (hook_wants_ticks_) wake = std::min(wake, next_hook_);
    TickSnapshotLocked(now, &wake);
    CutBatchesLocked(now, paused, &wake);
    ReforwardLocked(now, &wake);
  });
  return wake;
}

void ConsensusDriver::ReforwardLocked(int64_t now, int64_t* wake) {
  if (halted_ || replica_->IsPrimary() || replica_->state() != ConsensusState::kNormal ||
      deps_.sender->replicas() <= 1 || reported_pending_ == 0) {
    return;
  }
  const int64_t timeout = replica_->config().request_timeout_ms * 1'000'000;
  // Due every eighth of the timeout, and only once no block committed for half of it.
  const auto due = [&] { return std::max(next_reforward_, last_commit_nanos_ + timeout / 2); };
  if (now >= due()) {
    next_reforward_ = now + timeout / 8;
    std::vector<TxPtr> txs = deps_.pool->TakeForReforward(now - timeout / 2, replica_->view(),
                                                          kMaxReforwardTxs, kMaxReforwardBytes);
    if (!txs.empty()) {
      const uint32_t primary = replica_->config().PrimaryOf(replica_->view());
      deferred_.push_back(
          [this, primary, txs = std::move(txs)] { deps_.forwarder->Reforward(primary, txs); });
    }
  }
  *wake = std::min(*wake, due());
}

void ConsensusDriver::CutBatchesLocked(int64_t now, bool paused, int64_t* wake) {
  const uint64_t max_txs = deps_.batch_policy->options().max_txs;
  TxPool::ReadyCount ready = deps_.pool->CountReady(max_txs);
  if (ready.txs != reported_pending_) {
    reported_pending_ = ready.txs;
    StepLocked(PbftPendingRequests{ready.txs});
  }
  if (ready.txs == 0) {
    ready_since_ = 0;
    return;
  }
  if (ready_since_ == 0) ready_since_ = now;
  // Paused: Resume asks for a tick.
  if (paused) return;
  if (now < empty_cut_until_) {
    *wake = std::min(*wake, empty_cut_until_);
    return;
  }
  // Every replica asks (a backup's pool holds the forwarded txs too), so each node counts the
  // partitions with work alike; only a primary's answer is used. At most a quarter of the request
  // timeout: backups re-forward after half of it and change view after all of it.
  const int64_t interval =
      deps_.partial_batch_interval && !halted_
          ? deps_.partial_batch_interval(now, replica_->config().request_timeout_ms * 250'000)
          : 0;
  for (int round = 0; round < kMaxCutsPerTick && !halted_; ++round) {
    const int64_t not_before = last_cut_nanos_ > 0 ? last_cut_nanos_ + interval : 0;
    BatchPolicy::Decision d = deps_.batch_policy->Decide(
        now, ready.txs, ready.bytes, ready_since_, replica_->CanPropose(),
        replica_->own_proposals_in_flight(), not_before);
    if (!d.cut) {
      if (d.wake_at_nanos) *wake = std::min(*wake, *d.wake_at_nanos);
      return;
    }
    std::vector<TxPtr> batch =
        deps_.pool->SelectBatch(max_txs, deps_.batch_policy->options().max_bytes);
    if (batch.empty()) {
      // Counted as ready but not selectable (races with commits): look again shortly.
      empty_cut_until_ = now + kEmptyCutBackoffNanos;
      *wake = std::min(*wake, empty_cut_until_);
      return;
    }
    std::vector<std::string> hashes;
    hashes.reserve(batch.size());
    for (const auto& tx : batch) hashes.push_back(tx->hash);
    proposal_bodies_ = deps_.forwarder->TakeBodies(batch);
    const uint64_t in_flight = replica_->own_proposals_in_flight();
    const int64_t waited = now - ready_since_;  // before the step, which may reset it
    StepLocked(PbftBatchReady{std::move(hashes)});
    // Spaced from the last batch that became a proposal (none came of this one: look again as
    // if it had not been cut).
    if (replica_->own_proposals_in_flight() > in_flight) {
      last_cut_nanos_ = now;
      rounds_.CutWaited(waited);
    }
    if (proposal_bodies_) {  // no pre-prepare came of it: forward them instead
      deps_.forwarder->ReturnBodies(*std::move(proposal_bodies_));
      proposal_bodies_.reset();
      *wake = std::min(*wake, now);  // and flush them on the next tick
    }
    ready = deps_.pool->CountReady(max_txs);
    ready_since_ = ready.txs > 0 ? now : 0;
    if (ready.txs == 0) return;
  }
  // kMaxCutsPerTick cut and more is ready: the next tick looks again at once.
  if (!halted_) *wake = std::min(*wake, now);
}

}  // namespace partitions
