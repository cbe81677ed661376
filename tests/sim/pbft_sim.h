// Deterministic cluster simulation of PbftReplica (partitions/pbft_replica.h).
//
// One seeded run drives n replicas (4 or 7) through a simulated network with a priority queue of
// timed events: message delay and reordering, loss, duplication, network partitions and healing,
// crash and restart from persisted state (in-memory store + ledger that survive the crash), a
// Byzantine primary that equivocates, and a Byzantine replica that sends garbage and conflicting
// votes. Messages are authenticated by construction: the transport carries the true sender, and a
// Byzantine node can sign only with its own key (it can lie in content only).
//
// Execution reports state roots back (PbftExecuted), at once or, under delay faults, later.
//
// A Byzantine primary also proposes batches listing a tx whose body fails its signature check,
// which a colluding Byzantine replica prepares. A fetched body is admitted unchecked only when its
// batch is certified at the fetching replica (PbftReplica::ForEachCertifiedTx); a correct replica
// taking such a body that way is a validity violation. This models the node's rule with the
// fetch's own seq and the fetch path only: ConsensusDriver's tracker marks (latest seq, eviction)
// and forwarded copies of wanted bodies are tested in consensus_driver_test, not here.
//
// Checked after every step: agreement (no two honest replicas commit different batches at one
// seq), validity (every committed tx hash was submitted by a client), in-order execution; after
// the faults heal, liveness (new commits within a bound, every tx submitted before the end
// margin is committed by a correct replica, and at the end every correct replica that is up is
// NORMAL and has executed everything any replica executed). No correct replica may ever halt or
// be DIVERGED; a replica with a planted nondeterminism must end DIVERGED at or after its seq.
//
// Single-threaded; RunSimulation is a pure function of its options.
//
//   SimOptions options{.seed = 42, .fault = FaultKind::kPartition, .n = 4};
//   SimResult r = RunSimulation(options);
//   if (!r.ok) std::cerr << r.failure << "\n  replay: " << ReplayCommand(options);
#ifndef TESTS_SIM_PBFT_SIM_H_
#define TESTS_SIM_PBFT_SIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sim {

enum class FaultKind {
  kNone,
  kDelay,         // large random delays (heavy reordering)
  kLoss,          // random message loss (and txs that must be fetched)
  kDuplicate,     // random duplication
  kPartition,     // network partitions that change, then heal
  kCrash,         // crash and restart from persisted state
  kByzPrimary,    // primary of view 0 equivocates (different pre-prepares to different replicas)
  kByzReplica,    // a replica sends garbage and conflicting votes
  kIsolate,       // one replica at a time is cut off for longer than the view-change timeout
  kPause,         // one replica at a time is suspended (SIGSTOP): its events wait, then all run
  kCrashPrimary,  // the current primary crashes 3 times in a row; the others must commit without it
                  // (at n = 7 the second time with the next view's primary: two view changes)
  kDiverge,       // one replica's executor computes another state root from some seq on: it must
                  // end DIVERGED while the others go on (with delays; at n = 7 also crashes)
  kMixed,         // all of the above but kDiverge at once (Byzantine ones within f)
  kSlowQuorum,    // f replicas down, and every pre-prepare arrives later than the request
                  // timeout (votes stay fast): exactly a quorum must still commit in the window
  kQuietRejoin,   // a replica down while the others commit far past its window comes back while
                  // the partition is quiet, then f others crash: that quorum must commit once
                  // clients send again
};
const std::vector<FaultKind>& AllFaultKinds();
const char* FaultKindName(FaultKind kind);
std::optional<FaultKind> ParseFaultKind(const std::string& name);

struct SimOptions {
  uint64_t seed = 1;
  FaultKind fault = FaultKind::kNone;
  uint32_t n = 4;
  int64_t fault_end_ms = 5000;        // faults are active in [0, fault_end_ms), then heal
  int64_t liveness_bound_ms = 10000;  // after healing, new commits must appear within this
  int64_t duration_ms = 20000;        // total simulated time
  int64_t submit_every_ms = 50;       // one client tx per this period
  int64_t submit_until_ms = 14000;    // txs submitted before this must be committed by the end
  uint32_t batch_max = 8;
};

struct SimResult {
  bool ok = true;
  std::string failure;            // first violation, empty when ok
  bool safety_violation = false;  // agreement, validity or order (never acceptable)
  uint64_t max_committed_seq = 0;
  uint64_t submitted = 0;
  uint64_t committed_txs = 0;  // distinct submitted txs committed by some correct replica
  uint64_t view_changes = 0;
  uint64_t synced_batches = 0;
  uint64_t snapshots_installed = 0;  // PbftSnapshotInstalled steps (even seeds allow snapshots)
  uint64_t batches_pruned = 0;       // by every ledger (seeds divisible by 4 prune)
  uint64_t messages_delivered = 0;
  uint64_t dropped_by_replicas = 0;
  // Prepares and commits dropped on delivery because the receiver's quorum for them was already
  // complete (PbftReplica::Redundant), as the node's ConsensusDriver drops them unverified. Every
  // seed not divisible by 5 drops them; the rest step them, as before.
  uint64_t redundant_dropped = 0;
  // Fetched bodies of a batch certified at the fetching correct replica, which the node admits
  // without their own signature check (ConsensusDriver::OnTxBatch): valid ones it lacked taken
  // that way, and bodies that fail their check (a Byzantine primary's proposals list them)
  // refused because their batch was not certified. One of those taken on a certificate is a
  // safety violation.
  uint64_t certified_fetches = 0;
  uint64_t invalid_bodies_refused = 0;
};

SimResult RunSimulation(const SimOptions& options);

// One line that replays `options` with the runner binary.
std::string ReplayCommand(const SimOptions& options);

}  // namespace sim

#endif  // TESTS_SIM_PBFT_SIM_H_
