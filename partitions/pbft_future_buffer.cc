#include "partitions/pbft_future_buffer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "partitions/pbft_certs.h"

namespace partitions {

FutureBuffer::FutureBuffer(const PbftConfig& config)
    : n_(config.n), per_sender_(config.window * 4), held_(config.n, 0) {}

std::string FutureBuffer::Key(const ConsensusMessage& msg) {
  return absl::StrCat(msg.sender(), ":", SigningBytes(msg));
}

bool FutureBuffer::Add(const ConsensusMessage& msg, uint64_t h) {
  if (MessageSeq(msg) <= h || msg.sender() >= n_) return false;
  std::string key = Key(msg);
  if (keys_.contains(key)) return true;
  if (held_[msg.sender()] >= per_sender_) return false;
  keys_.insert(std::move(key));
  ++held_[msg.sender()];
  messages_.push_back(msg);
  return true;
}

size_t FutureBuffer::held_from(uint32_t sender) const { return sender < n_ ? held_[sender] : 0; }

void FutureBuffer::Keep(std::vector<ConsensusMessage> keep) {
  messages_ = std::move(keep);
  keys_.clear();
  std::fill(held_.begin(), held_.end(), 0);
  for (const ConsensusMessage& m : messages_) {
    keys_.insert(Key(m));
    ++held_[m.sender()];
  }
}

bool FutureBuffer::HasAbove(uint64_t view) const {
  return std::any_of(messages_.begin(), messages_.end(),
                     [&](const ConsensusMessage& m) { return MessageView(m) > view; });
}

void FutureBuffer::DropBelow(uint64_t view) {
  std::vector<ConsensusMessage> keep;
  for (ConsensusMessage& m : messages_) {
    if (MessageView(m) >= view) keep.push_back(std::move(m));
  }
  Keep(std::move(keep));
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
  Keep(std::move(keep));
  return replay;
}

}  // namespace partitions
