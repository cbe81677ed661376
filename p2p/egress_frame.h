// EgressFrame: one chunk of an outgoing message, as the egress scheduler releases it and a
// transport writes it (p2p/frame_writer.h). The frame shares the whole message's bytes; the
// chunk is [offset, offset + length) of them. The receiving side joins the chunks of one message
// (p2p/reassembler.h), which requires that the chunks of a message go out in order and that, per
// (partition, channel) and peer, one message's chunks are not interleaved with another's.
//
// A plain value: copy and move it freely; not synchronized.
//
//   EgressFrame f = scheduler.Dequeue().frame.value();
//   header.set_chunk_index(f.chunk_index);
//   frame.set_payload(f.payload());
#ifndef P2P_EGRESS_FRAME_H_
#define P2P_EGRESS_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "p2p/network.h"

namespace p2p {

// Bytes charged per frame for its header (an upper estimate of the encoded FrameHeader and its
// framing), so an egress cap covers what really goes on the wire.
inline constexpr size_t kFrameOverheadBytes = 32;

struct EgressFrame {
  NodeId peer;
  PartitionId partition = 0;
  Channel channel = node::p2p::CONSENSUS;
  uint64_t message_id = 0;
  uint32_t message_length = 0;  // whole message
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 1;
  std::shared_ptr<const std::string> data;  // whole message
  size_t offset = 0;                        // of this chunk in data
  size_t length = 0;                        // of this chunk
  int64_t enqueued_at = 0;                  // clock nanos when the message was enqueued

  absl::string_view payload() const { return absl::string_view(*data).substr(offset, length); }
  size_t wire_bytes() const { return length + kFrameOverheadBytes; }
  bool last() const { return chunk_index + 1 == chunk_count; }
};

}  // namespace p2p

#endif  // P2P_EGRESS_FRAME_H_
