#include "p2p/reassembler.h"

#include <string>

#include "gtest/gtest.h"

namespace p2p {
namespace {

node::p2p::FrameHeader H(uint32_t part, Channel ch, uint32_t len, uint32_t idx, uint32_t count,
                         uint64_t id) {
  node::p2p::FrameHeader h;
  h.set_partition(part);
  h.set_channel(ch);
  h.set_length(len);
  h.set_chunk_index(idx);
  h.set_chunk_count(count);
  h.set_message_id(id);
  return h;
}

TEST(ReassemblerTest, SingleFrameMessagePassesThrough) {
  Reassembler r(100);
  auto m = r.Add(H(1, node::p2p::CONSENSUS, 3, 0, 1, 7), "abc");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->payload, "abc");
  EXPECT_EQ((*m)->partition, 1u);
}

TEST(ReassemblerTest, JoinsChunksInterleavedAcrossChannelsAndPartitions) {
  Reassembler r(100);
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 6, 0, 3, 1), "ab")->has_value());
  EXPECT_FALSE(r.Add(H(2, node::p2p::BULK, 4, 0, 2, 2), "wx")->has_value());
  auto vote = r.Add(H(1, node::p2p::CONSENSUS, 1, 0, 1, 3), "v");
  ASSERT_TRUE(vote.ok() && vote->has_value());
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 6, 1, 3, 1), "cd")->has_value());
  auto two = r.Add(H(2, node::p2p::BULK, 4, 1, 2, 2), "yz");
  ASSERT_TRUE(two.ok() && two->has_value());
  EXPECT_EQ((*two)->payload, "wxyz");
  auto one = r.Add(H(1, node::p2p::BULK, 6, 2, 3, 1), "ef");
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->payload, "abcdef");
  EXPECT_EQ(r.partial_messages(), 0u);
}

TEST(ReassemblerTest, RefusesOversizedBadChannelAndBrokenSequences) {
  Reassembler r(10);
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 11, 0, 1, 1), "x").ok());
  EXPECT_FALSE(r.Add(H(1, node::p2p::CHANNEL_UNSPECIFIED, 1, 0, 1, 1), "x").ok());
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 2, 0, 1, 1), "x").ok());   // size != length
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 4, 1, 2, 1), "xy").ok());  // no chunk 0
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 4, 2, 2, 1), "xy").ok());  // index >= count
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 4, 0, 2, 5), "xy")->has_value());
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 4, 1, 2, 6), "zw").ok());  // other message id
  EXPECT_EQ(r.partial_messages(), 0u);                                // partial discarded
  // A new message restarts cleanly after the broken one.
  EXPECT_FALSE(r.Add(H(1, node::p2p::BULK, 4, 0, 2, 7), "ab")->has_value());
  auto m = r.Add(H(1, node::p2p::BULK, 4, 1, 2, 7), "cd");
  ASSERT_TRUE(m.ok() && m->has_value());
  EXPECT_EQ((*m)->payload, "abcd");
}

}  // namespace
}  // namespace p2p
