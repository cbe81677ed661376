// Node: everything one `noded` process runs, composed and started in order, stopped in reverse.
//
//   Start:  data dir + key -> worker pool, tick scheduler (one timer for every partition) ->
//           p2p transport + egress valve over it -> partitions (ledger, consensus store,
//           replica; then Start) -> arbiter tick -> client and admin gRPC servers -> metrics.
//   Stop:   servers stop taking calls (in-flight ones finish, up to the drain time) -> arbiter ->
//           partitions (drain lanes, finish callbacks, close stores) -> tick scheduler ->
//           egress valve -> transport -> pool.
//
// The arbiter is a flowctl::ArbiterService (flowctl/arbiter_service.h) ticking every
// resources.arbiter_tick_ms: every partition is one of its ResourceConsumers (usage in, CPU and
// memory shares out), and the egress scheduler is its EgressAccounting (bytes sent per partition
// in, partition weights out). It divides worker CPU, resources.memory_bytes and the egress cap;
// FlowStats adds its figures to each partition's stats.
//
// The node can also run on an in-process network (tests): NodeOptions::network replaces the gRPC
// transport. Either way the node sends through its own EgressValve (p2p/egress_valve.h) over that
// network, built from partitions::NodeChannelTable(), so the egress cap, UpdateEgress and the
// egress stats work the same on both.
//
// Partitions are created, stopped, started and removed live (CreatePartition ... RemovePartition,
// docs/ARCHITECTURE.md "Live partitions"); the changes are recorded under the data directory
// (runtime/partition_registry.h) and a restart keeps them. Lookups hand out shared pointers: a
// partition stopped while a call uses it stays valid (refusing new work) until that call lets go;
// StopPartition returns once its stores are closed.
//
// Thread-safety: all public methods are thread-safe after Start().
#ifndef RUNTIME_NODE_H_
#define RUNTIME_NODE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "flowctl/arbiter_service.h"
#include "flowctl/block_budget.h"
#include "flowctl/clock.h"
#include "flowctl/cpu_pressure.h"
#include "flowctl/egress_accounting.h"
#include "flowctl/memory_pressure.h"
#include "flowctl/node_admission.h"
#include "flowctl/tick_scheduler.h"
#include "flowctl/worker_pool.h"
#include "p2p/egress_valve.h"
#include "p2p/grpc_transport.h"
#include "p2p/network.h"
#include "proto/admin.pb.h"
#include "proto/client.pb.h"
#include "proto/config.pb.h"
#include "runtime/partition.h"
#include "runtime/read_hold.h"

namespace rocksdb {
class Cache;
}  // namespace rocksdb

namespace runtime {

class GrpcServers;  // grpc_servers.h
class MetricsServer;

inline constexpr char kNodeVersion[] = "0.7.0";

// config.key_file, or <data_dir>/node.key when it is empty.
std::string KeyFilePath(const node::config::NodeConfig& config);

struct NodeOptions {
  // Tests: use this network instead of a GrpcTransport (not owned; outlives the node). Its
  // self() must be the id of the configured key.
  p2p::Network* network = nullptr;
  // Tests: serve gRPC APIs or not (the in-memory cluster test drives partitions directly too).
  bool serve_grpc = true;
  bool serve_metrics = true;
  const flowctl::Clock* clock = flowctl::Clock::Real();
  // Tests only: p2p delay / loss injection (noded --p2p-fault-*); off by default.
  p2p::FaultOptions p2p_fault = {};  // "= {}": designated initializers may leave it out
  // Tests on a FakeClock: the egress valve runs no sender thread; the test releases frames with
  // egress()->ReleaseDue() as it moves the clock.
  bool egress_by_hand = false;
  // Fault tests only (noded --test-equivocate NAME): this node is a faulty primary of partition
  // NAME, proposing conflicting batches (ConsensusDriver::Deps::equivocate). Empty: none.
  std::string test_equivocate_partition = {};
  // Fault tests only (noded --test-withhold NAME): a faulty primary of NAME that withholds the
  // bodies of its proposals and answers no fetch (ConsensusDriver::Deps::withhold).
  std::string test_withhold_partition = {};
  // Fault tests only (noded --test-diverge NAME:HEIGHT): this node's executor of partition NAME
  // writes one extra value at block HEIGHT (Executor::PlantNondeterminismForTest), so its state
  // root differs from the others' from there on and it must go DIVERGED.
  std::string test_diverge_partition = {};
  uint64_t test_diverge_height = 0;
  // Tests: where memory pressure reads from (flowctl/memory_pressure.h). Empty: the process and
  // its cgroup (ProcMemorySource).
  std::function<std::unique_ptr<flowctl::MemorySource>()> memory_source = {};
  // Tests: where node-wide admission reads the CPU pressure (flowctl/cpu_pressure.h). Empty: the
  // node's cgroup or the machine (ProcCpuPressure).
  std::function<std::unique_ptr<flowctl::CpuPressureSource>()> cpu_pressure_source = {};
};

class Node {
 public:
  // The block cache all partitions' consensus stores share (their data, index and filter blocks).
  static constexpr size_t kConsensusStoreCacheBytes = size_t{8} << 20;

