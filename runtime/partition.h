// Partition: one chain of the node, composed from the parts in flowctl/, p2p/ and partitions/.
//
//   client request --> interceptor chain (raw bytes only: in-flight, health, pool, rate)
//        |  rejected: RESOURCE_EXHAUSTED / UNAVAILABLE with the stage's reason and retry-after
//        v  admitted
//   decode (cheap) --> "client" dispatcher lane on the worker pool: Ed25519 verify, pool add,
//        forward to peers on TX_FORWARD (batched) --> done callback (or a commit waiter)
//   lossless mode: admitted requests are appended to a SpillFifo instead (ack = durable under
//        the configured policy); a QuotaDrain moves them into the client lane at the set rate.
//
//   peer message --> OnPeerMessage (transport thread: frame header only) --> lane by channel
//        (consensus, sync, tx_forward, bulk; drop when full) --> lane handler: decode, verify the
//        envelope signature, PbftReplica::Step under the consensus mutex, apply the actions.
//
//   PbftCommit --> executor (deterministic) --> one atomic ledger write (block, receipts, state,
//        commit certificate, chain digest) --> pool.RemoveCommitted --> commit waiters.
//
// Ticks drive time: consensus timers, the batch policy (the primary cuts a batch from the pool
// when full or when the oldest tx waited batch_timeout_ms), pool expiry, waiter deadlines and
// forwarding flushes. A partition has no thread: the node's TickScheduler offers a tick to the
// partition's tick lane when one is due, and the tick runs on the worker pool like any lane.
//
// Replica identity: every node of the cluster runs every partition; replica index = position of
// the node id in the sorted list of all node ids (self + peers), the same on every node.
//
// Thread-safety: every public method may be called from any thread after Open(). Submit callbacks
// run on a worker-pool thread, or inline when rejected early; they must not block.
//
//   ASSIGN_OR_RETURN(auto part, Partition::Open(std::move(env)));
//   RETURN_IF_ERROR(part->Start());
//   part->Submit(bytes, {}, [](SubmitResult r) { ... });
//   part->Stop();
#ifndef RUNTIME_PARTITION_H_
#define RUNTIME_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "flowctl/block_budget.h"
#include "flowctl/clock.h"
#include "flowctl/dispatcher.h"
#include "flowctl/histogram.h"
#include "flowctl/memory_pressure.h"
#include "flowctl/node_admission.h"
#include "flowctl/peer_admission.h"
#include "flowctl/resource_consumer.h"
#include "flowctl/tick_scheduler.h"
#include "flowctl/worker_pool.h"
#include "p2p/channel.h"
#include "p2p/network.h"
#include "partitions/client_admission.h"
#include "proto/admin.pb.h"
#include "proto/chain.pb.h"
#include "proto/client.pb.h"
#include "proto/config.pb.h"
#include "runtime/commit_stream.h"
#include "runtime/peer_refusals.h"

namespace rocksdb {
class Cache;
}  // namespace rocksdb

