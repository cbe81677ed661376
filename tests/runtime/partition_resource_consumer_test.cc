// Partition as a flowctl::ResourceConsumer: what it reports (TakeUsage) and what each applied
// share does to it (its dispatcher's group share in the worker pool, its pool's byte limit).
// One partition of a 4-replica set, opened on an in-memory network and never started: nothing
// is sent, no time passes (FakeClock).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "flowctl/dispatcher.h"
#include "flowctl/tick_scheduler.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "p2p/in_memory_network.h"
#include "runtime/config.h"
#include "runtime/partition.h"
#include "tests/mocks/fake_clock.h"
#include "tests/runtime/runtime_test_util.h"

namespace runtime {
namespace {

using flowctl::Resource;

// Holds a pool's worker in another dispatcher's handler from construction until Release() or
// destruction (so an ASSERT that returns early never leaves the worker blocked). With a 1-thread
// pool, whatever is offered meanwhile waits in its lane.
class BlockedWorker {
 public:
  explicit BlockedWorker(flowctl::WorkerPool* pool) {
    absl::StatusOr<std::unique_ptr<flowctl::Dispatcher>> d = flowctl::Dispatcher::Create(
        pool, {.name = "blocker",
               .budget = {.max_messages = 1, .max_bytes = 1024},
               .lanes = {{.name = "b", .weight = 1, .handler = [this](flowctl::Message) {
                            entered_.Notify();
                            release_.WaitForNotification();
                          }}}});
    CHECK(d.ok()) << d.status();
    dispatcher_ = *std::move(d);
    CHECK(dispatcher_->Offer(0, flowctl::Message{}) == flowctl::Dispatcher::OfferResult::kAccepted);
    entered_.WaitForNotification();
  }
  ~BlockedWorker() {
    Release();
    dispatcher_->Stop();
  }
  BlockedWorker(const BlockedWorker&) = delete;
  BlockedWorker& operator=(const BlockedWorker&) = delete;

  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 private:
  absl::Notification entered_, release_;
  std::unique_ptr<flowctl::Dispatcher> dispatcher_;
};

class PartitionResourceConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/partition_consumer_", getpid());
    std::filesystem::remove_all(dir_);
    std::vector<std::pair<p2p::NodeId, base::PublicKey>> members;
    for (char seed : {'a', 'b', 'c', 'd'}) {
      base::PrivateKey key = testing::TestKey(seed);
      members.push_back({p2p::NodeIdFromPublicKey(key.public_key().bytes()), key.public_key()});
    }
    std::sort(members.begin(), members.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    const p2p::NodeId self = p2p::NodeIdFromPublicKey(testing::TestKey('a').public_key().bytes());
    net_ = hub_.AddNode(self);
    flowctl::WorkerPool::Options po;
    po.threads = 1;
    pool_ = std::make_unique<flowctl::WorkerPool>(po);
    ASSERT_TRUE(pool_->Start().ok());

    members_ = members;
    node::config::NodeConfig nc;
    nc.set_data_dir(dir_);
    auto* pc = nc.add_partitions();
    pc->set_id(5);
    pc->set_name("p");
    ApplyDefaults(&nc);
    config_ = nc.partitions(0);
    part_ = Open(config_, dir_ + "/part");
    ASSERT_NE(part_, nullptr);
  }