  // Validates the config (already defaulted), loads or creates the key file (0600).
  static absl::StatusOr<std::unique_ptr<Node>> Create(node::config::NodeConfig config,
                                                      NodeOptions options = {});
  ~Node();  // Stop()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  absl::Status Start();
  // Graceful: see the file comment. Idempotent.
  void Stop(absl::Duration drain = absl::Seconds(5));

  // Lookup of a running partition by PartitionRef (id if non-zero, else name) or by "id or name"
  // text. NOT_FOUND "unknown partition ..." / INVALID_ARGUMENT when the ref is empty /
  // UNAVAILABLE when the partition is stopped on this node.
  absl::StatusOr<std::shared_ptr<Partition>> FindPartition(
      const node::client::PartitionRef& ref) const;
  absl::StatusOr<std::shared_ptr<Partition>> FindPartition(const std::string& id_or_name) const;
  // The running partitions.
  std::vector<std::shared_ptr<Partition>> partitions() const;
  // Every partition, running or stopped, with its status and effective config.
  node::admin::ListPartitionsResponse ListPartitions() const;

  // ---- Live partitions (proto/admin.proto). Serialized with each other; each blocks while the
  // partition opens or drains. Errors: see admin.proto; FAILED_PRECONDITION before Start().
  absl::StatusOr<node::admin::CreatePartitionResponse> CreatePartition(
      node::config::PartitionConfig config);
  absl::StatusOr<node::admin::PartitionStatus> StopPartition(const std::string& id_or_name,
                                                             absl::Duration drain);
  absl::StatusOr<node::admin::PartitionStatus> StartPartition(const std::string& id_or_name);
  absl::StatusOr<node::admin::RemovePartitionResponse> RemovePartition(
      const std::string& id_or_name, bool delete_data);

  node::admin::NodeStatus Status() const;
  node::admin::ListPeersResponse Peers() const;
  // `partition` empty = all.
  // The worker pool's threads now (after Start; before it, the configured count).
  int cpu_workers() const;
  // The block budget in force (0 = none), and its ceiling (resources.consensus_blocks_per_second
  // or UpdateArbiter's), which it is below while it adapts down.
  uint32_t consensus_blocks_per_second() const { return block_budget_.blocks_per_second(); }
  uint32_t consensus_blocks_per_second_ceiling() const { return block_budget_.ceiling(); }
  // The running partitions' ledgers' memtables: the budget, each one's write buffer, what they
  // hold together (NodeStatus.ledger_memory).
  node::admin::LedgerMemoryStatus LedgerMemory() const;
  absl::StatusOr<node::admin::FlowStats> FlowStats(const std::string& partition) const;
  // Client reads waiting for their partition's read chain (PartitionConfig.read_hold). Its thread
  // runs from Start on a real clock; on an injected clock a test calls RunDue itself.
  ReadHold& read_hold() const { return *read_hold_; }
  // resources.memory_pressure at work (also in Status()).
  node::admin::MemoryPressureStatus MemoryPressureStatus() const;
  // resources.node_admission as of the last arbiter tick (enabled false when off).
  node::admin::NodeAdmissionStatus NodeAdmissionStatus() const;
  // Validated as the resources section it would leave (runtime/config_validation.h: the messages
  // config loading gives, "resources.tx_forward_floor_bytes_per_second: ...") before applying.
  absl::StatusOr<node::admin::EgressStats> UpdateEgress(
      const node::admin::UpdateEgressRequest& request);
  // Validates every entry as the config it would leave (unknown partition NOT_FOUND; else
  // InvalidArgument with config loading's messages, "partitions[hot].share.weight: ...", and the
  // guarantee sum, cpu_workers out of range) before applying any; applied shares are used from the
  // next tick, which is run at once. cpu_workers > 0 resizes the worker pool first, so that tick
  // divides the new CPU capacity.
  absl::StatusOr<std::vector<node::config::PartitionConfig>> UpdateArbiter(
      const node::admin::UpdateArbiterRequest& request);
  // Runs one arbiter tick now (tests; the arbiter's thread ticks periodically). No-op before
  // Start() and after Stop().
  void ArbiterTick();

