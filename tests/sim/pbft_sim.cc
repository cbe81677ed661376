#include "tests/sim/pbft_sim.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <variant>

#include "absl/strings/str_cat.h"
#include "partitions/pbft_certs.h"
#include "partitions/pbft_replica.h"
#include "tests/sim/sim_byzantine.h"
#include "tests/sim/sim_world.h"

namespace sim {
namespace {

using ::node::consensus::CommittedBatch;
using partitions::ConsensusMessage;
using partitions::PbftAction;
using partitions::PbftEvent;
using partitions::PbftReplica;
using partitions::PbftTimer;

constexpr uint64_t kMaxEvents = 4'000'000;

class Cluster {
 public:
  explicit Cluster(const SimOptions& o) : o_(o), rng_(o.seed * 0x2545F4914F6CDD1DULL + 7) {
    config_.n = o.n;
    config_.checkpoint_interval = 4;
    config_.window = 16;
    config_.max_inflight = 8;
    config_.request_timeout_ms = 800;
    config_.view_change_timeout_ms = 800;
    config_.max_backoff_shift = 3;
    config_.retransmit_ms = 250;
    config_.sync_chunk = 8;
    config_.max_batch_txs = 64;
    // Half the seeds: a replica two checkpoints behind fetches the state instead of the batches.
    config_.snapshot_min_gap = o.seed % 2 == 0 ? 8 : 0;
    // Half of those: every ledger prunes all but its last min_gap + window batches (and the
    // state history below them), the least state.retain_blocks accepts.
    retain_ = o.seed % 4 == 0 ? config_.snapshot_min_gap + config_.window : 0;
    drop_redundant_ = o.seed % 5 != 0;
    const FaultKind k = o.fault;
    loss_ = k == FaultKind::kLoss || k == FaultKind::kMixed;
    dup_ = k == FaultKind::kDuplicate || k == FaultKind::kMixed;
    // A diverging replica under delays too: its roots are reported late at times.
    delay_ = k == FaultKind::kDelay || k == FaultKind::kMixed || k == FaultKind::kDiverge;
    partition_ = k == FaultKind::kPartition || k == FaultKind::kMixed;
    slow_ = k == FaultKind::kSlowQuorum;
    quiet_ = k == FaultKind::kQuietRejoin;
    // With f = 2, a correct replica may also crash beside the diverging one.
    crash_ =
        k == FaultKind::kCrash || k == FaultKind::kMixed || (k == FaultKind::kDiverge && o.n >= 7);
    isolate_ = k == FaultKind::kIsolate || k == FaultKind::kMixed;
    pause_ = k == FaultKind::kPause || k == FaultKind::kMixed;
    for (uint32_t i = 0; i < o.n; ++i) nodes_.push_back(std::make_unique<Node>(i));
    // Byzantine nodes, at most f in all: the primary of view 0 and/or the last replica.
    const uint32_t f = config_.f();
    if ((k == FaultKind::kByzPrimary || k == FaultKind::kMixed) && f >= 1) {
      nodes_[0]->byz_primary = true;
    }
    if (k == FaultKind::kByzReplica || (k == FaultKind::kMixed && f >= 2)) {
      nodes_[o.n - 1]->byz_garbage = true;
    }
    if (k == FaultKind::kDiverge) {
      nodes_[rng_() % o.n]->diverge_from = static_cast<uint64_t>(Rand(3, 60));
    }
  }

  SimResult Run() {
    for (auto& n : nodes_) Restart(*n);
    for (int64_t t = 0; t < o_.submit_until_ms; t += o_.submit_every_ms) {
      if (quiet_ && t >= QuietFrom() && t < QuietUntil()) continue;
      At(t + Rand(0, o_.submit_every_ms - 1), [this] { Submit(); });
    }
    if (quiet_) ScheduleQuietRejoin();
    if (partition_) At(Rand(200, 1500), [this] { Repartition(); });
    if (crash_) At(Rand(300, 1500), [this] { CrashSomeone(); });
    if (isolate_) At(Rand(100, 1000), [this] { IsolateSomeone(); });
    if (pause_) At(Rand(100, 1000), [this] { PauseSomeone(); });
    if (slow_) {
      // Exactly a quorum up (the primary of view 0 among them) until the faults heal, and every
      // proposal arrives 900-1000 ms after it is sent: later than the 800 ms request timeout.
      At(1, [this] {
        for (uint32_t i = 0; i < config_.f(); ++i) Crash(*nodes_[o_.n - 1 - i]);
      });
      // Once converged, they go on committing: something in the window's first 2.5 s, and more
      // in its last 2.5 s.
      const int64_t mid = o_.fault_end_ms / 2;
      At(mid, [this, mid] {
        const uint64_t at_mid = max_seq_;
        if (at_mid == 0) SlowQuorumStalled(0, mid);
        At(o_.fault_end_ms - 1, [this, at_mid, mid] {
          if (max_seq_ <= at_mid) SlowQuorumStalled(mid, o_.fault_end_ms);
        });
      });
    }
    if (o_.fault == FaultKind::kCrashPrimary) {
      // At n = 7 (f = 2) the second crash takes the next view's primary down as well.
      for (int64_t t : {500, 5500, 10500}) {
        At(t + Rand(0, 300), [this, t] { CrashPrimary(t == 5500 && config_.f() >= 2); });
      }
    }
    for (auto& n : nodes_) {
      if (n->byz_garbage) At(Rand(1, 50), [this, id = n->id] { Garbage(id); });
    }
    At(o_.fault_end_ms, [this] { Heal(); });
    uint64_t events = 0;
    while (!queue_.empty() && result_.ok) {
      Event ev = queue_.top();
      queue_.pop();
      if (ev.t > o_.duration_ms) break;
      now_ = ev.t;
      ev.fn();
      if (++events > kMaxEvents) Fail(false, "event budget exceeded (message storm?)");
    }
    if (result_.ok) CheckEndLiveness();
    if (result_.ok) CheckDivergence();
    for (auto& n : nodes_) {
      if (n->replica) {
        const auto& c = n->replica->counters();
        result_.view_changes = std::max(result_.view_changes, c.view_changes_started);
        result_.synced_batches += c.synced_batches;
        result_.snapshots_installed += c.snapshots_installed;
        result_.dropped_by_replicas += c.dropped_not_replica + c.dropped_stale_view +
                                       c.dropped_outside_watermarks + c.dropped_conflicting +
                                       c.dropped_duplicate + c.dropped_invalid;
      }
    }
    result_.submitted = submitted_.size();
    result_.committed_txs = committed_txs_.size();
    return result_;
  }

