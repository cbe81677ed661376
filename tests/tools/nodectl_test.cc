// nodectl end to end, in-process: RunNodectl against a fake AdminService (and, for watch-commits
// and get-value, a fake ClientService) on loopback. Checks the
// request each subcommand sends, its table and JSON output, the token header, exit codes and
// error messages, and that --help and bad flags never make an RPC.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/tools/fake_admin_service.h"
#include "tests/tools/fake_client_service.h"
#include "tools/nodectl_commands.h"

namespace nodectl {
namespace {

using ::nodectl_test::FakeAdminService;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

template <typename T>
T FromText(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

node::admin::FlowStats SampleStats() {
  return FromText<node::admin::FlowStats>(R"pb(
    unix_millis: 1700000000123
    partitions {
      id: 1
      name: "hot"
      committed_txs: 4242
      commit_latency { count: 10 p50_us: 1500 p99_us: 8000 max_us: 12000 }
      consensus_rounds {
        prepare { count: 40 p50_us: 2100 p99_us: 9000 max_us: 15000 }
        apply { count: 41 p50_us: 800 p99_us: 3000 max_us: 4000 }
      }
      stages {
        name: "concurrency"
        kind: "concurrency"
        admitted: 1000
        rejected: 7
        current: 12
        limit: 1024
      }
      stages { name: "rate" kind: "rate" admitted: 990 rejected: 10 current: 3.5 limit: 500 }
      lanes {
        name: "consensus"
        weight: 8
        effective_weight: 12
        delay_target_ms: 5
        window_delay_ms: 7.5
        capacity_messages: 32768
        capacity_bytes: 33554432
        depth_messages: 3
        depth_bytes: 1536
        offered: 100
        processed: 97
        dropped_full: 0
        queueing_delay { count: 97 p50_us: 40 p99_us: 900 max_us: 1000 }
        cpu_nanos: 2500000
      }
      lanes {
        name: "bulk"
        weight: 1
        effective_weight: 1
        capacity_messages: 4096
        dropped_full: 55
        dropped_bytes_full: 2097152
      }
      pool {
        txs: 10
        bytes: 2048
        max_txs: 100000
        max_bytes: 134217728
        above_high_water: true
        added: 500
        rejected_full: 4
        expired: 1
      }
      retry_hints {
        commit_txs_per_second: 850
        commit_blocks_per_second: 4
        client_lane_jobs_per_second: 120
        pool_retry_after_ms: 330
        client_lane_retry_after_ms: 3
        tickets_issued: 12
        tickets_redeemed: 9
        tickets_expired: 2
        tickets_outstanding: 1
        reserved_txs: 1
        max_reserved_txs: 9000
      }
      spill {
        appended: 9
        drained: 8
        memory_bytes: 1024
        memory_budget_bytes: 16777216
        disk_bytes: 1048576
        segments: 2
        drain_bytes_per_second: 5242880
      }
      cpu {
        weight: 2
        guarantee: 1
        ceiling: inf
        demand: 3
        share: 2.5
        usage: 2
        limit: 0.5
        limit_holds: 12
        limited_seconds: 1.5
      }
      memory { weight: 2 demand: 1073741824 share: 536870912 usage: 268435456 ceiling: inf }
      egress { weight: 2 share: 1048576 ceiling: inf }
    }
    egress {
      cap_bytes_per_second: 52428800
      tx_forward_floor_bytes_per_second: 65536
      tx_forward_derived_bytes_per_second: 1048576
      channels {
        channel: "CONSENSUS"
        bytes_sent: 10240
        frames_sent: 20
        queue_bytes: 0
        queueing_delay { count: 20 p50_us: 30 p99_us: 80 max_us: 90 }
      }
      channels { channel: "BULK" bytes_sent: 0 frames_sent: 0 queue_bytes: 4096 dropped: 3 }
    })pb");
}

class NodectlTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fake_.Start()); }

  // Runs nodectl against the fake with `args` after the global --admin flag.
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    args.insert(args.begin(), {"--admin", fake_.address(), "--timeout-ms", "10000"});
    return RunNodectl(args, {.out = &out_, .err = &err_, .canceller = nullptr});
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

  FakeAdminService fake_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(NodectlTest, StatusPrintsNodeAndPartitionTable) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    version: "0.1.0"
    uptime_seconds: 3723
    peers_connected: 2
    peers_configured: 3
    consensus_blocks_per_second: 64
    partitions_with_work: 2
    partitions { id: 1 name: "hot" height: 120 view: 2 consensus_state: "NORMAL" view_changes: 2 }
    partitions {
      id: 2
      name: "steady"
      height: 7
      consensus_state: "VIEW_CHANGE"
      paused: true
      lossless: true
    })pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_EQ(fake_.methods(), std::vector<std::string>{"GetNodeStatus"});
  EXPECT_EQ(out(),
            "node     ab12\n"
            "version  0.1.0\n"
            "uptime   1h02m03s\n"
            "peers    2/3 connected\n"
            "blocks   budget 64/s, 2 partitions with work\n\n"
            "PARTITION  ID  HEIGHT  VIEW  STATE        PAUSED  LOSSLESS  VIEW_CHANGES\n"
            "hot         1     120     2  NORMAL       no      no                   2\n"
            "steady      2       7     0  VIEW_CHANGE  yes     yes                  0\n");
  EXPECT_THAT(err(), IsEmpty());
}