  std::unique_ptr<Partition> Open(const node::config::PartitionConfig& config,
                                  const std::string& dir, bool fixed_retry_after = false) {
    PartitionEnv env;
    env.config = config;
    env.dir = dir;
    env.pool = pool_.get();
    env.network = net_.get();
    env.key = testing::TestKey('a');
    for (const auto& [id, pk] : members_) {
      env.replica_ids.push_back(id);
      env.replica_keys.push_back(pk);
    }
    env.clock = &clock_;
    env.scheduler = &scheduler_;
    env.fixed_retry_after = fixed_retry_after;
    absl::StatusOr<std::unique_ptr<Partition>> p = Partition::Open(std::move(env));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  void TearDown() override {
    part_.reset();
    pool_->Stop();
    std::filesystem::remove_all(dir_);
  }

  // Submits a signed Put and waits for the answer: the fixture's worker thread verifies it; a
  // gate refusal answers at once.
  // The fixture's partition config as partition `id` named `name`, with a 4-tx pool whose
  // high-water mark is 2 txs and an interceptor of one stage, the pool gate ("pool").
  node::config::PartitionConfig GatedPoolConfig(uint32_t id, const std::string& name) const {
    node::config::PartitionConfig config = config_;
    config.set_id(id);
    config.set_name(name);
    config.mutable_pool()->set_max_txs(4);
    config.mutable_pool()->set_high_water_fraction(0.5);  // 2 txs: above the mark
    config.clear_interceptor();
    auto* gate = config.mutable_interceptor()->add_stages();
    gate->set_name("pool");
    gate->mutable_gate()->set_predicate("pool_below_high_water");
    return config;
  }

  static SubmitResult SubmitAndWait(Partition& part, uint32_t partition, char account,
                                    uint64_t nonce, uint64_t retry_ticket = 0) {
    absl::Notification done;
    SubmitResult out;
    SubmitOptions options;
    if (retry_ticket != 0) options.retry_tickets.push_back(retry_ticket);
    part.Submit(testing::SignedPut(partition, account, nonce), options, [&](SubmitResult r) {
      out = std::move(r);
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return out;
  }

  // What the fixture's state cache (`state`) or block cache borrows under `share` of `limit`
  // with nothing pooled or queued: its configured part of half the pool's and lanes' fractions.
  double CacheLent(double share, double limit, bool state) const {
    const double transient =
        static_cast<double>(config_.pool().max_bytes() + config_.dispatcher().budget_bytes());
    const double cache = static_cast<double>(config_.state().cache_bytes());
    const double block = static_cast<double>(config_.state().block_cache_bytes());
    return 0.5 * share * transient / limit * (state ? cache : block) / (cache + block);
  }

  double GroupShare() const {
    for (const auto& g : pool_->GetGroupStats()) {
      if (g.name == "p") return g.share;
    }
    ADD_FAILURE() << "no worker-pool group for the partition";
    return 0;
  }

  std::string dir_;
  std::vector<std::pair<p2p::NodeId, base::PublicKey>> members_;
  tests::FakeClock clock_;
  flowctl::TickScheduler scheduler_{&clock_};  // never started: no tick runs
  p2p::InMemoryHub hub_{&clock_};
  std::unique_ptr<p2p::InMemoryNetwork> net_;
  std::unique_ptr<flowctl::WorkerPool> pool_;
  node::config::PartitionConfig config_;
  std::unique_ptr<Partition> part_;
};

TEST_F(PartitionResourceConsumerTest, ReportsIdentityShareConfigAndUsage) {
  flowctl::ResourceConsumer* consumer = part_.get();
  EXPECT_EQ(consumer->id(), 5u);
  EXPECT_EQ(consumer->name(), "p");
  flowctl::ConsumerUsage u = consumer->TakeUsage();
  EXPECT_EQ(u.cpu_nanos, 0);
  EXPECT_FALSE(u.cpu_backlogged);
  // Nothing pooled, queued or cached: only what the ledger's block cache holds from its open.
  EXPECT_EQ(u.memory_bytes, part_->FlowStats().state_cache().ledger_block_cache_bytes());
  EXPECT_EQ(u.memory_limit, config_.pool().max_bytes() + config_.dispatcher().budget_bytes() +
                                config_.state().cache_bytes() +
                                config_.state().block_cache_bytes());

  node::config::ShareConfig share;
  share.set_weight(4);
  share.set_guarantee_fraction(0.25);
  share.set_ceiling_fraction(0.5);
  consumer->SetShareConfig(share);
  EXPECT_EQ(consumer->share_config().weight(), 4);
  EXPECT_EQ(consumer->share_config().ceiling_fraction(), 0.5);
  EXPECT_EQ(part_->config().share().guarantee_fraction(), 0.25);
}

TEST_F(PartitionResourceConsumerTest, CpuShareBecomesTheDispatcherGroupWeight) {
  part_->ApplyShare(Resource::kCpu, 12345);
  EXPECT_EQ(GroupShare(), 12345);
  part_->ApplyShare(Resource::kCpu, 0);  // not a weight: ignored
  EXPECT_EQ(GroupShare(), 12345);
}

// Work done for the partition outside the worker pool (here: client calls refused on the caller's
// thread, a paused partition's gate) is charged to it as well (one call in 8 measured, counted 8
// times): the CPU the arbiter sees grows while the pool's does not.
TEST_F(PartitionResourceConsumerTest, OffPoolClientWorkIsCharged) {
  part_->TakeUsage();  // start a fresh window
  part_->Pause();
  int refused = 0;
  for (uint64_t nonce = 1; nonce <= 500; ++nonce) {
    SubmitResult r = SubmitAndWait(*part_, 5, 'a', nonce);
    if (r.status.code() == absl::StatusCode::kUnavailable) ++refused;
  }
  EXPECT_EQ(refused, 500);
  int64_t pool_cpu = 0;
  const node::admin::PartitionFlowStats stats = part_->FlowStats();
  for (const auto& l : stats.lanes()) pool_cpu += static_cast<int64_t>(l.cpu_nanos());
  EXPECT_EQ(pool_cpu, 0);  // nothing reached the workers
  EXPECT_GT(part_->TakeUsage().cpu_nanos, 0);
  part_->Resume();
}

// The hard CPU limit goes to the partition's worker-pool group (whose effect, CPU held to the
// limit, tests/flowctl/worker_pool_limit_test.cc and arbiter_governs_test.cc measure), and its
// figures to the partition's flow stats.
TEST_F(PartitionResourceConsumerTest, CpuLimitHoldsTheDispatcherGroup) {
  auto group_limit = [this] {
    for (const auto& g : pool_->GetGroupStats()) {
      if (g.name == "p") return g.cpu_limit_cores;
    }
    ADD_FAILURE() << "no worker-pool group for the partition";
    return -1.0;
  };
  EXPECT_EQ(group_limit(), 0);
  part_->ApplyCpuLimit(0.5);
  EXPECT_EQ(group_limit(), 0.5);
  EXPECT_EQ(part_->FlowStats().cpu().limit(), 0.5);
  EXPECT_EQ(part_->FlowStats().cpu().limit_holds(), 0u);
  part_->ApplyCpuLimit(0);
  EXPECT_EQ(group_limit(), 0);
  EXPECT_EQ(part_->FlowStats().cpu().limit(), 0);
}

// The arbiter's tick (TakeUsage) is the adaptive lane weights' control step: a client job held
// past the client lane's target, behind a worker busy elsewhere, raises that lane's scheduling
// weight at the next TakeUsage, and not before.
TEST_F(PartitionResourceConsumerTest, TakeUsageAdaptsLaneWeights) {
  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("p");
  auto* a = r.mutable_dispatcher()->mutable_adaptive_weights();
  a->set_enabled(true);
  a->mutable_client()->set_target_p99_ms(1);
  // No health gate: the partition is never started, so its consensus is not NORMAL.
  auto* stage = r.mutable_interceptor()->add_stages();
  stage->set_name("in_flight");
  stage->mutable_concurrency()->set_max_in_flight(16);
  absl::StatusOr<node::config::PartitionConfig> updated = part_->UpdateFlow(r);
  ASSERT_TRUE(updated.ok()) << updated.status();
  auto client_lane = [&] {
    const node::admin::PartitionFlowStats stats = part_->FlowStats();
    for (const node::admin::LaneStats& l : stats.lanes()) {
      if (l.name() == "client") return l;
    }
    ADD_FAILURE() << "no client lane";
    return node::admin::LaneStats();
  };
  ASSERT_EQ(client_lane().delay_target_ms(), 1);

  BlockedWorker blocked(pool_.get());

  absl::Notification answered;
  part_->Submit(testing::SignedPut(5, 'x', 1), {}, [&](SubmitResult) { answered.Notify(); });
  ASSERT_EQ(client_lane().depth_messages(), 1u);  // queued for verification
  clock_.Advance(absl::Milliseconds(10));
  EXPECT_EQ(client_lane().effective_weight(), client_lane().weight());  // no step yet
  part_->TakeUsage();
  const node::admin::LaneStats after = client_lane();
  EXPECT_GT(after.effective_weight(), after.weight());
  EXPECT_EQ(after.weight_raises(), 1u);
  EXPECT_GE(after.window_delay_ms(), 10);

  blocked.Release();
  EXPECT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

// Node-wide admission's gate: at fraction 0.25 three calls in four are refused before anything
// is parsed, with the stage name and hint a client needs; the load the node reads back is what
// the tick measured (the CPU entitlement the arbiter applied, the consensus lane's delay).
TEST_F(PartitionResourceConsumerTest, NodeAdmissionFractionRefusesClientWrites) {
  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("p");
  auto* stage = r.mutable_interceptor()->add_stages();  // no health gate: never started
  stage->set_name("in_flight");
  stage->mutable_concurrency()->set_max_in_flight(16);
  ASSERT_TRUE(part_->UpdateFlow(r).ok());

  part_->SetAdmitFraction(0.25, 0.05, /*with_peers=*/true);
  EXPECT_EQ(part_->admit_fraction(), 0.25);
  std::vector<SubmitResult> results;
  for (uint64_t nonce = 1; nonce <= 4; ++nonce) {
    results.push_back(SubmitAndWait(*part_, 5, 'n', nonce));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].status.code(), absl::StatusCode::kResourceExhausted) << results[i].status;
    EXPECT_EQ(results[i].status.message(),
              "node congested: partition p admits 25% of client writes until the episode ends; "
              "retry later");
    EXPECT_EQ(results[i].rejected_by, kNodeAdmissionStage);
    EXPECT_EQ(results[i].retry_after, kNodeAdmissionRetryAfter);
    EXPECT_TRUE(results[i].tx_hash.empty()) << "refused before decoding";
  }
  EXPECT_TRUE(results[3].status.ok()) << results[3].status;
  EXPECT_EQ(part_->admission_refused(), 3u);

  // The consensus lane's delay as the tick saw it: a message held behind a busy worker.
  BlockedWorker blocked(pool_.get());
  const p2p::NodeId self = p2p::NodeIdFromPublicKey(testing::TestKey('a').public_key().bytes());
  const p2p::NodeId peer = members_[0].first == self ? members_[1].first : members_[0].first;
  part_->OnPeerMessage(peer, node::p2p::CONSENSUS, "not a message");
  clock_.Advance(absl::Milliseconds(80));
  part_->TakeUsage();
  part_->ApplyShare(Resource::kCpu, 4e7);
  const flowctl::NodeAdmission::PartitionLoad load = part_->AdmissionLoad();
  EXPECT_EQ(load.id, 5u);
  EXPECT_GE(load.consensus_delay_nanos, 80'000'000);
  EXPECT_TRUE(load.backlogged);
  EXPECT_EQ(load.entitlement_nanos, 4e7);
}

// What the node-wide admission calls refusing (flowctl/node_admission.h, "Contending
// partitions"): a tick in which client writes were refused for want of room. A rate limit's
// refusal while the pool has room is policy and does not count, nor does the node's own shedding;
// the pool gate's refusal above the high-water mark does (the tick is refusing, the next one
// without any is not), and so does the pool's own refusal at its client cap. The tick also
// reports how full the pool is against what its clients may fill (its high-water mark, 2 txs).
TEST_F(PartitionResourceConsumerTest, TicksWithClientWritesRefusedForWantOfRoomAreRefusing) {
  node::config::PartitionConfig config = GatedPoolConfig(8, "room");
  auto* rate = config.mutable_interceptor()->add_stages();
  rate->set_name("rate");
  rate->mutable_rate()->set_rate_per_second(1);
  rate->mutable_rate()->set_burst(1);
  std::unique_ptr<Partition> part = Open(config, dir_ + "/room");
  ASSERT_NE(part, nullptr);
  auto submit = [&](char account, uint64_t nonce) {
    return SubmitAndWait(*part, 8, account, nonce);
  };
  part->TakeUsage();
  EXPECT_FALSE(part->AdmissionLoad().refusing);
  EXPECT_EQ(part->AdmissionLoad().pool_fill, 0);

  ASSERT_TRUE(submit('a', 1).status.ok());
  SubmitResult refused = submit('a', 2);  // no time passes: no token, the pool has room
  ASSERT_EQ(refused.rejected_by, "rate") << refused.status;
  part->SetAdmitFraction(0.05, 0.05, /*with_peers=*/false);
  ASSERT_EQ(submit('a', 2).rejected_by, kNodeAdmissionStage);
  part->SetAdmitFraction(1, 0.05, /*with_peers=*/false);
  EXPECT_EQ(part->FlowStats().overload_refusals(), 0u);
  part->TakeUsage();
  EXPECT_FALSE(part->AdmissionLoad().refusing);
  EXPECT_DOUBLE_EQ(part->AdmissionLoad().pool_fill, 0.5);  // one tx of the 2 clients may pool

  clock_.Advance(absl::Seconds(1));  // a token
  ASSERT_TRUE(submit('a', 2).status.ok());
  clock_.Advance(absl::Seconds(1));
  refused = submit('a', 3);  // two pooled: above the mark
  ASSERT_EQ(refused.rejected_by, "pool") << refused.status;
  EXPECT_EQ(part->FlowStats().overload_refusals(), 1u);
  part->TakeUsage();
  EXPECT_TRUE(part->AdmissionLoad().refusing);
  EXPECT_DOUBLE_EQ(part->AdmissionLoad().pool_fill, 1);
  part->TakeUsage();
  EXPECT_FALSE(part->AdmissionLoad().refusing);
  part.reset();
}

TEST_F(PartitionResourceConsumerTest, MemoryShareCapsThePoolBytes) {
  const uint64_t configured = config_.pool().max_bytes();
  const double limit = static_cast<double>(part_->TakeUsage().memory_limit);
  ASSERT_GT(configured / 4, 1u << 20);  // above the 1 MiB floor
  // Half the partition's memory: the pool gets its part of it, halved for the parsed copy.
  part_->ApplyShare(Resource::kMemory, limit / 2);
  EXPECT_NEAR(static_cast<double>(part_->FlowStats().pool().max_bytes()),
              static_cast<double>(configured) / 4, 1);
  // Its whole memory: no cap.
  part_->ApplyShare(Resource::kMemory, limit);
  EXPECT_EQ(part_->FlowStats().pool().max_bytes(), configured);
}

TEST_F(PartitionResourceConsumerTest, MemoryShareBoundsTheStateCache) {
  const uint64_t configured = config_.state().cache_bytes();
  const double limit = static_cast<double>(part_->TakeUsage().memory_limit);
  ASSERT_GT(configured / 2, 1u << 20);  // above the 1 MiB floor
  EXPECT_EQ(part_->FlowStats().state_cache().capacity_bytes(), configured);
  // Half of it: half the configured cache, plus its part of what it borrows with nothing pooled
  // or queued (CachesBorrowTheRoomThePoolAndLanesLeave), at most the configured cache.
  part_->ApplyShare(Resource::kMemory, limit / 2);
  EXPECT_NEAR(static_cast<double>(part_->FlowStats().state_cache().capacity_bytes()),
              std::min(static_cast<double>(configured),
                       static_cast<double>(configured) / 2 + CacheLent(limit / 2, limit, true)),
              1);
  // With the defaults both caches are back at their configured sizes there (their caps never
  // moved), which they borrow beyond their own halves.
  const double block = static_cast<double>(config_.state().block_cache_bytes());
  EXPECT_NEAR(static_cast<double>(part_->FlowStats().state_cache().borrowed_capacity_bytes()),
              std::min(static_cast<double>(configured) / 2, CacheLent(limit / 2, limit, true)) +
                  std::min(block / 2, CacheLent(limit / 2, limit, false)),
              2);
  part_->ApplyShare(Resource::kMemory, limit / 8);
  EXPECT_NEAR(static_cast<double>(part_->FlowStats().state_cache().capacity_bytes()),
              static_cast<double>(configured) / 8 + CacheLent(limit / 8, limit, true), 1);
  // A share too small for anything: the 1 MiB floor, and the cache holds no more than that.
  part_->ApplyShare(Resource::kMemory, 1);
  EXPECT_EQ(part_->FlowStats().state_cache().capacity_bytes(), 1u << 20);
  EXPECT_LE(part_->FlowStats().state_cache().bytes(), 1u << 20);
  part_->ApplyShare(Resource::kMemory, limit);
  EXPECT_EQ(part_->FlowStats().state_cache().capacity_bytes(), configured);
}

// The ledger's block cache follows the memory share like the state cache: RocksDB's own capacity
// (which bounds what the cache holds: LedgerTest.SetBlockCacheCapacityBoundsWhatTheCacheHolds)
// is an eighth under an eighth of the partition's memory (plus what it borrows), falls to the 1 MiB
// floor under a share too small for anything, and is whole again under all of it. (What the cache
// holds counts in the usage: ReportsIdentityShareConfigAndUsage.)
TEST_F(PartitionResourceConsumerTest, MemoryShareBoundsTheLedgerBlockCache) {
  const uint64_t configured = config_.state().block_cache_bytes();
  const double limit = static_cast<double>(part_->TakeUsage().memory_limit);
  ASSERT_GT(configured / 2, 1u << 20);
  auto capacity = [&] {
    return part_->FlowStats().state_cache().ledger_block_cache_capacity_bytes();
  };
  EXPECT_EQ(capacity(), configured);
  part_->ApplyShare(Resource::kMemory, limit / 8);
  EXPECT_NEAR(static_cast<double>(capacity()),
              static_cast<double>(configured) / 8 + CacheLent(limit / 8, limit, false), 1);
  part_->ApplyShare(Resource::kMemory, 1);
  EXPECT_EQ(capacity(), 1u << 20);
  part_->ApplyShare(Resource::kMemory, limit);
  EXPECT_EQ(capacity(), configured);
}

// Under a share smaller than its configured memory, the state cache and the block cache borrow
// half the room the transient parts (pool, lanes) leave of their fractions of the share, divided
// between them as configured, by the most those parts held over the last 10 s: they give it back
// at the next share after the lanes fill, and take it again only once the window has passed. The
// pool keeps its own fraction throughout. (A partition of 8 MiB of pool, 32 MiB of lanes with the
// forwarding lane weighted 16, and 32 MiB for each cache, given half of its 104 MiB.)
TEST_F(PartitionResourceConsumerTest, CachesBorrowTheRoomThePoolAndLanesLeave) {
  constexpr uint64_t kMiB = 1 << 20;
  node::config::PartitionConfig cfg = config_;
  cfg.set_id(7);
  cfg.set_name("borrow");
  cfg.mutable_pool()->set_max_bytes(8 * kMiB);
  cfg.mutable_dispatcher()->set_budget_bytes(32 * kMiB);
  cfg.mutable_dispatcher()->mutable_lane_weights()->set_tx_forward(16);
  cfg.mutable_state()->set_cache_bytes(32 * kMiB);
  cfg.mutable_state()->set_block_cache_bytes(32 * kMiB);
  std::unique_ptr<Partition> part = Open(cfg, dir_ + "/borrow");
  ASSERT_NE(part, nullptr);
  const double limit = static_cast<double>(part->TakeUsage().memory_limit);
  ASSERT_EQ(limit, 104.0 * kMiB);
  const double share = limit / 2;
  const double own = share * 32 / 104;                // each cache's own fraction: 16 MiB
  const double transient = share * (8.0 + 32) / 104;  // the pool's and lanes': 20 MiB
  auto cache = [&] { return part->FlowStats().state_cache(); };
  auto lane_bytes = [&] {
    uint64_t bytes = 0;
    const node::admin::PartitionFlowStats stats = part->FlowStats();
    for (const node::admin::LaneStats& l : stats.lanes()) bytes += l.depth_bytes();
    return bytes;
  };
  // Each cache: its own fraction and half of what the caches borrow, which is half the room the
  // transient parts leave after `held`.
  auto expect_caches = [&](double held, const char* when) {
    SCOPED_TRACE(when);
    const double lent = 0.5 * std::max(0.0, transient - held);
    const node::admin::StateCacheStats c = cache();
    EXPECT_NEAR(static_cast<double>(c.capacity_bytes()), own + lent / 2, 2);
    EXPECT_NEAR(static_cast<double>(c.ledger_block_cache_capacity_bytes()), own + lent / 2, 2);
    EXPECT_NEAR(static_cast<double>(c.borrowed_capacity_bytes()), lent, 4);
    EXPECT_NEAR(static_cast<double>(part->FlowStats().pool().max_bytes()), share * 8 / 104 / 2, 1);
  };

  // Nothing pooled or queued: half of the transient parts' 20 MiB lent, 5 MiB to each cache.
  part->ApplyShare(Resource::kMemory, share);
  expect_caches(0, "idle");
  part->ApplyShare(Resource::kMemory, limit);  // the lanes' byte cap lifted while they fill

  // The forwarding lane holds 256 KiB messages while the worker is held elsewhere.
  const p2p::NodeId self = p2p::NodeIdFromPublicKey(testing::TestKey('a').public_key().bytes());
  const p2p::NodeId peer = members_[0].first == self ? members_[1].first : members_[0].first;
  double held = 0;
  {
    BlockedWorker blocked(pool_.get());
    for (int i = 0; i < 40; ++i) {
      part->OnPeerMessage(peer, node::p2p::TX_FORWARD, std::string(256 << 10, 'm'));
    }
    held = static_cast<double>(lane_bytes());
    ASSERT_GE(held, 8.0 * kMiB);  // enough to move the caps by more than 5%
    part->TakeUsage();            // the tick that sees them
    part->ApplyShare(Resource::kMemory, share);
    expect_caches(held, "lanes full");
  }
  ASSERT_TRUE(testing::WaitFor([&] { return lane_bytes() == 0; }, absl::Seconds(30)));

  // Drained, but within the window the caches keep to what the lanes held.
  clock_.Advance(absl::Seconds(5));
  part->TakeUsage();
  part->ApplyShare(Resource::kMemory, share);
  expect_caches(held, "drained, within the window");
  // A whole window later they borrow all of it again.
  clock_.Advance(absl::Seconds(5));
  part->TakeUsage();
  part->ApplyShare(Resource::kMemory, share);
  expect_caches(0, "a window later");

  // The whole configured memory: every part at its configured size, nothing borrowed.
  part->ApplyShare(Resource::kMemory, limit);
  EXPECT_EQ(cache().capacity_bytes(), 32 * kMiB);
  EXPECT_EQ(cache().ledger_block_cache_capacity_bytes(), 32 * kMiB);
  EXPECT_EQ(cache().borrowed_capacity_bytes(), 0u);
  part.reset();
}

// The lanes' bytes follow the memory share, except the consensus and sync lanes': with the worker
// held elsewhere, the tx-forwarding lane takes half as many 256 KiB peer messages before it drops
// one for bytes under half the partition's memory as under all of it, while the consensus lane
// keeps its capacity.
TEST_F(PartitionResourceConsumerTest, MemoryShareCapsTheForwardingLaneNotConsensus) {
  const double limit = static_cast<double>(part_->TakeUsage().memory_limit);
  auto lane = [&](const std::string& name) {
    const node::admin::PartitionFlowStats stats = part_->FlowStats();
    for (const node::admin::LaneStats& l : stats.lanes()) {
      if (l.name() == name) return l;
    }
    ADD_FAILURE() << "no lane " << name;
    return node::admin::LaneStats();
  };
  const p2p::NodeId self = p2p::NodeIdFromPublicKey(testing::TestKey('a').public_key().bytes());
  const p2p::NodeId peer = members_[0].first == self ? members_[1].first : members_[0].first;
  // Offers 256 KiB messages to the held tx-forwarding lane until one is dropped for bytes;
  // returns how many it took. The lane drains (the worker released) before it returns.
  auto fill = [&] {
    uint64_t accepted = 0;
    {
      BlockedWorker blocked(pool_.get());
      const uint64_t dropped = lane("tx_forward").dropped_bytes_full();
      for (int i = 0; i < 500 && lane("tx_forward").dropped_bytes_full() == dropped; ++i) {
        part_->OnPeerMessage(peer, node::p2p::TX_FORWARD, std::string(256 << 10, 'm'));
        if (lane("tx_forward").dropped_bytes_full() == dropped) ++accepted;
      }
      EXPECT_GT(lane("tx_forward").dropped_bytes_full(), dropped) << "the lane never filled";
    }
    EXPECT_TRUE(testing::WaitFor([&] { return lane("tx_forward").depth_messages() == 0; },
                                 absl::Seconds(30)));
    return accepted;
  };

  const uint64_t consensus_capacity = lane("consensus").capacity_bytes();
  const uint64_t sync_capacity = lane("sync").capacity_bytes();
  const uint64_t whole = fill();
  part_->ApplyShare(Resource::kMemory, limit / 2);
  const uint64_t half = fill();
  EXPECT_GE(half, 4u);
  EXPECT_GE(whole, 2 * half - 1);
  EXPECT_LE(whole, 2 * half + 1);
  EXPECT_EQ(lane("consensus").capacity_bytes(), consensus_capacity);
  EXPECT_EQ(lane("sync").capacity_bytes(), sync_capacity);
  // A live flow update (a new budget) keeps the share's cap.
  node::admin::UpdatePartitionFlowRequest r;
  r.set_partition("p");
  r.mutable_dispatcher()->set_budget_bytes(config_.dispatcher().budget_bytes());
  ASSERT_TRUE(part_->UpdateFlow(r).ok());
  EXPECT_NEAR(static_cast<double>(fill()), static_cast<double>(half), 1);
  // All of it again: no cap.
  part_->ApplyShare(Resource::kMemory, limit);
  EXPECT_NEAR(static_cast<double>(fill()), static_cast<double>(whole), 1);
}

// A lossless partition's spill memory tier follows the memory share: under all of its memory a
// burst stays in the memory tier; under half of it the budget (shown in its stats) is half the
// configured tier, and what arrives past that goes to the disk tier, acknowledged all the same.
// (Never started: the drain does not run, so the FIFO keeps everything appended.)
TEST_F(PartitionResourceConsumerTest, MemoryShareReachesTheSpillMemoryTier) {
  node::config::PartitionConfig cfg = config_;
  cfg.set_id(6);
  cfg.set_name("l");
  auto* l = cfg.mutable_lossless();
  l->set_enabled(true);
  l->set_memory_bytes(4 << 20);
  l->set_durability(node::config::LosslessConfig::NONE);
  l->set_drain_bytes_per_second(1);
  std::unique_ptr<Partition> lossless = Open(cfg, dir_ + "/lossless");
  ASSERT_NE(lossless, nullptr);
  const double limit = static_cast<double>(lossless->TakeUsage().memory_limit);
  // 60 KiB records, 40 of them: 2.4 MB, inside 4 MiB and past 2 MiB.
  uint64_t nonce = 0;
  auto append = [&](int n) {
    for (int i = 0; i < n; ++i) {
      node::chain::Transaction tx;
      tx.set_partition(6);
      tx.set_nonce(++nonce);
      tx.mutable_put()->set_key(absl::StrCat("k", nonce));
      tx.mutable_put()->set_value(std::string(60 << 10, 'v'));
      absl::Notification done;
      lossless->Submit(base::SignTx(std::move(tx), testing::TestKey('s')), {}, [&](SubmitResult r) {
        EXPECT_TRUE(r.status.ok()) << r.status;
        EXPECT_TRUE(r.spilled);
        done.Notify();
      });
      ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    }
  };
  EXPECT_EQ(lossless->FlowStats().spill().memory_budget_bytes(), 4u << 20);
  append(40);
  node::admin::SpillStats spill = lossless->FlowStats().spill();
  EXPECT_EQ(spill.appended(), 40u);
  EXPECT_EQ(spill.disk_bytes(), 0u);
  const uint64_t in_memory = spill.memory_bytes();
  EXPECT_GT(in_memory, 2u << 20);

  lossless->ApplyShare(Resource::kMemory, limit / 2);
  EXPECT_NEAR(static_cast<double>(lossless->FlowStats().spill().memory_budget_bytes()),
              static_cast<double>(2 << 20), 1);
  append(5);
  spill = lossless->FlowStats().spill();
  EXPECT_EQ(spill.appended(), 45u);
  EXPECT_EQ(spill.memory_bytes(), in_memory);  // over the new budget: nothing more in memory
  EXPECT_GT(spill.disk_bytes(), 5u * (60 << 10));

  // All of it again: the tier takes records again (until the configured 4 MiB).
  lossless->ApplyShare(Resource::kMemory, limit);
  EXPECT_EQ(lossless->FlowStats().spill().memory_budget_bytes(), 4u << 20);
  lossless.reset();
}

TEST_F(PartitionResourceConsumerTest, EgressShareChangesNothingOnThePartition) {
  const uint64_t max_bytes = part_->FlowStats().pool().max_bytes();
  const double share = GroupShare();
  part_->ApplyShare(Resource::kEgress, 1);
  EXPECT_EQ(part_->FlowStats().pool().max_bytes(), max_bytes);
  EXPECT_EQ(GroupShare(), share);
}

// The pool's retry-after follows the commit rate TakeUsage measures (never started here: a
// backlog with no commits), or stays the fixed 100 ms under resources.fixed_retry_after.
TEST_F(PartitionResourceConsumerTest, PoolRetryAfterComesFromTheMeasuredCommitRate) {
  const node::config::PartitionConfig config = GatedPoolConfig(6, "hinted");
  for (bool fixed : {false, true}) {
    SCOPED_TRACE(fixed ? "fixed" : "measured");
    std::unique_ptr<Partition> part =
        Open(config, absl::StrCat(dir_, "/hinted", fixed), /*fixed_retry_after=*/fixed);
    ASSERT_NE(part, nullptr);
    auto submit = [&](uint64_t nonce) { return SubmitAndWait(*part, 6, 'h', nonce); };
    ASSERT_TRUE(submit(1).status.ok());
    ASSERT_TRUE(submit(2).status.ok());
    // Nothing measured yet: the fixed hint.
    EXPECT_EQ(part->FlowStats().retry_hints().pool_retry_after_ms(), 100u);
    part->TakeUsage();  // opens a window: the pool holds txs
    clock_.Advance(absl::Milliseconds(600));
    part->TakeUsage();  // closes it: no commit in 600 ms with a backlog
    const node::admin::RetryHintStats hints = part->FlowStats().retry_hints();
    EXPECT_EQ(hints.fixed(), fixed);
    EXPECT_EQ(hints.commit_txs_per_second(), 0);
    SubmitResult refused = submit(3);
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
    EXPECT_EQ(refused.rejected_by, "pool");
    // Measured: nothing commits, so the longest hint; fixed: 100 ms whatever was measured.
    const absl::Duration want = fixed ? absl::Milliseconds(100) : absl::Seconds(10);
    EXPECT_EQ(refused.retry_after, want);
    EXPECT_EQ(hints.pool_retry_after_ms(), absl::ToInt64Milliseconds(want));
    part.reset();
  }
}

// Retry reservations: the pool gate's refusal carries a ticket; once room opens, the room the
// due ticket holds goes to its holder, not to the fresh requests that arrive first, and a ticket
// is good for one tx. With reservations off, the same fresh requests take all of the room.
TEST_F(PartitionResourceConsumerTest, ARetryTicketKeepsRoomForTheClientThatWaited) {
  for (bool reserve : {true, false}) {
    SCOPED_TRACE(reserve ? "reservations on" : "reservations off");
    node::config::PartitionConfig config = config_;
    config.set_id(8);
    config.set_name(reserve ? "reserved" : "unreserved");
    config.mutable_pool()->set_max_txs(10);
    config.mutable_pool()->set_max_per_sender(10);
    config.mutable_pool()->set_high_water_fraction(0.5);  // 5 txs
    config.mutable_pool()->set_retry_reserve_fraction(reserve ? 0.4 : 0);
    config.clear_interceptor();
    auto* gate = config.mutable_interceptor()->add_stages();
    gate->set_name("pool");
    gate->mutable_gate()->set_predicate("pool_below_high_water");
    std::unique_ptr<Partition> part = Open(config, absl::StrCat(dir_, "/reserve", reserve ? 1 : 0));
    ASSERT_NE(part, nullptr);
    for (uint64_t nonce = 1; nonce <= 5; ++nonce) {
      ASSERT_TRUE(SubmitAndWait(*part, 8, 'w', nonce).status.ok());
    }
    // At the mark: refused, told to come back in 100 ms (nothing measured), with a ticket.
    const SubmitResult refused = SubmitAndWait(*part, 8, 'w', 6);
    ASSERT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
    EXPECT_EQ(refused.rejected_by, "pool");
    EXPECT_EQ(refused.retry_after, absl::Milliseconds(100));
    if (!reserve) {
      EXPECT_EQ(refused.retry_ticket, 0u);
    } else {
      ASSERT_NE(refused.retry_ticket, 0u);
    }
    // Two txs of room open (the mark raised live to 7), and the client comes back as told.
    node::admin::UpdatePartitionFlowRequest grow;
    grow.set_partition(config.name());
    grow.mutable_pool()->set_max_txs(14);
    const absl::StatusOr<node::config::PartitionConfig> grown = part->UpdateFlow(grow);
    ASSERT_TRUE(grown.ok()) << grown.status();
    clock_.Advance(absl::Milliseconds(100));
    // Fresh requests from other senders arrive first: with reservations one of them takes the
    // free unit, the next is refused; without, both take the room.
    EXPECT_TRUE(SubmitAndWait(*part, 8, 'x', 1).status.ok());
    const SubmitResult second = SubmitAndWait(*part, 8, 'y', 1);
    const SubmitResult waited = SubmitAndWait(*part, 8, 'w', 6, refused.retry_ticket);
    const node::admin::RetryHintStats hints = part->FlowStats().retry_hints();
    if (reserve) {
      EXPECT_EQ(second.status.code(), absl::StatusCode::kResourceExhausted) << second.status;
      EXPECT_TRUE(waited.status.ok()) << "the waiting client lost its room: " << waited.status;
      EXPECT_EQ(hints.tickets_redeemed(), 1u);
      EXPECT_EQ(hints.max_reserved_txs(), 2u);  // 0.4 of the 7-tx mark
      // Used once: the same ticket again is a fresh request, refused at the mark.
      const SubmitResult again = SubmitAndWait(*part, 8, 'w', 7, refused.retry_ticket);
      EXPECT_EQ(again.status.code(), absl::StatusCode::kResourceExhausted) << again.status;
      EXPECT_EQ(part->FlowStats().retry_hints().tickets_unknown(), 1u);
      // That refusal's own ticket, back at its hint with the pool still at its mark (7 txs): the
      // holder is let past the mark, into its room.
      ASSERT_NE(again.retry_ticket, 0u);
      clock_.Advance(again.retry_after);
      EXPECT_EQ(part->FlowStats().pool().txs(), 7u);
      const SubmitResult past = SubmitAndWait(*part, 8, 'w', 7, again.retry_ticket);
      EXPECT_TRUE(past.status.ok()) << past.status;
      EXPECT_EQ(part->FlowStats().pool().txs(), 8u);
      EXPECT_EQ(part->FlowStats().retry_hints().tickets_redeemed(), 2u);
    } else {
      EXPECT_TRUE(second.status.ok()) << second.status;
      EXPECT_EQ(waited.status.code(), absl::StatusCode::kResourceExhausted) << waited.status;
      EXPECT_EQ(waited.retry_ticket, 0u);
      EXPECT_EQ(hints.tickets_issued(), 0u);
      // Turned on live (UpdatePartitionFlow): the next refusal carries a ticket.
      node::admin::UpdatePartitionFlowRequest on;
      on.set_partition(config.name());
      on.mutable_pool()->set_retry_reserve_fraction(0.4);
      const absl::StatusOr<node::config::PartitionConfig> updated = part->UpdateFlow(on);
      ASSERT_TRUE(updated.ok()) << updated.status();
      const SubmitResult later = SubmitAndWait(*part, 8, 'w', 6);
      EXPECT_EQ(later.status.code(), absl::StatusCode::kResourceExhausted) << later.status;
      EXPECT_NE(later.retry_ticket, 0u);
      EXPECT_EQ(part->FlowStats().retry_hints().max_reserved_txs(), 2u);
    }
    part.reset();
  }
}

// The same when the pool refuses at its client cap (the forwarding reserve) below the high-water
// mark: the backlog is measured there too, and TxPool::Add's refusal carries the hint.
TEST_F(PartitionResourceConsumerTest, PoolFullAtTheClientCapGetsTheMeasuredHintToo) {
  node::config::PartitionConfig config = config_;
  config.set_id(7);
  config.set_name("capped");
  config.mutable_pool()->set_max_txs(4);
  config.mutable_pool()->set_forward_reserve_fraction(0.5);  // clients may fill 2
  config.mutable_pool()->set_high_water_fraction(1.0);       // the gate never closes
  config.clear_interceptor();
  auto* stage = config.mutable_interceptor()->add_stages();
  stage->set_name("in_flight");
  stage->mutable_concurrency()->set_max_in_flight(100);
  std::unique_ptr<Partition> part = Open(config, dir_ + "/capped");
  ASSERT_NE(part, nullptr);
  auto submit = [&](uint64_t nonce) { return SubmitAndWait(*part, 7, 'c', nonce); };
  ASSERT_TRUE(submit(1).status.ok());
  ASSERT_TRUE(submit(2).status.ok());
  part->TakeUsage();
  clock_.Advance(absl::Milliseconds(600));
  part->TakeUsage();
  EXPECT_TRUE(part->FlowStats().retry_hints().commit_rate_measured());
  SubmitResult refused = submit(3);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
  EXPECT_EQ(refused.rejected_by, "pool");
  EXPECT_EQ(refused.retry_after, absl::Seconds(10));     // measured: nothing commits
  EXPECT_EQ(part->FlowStats().overload_refusals(), 1u);  // for want of room (node admission)
}

}  // namespace
}  // namespace runtime
