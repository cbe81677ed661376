#include "p2p/reassembler.h"

#include "absl/strings/str_cat.h"

namespace p2p {

absl::StatusOr<std::optional<Reassembler::Message>> Reassembler::Add(
    const node::p2p::FrameHeader& h, std::string payload) {
  if (!IsValidChannel(h.channel())) {
    return absl::InvalidArgumentError(absl::StrCat("frame on invalid channel ", h.channel()));
  }
  if (h.length() > max_frame_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", h.length(), " bytes exceeds max_frame_bytes ", max_frame_bytes_));
  }
  if (h.chunk_count() == 0 || h.chunk_index() >= h.chunk_count() || payload.size() > h.length()) {
    return absl::InvalidArgumentError("frame with inconsistent chunk header");
  }
  const auto key = std::make_pair(h.partition(), static_cast<int>(h.channel()));
  if (h.chunk_count() == 1) {
    partial_.erase(key);  // a sender that gave up on a message starts afresh
    if (payload.size() != h.length()) {
      return absl::InvalidArgumentError("frame payload size differs from its header length");
    }
    return Message{h.partition(), h.channel(), std::move(payload)};
  }
  if (h.chunk_index() == 0) {
    Partial& p = partial_[key];
    p = Partial{};
    p.message_id = h.message_id();
    p.count = h.chunk_count();
    p.length = h.length();
    p.data.reserve(h.length());
  }
  auto it = partial_.find(key);
  if (it == partial_.end() || it->second.message_id != h.message_id() ||
      it->second.next_index != h.chunk_index() || it->second.count != h.chunk_count() ||
      it->second.length != h.length() ||
      it->second.data.size() + payload.size() > it->second.length) {
    if (it != partial_.end()) partial_.erase(it);
    return absl::InvalidArgumentError(absl::StrCat("chunk ", h.chunk_index(), " of message ",
                                                   h.message_id(), " out of sequence"));
  }
  Partial& p = it->second;
  p.data.append(payload);
  ++p.next_index;
  if (p.next_index < p.count) return std::optional<Message>();
  if (p.data.size() != p.length) {
    partial_.erase(it);
    return absl::InvalidArgumentError("reassembled message size differs from its header length");
  }
  Message m{h.partition(), h.channel(), std::move(p.data)};
  partial_.erase(it);
  return m;
}

}  // namespace p2p