TEST_F(NodectlTest, StatusShowsABlockBudgetAdaptedBelowItsCeiling) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    version: "0.1.0"
    consensus_blocks_per_second: 40
    consensus_blocks_per_second_ceiling: 64
    block_budget { queueing_delay_ms: 12.5 blocks_per_second: 41 lowered: 3 }
    partitions_with_work: 16
    ledger_memory {
      write_buffer_budget_bytes: 268435456
      write_buffer_scale: 1
      write_buffer_budget_in_force_bytes: 268435456
      write_buffer_per_partition_bytes: 8388608
      memtable_bytes: 106954752
      block_cache_bytes: 41943040
      block_cache_capacity_bytes: 536870912
      consensus_store_memtable_bytes: 3145728
      consensus_store_table_reader_bytes: 65536
      consensus_store_cache_bytes: 1048576
      consensus_store_cache_capacity_bytes: 8388608
    }
  )pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_THAT(out(), HasSubstr("blocks   budget 40/s (of 64: queueing 12.5 ms), 16 "
                               "partitions with work\n"
                               "ledgers  memtables 102.0 MiB of 256.0 MiB, write buffer 8.0 MiB "
                               "each; block caches 40.0 MiB of 512.0 MiB\n"
                               "pbft log memtables 3.0 MiB, table readers 64.0 KiB; shared block "
                               "cache 1.0 MiB of 8.0 MiB\n"));
}

TEST_F(NodectlTest, StatusShowsAnOlderNodesLedgerLineAsItWas) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    ledger_memory {
      write_buffer_budget_bytes: 268435456
      write_buffer_per_partition_bytes: 8388608
      memtable_bytes: 106954752
    }
  )pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_THAT(out(), HasSubstr("ledgers  memtables 102.0 MiB of 256.0 MiB, write buffer 8.0 MiB "
                               "each\n"));
}

TEST_F(NodectlTest, StatusShowsTheLedgersMemtableBudgetUnderMemoryPressure) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    ledger_memory {
      write_buffer_budget_bytes: 268435456
      write_buffer_scale: 0.5
      write_buffer_budget_in_force_bytes: 134217728
      write_buffer_per_partition_bytes: 4194304
      memtable_bytes: 52428800
      block_cache_bytes: 1048576
      block_cache_capacity_bytes: 16777216
    }
  )pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_THAT(out(), HasSubstr("ledgers  memtables 50.0 MiB of 128.0 MiB (0.5 of 256.0 MiB: "
                               "memory pressure), write buffer 4.0 MiB each; block caches "
                               "1.0 MiB of 16.0 MiB\n"));
}

TEST_F(NodectlTest, StatusNamesWhyAPartitionHalted) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    partitions { id: 1 name: "hot" height: 120 consensus_state: "NORMAL" }
    partitions {
      id: 2
      name: "steady"
      height: 7
      consensus_state: "HALTED"
      halt_reason: "commit of seq 8 failed: INTERNAL: No space left on device"
    })pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_THAT(out(), HasSubstr("steady      2       7     0  HALTED"));
  EXPECT_THAT(out(), HasSubstr("\nsteady halted: commit of seq 8 failed: INTERNAL: No space left "
                               "on device\n"));
  EXPECT_THAT(out(), Not(HasSubstr("hot halted")));
}

TEST_F(NodectlTest, StatusShowsTheAdmissionCutsWithCpuAndAllocation) {
  fake_.SetStatus(FromText<node::admin::NodeStatus>(R"pb(
    node_id: "ab12"
    partitions { id: 1 name: "hot" consensus_state: "NORMAL" }
    partitions { id: 2 name: "steady" consensus_state: "NORMAL" }
    admission {
      enabled: true
      congested: true
      episodes: 3
      cpu_pressure_percent: 41.5
      measured_allocation: true
      trigger: "consensus lane of partition 2 late: 80ms > 50ms"
      partitions {
        name: "hot"
        admit_fraction: 0.25
        local_admit_fraction: 0.5
        peers_cutting: 2
        cpu_cores: 0.1
        allocation_cores: 0.00031
        contending: true
      }
      partitions {
        name: "steady"
        admit_fraction: 1
        local_admit_fraction: 1
        cpu_cores: 0.01
        allocation_cores: 0.03
      }
    })pb"));
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_THAT(out(),
              HasSubstr("admission CONGESTED (consensus lane of partition 2 late: 80ms > "
                        "50ms), 3 episodes, CPU pressure 41.5% (measured shares); "
                        "admitting hot 25% (own 50%, 2 peers cutting, contending; 0.1 of 0.00031 "
                        "cores)\n"));
}
TEST_F(NodectlTest, JsonOutputRoundTripsTheResponse) {
  fake_.SetStats(SampleStats());
  ASSERT_EQ(Run({"--json", "stats"}), kExitOk) << err();
  node::admin::FlowStats parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out(), &parsed).ok()) << out();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, SampleStats()));
  // Proto field names, zero values included.
  EXPECT_THAT(out(), HasSubstr("\"committed_txs\": \"4242\""));
  EXPECT_THAT(out(), HasSubstr("\"dropped_full\": \"0\""));
}

TEST_F(NodectlTest, GlobalFlagsMayFollowTheCommand) {
  ASSERT_EQ(Run({"peers", "--json"}), kExitOk) << err();
  EXPECT_EQ(out(), "{\n \"peers\": []\n}\n");
}

