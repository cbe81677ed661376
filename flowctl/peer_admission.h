// PeerAdmission: one partition's node-wide admission agreed across its replicas.
//
// A node's NodeAdmission (flowctl/node_admission.h) cuts only the client calls that reach that
// node. A partition's CPU on a node is mostly the work every replica does for every transaction,
// wherever its client connected (verification, ordering, execution, the ledger write), so a
// node that cuts its own clients alone barely moves it: the other replicas keep admitting. So
// each replica tells the partition's other replicas its own admit fraction while it cuts
// (Update says when: on a change, as a keepalive, and once when it is back to 1), and admits no
// more than the (f+1)-th lowest of all the replicas' fractions, its own included (f = (n-1)/3):
// a flood that f+1 replicas cut is cut on every replica. Faulty replicas alone (up to f) cannot
// cut anyone: what a replica admits is never below the lowest fraction an honest replica sent
// (f faulty replicas claiming the floor beside one honest replica that cuts to 0.5 give every
// replica 0.5), nor below its own node's floor. With fewer than four replicas f is 0 and any
// one replica's cut holds for all. A fraction not heard again within kExpiry counts as 1 (a
// replica that stopped or lost its messages does not hold the others down).
//
// The caller sends on its arbiter tick, which must be well under kExpiry (the node refuses
// agree_with_peers with arbiter_tick_ms above 500).
//
// Thread-safe: Observe comes from the partition's message handling, Update and Sent from the
// arbiter's tick.
//
//   PeerAdmission peers(/*replicas=*/4, /*self=*/0);
//   peers.Observe(2, 0.25, now);                          // a PartitionMessage.admission
//   PeerAdmission::Decision d = peers.Update(own, floor, now);
//   shedder.SetFraction(d.applied);
//   if (d.send && Broadcast(d.own)) peers.Sent(d.own, now);
#ifndef FLOWCTL_PEER_ADMISSION_H_
#define FLOWCTL_PEER_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flowctl {

class PeerAdmission {
 public:
  // Below 1, the own fraction goes to the peers at least this often (so that kExpiry, a few
  // of these, only ends a cut whose sender is gone).
  static constexpr absl::Duration kKeepalive = absl::Milliseconds(500);
  static constexpr absl::Duration kExpiry = absl::Seconds(2);
  // A change of the own fraction at least this large (absolute) goes out at once.
  static constexpr double kResendChange = 0.01;
  // On the wire a fraction is in millionths (PartitionMessage.admission.admit_ppm): kPpmOne is 1.
  static constexpr uint32_t kPpmOne = 1'000'000;
  static uint32_t ToPpm(double fraction);
  // nullopt above kPpmOne: malformed.
  static std::optional<double> FromPpm(uint32_t ppm);

  struct Decision {
    double applied = 1;  // what this replica admits: min(own, the replicas' (f+1)-th lowest)
    double own = 1;      // the own fraction, clamped: what to send
    bool send = false;   // own goes to the other replicas now
  };

  struct Snapshot {
    double own = 1;
    double applied = 1;
    int peers_cutting = 0;  // other replicas with a fraction below 1, heard within kExpiry
  };

  // `replicas` >= 1; `self` < replicas, this replica's index.
  PeerAdmission(uint32_t replicas, uint32_t self);
  PeerAdmission(const PeerAdmission&) = delete;
  PeerAdmission& operator=(const PeerAdmission&) = delete;

  // Replica `replica`'s fraction, received at `now_nanos`; clamped to [0, 1]. A message from
  // self or from an index outside the set is ignored (false).
  bool Observe(uint32_t replica, double fraction, int64_t now_nanos);

  // This replica's own fraction at `now_nanos` (clamped to [floor, 1]); the result's applied is
  // never below `floor` (this node's node_admission.min_admit_fraction): peers cannot push a
  // partition below what this node would cut it to itself. Send is true when own changed by
  // kResendChange or more since it was last Sent, when it is below 1 and was last sent
  // kKeepalive ago or more, and when it is back to 1 after a cut, until Sent.
  Decision Update(double own, double floor, int64_t now_nanos);
  // `own` (a Decision's) went out at `now_nanos`. A send the network refused is not Sent: the
  // next Update asks for it again.
  void Sent(double own, int64_t now_nanos);

  Snapshot snapshot(int64_t now_nanos) const;

 private:
  struct Heard {
    double fraction = 1;
    int64_t at_nanos = 0;
    bool heard = false;
  };
  // The (f+1)-th lowest of own and the live peers' fractions. REQUIRES: mu_ held.
  double AgreedLocked(double own, int64_t now_nanos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LiveLocked(const Heard& h, int64_t now_nanos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t self_;
  const size_t f_;
  mutable absl::Mutex mu_;
  std::vector<Heard> peers_ ABSL_GUARDED_BY(mu_);  // by replica index; self's unused
  double own_ ABSL_GUARDED_BY(mu_) = 1;
  double applied_ ABSL_GUARDED_BY(mu_) = 1;
  double sent_ ABSL_GUARDED_BY(mu_) = 1;  // the last own fraction sent (1 before any)
  int64_t sent_at_nanos_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flowctl

#endif  // FLOWCTL_PEER_ADMISSION_H_
