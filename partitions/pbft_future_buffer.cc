#include "partitions/pbft_future_buffer.h"

#include <algorithm>
#include <utility>

#include "partitions/pbft_certs.h"

namespace partitions {

FutureBuffer::FutureBuffer(const PbftConfig& config) : capacity_(config.window * config.n * 4) {}

bool FutureBuffer::Add(const ConsensusMessage& msg, uint64_t h) {
  if (MessageSeq(msg) <= h || messages_.size() >= capacity_) return false;
  messages_.push_back(msg);
  return true;
}

bool FutureBuffer::HasAbove(uint64_t view) const {
  return std::any_of(messages_.begin(), messages_.end(),
                     [&](const ConsensusMessage& m) { return MessageView(m) > view; });
}

void FutureBuffer::DropBelow(uint64_t view) {
  messages_.erase(std::remove_if(messages_.begin(), messages_.end(),
                                 [&](const ConsensusMessage& m) { return MessageView(m) < view; }),
                  messages_.end());
}

std::vector<ConsensusMessage> FutureBuffer::TakeFor(uint64_t view) {
  std::vector<ConsensusMessage> replay;
  std::vector<ConsensusMessage> keep;
  for (ConsensusMessage& m : messages_) {
    const uint64_t v = MessageView(m);
    if (v == view) {
      replay.push_back(std::move(m));
    } else if (v > view) {
      keep.push_back(std::move(m));
    }
  }
  messages_ = std::move(keep);
  return replay;
}

}  // namespace partitions