TEST_F(NodectlTest, StatsSendsPartitionAndPrintsTables) {
  fake_.SetStats(SampleStats());
  ASSERT_EQ(Run({"stats", "--partition", "hot"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("GetFlowStats"), "partition: \"hot\"");
  std::string o = out();
  EXPECT_THAT(o, StartsWith("at 2023-11-14T22:13:20.123Z\n"));
  EXPECT_THAT(o, HasSubstr("partition hot (id 1)  committed 4242 txs  commit latency "
                           "p50 1.50ms p99 8.00ms max 12.00ms\n"));
  EXPECT_THAT(o, HasSubstr("  STAGE        KIND         ADMITTED  REJECTED  CURRENT  LIMIT\n"
                           "  concurrency  concurrency      1000         7       12   1024\n"
                           "  rate         rate              990        10      3.5    500\n"));
  // Only the phases timed: a backup's cut_wait, say, stays out.
  EXPECT_THAT(o, ContainsRegex("  ROUND_PHASE +BLOCKS +P50 +P99 +MAX\n"
                               "  prepare +40 +2.10ms +9.00ms +15.00ms\n"
                               "  apply +41 +800us +3.00ms +4.00ms\n"));
  EXPECT_THAT(o, Not(HasSubstr("cut_wait")));
  EXPECT_THAT(o, ContainsRegex("  consensus +8 +12 \\(7.5/5ms\\) +3 +1.5 KiB +32768 +32.0 MiB "
                               "+100 +97 +0 +0 B +40us +900us +2.50ms\n"));
  EXPECT_THAT(o, ContainsRegex("  bulk +1 +1 +0 +0 B +4096 +0 B +0 +0 +55 +2.0 MiB +- +- +0us\n"));
  EXPECT_THAT(o, HasSubstr("  pool   txs 10/100000  bytes 2.0 KiB/128.0 MiB  high-water yes  "
                           "added 500  rejected_full 4  expired 1\n"));
  EXPECT_THAT(o, HasSubstr("  retry  pool 330ms  client_lane 3ms  from commits 850 tx/s, 4 "
                           "blocks/s, client lane 120 jobs/s\n"));
  EXPECT_THAT(o, HasSubstr("  tickets  issued 12  redeemed 9  early 0  expired 2  unknown 0  "
                           "outstanding 1  reserved 1/9000 txs\n"));
  EXPECT_THAT(o, HasSubstr("  spill  appended 9  drained 8  memory 1.0 KiB/16.0 MiB  disk 1.0 MiB  "
                           "segments 2  drain 5.0 MiB/s (measured 0 B/s)  disk budget none  "
                           "refused 0\n"));
  EXPECT_THAT(o, ContainsRegex("  cpu +2 +1 +none +3 +2.5 +2 +0.5 held 12x 1.5s\n"));
  EXPECT_THAT(o, ContainsRegex("  memory +2 +0 B +none +1.0 GiB +512.0 MiB +256.0 MiB +-\n"));
  EXPECT_THAT(
      o, HasSubstr("egress  cap 50.0 MiB/s  tx_forward floor 64.0 KiB/s  derived 1.0 MiB/s\n"));
  EXPECT_THAT(o, ContainsRegex("  CONSENSUS +10.0 KiB +20 +0 B +0 +30us +80us\n"));
  EXPECT_THAT(o, ContainsRegex("  BULK +0 B +0 +4.0 KiB +3 +- +-\n"));
}

TEST_F(NodectlTest, StatsWithoutPartitionAsksForAll) {
  ASSERT_EQ(Run({"stats"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("GetFlowStats"), "");
}

TEST_F(NodectlTest, PartitionsAndPeersTables) {
  fake_.SetPartitions(FromText<node::admin::ListPartitionsResponse>(R"pb(
    partitions { id: 1 name: "hot" height: 5 consensus_state: "NORMAL" }
    configs {
      id: 1
      name: "hot"
      share { weight: 2 guarantee_fraction: 0.25 ceiling_fraction: 1 }
      interceptor {
        stages { concurrency { max_in_flight: 1024 } }
        stages {
          name: "health"
          gate { predicate: "consensus_normal" }
        }
        stages { rate { unlimited: true } }
      }
      dispatcher {
        budget_messages: 65536
        lane_weights { consensus: 8 sync: 4 tx_forward: 2 bulk: 1 }
      }
      pool { max_txs: 100000 max_bytes: 134217728 }
    })pb"));
  ASSERT_EQ(Run({"partitions"}), kExitOk) << err();
  EXPECT_THAT(out(),
              ContainsRegex("hot +1 +5 +0 +NORMAL +no +no +2 +0.25 +1 +100000 +128.0 MiB\n"));
  EXPECT_THAT(out(), HasSubstr("  interceptor  concurrency(max_in_flight=1024) -> "
                               "health=gate(consensus_normal) -> rate(unlimited)\n"));
  EXPECT_THAT(out(), HasSubstr("  lanes        consensus=8,sync=4,tx_forward=2,bulk=1"));

  fake_.SetPeers(FromText<node::admin::ListPeersResponse>(R"pb(
    peers {
      node_id: "ff00"
      address: "127.0.0.1:26657"
      connected: true
      bytes_sent: 2048
      bytes_received: 100
      reconnects: 1
      link_stalls: 2
      rtt_ms: 0.25
    }
    peers {
      node_id: "ee11"
      address: "127.0.0.1:26667"
      refused { bad_signature: 40 unknown_partition: 2 bad_frame: 1 }
    })pb"));
  ASSERT_EQ(Run({"peers"}), kExitOk) << err();
  EXPECT_EQ(out(),
            "ADDRESS          CONNECTED     SENT  RECEIVED  RECONNECTS  STALLS     RTT  REFUSED  "
            "NODE_ID\n"
            "127.0.0.1:26657  yes        2.0 KiB     100 B           1       2  0.2 ms        0  "
            "ff00\n"
            "127.0.0.1:26667  no             0 B       0 B           0       0       -       43  "
            "ee11\n"
            "\nrefused from ee11: unknown_partition=2, bad_signature=40, bad_frame=1\n");
}

TEST_F(NodectlTest, TokenFileSendsBearerHeader) {
  std::string path = ::testing::TempDir() + "/nodectl_token";
  std::ofstream(path) << "  s3cret-token\n";
  ASSERT_EQ(Run({"--token-file", path, "status"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_authorization(), "Bearer s3cret-token");
  ASSERT_EQ(Run({"status"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_authorization(), "");
}

TEST_F(NodectlTest, BadTokenFileIsAUsageError) {
  EXPECT_EQ(Run({"--token-file", ::testing::TempDir() + "/no_such_token", "status"}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--token-file: cannot read"));
  std::string empty = ::testing::TempDir() + "/empty_token";
  std::ofstream(empty) << "\n";
  EXPECT_EQ(Run({"--token-file", empty, "status"}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("is empty"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(NodectlTest, RpcErrorsExitOneWithCodeAndMessage) {
  fake_.SetError(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing admin token"));
  EXPECT_EQ(Run({"status"}), kExitRpcError);
  EXPECT_EQ(err(), "nodectl: UNAUTHENTICATED: missing admin token\n");
  EXPECT_THAT(out(), IsEmpty());
  fake_.SetError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "interceptor.stages[0].rate.rate_per_second: must be >= 0"));
  EXPECT_EQ(Run({"update-flow", "--partition", "hot", "--pool", "max_txs=10"}), kExitRpcError);
  EXPECT_EQ(err(),
            "nodectl: INVALID_ARGUMENT: "
            "interceptor.stages[0].rate.rate_per_second: must be >= 0\n");
  fake_.SetError(grpc::Status(grpc::StatusCode::NOT_FOUND, "no partition 'x'"));
  EXPECT_EQ(Run({"watch", "--partition", "x"}), kExitRpcError);
  EXPECT_EQ(err(), "nodectl: NOT_FOUND: no partition 'x'\n");
}

TEST_F(NodectlTest, UnreachableNodeIsUnavailable) {
  fake_.Stop();
  EXPECT_EQ(Run({"status"}), kExitRpcError);
  EXPECT_THAT(err(), StartsWith("nodectl: UNAVAILABLE: "));
}

TEST_F(NodectlTest, UpdateFlowSendsEverySection) {
  fake_.SetFlowResponse(FromText<node::admin::UpdatePartitionFlowResponse>(R"pb(
    effective {
      id: 1
      name: "hot"
      interceptor { stages { concurrency { max_in_flight: 512 } } }
      read_interceptor { stages { rate { rate_per_second: 300 burst: 30 } } }
    })pb"));
  ASSERT_EQ(Run({"update-flow", "--partition=hot", "--interceptor",
                 "stages { concurrency { max_in_flight: 512 } }", "--read-interceptor",
                 "stages { rate { rate_per_second: 300 burst: 30 } }", "--lane-weights",
                 "consensus=16,bulk=0.5", "--budget", "messages=1000,bytes=1MiB", "--pool",
                 "max_txs=5000,max_bytes=64MiB,high_water_fraction=0.8"}),
            kExitOk)
      << err();
  auto sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  auto want = FromText<node::admin::UpdatePartitionFlowRequest>(R"pb(
    partition: "hot"
    interceptor { stages { concurrency { max_in_flight: 512 } } }
    read_interceptor { stages { rate { rate_per_second: 300 burst: 30 } } }
    dispatcher {
      budget_messages: 1000
      budget_bytes: 1048576
      lane_weights { consensus: 16 bulk: 0.5 }
    }
    pool { max_txs: 5000 max_bytes: 67108864 high_water_fraction: 0.8 })pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(sent, want)) << sent.DebugString();
  EXPECT_THAT(out(), AllOf(HasSubstr("updated; effective configuration:\npartition hot (id 1)\n"),
                           HasSubstr("interceptor  concurrency(max_in_flight=512)\n"),
                           HasSubstr("reads        rate(300/s burst=30)\n")));
}

TEST_F(NodectlTest, UpdateFlowReadsInterceptorFileAndKeepsUnsetSectionsUnset) {
  std::string path = ::testing::TempDir() + "/chain.txtpb";
  std::ofstream(path) << "# two stages\nstages { rate { rate_per_second: 100 burst: 10 } }\n"
                         "stages { gate { predicate: \"consensus_normal\" } }\n";
  ASSERT_EQ(Run({"update-flow", "--partition", "hot", "--interceptor", path}), kExitOk) << err();
  auto sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  EXPECT_EQ(sent.interceptor().stages_size(), 2);
  EXPECT_EQ(sent.interceptor().stages(0).rate().burst(), 10);
  EXPECT_FALSE(sent.has_dispatcher());
  EXPECT_FALSE(sent.has_pool());
}

// --read-hold sends the whole ReadHoldConfig ("off": an empty one, which turns holding off);
// bad values name the flag and the key.
TEST_F(NodectlTest, UpdateFlowSendsReadHold) {
  fake_.SetFlowResponse(FromText<node::admin::UpdatePartitionFlowResponse>(R"pb(
    effective {
      id: 1
      name: "hot"
      read_interceptor { stages { rate { rate_per_second: 300 burst: 30 } } }
      read_hold { max_wait_ms: 2000 max_waiting: 64 }
    })pb"));
  ASSERT_EQ(
      Run({"update-flow", "--partition", "hot", "--read-hold", "max_wait_ms=2000,max_waiting=64"}),
      kExitOk)
      << err();
  auto sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  auto want = FromText<node::admin::UpdatePartitionFlowRequest>(R"pb(
    partition: "hot"
    read_hold { max_wait_ms: 2000 max_waiting: 64 })pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(sent, want)) << sent.DebugString();
  EXPECT_THAT(out(), HasSubstr("reads        rate(300/s burst=30)  (held up to 2000 ms, 64 "
                               "waiting)\n"));
  ASSERT_EQ(Run({"update-flow", "--partition", "hot", "--read-hold", "off"}), kExitOk) << err();
  sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  EXPECT_TRUE(sent.has_read_hold());
  EXPECT_EQ(sent.read_hold().max_wait_ms(), 0u);
  EXPECT_NE(Run({"update-flow", "--partition", "hot", "--read-hold", "max_wait_ms=70000"}),
            kExitOk);
  EXPECT_THAT(err(), HasSubstr("--read-hold max_wait_ms"));
}

TEST_F(NodectlTest, UpdateFlowSendsAdaptiveLaneTargets) {
  ASSERT_EQ(
      Run({"update-flow", "--partition", "hot", "--adaptive-lanes", "consensus=3/64,client=50"}),
      kExitOk)
      << err();
  auto sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  auto want = FromText<node::admin::UpdatePartitionFlowRequest>(R"pb(
    partition: "hot"
    dispatcher {
      adaptive_weights {
        enabled: true
        consensus { target_p99_ms: 3 max_weight: 64 }
        client { target_p99_ms: 50 }
      }
    })pb");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(sent, want)) << sent.DebugString();

  ASSERT_EQ(Run({"update-flow", "--partition", "hot", "--adaptive-lanes", "off"}), kExitOk);
  sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  EXPECT_TRUE(sent.dispatcher().adaptive_weights().has_enabled());
  EXPECT_FALSE(sent.dispatcher().adaptive_weights().enabled());
  EXPECT_FALSE(sent.dispatcher().adaptive_weights().has_consensus());

  EXPECT_EQ(Run({"update-flow", "--partition", "hot", "--adaptive-lanes", "consensus=-1"}),
            kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--adaptive-lanes consensus"));
  EXPECT_EQ(Run({"update-flow", "--partition", "hot", "--adaptive-lanes", "egress=5"}), kExitUsage);
}

TEST_F(NodectlTest, UpdateFlowSendsTheLosslessDrainRateAndDiskBudget) {
  ASSERT_EQ(
      Run({"update-flow", "--partition", "ledger", "--drain-rate", "5MB", "--disk-budget", "1GiB"}),
      kExitOk)
      << err();
  auto sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  EXPECT_EQ(sent.lossless().drain_bytes_per_second(), 5'000'000u);
  EXPECT_TRUE(sent.lossless().set_disk_budget());
  EXPECT_EQ(sent.lossless().disk_budget_bytes(), uint64_t{1} << 30);
  EXPECT_FALSE(sent.has_pool());
  // "none" lifts the budget: set, with 0.
  ASSERT_EQ(Run({"update-flow", "--partition", "ledger", "--disk-budget", "none"}), kExitOk)
      << err();
  sent =
      FromText<node::admin::UpdatePartitionFlowRequest>(fake_.last_request("UpdatePartitionFlow"));
  EXPECT_TRUE(sent.lossless().set_disk_budget());
  EXPECT_EQ(sent.lossless().disk_budget_bytes(), 0u);
  EXPECT_EQ(sent.lossless().drain_bytes_per_second(), 0u);
}

TEST_F(NodectlTest, UpdateEgressSendsCapAndFloor) {
  ASSERT_EQ(Run({"update-egress", "--cap", "50MB", "--floor", "64KiB"}), kExitOk) << err();
  EXPECT_EQ(
      fake_.last_request("UpdateEgress"),
      "cap_bytes_per_second: 50000000 set_cap: true tx_forward_floor_bytes_per_second: 65536");
  ASSERT_EQ(Run({"update-egress", "--cap", "unlimited"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateEgress"), "set_cap: true");
  EXPECT_THAT(out(), HasSubstr("egress  cap unlimited"));
  ASSERT_EQ(Run({"update-egress", "--floor", "1000"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateEgress"), "tx_forward_floor_bytes_per_second: 1000");
}

TEST_F(NodectlTest, UpdateArbiterGroupsFlagsPerPartition) {
  fake_.SetArbiterResponse(FromText<node::admin::UpdateArbiterResponse>(R"pb(
    effective {
      id: 1
      name: "hot"
      share { weight: 3 guarantee_fraction: 0.2 ceiling_fraction: 0.9 }
    }
    effective {
      id: 2
      name: "steady"
      share { weight: 1 ceiling_fraction: 1 }
    })pb"));
  ASSERT_EQ(Run({"update-arbiter", "--partition", "hot", "--weight", "3", "--guarantee", "0.2",
                 "--ceiling", "0.9", "--partition", "steady", "--weight", "1"}),
            kExitOk)
      << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"),
            "entries { partition: \"hot\" share { weight: 3 guarantee_fraction: 0.2 "
            "ceiling_fraction: 0.9 } } entries { partition: \"steady\" share { weight: 1 } }");
  EXPECT_EQ(out(),
            "updated\n"
            "PARTITION  ID  WEIGHT  GUARANTEE  CEILING\n"
            "hot         1       3        0.2      0.9\n"
            "steady      2       1          0        1\n");
}

TEST_F(NodectlTest, UpdateArbiterHardCeiling) {
  fake_.SetArbiterResponse(FromText<node::admin::UpdateArbiterResponse>(R"pb(
    effective {
      id: 1
      name: "hot"
      share { weight: 1 ceiling_fraction: 0.25 hard_ceiling: true }
    })pb"));
  ASSERT_EQ(
      Run({"update-arbiter", "--partition", "hot", "--weight", "1", "--ceiling", "0.25", "--hard"}),
      kExitOk)
      << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"),
            "entries { partition: \"hot\" share { weight: 1 ceiling_fraction: 0.25 "
            "hard_ceiling: true } }");
  EXPECT_THAT(out(), HasSubstr("0.25 hard\n"));
  // A hard ceiling needs a ceiling to be hard.
  EXPECT_EQ(Run({"update-arbiter", "--partition", "hot", "--weight", "1", "--hard"}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--hard: needs a --ceiling below 1 for partition 'hot'"));
}

TEST_F(NodectlTest, UpdateArbiterSendsTheWorkerCountAlone) {
  fake_.SetArbiterResponse(
      FromText<node::admin::UpdateArbiterResponse>("cpu_workers: 3 effective { id: 1 name: "
                                                   "\"hot\" share { weight: 1 } }"));
  ASSERT_EQ(Run({"update-arbiter", "--cpu-workers", "3"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"), "cpu_workers: 3");
  EXPECT_THAT(out(), HasSubstr("updated; worker threads: 3\n"));
}

TEST_F(NodectlTest, UpdateArbiterSendsTheBlockBudgetAloneAndZeroToTurnItOff) {
  fake_.SetArbiterResponse(
      FromText<node::admin::UpdateArbiterResponse>("consensus_blocks_per_second: 32"));
  ASSERT_EQ(Run({"update-arbiter", "--blocks-per-second", "32"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"), "consensus_blocks_per_second: 32");
  EXPECT_THAT(out(), HasSubstr("updated; block budget: 32 blocks/s\n"));
  ASSERT_EQ(Run({"update-arbiter", "--blocks-per-second", "0"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"), "consensus_blocks_per_second: 0")
      << "0 is sent (turns the budget off), not left out";
}

TEST_F(NodectlTest, UpdateArbiterSendsTheLedgerWriteBuffersAlone) {
  fake_.SetArbiterResponse(FromText<node::admin::UpdateArbiterResponse>(
      "ledger_write_buffer_bytes: 536870912 ledger_write_buffer_per_partition_bytes: 16777216"));
  ASSERT_EQ(Run({"update-arbiter", "--ledger-write-buffers", "512MiB"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("UpdateArbiter"), "ledger_write_buffer_bytes: 536870912");
  EXPECT_THAT(out(), HasSubstr("updated; ledger write buffers: 536870912 bytes, 16777216 per "
                               "partition\n"));
}

TEST_F(NodectlTest, PauseAndResumeSendThePartition) {
  ASSERT_EQ(Run({"pause", "hot"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("PausePartition"), "partition: \"hot\"");
  EXPECT_EQ(out(), "partition hot paused\n");
  ASSERT_EQ(Run({"resume", "hot"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("ResumePartition"), "partition: \"hot\"");
  EXPECT_EQ(out(), "partition hot resumed\n");
  ASSERT_EQ(Run({"--json", "pause", "hot"}), kExitOk) << err();
  EXPECT_EQ(out(), "{}\n");
}

TEST_F(NodectlTest, CreatePartitionSendsTheConfigTextOrFile) {
  ASSERT_EQ(Run({"create-partition", "--config", "id: 7 name: \"orders\" share { weight: 2 }"}),
            kExitOk)
      << err();
  EXPECT_EQ(fake_.last_request("CreatePartition"),
            "config { id: 7 name: \"orders\" share { weight: 2 } }");
  EXPECT_EQ(out(), "created partition orders (7): NORMAL at height 0\n");

  const std::string file = ::testing::TempDir() + "/nodectl_create_partition.textproto";
  std::ofstream(file) << "id: 8\nname: \"fills\"\npool { max_txs: 100 }\n";
  ASSERT_EQ(Run({"create-partition", "--config", file}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("CreatePartition"),
            "config { id: 8 name: \"fills\" pool { max_txs: 100 } }");
  std::remove(file.c_str());
}

TEST_F(NodectlTest, CreatePartitionRefusesABadConfigBeforeAnyCall) {
  EXPECT_EQ(Run({"create-partition", "--config", "id: 7 nmae: \"x\""}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--config: line 1"));
  EXPECT_EQ(Run({"create-partition", "--config", "name: \"x\""}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--config: id: required"));
  EXPECT_EQ(Run({"create-partition"}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--config: required"));
  EXPECT_EQ(Run({"create-partition", "--config", "/no/such/file"}), kExitUsage);
  EXPECT_THAT(err(), HasSubstr("cannot read file '/no/such/file'"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(NodectlTest, StopStartRemoveSendThePartitionAndOptions) {
  ASSERT_EQ(Run({"stop-partition", "orders", "--drain-ms", "2000"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("StopPartition"), "partition: \"orders\" drain_ms: 2000");
  EXPECT_EQ(out(), "partition orders (7): STOPPED\n");
  ASSERT_EQ(Run({"start-partition", "orders"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("StartPartition"), "partition: \"orders\"");
  EXPECT_EQ(out(), "partition orders (7): NORMAL at height 12\n");
  ASSERT_EQ(Run({"remove-partition", "orders", "--delete-data"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("RemovePartition"), "partition: \"orders\" delete_data: true");
  EXPECT_EQ(out(), "partition orders removed; data deleted: /data/partition-7\n");
  EXPECT_EQ(Run({"stop-partition", "orders", "--drain-ms", "0"}), kExitUsage);
  EXPECT_EQ(Run({"stop-partition"}), kExitUsage);
}

TEST_F(NodectlTest, AdminsAppliesTheChangeToEachNodeAndReportsEach) {
  FakeAdminService second;
  ASSERT_TRUE(second.Start());
  second.SetError(
      grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "config.id: partition id 7 is in use"));
  const std::string list = absl::StrCat(fake_.address(), ",", second.address());
  EXPECT_EQ(Run({"create-partition", "--config", "id: 7 name: \"orders\"", "--admins", list}),
            kExitRpcError);
  EXPECT_EQ(
      out(),
      absl::StrCat(fake_.address(), ": created partition orders (7): NORMAL at height 0\n",
                   second.address(), ": ALREADY_EXISTS: config.id: partition id 7 is in use\n"));
  EXPECT_THAT(err(), HasSubstr("1 of 2 nodes failed"));
  EXPECT_EQ(second.last_request("CreatePartition"), "config { id: 7 name: \"orders\" }");

  second.SetError(grpc::Status::OK);
  ASSERT_EQ(Run({"--json", "stop-partition", "orders", "--admins", list}), kExitOk) << err();
  EXPECT_THAT(out(), HasSubstr(absl::StrCat("{\"admin\":\"", second.address(), "\",\"ok\":true,")));
  EXPECT_EQ(Run({"stop-partition", "orders", "--admins", absl::StrCat(list, ",", fake_.address())}),
            kExitUsage);
  EXPECT_THAT(err(), HasSubstr("listed twice"));
  EXPECT_EQ(Run({"stop-partition", "orders", "--admins", ","}), kExitUsage);
}

TEST_F(NodectlTest, TokenFilesGiveEachAdminAddressItsOwnToken) {
  FakeAdminService second;
  ASSERT_TRUE(second.Start());
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/nodectl_token_a") << "token-of-node-a\n";
  std::ofstream(dir + "/nodectl_token_b") << "token-of-node-b\n";
  const std::string list = absl::StrCat(fake_.address(), ",", second.address());
  ASSERT_EQ(Run({"start-partition", "orders", "--admins", list, "--token-files",
                 dir + "/nodectl_token_a," + dir + "/nodectl_token_b"}),
            kExitOk)
      << err();
  EXPECT_EQ(fake_.last_authorization(), "Bearer token-of-node-a");
  EXPECT_EQ(second.last_authorization(), "Bearer token-of-node-b");
  // An empty entry sends no token to that address.
  ASSERT_EQ(Run({"start-partition", "orders", "--admins", list, "--token-files",
                 dir + "/nodectl_token_a,"}),
            kExitOk)
      << err();
  EXPECT_EQ(second.last_authorization(), "");
  // One file per address, or a usage error before any call.
  const int calls = fake_.calls();
  EXPECT_EQ(Run({"start-partition", "orders", "--admins", list, "--token-files",
                 dir + "/nodectl_token_a"}),
            kExitUsage);
  EXPECT_THAT(err(), HasSubstr("--token-files: give one file per --admins address (2), got 1"));
  EXPECT_EQ(fake_.calls(), calls);
  std::remove((dir + "/nodectl_token_a").c_str());
  std::remove((dir + "/nodectl_token_b").c_str());
}

TEST_F(NodectlTest, WatchStopsAfterCount) {
  fake_.SetStats(SampleStats());
  fake_.SetWatch(/*updates=*/50, /*hold=*/true);
  ASSERT_EQ(Run({"--json", "watch", "--partition", "hot", "--interval-ms", "250", "--count", "3"}),
            kExitOk)
      << err();
  EXPECT_EQ(fake_.last_request("WatchFlowStats"), "partition: \"hot\" interval_ms: 250");
  // One JSON object per line, in order.
  std::vector<std::string> lines;
  std::istringstream in(out());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << out();
  for (int i = 0; i < 3; ++i) {
    node::admin::FlowStats s;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[i], &s).ok()) << lines[i];
    EXPECT_EQ(s.unix_millis(), i + 1);
  }
}

TEST_F(NodectlTest, WatchEndsWhenTheServerEndsTheStream) {
  fake_.SetWatch(/*updates=*/2, /*hold=*/false);
  ASSERT_EQ(Run({"watch"}), kExitOk) << err();
  EXPECT_EQ(fake_.last_request("WatchFlowStats"), "");
  EXPECT_THAT(out(), HasSubstr(std::string(72, '-')));  // separator between the two updates
  EXPECT_THAT(out(), HasSubstr("at 1970-01-01T00:00:00.002Z"));
}

TEST_F(NodectlTest, WatchCancelledLikeCtrlCExitsZero) {
  fake_.SetWatch(/*updates=*/1, /*hold=*/true);
  CallCanceller canceller;
  std::ostringstream out, err;
  int code = -1;
  std::thread run([&] {
    code = RunNodectl({"--admin", fake_.address(), "watch"},
                      {.out = &out, .err = &err, .canceller = &canceller});
  });
  ASSERT_TRUE(fake_.watch_holding().WaitForNotificationWithTimeout(absl::Seconds(10)));
  canceller.Cancel();
  run.join();
  EXPECT_EQ(code, kExitOk) << err.str();
  EXPECT_THAT(err.str(), IsEmpty());
  // A cancelled canceller stops later calls before they start.
  std::ostringstream out2, err2;
  EXPECT_EQ(RunNodectl({"--admin", fake_.address(), "status"},
                       {.out = &out2, .err = &err2, .canceller = &canceller}),
            kExitRpcError);
  EXPECT_EQ(err2.str(), "nodectl: CANCELLED: cancelled\n");
}

// The client API commands talk to --client, never with the admin token.
class NodectlClientTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(client_.Start()); }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    args.insert(args.begin(), {"--client", client_.address()});
    return RunNodectl(args, {.out = &out_, .err = &err_, .canceller = nullptr});
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

  loadgen_test::FakeClientService client_{{{"hot", 1}}};
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(NodectlClientTest, WatchCommitsPrintsOneLinePerBlockUntilCount) {
  using node::chain::Receipt;
  client_.AddBlock("hot", {Receipt::SUCCESS, Receipt::FAILED, Receipt::SUCCESS});
  client_.AddBlock("hot", {});
  client_.AddBlock("hot", {Receipt::REJECTED});
  client_.SetWatchLive(true);  // the stream would go on: --count ends it
  ASSERT_EQ(
      Run({"watch-commits", "--partition", "hot", "--from", "1", "--count", "2", "--receipts"}),
      kExitOk)
      << err();
  EXPECT_EQ(client_.last_watch_request(),
            "partition { name: \"hot\" } from_height: 1 include_receipts: true");
  EXPECT_EQ(out(),
            "HEIGHT      HASH          TXS     RECEIPTS\n"
            "1           010101010101  3       2 SUCCESS, 1 FAILED\n"
            "2           020202020202  0       -\n");
  EXPECT_THAT(err(), IsEmpty());
}

TEST_F(NodectlClientTest, WatchCommitsWithoutReceiptsAndAsJson) {
  client_.AddBlock("hot", {node::chain::Receipt::SUCCESS});
  client_.AddBlock("hot", {});
  ASSERT_EQ(Run({"watch-commits", "--partition", "1", "--from", "1"}), kExitOk) << err();
  EXPECT_EQ(client_.last_watch_request(), "partition { id: 1 } from_height: 1");
  EXPECT_EQ(out(),
            "HEIGHT      HASH          TXS\n"
            "1           010101010101  1\n"
            "2           020202020202  0\n");

  ASSERT_EQ(Run({"--json", "watch-commits", "--partition", "hot", "--from", "2", "--txs"}), kExitOk)
      << err();
  EXPECT_EQ(client_.last_watch_request(),
            "partition { name: \"hot\" } from_height: 2 include_txs: true");
  node::client::WatchCommitsResponse block;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out(), &block).ok()) << out();
  EXPECT_EQ(block.height(), 2u);
}

TEST_F(NodectlClientTest, WatchCommitsCutByTheNodeExitsOneWithTheResumeHeight) {
  client_.AddBlock("hot", {});
  client_.AddBlock("hot", {});
  client_.SetWatchEnd(1, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                      "client reads too slowly; resume from height 2"));
  EXPECT_EQ(Run({"watch-commits", "--partition", "hot", "--from", "1"}), kExitRpcError);
  EXPECT_THAT(out(), HasSubstr("\n1   "));
  EXPECT_EQ(err(), "nodectl: RESOURCE_EXHAUSTED: client reads too slowly; resume from height 2\n");
}

TEST_F(NodectlClientTest, GetValuePrintsTheValueAndSendsNoAdminToken) {
  const std::string token = ::testing::TempDir() + "/nodectl_client_token";
  std::ofstream(token) << "secret\n";
  client_.AddBlock("hot", {});
  client_.SetValue("k1", std::string("v\x01", 2));
  ASSERT_EQ(Run({"--token-file", token, "get-value", "--partition", "hot", "k1"}), kExitOk)
      << err();
  EXPECT_EQ(client_.last_value_request(), "partition { name: \"hot\" } key: \"k1\"");
  EXPECT_EQ(out(),
            "KEY  FOUND  VALUE  HEIGHT\n"
            "k1   yes    v\\x01       1\n");
  ASSERT_EQ(Run({"get-value", "--partition", "hot", "--height", "5", "nope"}), kExitOk) << err();
  EXPECT_EQ(client_.last_value_request(), "partition { name: \"hot\" } key: \"nope\" height: 5");
  EXPECT_THAT(out(), HasSubstr("nope  no     -"));
  EXPECT_EQ(client_.client_calls_with_token(), 0);
  ASSERT_EQ(Run({"get-value", "--partition", "cold", "k"}), kExitRpcError);
  EXPECT_EQ(err(), "nodectl: NOT_FOUND: unknown partition\n");
}

}  // namespace
}  // namespace nodectl