namespace runtime {

// What a partition needs from the node. Pointers outlive the partition.
struct PartitionEnv {
  node::config::PartitionConfig config;  // after ApplyDefaults + validation
  std::string dir;                       // e.g. <data_dir>/partition-<id>; created if missing
  flowctl::WorkerPool* pool = nullptr;
  p2p::Network* network = nullptr;
  std::optional<base::PrivateKey> key;        // this node's key (required)
  std::vector<p2p::NodeId> replica_ids;       // sorted; includes self
  std::vector<base::PublicKey> replica_keys;  // same order as replica_ids
  const flowctl::Clock* clock = flowctl::Clock::Real();
  // Channel descriptors: which lane each p2p channel feeds and which message kinds it may carry
  // (the egress valve's table). Null: partitions::NodeChannelTable().
  const p2p::ChannelTable* channels = nullptr;
  // The node's timer (required): it offers this partition's ticks to its tick lane.
  flowctl::TickScheduler* scheduler = nullptr;
  // Longest time between two ticks. Only a backstop: a tick is asked for at every time the
  // partition needs one (consensus timers, batch cut deadlines, held forwarding, commit waiters'
  // deadlines, the pool's expiry sweep) and by every event that gives it work, so an idle
  // partition costs next to nothing.
  absl::Duration tick = absl::Seconds(1);
  // The node's per-peer refusal counts (runtime/peer_refusals.h); null: not counted per peer.
  PeerRefusals* refusals = nullptr;
  // The node's memory pressure (flowctl/memory_pressure.h); null: none. Under it, client writes
  // are refused (rejected_by kMemoryPressureStage) and forwarded txs dropped on arrival.
  flowctl::MemoryPressure* memory_pressure = nullptr;
  // The node's block budget (flowctl/block_budget.h): spaces this partition's partial batches
  // while other partitions have work too. Registered at Start with the share weight (times the
  // admit fraction node-wide admission applies, at each of its ticks), removed at Stop. Null: no
  // spacing.
  flowctl::BlockBudget* block_budget = nullptr;
  // The ledger's write buffer (partitions::LedgerOptions::write_buffer_bytes): the node's
  // resources.ledger_write_buffer_bytes divided among its running partitions. 0: RocksDB's
  // default.
  size_t ledger_write_buffer_bytes = 0;
  // The block cache the node's consensus stores share (partitions::ConsensusStoreOptions); null:
  // a small one of the store's own.
  std::shared_ptr<rocksdb::Cache> consensus_store_cache;
  // ResourceConfig.fixed_retry_after: refusals carry the fixed retry-after hints (100 ms pool,
  // 50 ms lane), not the ones computed from the measured commit and service rates.
  bool fixed_retry_after = false;
  // Fault tests only (noded --test-equivocate): a faulty primary, ConsensusDriver::Deps.
  bool test_equivocate = false;
  // Fault tests only (noded --test-withhold): ConsensusDriver::Deps::withhold.
  bool test_withhold = false;
  // Fault tests only (noded --test-diverge): block at this height executes differently here
  // (Executor::PlantNondeterminismForTest); 0: never.
  uint64_t test_diverge_height = 0;
};

// What a write refused under node memory pressure names as the refusing stage, and its hint (the
// pressure is sampled every arbiter tick; PSI's 10 s average falls slowly).
inline constexpr char kMemoryPressureStage[] = "memory_pressure";
inline constexpr absl::Duration kMemoryPressureRetryAfter = absl::Seconds(1);
// Client writes the node-wide admission sheds (flowctl/node_admission.h) are refused with
// RESOURCE_EXHAUSTED, rejected by this name, with this hint (a few arbiter ticks: the fraction
// moves once per tick).
inline constexpr char kNodeAdmissionStage[] = "node_admission";
// The rejected-by of a read refused by the read hold itself (runtime/read_hold.h).
inline constexpr char kReadHoldStage[] = "read_hold";
inline constexpr absl::Duration kNodeAdmissionRetryAfter = absl::Milliseconds(500);

// The outcome of one submitted tx and the submit options (partitions/client_admission.h).
using SubmitResult = partitions::SubmitResult;
using SubmitOptions = partitions::SubmitOptions;

// What a partition's ledger holds in memory now (Partition::ledger_memory).
struct LedgerMemoryUse {
  uint64_t memtable_bytes = 0;
  uint64_t block_cache_bytes = 0;  // pinned blocks included
  uint64_t block_cache_capacity = 0;
  // The partition's consensus store (its own RocksDB): its memtables and its tables' readers.
  uint64_t consensus_store_memtable_bytes = 0;
  uint64_t consensus_store_table_reader_bytes = 0;
};

// A Partition is a flowctl::ResourceConsumer: the node's arbiter (flowctl/arbiter_service.h)
// reads its usage and applies its CPU and memory shares through that interface.
class Partition final : public flowctl::ResourceConsumer {
 public:
  using SubmitDone = absl::AnyInvocable<void(SubmitResult)>;
  using BatchDone = absl::AnyInvocable<void(std::vector<SubmitResult>)>;