  const p2p::NodeId& id() const { return id_; }
  // The config the node was started with (its `partitions` are the file's, without live changes;
  // ListPartitions has the effective ones).
  const node::config::NodeConfig& config() const { return config_; }
  // Bound ports (after Start; useful with port 0 in tests). 0 when not serving.
  int client_port() const { return client_port_; }
  int admin_port() const { return admin_port_; }
  int p2p_port() const;
  // Re-points the dialer of peer `public_key_hex` (hex of its Ed25519 public key, as in the config)
  // to `address` (host:port), live: a peer that moved, or a cluster whose nodes all listen on port
  // 0 and learn each other's ports once started (tests). NotFound for a key that is not a peer,
  // InvalidArgument for an address that is not host:port, FailedPrecondition when the node runs
  // on an injected network.
  absl::Status SetPeerAddress(absl::string_view public_key_hex, const std::string& address);
  int metrics_port() const;
  // The egress valve every partition sends through (after Start).
  p2p::EgressValve* egress() const { return egress_.get(); }
  // The admin token ("" when none is configured).
  const std::string& admin_token() const { return admin_token_; }

 private:
  Node(node::config::NodeConfig config, NodeOptions options, base::PrivateKey key);
  // One partition the node lists: running (`running` set) or stopped.
  struct PartitionEntry {
    node::config::PartitionConfig config = {};     // as last run (live updates included) or created
    std::shared_ptr<Partition> running = nullptr;  // null when stopped
    // Notified when the Partition object is destroyed (its stores closed).
    std::shared_ptr<absl::Notification> closed = nullptr;
    bool created_live = false;
  };

