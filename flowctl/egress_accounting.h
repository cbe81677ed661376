// EgressAccounting: the arbiter's view of the node's egress valve (the egress scheduler): how
// many bytes each partition has sent, the cap, and the per-partition weights it serves by.
//
// The arbiter (flowctl/arbiter_service.h) reads Usage() once per tick to measure each
// partition's egress rate and the capacity to divide, and sets each partition's weight from its
// entitlement. Whatever wraps the network with an egress scheduler implements it (the node
// adapts p2p::EgressScheduler); a node without an egress valve passes none.
//
// Thread-safety: implementations must be thread-safe; the arbiter calls them from its tick with
// its mutex held, so they must not call back into the arbiter.
//
//   flowctl::EgressUsage u = egress->Usage();
//   double rate = (u.bytes_sent[7] - last_bytes) * 1e9 / elapsed_nanos;
//   RETURN_IF_ERROR(egress->SetPartitionWeight(7, 250));
#ifndef FLOWCTL_EGRESS_ACCOUNTING_H_
#define FLOWCTL_EGRESS_ACCOUNTING_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "flowctl/token_bucket.h"

namespace flowctl {

struct EgressUsage {
  // The global egress cap; TokenBucket::kUnlimited when there is none.
  double cap_bytes_per_second = TokenBucket::kUnlimited;
  // Bytes sent so far per partition id, all channels together; never decreases. A partition
  // that has sent nothing may be absent.
  std::map<uint32_t, uint64_t> bytes_sent;
};

class EgressAccounting {
 public:
  virtual ~EgressAccounting() = default;

  // One consistent snapshot.
  virtual EgressUsage Usage() const = 0;
  // Relative weight (>= 1) of the partition in the scheduler's round robin.
  // InvalidArgument for weight 0.
  virtual absl::Status SetPartitionWeight(uint32_t partition, uint32_t weight) = 0;
  // A hard limit on the partition's egress in bytes/s, held even while the link is otherwise
  // idle; 0 removes it. InvalidArgument for a negative or NaN rate.
  virtual absl::Status SetPartitionRateLimit(uint32_t partition, double bytes_per_second) = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_EGRESS_ACCOUNTING_H_
