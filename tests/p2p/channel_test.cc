#include "p2p/channel.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace p2p {
namespace {

using ::testing::HasSubstr;

std::string CreateError(std::vector<ChannelDescriptor> d) {
  absl::StatusOr<ChannelTable> t = ChannelTable::Create(std::move(d));
  EXPECT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  return std::string(t.status().message());
}

TEST(KindSetTest, HoldsSmallIntegers) {
  const KindSet s = KindSet::Of({0, 2, 63});
  EXPECT_TRUE(s.Contains(0));
  EXPECT_FALSE(s.Contains(1));
  EXPECT_TRUE(s.Contains(2));
  EXPECT_TRUE(s.Contains(63));
  EXPECT_FALSE(s.Contains(64));  // out of range: never allowed
  EXPECT_TRUE(KindSet().empty());
  EXPECT_EQ(KindSet().With(1).With(1), KindSet::Of({1}));
  EXPECT_TRUE(KindSet::All().Contains(40));
}

TEST(ChannelTableTest, DefaultTableIsInPriorityOrderWithForwardingDerived) {
  const ChannelTable& t = DefaultChannelTable();
  ASSERT_EQ(t.by_priority().size(), 4u);
  EXPECT_EQ(t.by_priority()[0].channel, node::p2p::CONSENSUS);
  EXPECT_EQ(t.by_priority()[1].channel, node::p2p::SYNC);
  EXPECT_EQ(t.by_priority()[2].channel, node::p2p::TX_FORWARD);
  EXPECT_EQ(t.by_priority()[3].channel, node::p2p::BULK);
  EXPECT_EQ(t.derived_rate_index(), 2);
  EXPECT_EQ(t.Find(node::p2p::CONSENSUS)->overflow, OverflowPolicy::kRefuseNew);
  EXPECT_EQ(t.Find(node::p2p::BULK)->overflow, OverflowPolicy::kDropOldest);
  EXPECT_EQ(t.Find(node::p2p::SYNC)->lane, "sync");
  EXPECT_EQ(t.Find(node::p2p::TX_FORWARD)->name(), "TX_FORWARD");
  EXPECT_TRUE(t.Find(node::p2p::BULK)->Allows(7));  // p2p knows no kinds: all allowed
  EXPECT_EQ(t.Find(node::p2p::CHANNEL_UNSPECIFIED), nullptr);
  EXPECT_EQ(t.Find(static_cast<Channel>(99)), nullptr);
  EXPECT_EQ(t.PriorityIndex(static_cast<Channel>(-1)), -1);
}

TEST(ChannelTableTest, OrderFollowsPriorityNotListOrder) {
  std::vector<ChannelDescriptor> d = DefaultChannelDescriptors();
  std::swap(d[0], d[3]);
  d[0].priority = 100;  // BULK, now listed first, goes first
  absl::StatusOr<ChannelTable> t = ChannelTable::Create(d);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->by_priority()[0].channel, node::p2p::BULK);
  EXPECT_EQ(t->PriorityIndex(node::p2p::CONSENSUS), 1);
  EXPECT_EQ(t->derived_rate_index(), 3);
}

TEST(ChannelTableTest, RefusesTablesThatDoNotDescribeEachChannelOnce) {
  std::vector<ChannelDescriptor> d = DefaultChannelDescriptors();
  d.pop_back();
  EXPECT_THAT(CreateError(d), HasSubstr("BULK is not described"));

  d = DefaultChannelDescriptors();
  d[3].channel = node::p2p::SYNC;
  EXPECT_THAT(CreateError(d), HasSubstr("channels[3].channel: SYNC is described twice"));

  d = DefaultChannelDescriptors();
  d[1].channel = node::p2p::CHANNEL_UNSPECIFIED;
  EXPECT_THAT(CreateError(d), HasSubstr("channels[1].channel: 0 is not a wire channel"));

  d = DefaultChannelDescriptors();
  d[2].priority = d[1].priority;
  EXPECT_THAT(CreateError(d), HasSubstr("share priority"));

  d = DefaultChannelDescriptors();
  d[2].queue_bytes = 0;
  EXPECT_THAT(CreateError(d), HasSubstr("channels[2].queue_bytes"));

  d = DefaultChannelDescriptors();
  d[0].lane.clear();
  EXPECT_THAT(CreateError(d), HasSubstr("channels[0].lane"));

  d = DefaultChannelDescriptors();
  d[3].derived_rate = true;
  EXPECT_THAT(CreateError(d), HasSubstr("TX_FORWARD and BULK both have derived_rate"));
}

}  // namespace
}  // namespace p2p
