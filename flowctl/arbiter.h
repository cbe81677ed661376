// Arbiter allocation: weighted max-min fair shares of one capacity, with guarantees and ceilings.
//
// AllocateFairShares(capacity, consumers) is a pure function (no state, no clock, thread-safe). The
// node calls it on a short tick, once per resource (CPU worker time, memory bytes, egress bytes/s),
// with each partition's weight, guaranteed minimum, ceiling and currently measured demand.
//
// The result, with cap_i = min(demand_i, ceiling_i) and floor_i = min(guarantee_i, cap_i):
//   * Guarantees first. If the floors fit (sum floor_i <= capacity) every consumer gets at least
//     its floor. If they do not (guarantees over-committed, or capacity shrank), each gets
//     floor_i * capacity / sum(floor) -- guarantees scaled down proportionally -- and nothing else.
//   * Then weighted water-filling: share_i = clamp(lambda * weight_i, floor_i, cap_i) with one
//     level lambda for everybody, the largest for which sum(share) <= capacity. So each consumer
//     gets min(its demand, its weighted fair share); share a consumer does not use is spread over
//     the others by weight; a guarantee only matters when it is above the weighted share.
//   * Never more than capacity in total, never more than a ceiling or the demand.
//   * Work-conserving: if some consumer gets less than cap_i, the whole capacity is handed out.
//   * When every consumer wants more than it can get and no guarantee or ceiling binds, shares
//     are exactly proportional to weights.
//
// Borrowing (HTB's rate/ceil): guarantee ~ rate, ceiling ~ ceil. A consumer whose demand is below
// its share (idle) lends the rest: the water level rises and busy consumers get it, up to their
// ceilings. Nothing is reserved for the lender, and it gets its share back on the next tick,
// because shares are recomputed from demand each tick. Hence demand must measure what a
// consumer would use if allowed (queued + in progress), not what it was last granted, or a lender
// could never reclaim. Floating-point results are exact up to rounding (relative ~1e-12).
//
//   std::vector<flowctl::ArbiterConsumer> consumers = {
//       {.weight = 1, .guarantee = 10, .demand = 80},
//       {.weight = 3, .ceiling = 50, .demand = 200}};
//   ASSIGN_OR_RETURN(std::vector<double> shares, flowctl::AllocateFairShares(100, consumers));
//   // shares == {50, 50}: the second hits its ceiling; the first takes the rest.
#ifndef FLOWCTL_ARBITER_H_
#define FLOWCTL_ARBITER_H_

#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace flowctl {

inline constexpr double kNoCeiling = std::numeric_limits<double>::infinity();
// A demand that takes whatever it is given.
inline constexpr double kUnboundedDemand = std::numeric_limits<double>::infinity();

// One consumer (a partition) of one resource. All amounts are in the resource's unit.
struct ArbiterConsumer {
  double weight = 1;            // > 0, finite
  double guarantee = 0;         // >= 0, finite: minimum share while demanded
  double ceiling = kNoCeiling;  // >= guarantee; kNoCeiling for none
  double demand = 0;            // >= 0; kUnboundedDemand allowed
};

// The share of `capacity` (finite, >= 0) of each consumer, in input order.
// InvalidArgument naming the field (e.g. "consumers[2].weight: must be > 0 and finite, got 0")
// for a weight <= 0, a negative or NaN amount, an infinite guarantee, or ceiling < guarantee.
absl::StatusOr<std::vector<double>> AllocateFairShares(double capacity,
                                                       absl::Span<const ArbiterConsumer> consumers);

}  // namespace flowctl

#endif  // FLOWCTL_ARBITER_H_
