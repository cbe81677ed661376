// FutureBuffer: normal-case messages (pre-prepare, prepare, commit) of views a PBFT replica has
// not installed yet, held until their view's NewView is installed.
//
// Bounded: at most window * n * 4 messages; beyond that, and for seqs at or below the low
// watermark, messages are refused (the replica counts them as outside the watermarks). Messages
// are kept in arrival order and replayed in it.
//
// Thread-compatibility: not thread-safe; owned by one PbftReplica.
//
//   FutureBuffer future(config);
//   if (!future.Add(msg, h)) ++dropped_outside_watermarks;
//   if (future.HasAbove(view)) AskForNewView(view + 1);
//   for (const ConsensusMessage& m : future.TakeFor(installed_view)) OnMessage(m);
#ifndef PARTITIONS_PBFT_FUTURE_BUFFER_H_
#define PARTITIONS_PBFT_FUTURE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "partitions/pbft_types.h"

namespace partitions {

class FutureBuffer {
 public:
  explicit FutureBuffer(const PbftConfig& config);

  // Holds `msg` unless its seq is at or below `h` or the buffer is full; true if held.
  bool Add(const ConsensusMessage& msg, uint64_t h);
  // True if a held message belongs to a view above `view`.
  bool HasAbove(uint64_t view) const;
  // Drops the messages of views below `view`.
  void DropBelow(uint64_t view);
  // A NewView for `view` was installed: returns its messages (in arrival order), drops those of
  // lower views, keeps those of higher ones.
  std::vector<ConsensusMessage> TakeFor(uint64_t view);
  size_t size() const { return messages_.size(); }

 private:
  const size_t capacity_;
  std::vector<ConsensusMessage> messages_;
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_FUTURE_BUFFER_H_
