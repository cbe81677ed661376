#include "flowctl/peer_admission.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr double kFloor = 0.05;

TEST(PeerAdmissionTest, FPlusOneReplicasCuttingCutEveryReplica) {
  PeerAdmission peers(/*replicas=*/4, /*self=*/3);  // f = 1: the 2nd lowest of the four
  EXPECT_EQ(peers.Update(1, kFloor, 0).applied, 1);
  peers.Observe(0, 0.25, 0);
  // One replica cutting moves nobody: it may be faulty.
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, 1);
  EXPECT_EQ(peers.snapshot(kMs).peers_cutting, 1);
  peers.Observe(1, 0.5, 2 * kMs);
  EXPECT_EQ(peers.Update(1, kFloor, 3 * kMs).applied, 0.5);  // {0.25, 0.5, 1, 1}
  peers.Observe(2, 0.4, 4 * kMs);
  EXPECT_EQ(peers.Update(1, kFloor, 5 * kMs).applied, 0.4);  // {0.25, 0.4, 0.5, 1}
  // Own counts as one of the replicas, and what this node decides itself always holds.
  EXPECT_EQ(peers.Update(0.3, kFloor, 6 * kMs).applied, 0.3);  // {0.25, 0.3, 0.4, 0.5}
  EXPECT_EQ(peers.Update(0.1, kFloor, 7 * kMs).applied, 0.1);
  const PeerAdmission::Snapshot s = peers.snapshot(7 * kMs);
  EXPECT_EQ(s.own, 0.1);
  EXPECT_EQ(s.applied, 0.1);
  EXPECT_EQ(s.peers_cutting, 3);
}

TEST(PeerAdmissionTest, SevenReplicasNeedThreeToCut) {
  PeerAdmission peers(/*replicas=*/7, /*self=*/0);  // f = 2
  peers.Observe(1, 0.1, 0);
  peers.Observe(2, 0.1, 0);
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, 1);  // two faulty replicas cannot
  peers.Observe(3, 0.6, 0);
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, 0.6);
}

TEST(PeerAdmissionTest, ALoneReplicaFollowsItself) {
  PeerAdmission peers(/*replicas=*/1, /*self=*/0);
  EXPECT_FALSE(peers.Observe(0, 0.1, 0));  // from self: ignored
  EXPECT_EQ(peers.Update(0.7, kFloor, 0).applied, 0.7);
}

// Three replicas: f = 0, so any one replica's cut holds for all (the lowest of the three).
TEST(PeerAdmissionTest, WithFewerThanFourReplicasAnyCutHolds) {
  PeerAdmission peers(/*replicas=*/3, /*self=*/1);
  EXPECT_FALSE(peers.Observe(1, 0.1, 0));  // from self: ignored, own is what Update is given
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, 1);
  EXPECT_TRUE(peers.Observe(2, 0.3, 0));
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, 0.3);
}

TEST(PeerAdmissionTest, PeersNeverPushBelowTheFloorAndBadValuesAreClamped) {
  PeerAdmission peers(4, 0);
  EXPECT_TRUE(peers.Observe(1, 0, 0));
  EXPECT_TRUE(peers.Observe(2, -3, 0));
  EXPECT_FALSE(peers.Observe(9, 0, 0));  // not a replica
  EXPECT_EQ(peers.Update(1, kFloor, kMs).applied, kFloor);
  EXPECT_TRUE(peers.Observe(1, 7, 2 * kMs));  // clamped to 1
  peers.Observe(2, 7, 2 * kMs);
  EXPECT_EQ(peers.Update(1, kFloor, 3 * kMs).applied, 1);
  EXPECT_EQ(peers.snapshot(3 * kMs).peers_cutting, 0);
  // Own below the floor is raised to it.
  EXPECT_EQ(peers.Update(0.01, kFloor, 4 * kMs).own, kFloor);
}

TEST(PeerAdmissionTest, AFractionNotHeardAgainExpires) {
  PeerAdmission peers(4, 0);
  const int64_t expiry = absl::ToInt64Nanoseconds(PeerAdmission::kExpiry);
  peers.Observe(1, 0.2, 0);
  peers.Observe(2, 0.2, 0);
  EXPECT_EQ(peers.Update(1, kFloor, expiry - 1).applied, 0.2);
  EXPECT_EQ(peers.snapshot(expiry - 1).peers_cutting, 2);
  // Replica 1 keeps sending, replica 2 went quiet: one cutting is not enough.
  peers.Observe(1, 0.2, expiry - 1);
  EXPECT_EQ(peers.Update(1, kFloor, expiry).applied, 1);
  EXPECT_EQ(peers.snapshot(expiry).peers_cutting, 1);
}

// One arbiter tick: Update, and Sent when it asks to send and the network takes it.
bool Tick(PeerAdmission& peers, double own, int64_t now, bool network_takes = true) {
  const PeerAdmission::Decision d = peers.Update(own, kFloor, now);
  if (d.send && network_takes) peers.Sent(d.own, now);
  return d.send;
}

TEST(PeerAdmissionTest, SendsOnAChangeAsAKeepaliveAndOnceWhenBackToOne) {
  PeerAdmission peers(4, 0);
  const int64_t keepalive = absl::ToInt64Nanoseconds(PeerAdmission::kKeepalive);
  EXPECT_FALSE(Tick(peers, 1, 0));  // never cut: nothing to say
  const PeerAdmission::Decision d = peers.Update(0.995, kFloor, kMs);
  EXPECT_TRUE(d.send);  // the first cut, however small
  EXPECT_EQ(d.own, 0.995);
  peers.Sent(d.own, kMs);
  EXPECT_FALSE(Tick(peers, 0.99, 2 * kMs));  // within kResendChange of 0.995
  EXPECT_TRUE(Tick(peers, 0.5, 3 * kMs));
  EXPECT_FALSE(Tick(peers, 0.5, 3 * kMs + keepalive - 1));
  EXPECT_TRUE(Tick(peers, 0.5, 3 * kMs + keepalive));  // keepalive
  EXPECT_TRUE(Tick(peers, 1, 4 * kMs + keepalive));    // the cut is over
  EXPECT_FALSE(Tick(peers, 1, 5 * kMs + 10 * keepalive));
}

TEST(PeerAdmissionTest, ASendTheNetworkRefusedIsAskedForAgain) {
  PeerAdmission peers(4, 0);
  EXPECT_TRUE(Tick(peers, 0.5, 0));
  EXPECT_TRUE(Tick(peers, 1, kMs, /*network_takes=*/false));  // "back to 1" refused
  EXPECT_TRUE(Tick(peers, 1, 2 * kMs));                       // so it goes at the next tick
  EXPECT_FALSE(Tick(peers, 1, 3 * kMs));
}

}  // namespace
}  // namespace flowctl