  // Opens the ledger, the consensus store, the replica and (lossless) the spill FIFO.
  // Errors name what failed (e.g. the ledger directory or the replica set).
  static absl::StatusOr<std::unique_ptr<Partition>> Open(PartitionEnv env);
  ~Partition() override;  // Stop()
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;

  // Starts consensus, the ticker and (lossless) the drain. Call once.
  absl::Status Start();
  // Stops admitting (new requests get UNAVAILABLE "shutting down"), drains the lanes for up to
  // `drain`, finishes every pending callback, stops the threads and closes the stores.
  // Idempotent.
  void Stop(absl::Duration drain = absl::Seconds(5));

  // ---- Client path. `done` is called exactly once. ----
  void Submit(std::string signed_tx, const SubmitOptions& options, SubmitDone done);
  // Each tx is admitted on its own (one result per tx, in order); verification runs as one job.
  void SubmitBatch(std::vector<std::string> signed_txs, const SubmitOptions& options,
                   BatchDone done);

  // ---- Peer path (called from transport threads; never blocks). ----
  void OnPeerMessage(const p2p::NodeId& from, p2p::Channel channel, std::string payload);

  // ---- Reads. ----
  // The read chain's decision (PartitionConfig.read_interceptor) for one read of `size_bytes`
  // from `client`: checked before the read does any work; the caller keeps the Admission until
  // the read is answered (a concurrency stage's permit). Never blocks; thread-safe.
  flowctl::Admission AdmitRead(uint64_t size_bytes, absl::string_view client) const;
  // PartitionConfig.read_hold as of now: the longest a read the chain refuses waits for it (0:
  // refused at once) and how many may wait (runtime/read_hold.h). Thread-safe.
  struct ReadHoldLimits {
    int64_t max_wait_ns = 0;
    size_t max_waiting = 1024;
  };
  ReadHoldLimits read_hold() const;
  // Stop has begun (or ended). Thread-safe.
  bool stopping() const;

  // ---- Queries. NOT_FOUND for unknown hashes/heights. ----
  absl::StatusOr<node::client::GetTxResponse> GetTx(const std::string& tx_hash) const;
  absl::StatusOr<node::client::GetAccountResponse> GetAccount(const std::string& address) const;
  // Height 0 = the latest committed block (genesis while none is).
  absl::StatusOr<node::client::GetBlockResponse> GetBlock(uint64_t height, bool include_txs) const;
  node::client::GetChainStatusResponse ChainStatus() const;
  // A key of the Put store. Height 0 = the latest state, else its value as of that block
  // (the ledger's undo records); OUT_OF_RANGE beyond the tip.
  absl::StatusOr<node::client::GetValueResponse> GetValue(const std::string& key,
                                                          uint64_t height) const;

  // ---- Commit stream (ClientService.WatchCommits; runtime/commit_stream.h). ----
  // A watcher of this partition's committed blocks; errors and `wake` as CommitStreamHub::Watch.
  // After Stop: UNAVAILABLE.
  absl::StatusOr<std::shared_ptr<CommitWatcher>> WatchCommits(const CommitWatcher::Options& options,
                                                              absl::AnyInvocable<void()> wake);

  // ---- Admin. ----
  node::admin::PartitionStatus Status() const;
  // The arbiter's cpu/memory/egress figures are not here: the node adds them (Node::FlowStats).
  node::admin::PartitionFlowStats FlowStats() const;
  // Validates the whole config the request would leave first (runtime/config_validation.h:
  // InvalidArgument with the messages config loading gives, "partitions[hot].pool.max_txs: ...")
  // and then applies interceptor, lane weights / budget and pool limits together; on error
  // nothing changes. Returns the effective config.
  absl::StatusOr<node::config::PartitionConfig> UpdateFlow(
      const node::admin::UpdatePartitionFlowRequest& request);
  node::config::PartitionConfig config() const;
  void Pause();
  void Resume();
  bool paused() const;

