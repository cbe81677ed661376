// Reassembler: joins the chunks of inbound messages on one peer stream.
//
// The sender's egress scheduler sends the chunks of one message contiguously within its
// (partition, channel) queue, so per (partition, channel) at most one message is partial at a
// time; chunks of other channels or partitions may come in between. A frame that breaks the
// sequence (wrong index, other message id, length over max_frame_bytes, inconsistent sizes) is
// refused with InvalidArgument and the partial message it belonged to is discarded.
//
// Not thread-safe: one instance per stream, used by the stream's reader thread.
//
//   Reassembler r(max_frame_bytes);
//   ASSIGN_OR_RETURN(std::optional<Reassembler::Message> m, r.Add(frame.header(), payload));
//   if (m) Deliver(*m);
#ifndef P2P_REASSEMBLER_H_
#define P2P_REASSEMBLER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "p2p/network.h"
#include "proto/p2p.pb.h"

namespace p2p {

class Reassembler {
 public:
  struct Message {
    PartitionId partition = 0;
    Channel channel = node::p2p::CONSENSUS;
    std::string payload;
  };

  explicit Reassembler(size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // A complete message, nullopt while chunks are missing, or InvalidArgument for a bad frame.
  absl::StatusOr<std::optional<Message>> Add(const node::p2p::FrameHeader& header,
                                             std::string payload);

  size_t partial_messages() const { return partial_.size(); }

 private:
  struct Partial {
    uint64_t message_id = 0;
    uint32_t next_index = 0;
    uint32_t count = 0;
    uint32_t length = 0;
    std::string data;
  };

  const size_t max_frame_bytes_;
  std::map<std::pair<PartitionId, int>, Partial> partial_;
};

}  // namespace p2p

#endif  // P2P_REASSEMBLER_H_