 private:
  struct Event {
    int64_t t;
    uint64_t order;
    std::function<void()> fn;
    bool operator<(const Event& other) const {
      return t != other.t ? t > other.t : order > other.order;  // min-heap
    }
  };

  void At(int64_t t, std::function<void()> fn) {
    queue_.push(Event{t, next_order_++, std::move(fn)});
  }
  int64_t Rand(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  bool Faulty() const { return now_ < o_.fault_end_ms; }

  void Fail(bool safety, const std::string& what) {
    if (!result_.ok) return;
    result_.ok = false;
    result_.safety_violation = safety;
    result_.failure = absl::StrCat("t=", now_, "ms: ", what);
  }

  // ---- Nodes ----

  void Restart(Node& n) {
    PbftReplica::Deps deps{&n.crypto, &n.pool, &n.store, &n.ledger};
    PbftReplica::LedgerPosition pos{n.ledger.last, n.ledger.chain, n.ledger.root};
    config_.self = n.id;
    auto replica = PbftReplica::Create(config_, deps, pos);
    if (!replica.ok()) {
      Fail(false,
           absl::StrCat("replica ", n.id, " failed to restart: ", replica.status().ToString()));
      return;
    }
    n.replica = std::move(*replica);
    n.up = true;
    n.snapshot.reset();  // the replica wants it again from its stable checkpoint
    n.newest_snapshot.reset();
    n.reported_pending = ~0ULL;
    n.proposed.clear();
    StepNode(n, partitions::PbftStart{});
  }

  void Crash(Node& n) {
    if (trace_) std::fprintf(stderr, "%6lld ms  %u: CRASH\n", static_cast<long long>(now_), n.id);
    n.up = false;
    n.replica.reset();
    ++n.incarnation;
    for (uint64_t& g : n.timer_gen) ++g;
  }

  void StepNode(Node& n, const PbftEvent& ev) {
    if (!n.up) return;
    if (now_ < n.paused_until) {
      // Suspended: everything addressed to it (messages, its timers) runs when it resumes, in
      // the original order, as after SIGCONT.
      At(n.paused_until, [this, id = n.id, inc = n.incarnation, ev] {
        Node& node = *nodes_[id];
        if (node.incarnation == inc) StepNode(node, ev);
      });
      return;
    }
    if (trace_) {
      last_event_ = static_cast<int>(ev.index());
      if (auto* tf = std::get_if<partitions::PbftTimerFired>(&ev)) {
        last_event_ = 100 + static_cast<int>(tf->timer);
      } else if (auto* m = std::get_if<partitions::PbftMessage>(&ev)) {
        last_event_ = 200 + static_cast<int>(m->msg.body_case());
      }
    }
    Apply(n, n.replica->Step(ev));
    if (trace_ && n.up) TraceState(n);
    if (n.up && n.honest() && !n.replica->status().ok()) {
      Fail(n.replica->divergence().has_value(),
           absl::StrCat("correct replica ", n.id, " stopped: ", n.replica->status().ToString()));
      return;
    }
    if (n.in_followup) return;
    n.in_followup = true;
    for (int i = 0; i < 64 && n.up; ++i) {
      bool did = false;
      const uint64_t pending = n.pool.fifo.size();
      if (pending != n.reported_pending) {
        n.reported_pending = pending;
        Apply(n, n.replica->Step(partitions::PbftPendingRequests{pending}));
        did = true;
      }
      if (n.replica->CanPropose()) {
        std::vector<std::string> batch = CutBatch(n);
        if (!batch.empty()) {
          Apply(n, n.replica->Step(partitions::PbftBatchReady{std::move(batch)}));
          did = true;
        }
      }
      if (!did) break;
    }
    n.in_followup = false;
  }

  // SIM_TRACE=1: one line per replica state change and per view-change or sync message sent.
  void TraceState(Node& n) {
    const auto key = std::make_tuple(n.replica->view(), static_cast<int>(n.replica->state()),
                                     n.replica->observing());
    if (key == n.traced) return;
    n.traced = key;
    std::fprintf(stderr, "%6lld ms  %u: view %llu %s%s executed %llu (event %d)\n",
                 static_cast<long long>(now_), n.id,
                 static_cast<unsigned long long>(n.replica->view()),
                 partitions::ConsensusStateName(n.replica->state()),
                 n.replica->observing() ? " observing" : "",
                 static_cast<unsigned long long>(n.replica->last_executed()), last_event_);
  }

  void TraceSend(const Node& n, const ConsensusMessage& m, int64_t to) {
    if (!trace_) return;
    if (m.has_view_change()) {
      std::fprintf(stderr, "%6lld ms  %u -> %lld: ViewChange(%llu)\n", static_cast<long long>(now_),
                   n.id, static_cast<long long>(to),
                   static_cast<unsigned long long>(m.view_change().new_view()));
    } else if (m.has_new_view()) {
      std::fprintf(stderr, "%6lld ms  %u -> %lld: NewView(%llu)\n", static_cast<long long>(now_),
                   n.id, static_cast<long long>(to),
                   static_cast<unsigned long long>(m.new_view().view()));
    } else if (m.has_sync_request()) {
      std::fprintf(stderr, "%6lld ms  %u -> %lld: SyncRequest(%llu.., stable %llu)\n",
                   static_cast<long long>(now_), n.id, static_cast<long long>(to),
                   static_cast<unsigned long long>(m.sync_request().from_seq()),
                   static_cast<unsigned long long>(m.sync_request().known_stable_seq()));
    } else if (m.has_sync_response()) {
      const auto& r = m.sync_response();
      std::fprintf(stderr,
                   "%6lld ms  %u -> %lld: SyncResponse(%d batches from %llu, stable %llu)\n",
                   static_cast<long long>(now_), n.id, static_cast<long long>(to), r.batches_size(),
                   static_cast<unsigned long long>(r.batches_size() > 0 ? r.batches(0).seq() : 0),
                   static_cast<unsigned long long>(r.stable().seq()));
    }
  }

  std::vector<std::string> CutBatch(Node& n) {
    if (n.replica->view() != n.proposed_view) {
      n.proposed.clear();  // the new view re-issues what was prepared; propose the rest again
      n.proposed_view = n.replica->view();
    }
    std::vector<std::string> batch;
    for (const auto& [no, h] : n.pool.fifo) {
      if (batch.size() >= o_.batch_max) break;
      if (n.proposed.insert(h).second) batch.push_back(h);
    }
    return batch;
  }

  void Apply(Node& n, std::vector<PbftAction> actions) {
    std::vector<partitions::PbftExecuted> executed;
    for (PbftAction& a : actions) {
      if (!result_.ok) return;
      if (auto* s = std::get_if<partitions::PbftSend>(&a)) {
        TraceSend(n, s->msg, s->to);
        Transmit(n, s->to, std::make_shared<const ConsensusMessage>(std::move(s->msg)));
      } else if (auto* b = std::get_if<partitions::PbftBroadcast>(&a)) {
        auto msg = std::make_shared<const ConsensusMessage>(std::move(b->msg));
        TraceSend(n, *msg, -1);
        for (uint32_t to = 0; to < o_.n; ++to) {
          if (to != n.id) Transmit(n, to, msg);
        }
      } else if (auto* c = std::get_if<partitions::PbftCommit>(&a)) {
        OnCommit(n, *c);
        if (c->report_state_root) executed.push_back({c->seq, n.ledger.root});
      } else if (auto* st = std::get_if<partitions::PbftSetTimer>(&a)) {
        const int idx = static_cast<int>(st->timer);
        const uint64_t gen = ++n.timer_gen[idx];
        At(now_ + st->delay_ms, [this, id = n.id, idx, gen, timer = st->timer] {
          Node& node = *nodes_[id];
          if (node.up && node.timer_gen[idx] == gen)
            StepNode(node, partitions::PbftTimerFired{timer});
        });
      } else if (auto* ct = std::get_if<partitions::PbftCancelTimer>(&a)) {
        ++n.timer_gen[static_cast<int>(ct->timer)];
      } else if (auto* sw = std::get_if<partitions::PbftSnapshotWanted>(&a)) {
        OnSnapshotWanted(n, *sw);
      } else if (auto* fe = std::get_if<partitions::PbftFetchTxs>(&a)) {
        At(now_ + Rand(5, 30),
           [this, id = n.id, inc = n.incarnation, hashes = fe->tx_hashes, seq = fe->seq] {
             Node& node = *nodes_[id];
             if (!node.up || node.incarnation != inc) return;
             OnFetched(node, seq, hashes);
             StepNode(node, partitions::PbftTxsAvailable{hashes});
           });
      }
    }
    // The executor's report: at once, as in the node (the driver executes in Step order), or,
    // under delay faults, sometimes later (an asynchronous executor), lost if the node crashes.
    for (partitions::PbftExecuted& e : executed) {
      if (!result_.ok || !n.up) return;
      if (delay_ && Chance(0.3)) {
        At(now_ + Rand(1, 300), [this, id = n.id, inc = n.incarnation, e] {
          Node& node = *nodes_[id];
          if (node.up && node.incarnation == inc) StepNode(node, e);
        });
      } else {
        Apply(n, n.replica->Step(e));
      }
    }
  }

  // ---- Network ----

  void Transmit(Node& from, uint32_t to, std::shared_ptr<const ConsensusMessage> msg) {
    if (from.byz_primary && msg->has_pre_prepare()) {
      switch (rng_() % 3) {
        case 0:
          break;  // the real one
        case 1:
          msg = Equivocate(from, *msg);
          break;  // a conflicting one
        default:
          if (Chance(0.5)) return;  // nothing
          msg = WithInvalidBody(from, *msg);
          break;  // one listing a tx whose body fails its check
      }
    }
    if (from.byz_garbage && (msg->has_prepare() || msg->has_commit()) && Chance(0.5)) {
      ConsensusMessage bad = *msg;
      std::string digest = RandomBytes(rng_, 32);
      if (bad.has_prepare()) bad.mutable_prepare()->set_digest(digest);
      if (bad.has_commit()) bad.mutable_commit()->set_digest(digest);
      bad.set_signature(from.crypto.Sign(bad));
      Send(from.id, to, std::make_shared<const ConsensusMessage>(std::move(bad)));
    }
    Send(from.id, to, std::move(msg));
  }

  void Send(uint32_t from, uint32_t to, std::shared_ptr<const ConsensusMessage> msg) {
    if (nodes_[from]->isolated || nodes_[to]->isolated) return;
    if (Faulty()) {
      if (partition_ && nodes_[from]->group != nodes_[to]->group) return;
      if (loss_ && Chance(0.15)) return;
    }
    int copies = 1;
    if (Faulty() && dup_ && Chance(0.2)) copies = 1 + static_cast<int>(Rand(1, 2));
    for (int i = 0; i < copies; ++i) {
      // Under slow_quorum a proposal takes longer than the request timeout to reach a replica
      // (as a large batch whose bodies are verified on a starved CPU does); votes and view
      // changes stay fast.
      const int64_t delay = !Faulty()                         ? Rand(1, 12)
                            : slow_ && msg->has_pre_prepare() ? Rand(900, 1000)
                            : delay_                          ? Rand(1, 400)
                                                              : Rand(1, 12);
      At(now_ + delay, [this, to, msg] {
        Node& node = *nodes_[to];
        if (!node.up) return;
        ++result_.messages_delivered;
        if (drop_redundant_ && now_ >= node.paused_until && node.replica &&
            node.replica->Redundant(*msg)) {
          ++result_.redundant_dropped;
          return;
        }
        StepNode(node, partitions::PbftMessage{*msg});
      });
    }
  }

  // The bodies a fetch brings, as the node's driver admits them. Only txs some client really
  // submitted, or that a Byzantine primary listed with a body failing its check, can be fetched;
  // other invented hashes stay missing. A body whose batch (`seq`) is certified here is admitted
  // without its check; an invalid one is admitted otherwise only by a Byzantine replica.
  void OnFetched(Node& node, uint64_t seq, const std::vector<std::string>& hashes) {
    std::set<std::string> certified;
    if (node.replica && seq != 0) {
      node.replica->ForEachCertifiedTx(seq, [&](const std::string& h) { certified.insert(h); });
    }
    for (const std::string& h : hashes) {
      if (submitted_.count(h) > 0) {
        // Counted where the driver would skip a check: a correct replica, a body it lacks.
        if (node.honest() && node.pool.have.count(h) == 0) {
          result_.certified_fetches += certified.count(h);
        }
        node.pool.Add(h);
      } else if (invalid_.count(h) > 0) {
        if (node.byz_primary || node.byz_garbage) {
          node.pool.Add(h);
        } else if (certified.count(h) > 0) {
          Fail(true,
               absl::StrCat("validity: replica ", node.id,
                            " took a body that fails its check on a certificate of seq ", seq));
          return;
        } else {
          ++result_.invalid_bodies_refused;
        }
      }
    }
  }

  // The Byzantine primary's proposal for the real one's view and seq listing, besides the real
  // txs, one whose body fails its signature check: the same to every replica it goes to.
  std::shared_ptr<const ConsensusMessage> WithInvalidBody(Node& from,
                                                          const ConsensusMessage& real) {
    const auto key = std::make_pair(real.pre_prepare().view(), real.pre_prepare().seq());
    if (auto it = invalid_proposals_.find(key); it != invalid_proposals_.end()) return it->second;
    ConsensusMessage alt = real;
    auto* pp = alt.mutable_pre_prepare();
    const std::string h = partitions::ChainDigest(partitions::GenesisDigest(), invalid_.size(),
                                                  absl::StrCat("invalid", o_.seed));
    invalid_.insert(h);
    pp->add_tx_hashes(h);
    pp->set_digest(partitions::BatchDigest(pp->tx_hashes()));
    alt.set_signature(from.crypto.Sign(alt));
    auto msg = std::make_shared<const ConsensusMessage>(std::move(alt));
    invalid_proposals_.emplace(key, msg);
    return msg;
  }

  std::shared_ptr<const ConsensusMessage> Equivocate(Node& from, const ConsensusMessage& real) {
    ConsensusMessage alt = real;
    auto* pp = alt.mutable_pre_prepare();
    if (pp->tx_hashes_size() >= 2) {
      std::rotate(pp->mutable_tx_hashes()->begin(), pp->mutable_tx_hashes()->begin() + 1,
                  pp->mutable_tx_hashes()->end());
    } else if (!submitted_list_.empty()) {
      pp->clear_tx_hashes();
      pp->add_tx_hashes(submitted_list_[rng_() % submitted_list_.size()]);
    }
    pp->set_digest(partitions::BatchDigest(pp->tx_hashes()));
    alt.set_signature(from.crypto.Sign(alt));
    return std::make_shared<const ConsensusMessage>(std::move(alt));
  }

  // A Byzantine replica's noise: well-signed (as itself) but wrong content of every kind.
  void Garbage(uint32_t id) {
    Node& n = *nodes_[id];
    if (n.up && n.replica) {
      ConsensusMessage m =
          MakeGarbage(rng_, config_, n.replica->view(), n.replica->last_executed(), id, n.crypto);
      const uint32_t to = static_cast<uint32_t>(Rand(0, o_.n - 1));
      if (to != id) Send(id, to, std::make_shared<const ConsensusMessage>(std::move(m)));
    }
    At(now_ + Rand(10, 60), [this, id] { Garbage(id); });
  }

  // ---- Faults ----

  void Repartition() {
    if (!Faulty()) return;
    for (auto& n : nodes_) n->group = static_cast<int>(rng_() % 2);
    At(now_ + Rand(500, 2500), [this] { Repartition(); });
  }

  void CrashSomeone() {
    if (!Faulty()) return;
    uint32_t down = 0;
    // A diverging replica stops for good once caught: it counts against f like a crashed one.
    for (auto& n : nodes_) down += n->up && n->diverge_from == 0 ? 0 : 1;
    if (down < config_.f()) {
      Node& n = *nodes_[rng_() % o_.n];
      if (n.up && n.honest()) {
        Crash(n);
        At(now_ + Rand(100, 2000), [this, id = n.id] {
          if (!nodes_[id]->up) Restart(*nodes_[id]);
        });
      }
    }
    At(now_ + Rand(300, 1500), [this] { CrashSomeone(); });
  }

  // One honest replica at a time, for longer than the view-change timeout: it starts a view
  // change alone while the others carry on in their view.
  void IsolateSomeone() {
    if (!Faulty()) return;
    Node& n = *nodes_[rng_() % o_.n];
    if (n.up && n.honest() && !n.isolated) {
      n.isolated = true;
      At(now_ + Rand(1000, 3000), [this, id = n.id] { nodes_[id]->isolated = false; });
    }
    At(now_ + Rand(3500, 6000), [this] { IsolateSomeone(); });
  }

  // The primary of the highest view any up replica is in dies and stays down for 5x the
  // view-change timeout: the others must change view and commit without it (chaos.py's
  // kill_primary, which found a 30 s stall here). With `and_next` (f >= 2), the primary of the
  // view after it dies with it: the others need two view changes, the second after the doubled
  // timeout (netns.py's kill_cut when its cut replica leads the next view).
  void CrashPrimary(bool and_next) {
    uint64_t view = 0;
    for (auto& n : nodes_) {
      if (!n->up) return;  // one fault at a time
      view = std::max(view, n->replica->view());
    }
    Node& p = *nodes_[view % o_.n];
    Node& next = *nodes_[(view + 1) % o_.n];
    if (!p.honest() || (and_next && !next.honest())) return;
    Crash(p);
    if (and_next) Crash(next);
    const uint64_t seq = max_seq_;
    const int64_t bound = 5 * config_.view_change_timeout_ms;
    At(now_ + bound, [this, id = p.id, next_id = and_next ? next.id : p.id, seq, bound] {
      if (max_seq_ <= seq) {
        std::string states;
        for (auto& n : nodes_) {
          if (!n->up) continue;
          absl::StrAppend(&states, " [", n->id, ": view ", n->replica->view(), " ",
                          partitions::ConsensusStateName(n->replica->state()),
                          n->replica->observing() ? " observing" : "", ", ",
                          n->replica->view_change_votes(), " ViewChanges, executed ",
                          n->replica->last_executed(), "]");
        }
        Fail(false, absl::StrCat("liveness: no commit within ", bound, "ms of the primary (", id,
                                 next_id != id ? absl::StrCat(" and the next, ", next_id) : "",
                                 ") crashing (stuck at seq ", seq, "):", states));
      }
      for (const uint32_t down : {id, next_id}) {
        if (!nodes_[down]->up) Restart(*nodes_[down]);
      }
    });
  }

  void PauseSomeone() {
    if (!Faulty()) return;
    Node& n = *nodes_[rng_() % o_.n];
    if (n.up && n.honest() && now_ >= n.paused_until) n.paused_until = now_ + Rand(1000, 3000);
    At(now_ + Rand(3500, 6000), [this] { PauseSomeone(); });
  }

  void SlowQuorumStalled(int64_t from_ms, int64_t to_ms) {
    Fail(false, absl::StrCat("liveness: exactly a quorum, its proposals late, committed nothing "
                             "from ",
                             from_ms, " to ", to_ms, " ms (",
                             nodes_[0]->replica->counters().view_changes_started,
                             " view changes started by replica 0)"));
  }

  // kQuietRejoin. Clients are silent in [QuietFrom(), QuietUntil()); the faults heal at
  // fault_end_ms, after the check (QuietUntil() + the request timeout).
  int64_t QuietFrom() const { return o_.fault_end_ms * 2 / 5; }
  int64_t QuietUntil() const { return o_.fault_end_ms * 3 / 5; }

  // A backup goes down at once (half the seeds: it is cut off instead, and never restarts) and
  // comes back while the partition is quiet, the others by then many windows ahead of its low
  // watermark. Nothing it hears while quiet says it is behind. Then f others crash, so every
  // commit needs it; they stay down until the faults heal. Clients send again: the remaining
  // quorum, whose primary is correct, must commit before the request timeout, with no view
  // change.
  void ScheduleQuietRejoin() {
    if (o_.n < 4 || QuietUntil() + config_.request_timeout_ms >= o_.fault_end_ms ||
        QuietFrom() <= 200 + static_cast<int64_t>(config_.window) * o_.submit_every_ms) {
      Fail(false, absl::StrCat("quiet_rejoin needs n >= 4 and a longer fault_end_ms (got n = ",
                               o_.n, ", fault_end_ms = ", o_.fault_end_ms, ")"));
      return;
    }
    const uint32_t laggard = 1 + static_cast<uint32_t>(rng_() % (o_.n - 1));
    const bool cut_off = o_.seed / 2 % 2 == 1;
    if (cut_off) {
      nodes_[laggard]->isolated = true;  // from the start: nothing pending, no view change alone
    } else {
      At(Rand(50, 200), [this, laggard] { Crash(*nodes_[laggard]); });
    }
    const int64_t quiet = QuietUntil() - QuietFrom();
    At(QuietFrom() + quiet / 3, [this, laggard, cut_off] {
      if (cut_off) {
        nodes_[laggard]->isolated = false;
      } else {
        Restart(*nodes_[laggard]);
      }
    });
    At(QuietFrom() + 2 * quiet / 3, [this, laggard] {
      std::vector<uint32_t> others;
      for (uint32_t i = 1; i < o_.n; ++i) {
        if (i != laggard) others.push_back(i);
      }
      std::shuffle(others.begin(), others.end(), rng_);
      for (uint32_t i = 0; i < config_.f(); ++i) Crash(*nodes_[others[i]]);
    });
    At(QuietUntil(), [this, laggard] {
      const uint64_t at_resume = max_seq_;
      const int64_t bound = config_.request_timeout_ms;
      At(QuietUntil() + bound, [this, laggard, at_resume, bound] {
        uint64_t view_changes = 0;
        for (auto& n : nodes_) {
          if (n->up) view_changes += n->replica->counters().view_changes_started;
        }
        if (max_seq_ > at_resume && view_changes == 0) return;
        const PbftReplica& r = *nodes_[laggard]->replica;
        Fail(false, absl::StrCat(
                        "liveness: a quorum with replica ", laggard,
                        " (rejoined while quiet) committed ", max_seq_ - at_resume,
                        " batches in the ", bound, " ms after clients resumed, with ", view_changes,
                        " view changes started since the start (it executed ", r.last_executed(),
                        " of ", max_seq_, ", low watermark ", r.low_watermark(), ", view ",
                        r.view(), ", ", partitions::ConsensusStateName(r.state()), ")"));
      });
    });
  }

  void Heal() {
    for (auto& n : nodes_) {
      n->group = 0;
      n->isolated = false;
      if (!n->up) Restart(*n);
    }
    healed_seq_ = max_seq_;
    At(o_.fault_end_ms + o_.liveness_bound_ms, [this] {
      if (max_seq_ <= healed_seq_) {
        Fail(false, absl::StrCat("liveness: no new commit within ", o_.liveness_bound_ms,
                                 "ms after healing (stuck at seq ", max_seq_, ")"));
      }
    });
  }

  // ---- Clients and checks ----

  void Submit() {
    const std::string h = partitions::ChainDigest(partitions::GenesisDigest(), submitted_.size(),
                                                  absl::StrCat("tx", o_.seed));
    submitted_.insert(h);
    submitted_list_.push_back(h);
    for (auto& n : nodes_) {
      // Under loss, forwarding of some txs to some replicas is late (after healing): those
      // replicas fetch them when a pre-prepare needs them.
      const int64_t when =
          Faulty() && loss_ && Chance(0.1) ? o_.fault_end_ms + Rand(1, 3000) : now_ + Rand(1, 30);
      At(when, [this, id = n->id, h] {
        Node& node = *nodes_[id];
        // Under quiet_rejoin a replica cut off hears from no client either; it fetches the txs
        // its batches need once back.
        if (quiet_ && node.isolated) return;
        node.pool.Add(h);
        if (node.up) StepNode(node, partitions::PbftTxsAvailable{{h}});
      });
    }
  }

  // ---- Snapshot sync, modelled: the fetch takes a while; it completes only while f+1 correct
  // replicas that are up can serve the state at its seq (executed it, and installed no later
  // snapshot), since the fetcher needs f+1 identical manifests. Stalled with a newer one wanted,
  // it switches to that, as the driver does.

  void OnSnapshotWanted(Node& n, const partitions::PbftSnapshotWanted& wanted) {
    // What a stable checkpoint names must be what correct replicas executed there.
    auto it = executed_state_.find(wanted.seq);
    if (it == executed_state_.end() || it->second.first != wanted.chain_digest ||
        it->second.second != wanted.state_root) {
      Fail(true, absl::StrCat("snapshot: replica ", n.id, " wants a state at seq ", wanted.seq,
                              " that no correct replica executed"));
      return;
    }
    if (n.snapshot) {
      n.newest_snapshot = wanted;
      return;
    }
    n.snapshot = wanted;
    At(now_ + Rand(20, 200), [this, id = n.id, inc = n.incarnation] { TrySnapshot(id, inc, 0); });
  }

  void TrySnapshot(uint32_t id, uint64_t inc, int stalls) {
    Node& n = *nodes_[id];
    if (!n.up || n.incarnation != inc || !n.snapshot || !result_.ok) return;
    const partitions::PbftSnapshotWanted target = *n.snapshot;
    int servers = 0;
    for (auto& p : nodes_) {
      if (p->id != id && p->up && p->honest() && p->ledger.history_from <= target.seq &&
          p->ledger.last >= target.seq) {
        ++servers;
      }
    }
    if (servers < static_cast<int>(config_.f()) + 1) {
      if (stalls >= 2 && n.newest_snapshot) {
        n.snapshot = std::move(n.newest_snapshot);
        n.newest_snapshot.reset();
        stalls = -1;
      }
      At(now_ + Rand(50, 300), [this, id, inc, stalls] { TrySnapshot(id, inc, stalls + 1); });
      return;
    }
    n.snapshot.reset();
    n.newest_snapshot.reset();
    if (target.seq <= n.ledger.last) return;
    n.ledger.last = target.seq;
    n.ledger.chain = target.chain_digest;
    n.ledger.root = target.state_root;
    n.ledger.history_from = target.seq;
    // The installed state includes the skipped batches' txs: they leave the pool (the node's
    // TxPool::Resync drops them by nonce).
    for (auto it = executed_txs_.begin(); it != executed_txs_.end() && it->first <= target.seq;
         ++it) {
      for (const std::string& h : it->second) n.pool.Commit(h);
    }
    ++snapshots_installed_;
    StepNode(n, partitions::PbftSnapshotInstalled{.seq = target.seq,
                                                  .chain_digest = target.chain_digest});
  }

  void OnCommit(Node& n, const partitions::PbftCommit& c) {
    if (c.seq != n.ledger.last + 1) {
      Fail(n.honest(), absl::StrCat("order: replica ", n.id, " executed seq ", c.seq, " after ",
                                    n.ledger.last));
      return;
    }
    CommittedBatch batch;
    batch.set_seq(c.seq);
    for (const std::string& h : c.tx_hashes) *batch.add_tx_hashes() = h;
    for (const ConsensusMessage& m : c.certificate) *batch.add_commit_certificate() = m;
    n.ledger.batches[c.seq] = std::move(batch);
    n.ledger.last = c.seq;
    if (retain_ > 0 && c.seq + 1 > retain_) {
      const uint64_t below = c.seq + 1 - retain_;
      auto end = n.ledger.batches.lower_bound(below);
      result_.batches_pruned += static_cast<uint64_t>(std::distance(n.ledger.batches.begin(), end));
      n.ledger.batches.erase(n.ledger.batches.begin(), end);
      n.ledger.history_from = std::max(n.ledger.history_from, below);
    }
    n.ledger.chain = c.chain_digest;
    // The planted nondeterminism: from diverge_from on, this executor hashes something else.
    const bool planted = n.diverge_from != 0 && c.seq >= n.diverge_from;
    n.ledger.root = partitions::ChainDigest(
        n.ledger.root, c.seq, planted ? partitions::BatchDigest({c.digest}) : c.digest);
    for (const std::string& h : c.tx_hashes) n.pool.Commit(h);
    if (n.honest()) {
      executed_state_.try_emplace(c.seq, c.chain_digest, n.ledger.root);
      executed_txs_.try_emplace(c.seq, c.tx_hashes);
    }
    if (n.byz_primary || n.byz_garbage) return;  // a diverging replica still orders honestly
    auto [it, inserted] = decided_.emplace(c.seq, c.digest);
    if (!inserted && it->second != c.digest) {
      Fail(true, absl::StrCat("agreement: replica ", n.id, " committed a different batch at seq ",
                              c.seq));
      return;
    }
    for (const std::string& h : c.tx_hashes) {
      if (submitted_.count(h) == 0) {
        Fail(true, absl::StrCat("validity: replica ", n.id, " committed an unsubmitted tx at seq ",
                                c.seq));
        return;
      }
      committed_txs_.insert(h);
    }
    max_seq_ = std::max(max_seq_, c.seq);
    result_.max_committed_seq = max_seq_;
  }

  // A planted nondeterminism must be caught: once the others made a checkpoint after its seq
  // stable, the replica is DIVERGED at or after that seq, with roots that differ.
  void CheckDivergence() {
    for (auto& n : nodes_) {
      if (n->diverge_from == 0 || !result_.ok) continue;
      const uint64_t caught_by =
          (n->diverge_from / config_.checkpoint_interval + 2) * config_.checkpoint_interval;
      if (max_seq_ < caught_by) continue;  // the others never got that far
      if (!n->replica || !n->replica->divergence()) {
        Fail(false,
             absl::StrCat("divergence: replica ", n->id, " planted at seq ", n->diverge_from,
                          " ends ",
                          n->replica ? partitions::ConsensusStateName(n->replica->state()) : "down",
                          " at seq ", n->ledger.last, " of ", max_seq_));
        continue;
      }
      const PbftReplica::Divergence& d = *n->replica->divergence();
      if (d.seq < n->diverge_from || d.own_state_root == d.agreed_state_root) {
        Fail(false, absl::StrCat("divergence: replica ", n->id, " planted at seq ", n->diverge_from,
                                 " reported ", d.ToString()));
      }
    }
  }

  void CheckEndLiveness() {
    uint64_t missing = 0;
    for (const std::string& h : submitted_) missing += committed_txs_.count(h) == 0 ? 1 : 0;
    if (missing > 0) {
      Fail(false, absl::StrCat("liveness: ", missing, " of ", submitted_.size(),
                               " submitted txs never committed"));
    }
    // Long after the faults healed, no correct replica may be left behind: not stuck in a view
    // change the others never joined, not short of what they executed.
    for (auto& n : nodes_) {
      if (!n->up || !n->honest() || !result_.ok) continue;
      if (n->replica->state() != partitions::ConsensusState::kNormal) {
        Fail(false, absl::StrCat("liveness: replica ", n->id, " ends in state ",
                                 partitions::ConsensusStateName(n->replica->state()), " at view ",
                                 n->replica->view()));
      } else if (n->ledger.last < max_seq_) {
        Fail(false, absl::StrCat("liveness: replica ", n->id, " ends at seq ", n->ledger.last,
                                 " of ", max_seq_));
      }
    }
  }

  const SimOptions o_;
  partitions::PbftConfig config_;
  // seq -> (chain digest, state root) after it, as the first correct replica executed it.
  std::map<uint64_t, std::pair<std::string, std::string>> executed_state_;
  std::map<uint64_t, std::vector<std::string>> executed_txs_;  // seq -> its batch
  uint64_t snapshots_installed_ = 0;
  uint64_t retain_ = 0;  // batches each ledger keeps (0: every one)
  std::mt19937_64 rng_;
  bool loss_, dup_, delay_, partition_, crash_, isolate_, pause_, slow_, quiet_;
  bool drop_redundant_;  // as the node's driver: surplus votes never reach the replica
  const bool trace_ = std::getenv("SIM_TRACE") != nullptr;
  int last_event_ = -1;  // SIM_TRACE: variant index; 100 + timer; 200 + message body case
  std::vector<std::unique_ptr<Node>> nodes_;
  std::priority_queue<Event> queue_;
  uint64_t next_order_ = 0;
  int64_t now_ = 0;
  SimResult result_;
  std::set<std::string> submitted_;
  std::vector<std::string> submitted_list_;
  // Hashes of txs whose bodies fail their signature check, listed by a Byzantine primary; and
  // its proposals listing one, by (view, seq).
  std::set<std::string> invalid_;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const ConsensusMessage>>
      invalid_proposals_;
  std::set<std::string> committed_txs_;
  std::map<uint64_t, std::string> decided_;
  uint64_t max_seq_ = 0;
  uint64_t healed_seq_ = 0;
};

}  // namespace

const std::vector<FaultKind>& AllFaultKinds() {
  static const std::vector<FaultKind> kinds = {
      FaultKind::kNone,       FaultKind::kDelay,        FaultKind::kLoss,
      FaultKind::kDuplicate,  FaultKind::kPartition,    FaultKind::kCrash,
      FaultKind::kByzPrimary, FaultKind::kByzReplica,   FaultKind::kIsolate,
      FaultKind::kPause,      FaultKind::kCrashPrimary, FaultKind::kDiverge,
      FaultKind::kMixed,      FaultKind::kSlowQuorum,   FaultKind::kQuietRejoin};
  return kinds;
}

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kNone:
      return "none";
    case FaultKind::kDelay:
      return "delay";
    case FaultKind::kLoss:
      return "loss";
    case FaultKind::kDuplicate:
      return "duplicate";
    case FaultKind::kPartition:
      return "partition";
    case FaultKind::kCrash:
      return "crash";
    case FaultKind::kByzPrimary:
      return "byz_primary";
    case FaultKind::kByzReplica:
      return "byz_replica";
    case FaultKind::kIsolate:
      return "isolate";
    case FaultKind::kPause:
      return "pause";
    case FaultKind::kCrashPrimary:
      return "crash_primary";
    case FaultKind::kDiverge:
      return "diverge";
    case FaultKind::kMixed:
      return "mixed";
    case FaultKind::kSlowQuorum:
      return "slow_quorum";
    case FaultKind::kQuietRejoin:
      return "quiet_rejoin";
  }
  return "unknown";
}

std::optional<FaultKind> ParseFaultKind(const std::string& name) {
  for (FaultKind k : AllFaultKinds()) {
    if (name == FaultKindName(k)) return k;
  }
  return std::nullopt;
}

SimResult RunSimulation(const SimOptions& options) { return Cluster(options).Run(); }

std::string ReplayCommand(const SimOptions& o) {
  return absl::StrCat("build/tests/pbft_sim_runner --seed ", o.seed, " --fault ",
                      FaultKindName(o.fault), " --n ", o.n);
}

}  // namespace sim
