#include "partitions/partition_message_kind.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitions/partition_channels.h"

namespace partitions {
namespace {

using ::testing::HasSubstr;

absl::Status Check(p2p::Channel channel, PartitionMessageKind kind) {
  const p2p::ChannelDescriptor* d = NodeChannelTable().Find(channel);
  if (d == nullptr) return absl::NotFoundError("no such channel");
  return CheckChannelKind(*d, kind);
}

TEST(PartitionMessageKindTest, KindComesFromTheBody) {
  node::partition::PartitionMessage m;
  EXPECT_TRUE(absl::IsInvalidArgument(KindOf(m).status()));
  m.mutable_consensus();
  EXPECT_EQ(*KindOf(m), PartitionMessageKind::kConsensus);
  m.mutable_txs()->add_signed_txs("tx");
  EXPECT_EQ(*KindOf(m), PartitionMessageKind::kTxs);
  m.mutable_fetch();
  EXPECT_EQ(*KindOf(m), PartitionMessageKind::kFetch);
  EXPECT_STREQ(PartitionMessageKindName(PartitionMessageKind::kFetch), "fetch");
  m.mutable_admission()->set_admit_ppm(250'000);
  EXPECT_EQ(*KindOf(m), PartitionMessageKind::kAdmission);
  EXPECT_STREQ(PartitionMessageKindName(PartitionMessageKind::kAdmission), "admission");
}

// What each channel may carry is what the partition sends on it today, and nothing else.
TEST(CheckChannelKindTest, NodeTableAllowsWhatThePartitionSends) {
  using K = PartitionMessageKind;
  EXPECT_TRUE(Check(node::p2p::CONSENSUS, K::kConsensus).ok());  // PBFT
  EXPECT_TRUE(Check(node::p2p::CONSENSUS, K::kTxs).ok());        // proposal bodies
  EXPECT_TRUE(Check(node::p2p::SYNC, K::kConsensus).ok());       // block sync
  EXPECT_TRUE(Check(node::p2p::SYNC, K::kFetch).ok());
  EXPECT_TRUE(Check(node::p2p::SYNC, K::kTxs).ok());  // fetch answers
  EXPECT_TRUE(Check(node::p2p::TX_FORWARD, K::kTxs).ok());
  EXPECT_TRUE(Check(node::p2p::CONSENSUS, K::kAdmission).ok());  // node-wide admission

  const absl::Status s = Check(node::p2p::TX_FORWARD, K::kConsensus);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("a consensus message may not travel on channel TX_FORWARD"));
  EXPECT_FALSE(Check(node::p2p::CONSENSUS, K::kFetch).ok());
  EXPECT_FALSE(Check(node::p2p::TX_FORWARD, K::kFetch).ok());
  EXPECT_FALSE(Check(node::p2p::TX_FORWARD, K::kAdmission).ok());
  EXPECT_FALSE(Check(node::p2p::SYNC, K::kAdmission).ok());
  for (K k : {K::kConsensus, K::kTxs, K::kFetch, K::kAdmission}) {
    EXPECT_FALSE(Check(node::p2p::BULK, k).ok()) << PartitionMessageKindName(k);
  }
}

TEST(NodeChannelTableTest, LanesAndEgressBehaviour) {
  const p2p::ChannelTable& t = NodeChannelTable();
  EXPECT_EQ(t.Find(node::p2p::CONSENSUS)->lane, kConsensusLaneName);
  EXPECT_EQ(t.Find(node::p2p::SYNC)->lane, kSyncLaneName);
  EXPECT_EQ(t.Find(node::p2p::TX_FORWARD)->lane, kTxForwardLaneName);
  EXPECT_EQ(t.Find(node::p2p::BULK)->lane, kBulkLaneName);
  // Egress behaviour is p2p's default: same priorities, bounds, policies and derived channel.
  const p2p::ChannelTable& defaults = p2p::DefaultChannelTable();
  for (size_t i = 0; i < t.by_priority().size(); ++i) {
    const p2p::ChannelDescriptor& a = t.by_priority()[i];
    const p2p::ChannelDescriptor& b = defaults.by_priority()[i];
    EXPECT_EQ(a.channel, b.channel);
    EXPECT_EQ(a.queue_bytes, b.queue_bytes);
    EXPECT_EQ(a.overflow, b.overflow);
    EXPECT_EQ(a.derived_rate, b.derived_rate);
  }
}

}  // namespace
}  // namespace partitions
