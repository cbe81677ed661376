// StateRoot: an incremental, order-independent hash of a set of (key, value) entries.
//
// It is LtHash16 (Lewi et al., "Securing Update Propagation with Homomorphic Hashing", 2019):
// each entry is expanded into 1024 16-bit lanes (AES-256-CTR keystream keyed by the SHA-256 of
// the entry), and the set's hash is the lane-wise sum mod 2^16 of its entries. Adding or
// removing an entry costs one expansion (~2 us with AES-NI), so the
// executor updates the root in O(entries changed by the block), never O(state). The sum depends
// only on the set, not on insertion order, so two replicas with the same state always agree, and
// a replica reopening its ledger can re-derive it from a scan. Root() compresses the 2 KiB lane
// vector to 32 bytes with SHA-256. (A plain additive 256-bit sum would be cheaper but falls to
// Wagner's generalized-birthday attack; 1024 x 16-bit lanes keep ~200-bit collision resistance.)
//
// Not thread-safe: a value type, owned by one thread at a time (the executor guards its copy).
//
//   StateRoot acc;
//   acc.Add("a/alice", "...");               // entry inserted
//   acc.Remove("a/alice", old); acc.Add("a/alice", now);   // entry updated
//   std::string root = acc.Root();           // 32 bytes
#ifndef PARTITIONS_STATE_ROOT_H_
#define PARTITIONS_STATE_ROOT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace partitions {

class StateRoot {
 public:
  static constexpr int kLanes = 1024;

  // The empty set.
  StateRoot() { lanes_.fill(0); }

  void Add(absl::string_view key, absl::string_view value);
  // REQUIRES: (key, value) is in the set (otherwise the root silently describes another set).
  void Remove(absl::string_view key, absl::string_view value);

  // Adds every entry of `other` (the hash of the union of two disjoint sets).
  void Merge(const StateRoot& other);

  // SHA-256 of the lanes (little-endian), 32 bytes.
  std::string Root() const;

  // The lanes, little-endian: 2 KiB. The ledger stores them with every block so a reopen need not
  // rehash the whole state. Parse returns nullopt unless `bytes` is exactly that size.
  std::string Serialize() const;
  static std::optional<StateRoot> Parse(absl::string_view bytes);

  bool operator==(const StateRoot& other) const { return lanes_ == other.lanes_; }

 private:
  std::array<uint16_t, kLanes> lanes_;
};

}  // namespace partitions

#endif  // PARTITIONS_STATE_ROOT_H_