  // ---- flowctl::ResourceConsumer (the arbiter calls these). ----
  node::config::ShareConfig share_config() const override;
  void SetShareConfig(const node::config::ShareConfig& share) override;
  // CPU since the last call: the dispatcher's worker-pool time plus the thread CPU of the
  // partition's work elsewhere (client calls on gRPC threads, the lossless drain thread);
  // backlogged = a lane holds messages; memory = pool + lane + spill-memory bytes + state cache,
  // limit = their configured sum.
  flowctl::ConsumerUsage TakeUsage() override;
  // kCpu sets the dispatcher group's CPU share; kMemory caps, each by its configured part of the
  // partition's memory, the pool's byte limit, the lanes' byte budget (Dispatcher::SetByteCap:
  // the tx-forwarding, bulk and client lanes; consensus and sync keep theirs), the spill memory
  // tier and the state cache, never above their configured values; kEgress is ignored (the
  // arbiter weights the egress scheduler itself).
  void ApplyShare(flowctl::Resource resource, double amount) override;
  // Holds the dispatcher's worker-pool group to `cores` (0 = none; ShareConfig.hard_ceiling).
  void ApplyCpuLimit(double cores) override;

  // ---- Node-wide admission (the node calls these after each arbiter tick). ----
  // This partition's load over the last tick: worker CPU used and entitled (the arbiter's CPU
  // entitlement), its consensus lane's delay signal, whether work was queued.
  flowctl::NodeAdmission::PartitionLoad AdmissionLoad() const;
  // This node's own admit fraction for the partition's client writes (Submit / SubmitBatch
  // calls), in [floor, 1]. What is let through is the smaller of it and the fraction the
  // replicas agree on (the (f+1)-th lowest of theirs, flowctl/peer_admission.h), never below
  // `floor`; own goes to the other replicas while it is below 1 (PartitionMessage.admission).
  // Without `with_peers` (node_admission.agree_with_peers false) own alone is let through and
  // nothing is sent.
  void SetAdmitFraction(double own, double floor, bool with_peers);
  // What is let through now.
  double admit_fraction() const;
  // This node's own fraction and the other replicas heard to cut the partition's client writes.
  flowctl::PeerAdmission::Snapshot peer_admission() const;
  // Client calls refused by the node-wide admission since Open.
  uint64_t admission_refused() const;

  // Over the last arbiter tick (nothing at its first): the queueing delays of the messages its
  // lanes started (Offer to handler; the tick lane left out), their sum and count, and the blocks
  // it committed (not those a snapshot skipped). The node's block budget adapts to them
  // (flowctl/block_budget.h).
  flowctl::BlockBudget::PartitionTick BlockBudgetTick() const;

  // The ledger's write buffer, changed live (the node re-divides its memtable budget as
  // partitions come and go, and under memory pressure), and what its memtables and block cache
  // hold now.
  absl::Status SetLedgerWriteBufferBytes(size_t bytes);
  LedgerMemoryUse ledger_memory() const;

  uint32_t id() const override { return id_; }
  const std::string& name() const override { return name_; }
  uint64_t height() const;
  bool lossless() const;
  // Consensus state name: "NORMAL", "VIEW_CHANGE", "RECOVERING" (or "HALTED" after a store error,
  // "DIVERGED" after its state root differed from an agreed one).
  std::string consensus_state() const;

 private:
  class Impl;
  explicit Partition(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  const uint32_t id_;
  const std::string name_;
};

}  // namespace runtime

#endif  // RUNTIME_PARTITION_H_