  absl::Status StartServers();
  absl::Status StartArbiter();
  void RegisterMetrics();
  // Reads the live-partition record, plans and validates the partitions to run
  // (runtime/partition_registry.h) and lists them all in entries_; true for those to start.
  absl::StatusOr<std::vector<bool>> PlanPartitionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);
  // Opens (not starts) one partition in <data_dir>/partition-<id>, its ledger's write buffer
  // its part of the budget as one of `running` partitions (itself included).
  absl::StatusOr<std::shared_ptr<Partition>> OpenPartition(
      const node::config::PartitionConfig& config, std::shared_ptr<absl::Notification> closed,
      size_t running);
  // Opens and starts entries_[index]'s partition and gives it to the arbiter.
  absl::Status RunPartition(size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);
  // Takes entries_[index]'s running partition from the arbiter, stops it and waits for it to close.
  void ClosePartition(size_t index, absl::Duration drain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);
  void RoutePeerMessage(const p2p::NodeId& from, p2p::PartitionId part, p2p::Channel ch,
                        std::string payload) const;
  // Index of the entry with this id or name; NOT_FOUND / INVALID_ARGUMENT as FindPartition.
  absl::StatusOr<size_t> EntryIndexLocked(const std::string& id_or_name) const
      ABSL_SHARED_LOCKS_REQUIRED(partitions_mu_);
  node::admin::PartitionStatus StatusOfLocked(const PartitionEntry& entry) const
      ABSL_SHARED_LOCKS_REQUIRED(partitions_mu_);
  std::string PartitionDir(uint32_t id) const;
  // UNAVAILABLE once Stop() began: no live partition call may start or stop a partition then.
  absl::Status LiveCallAllowedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);
  absl::Status WriteLiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);
  // Writes the record after a stop or start of entries_[index] and answers its status; a failed
  // write says the change was `done` but a restart would `lost`.
  absl::StatusOr<node::admin::PartitionStatus> RecordLiveChangeLocked(size_t index,
                                                                      absl::string_view done,
                                                                      absl::string_view lost)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(live_mu_);

  node::config::NodeConfig config_;
  const NodeOptions options_;
  const base::PrivateKey key_;
  const p2p::NodeId id_;
  const absl::Time start_time_ = absl::Now();
  std::string admin_token_;

  std::unique_ptr<flowctl::WorkerPool> pool_;
  const std::unique_ptr<ReadHold> read_hold_;
  // resources.consensus_blocks_per_second, divided among the partitions with work (live).
  flowctl::BlockBudget block_budget_;
  // The block cache every partition's consensus store shares (the PBFT logs are read only when a
  // partition opens, so a few MiB serve any number of partitions).
  const std::shared_ptr<rocksdb::Cache> consensus_store_cache_;
  // resources.ledger_write_buffer_bytes (live: UpdateArbiter), divided among the running
  // partitions' ledgers by DivideWriteBuffers whenever one starts or stops.
  // write_buffer_mu_ serializes the divisions (never taken under partitions_mu_: a division
  // lists the partitions); the figures are read without it.
  absl::Mutex write_buffer_mu_;
  std::atomic<uint64_t> write_buffer_budget_{0};
  // The part of it divided under memory pressure (partitions::LedgerWriteBufferScale of the
  // pressure's scale, set after every arbiter tick): 1 without pressure.
  std::atomic<double> write_buffer_scale_{1};
  // write_buffer_budget_ x write_buffer_scale_.
  uint64_t WriteBufferBudgetInForce() const;
  // Gives every running partition's ledger its part of the budget in force (a failure is
  // logged: the ledger keeps its previous write buffer).
  void DivideWriteBuffers() ABSL_LOCKS_EXCLUDED(write_buffer_mu_);
  void DivideWriteBuffersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_buffer_mu_);
  // After an arbiter tick, outside the arbiter's mutex: divides again when memory pressure
  // (MemoryPressure::pressure_scale, not the cap on the memory divided) moved
  // write_buffer_scale_.
  void WriteBufferPressureTick() ABSL_LOCKS_EXCLUDED(write_buffer_mu_);
  // resources.memory_pressure; sampled at every arbiter tick (null when disabled).
  std::unique_ptr<flowctl::MemoryPressure> memory_pressure_;
  // resources.node_admission (null when off): updated after every arbiter tick (AdmissionTick),
  // read by NodeAdmissionStatus.
  mutable absl::Mutex admission_mu_;
  std::unique_ptr<flowctl::NodeAdmission> admission_ ABSL_GUARDED_BY(admission_mu_);
  std::unique_ptr<flowctl::CpuPressureSource> cpu_pressure_ ABSL_GUARDED_BY(admission_mu_);
  bool admission_with_peers_ ABSL_GUARDED_BY(admission_mu_) = true;  // agree_with_peers
  // The arbiter's after_tick, first: feeds the block budget's adaptation the tick's figures
  // (flowctl/block_budget.h).
  void BlockBudgetTick(absl::Span<flowctl::ResourceConsumer* const> consumers);
  // The arbiter's after_tick, then: feeds the partitions' loads to admission_ and sets their
  // fractions.
  void AdmissionTick(double elapsed_nanos, double cpu_capacity_nanos,
                     absl::Span<flowctl::ResourceConsumer* const> consumers);
  std::unique_ptr<flowctl::TickScheduler> scheduler_;
  std::unique_ptr<p2p::GrpcTransport> transport_;  // null with options_.network
  std::unique_ptr<p2p::EgressValve> egress_;       // over transport_ or options_.network
  p2p::Network* network_ = nullptr;                // egress_, as the partitions see it
  std::unique_ptr<PeerRefusals> refusals_;         // per peer, over every partition
  std::vector<p2p::NodeId> replica_ids_;           // sorted; every partition's replica set
  std::vector<base::PublicKey> replica_keys_;

  // Live operations hold live_mu_ throughout (it is taken before partitions_mu_); lookups take
  // partitions_mu_ shared, briefly.
  absl::Mutex live_mu_;
  node::config::LivePartitions live_ ABSL_GUARDED_BY(live_mu_);
  mutable absl::Mutex partitions_mu_ ABSL_ACQUIRED_AFTER(live_mu_);
  std::vector<PartitionEntry> entries_ ABSL_GUARDED_BY(partitions_mu_);

  std::unique_ptr<GrpcServers> servers_;
  std::unique_ptr<MetricsServer> metrics_;
  int client_port_ = 0;
  int admin_port_ = 0;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> tx_forward_floor_{0};
  // Set in Start() before any server runs; stopped (not destroyed) by Stop().
  std::unique_ptr<flowctl::EgressAccounting> egress_accounting_;  // null without transport_
  std::unique_ptr<flowctl::ArbiterService> arbiter_;
};

}  // namespace runtime

#endif  // RUNTIME_NODE_H_
