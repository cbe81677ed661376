// FutureBuffer: normal-case messages (pre-prepare, prepare, commit) of views a PBFT replica has
// not installed yet, held until their view's NewView is installed.
//
// Bounded per sender: at most window * 4 messages of each replica (window * n * 4 in all), so a
// faulty replica flooding future-view messages fills only its own share and never crowds out the
// honest ones. Beyond its share, and for seqs at or below the low watermark, a message is refused
// (the replica counts it as outside the watermarks). A message whose sender and signed content
// equal a held one's (a retransmission) takes no room. Messages are kept in arrival order and
// replayed in it.
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
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "partitions/pbft_types.h"

namespace partitions {

class FutureBuffer {
 public:
  explicit FutureBuffer(const PbftConfig& config);

  // Holds `msg` unless its seq is at or below `h`, its sender is not a replica, or its sender's
  // share is full; true if held (now, or already: a duplicate).
  bool Add(const ConsensusMessage& msg, uint64_t h);
  // True if a held message belongs to a view above `view`.
  bool HasAbove(uint64_t view) const;
  // Drops the messages of views below `view`.
  void DropBelow(uint64_t view);
  // A NewView for `view` was installed: returns its messages (in arrival order), drops those of
  // lower views, keeps those of higher ones.
  std::vector<ConsensusMessage> TakeFor(uint64_t view);
  size_t size() const { return messages_.size(); }
  // Messages held from replica `sender`.
  size_t held_from(uint32_t sender) const;

 private:
  // Sender index and signed content: equal for a message and its retransmissions.
  static std::string Key(const ConsensusMessage& msg);
  // Replaces messages_ by `keep` and recounts.
  void Keep(std::vector<ConsensusMessage> keep);

  const uint32_t n_;
  const size_t per_sender_;
  std::vector<ConsensusMessage> messages_;
  std::vector<size_t> held_;               // per sender
  absl::flat_hash_set<std::string> keys_;  // Key() of every held message
};

}  // namespace partitions

#endif  // PARTITIONS_PBFT_FUTURE_BUFFER_H_
