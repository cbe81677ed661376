#include "flowctl/retry_reservations.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

constexpr int64_t kMs = 1'000'000;

RetryReservations::Options On(int64_t max_reserved) {
  return {.max_reserved = max_reserved,
          .lead = absl::Milliseconds(50),
          .grace = absl::Milliseconds(500)};
}

TEST(RetryReservationsTest, OffGivesNoTicketsAndAdmitsIntoAnyRoom) {
  RetryReservations book;
  EXPECT_FALSE(book.enabled());
  EXPECT_EQ(book.Issue(0, 100 * kMs), 0u);
  EXPECT_TRUE(book.Admit(0, 0, 1).admitted);
  EXPECT_FALSE(book.Admit(0, 0, 0).admitted);
}

TEST(RetryReservationsTest, ADueTicketHoldsRoomThatAFreshRequestCannotTake) {
  RetryReservations book(On(8));
  const uint64_t ticket = book.Issue(1000 * kMs, 1200 * kMs);
  ASSERT_NE(ticket, 0u);
  // Before its window the ticket holds nothing: the last unit of room goes to whoever asks.
  EXPECT_EQ(book.Reserved(1100 * kMs), 0);
  EXPECT_TRUE(book.Admit(0, 1100 * kMs, 1).admitted);
  // In its window (from 50 ms before the slot) one unit is held for it.
  EXPECT_EQ(book.Reserved(1160 * kMs), 1);
  EXPECT_FALSE(book.Admit(0, 1160 * kMs, 1).admitted) << "a fresh request took the ticket's room";
  EXPECT_TRUE(book.Admit(0, 1160 * kMs, 2).admitted);
  // The holder gets the last unit.
  EXPECT_TRUE(book.Admit(ticket, 1210 * kMs, 1).admitted);
  EXPECT_EQ(book.Reserved(1210 * kMs), 0);
  EXPECT_TRUE(book.Admit(0, 1210 * kMs, 1).admitted);
  const RetryReservations::Stats s = book.stats(1210 * kMs);
  EXPECT_EQ(s.issued, 1u);
  EXPECT_EQ(s.redeemed, 1u);
  EXPECT_EQ(s.outstanding, 0);
}

TEST(RetryReservationsTest, ATicketIsUsedOnce) {
  RetryReservations book(On(8));
  const uint64_t ticket = book.Issue(0, 100 * kMs);
  EXPECT_TRUE(book.Admit(ticket, 100 * kMs, 1).admitted);
  // Again, with one unit of room and another ticket due: the reuse is a fresh request.
  const uint64_t other = book.Issue(100 * kMs, 120 * kMs);
  ASSERT_NE(other, 0u);
  EXPECT_FALSE(book.Admit(ticket, 110 * kMs, 1).admitted);
  EXPECT_TRUE(book.Admit(other, 110 * kMs, 1).admitted);
  EXPECT_EQ(book.stats(110 * kMs).unknown, 1u);
}

TEST(RetryReservationsTest, AnEarlyTicketIsSpentAsAFreshRequest) {
  RetryReservations book(On(8));
  const uint64_t served = book.Issue(0, 1000 * kMs);
  const uint64_t refused = book.Issue(0, 1000 * kMs);
  EXPECT_EQ(book.Reserved(1000 * kMs), 2);
  // 200 ms early: judged as fresh (admitted into free room, or not), and spent either way, so it
  // holds no room later for a client that was served, or that holds a newer ticket.
  const RetryReservations::Verdict v = book.Admit(served, 800 * kMs, 5);
  EXPECT_TRUE(v.admitted);
  EXPECT_FALSE(v.redeemed);
  EXPECT_FALSE(book.Admit(refused, 800 * kMs, 0).admitted);
  const RetryReservations::Stats s = book.stats(800 * kMs);
  EXPECT_EQ(s.early, 2u);
  EXPECT_EQ(s.outstanding, 0);
  EXPECT_EQ(book.Reserved(1000 * kMs), 0);
  EXPECT_FALSE(book.Admit(served, 1000 * kMs, 0).admitted);  // spent: no longer known
}

TEST(RetryReservationsTest, ATicketNeverUsedStopsHoldingRoomAfterItsGrace) {
  RetryReservations book(On(8));
  const uint64_t ticket = book.Issue(0, 100 * kMs);
  EXPECT_EQ(book.Reserved(590 * kMs), 1);
  EXPECT_EQ(book.Reserved(620 * kMs), 0);
  EXPECT_TRUE(book.Admit(0, 620 * kMs, 1).admitted);
  EXPECT_FALSE(book.Admit(ticket, 620 * kMs, 0).admitted);  // expired: no better than fresh
  const RetryReservations::Stats s = book.stats(620 * kMs);
  EXPECT_EQ(s.expired, 1u);
  EXPECT_EQ(s.outstanding, 0);
}

TEST(RetryReservationsTest, ALongerWaitGetsALongerGrace) {
  RetryReservations book(On(8));
  // Told to wait 4 s: half of that, 2 s, of grace.
  const uint64_t ticket = book.Issue(0, 4000 * kMs);
  EXPECT_EQ(book.Reserved(5900 * kMs), 1);
  EXPECT_TRUE(book.Admit(ticket, 5900 * kMs, 0).redeemed);
  // Told to wait 20 s: at most 5 s.
  const uint64_t far = book.Issue(6000 * kMs, 26000 * kMs);
  EXPECT_EQ(book.Reserved(30900 * kMs), 1);
  EXPECT_EQ(book.Reserved(31100 * kMs), 0);
  EXPECT_FALSE(book.Admit(far, 31100 * kMs, 0).redeemed);
}

TEST(RetryReservationsTest, AHolderIsAdmittedEvenWithNoRoomLeftAndSpendsItsTicket) {
  RetryReservations book(On(8));
  const uint64_t ticket = book.Issue(0, 100 * kMs);
  const RetryReservations::Verdict v = book.Admit(ticket, 100 * kMs, 0);
  EXPECT_TRUE(v.admitted);
  EXPECT_TRUE(v.redeemed);
  EXPECT_FALSE(book.Admit(0, 100 * kMs, 0).admitted);
  const RetryReservations::Verdict fresh = book.Admit(0, 100 * kMs, 1);
  EXPECT_TRUE(fresh.admitted);
  EXPECT_FALSE(fresh.redeemed);
  const RetryReservations::Stats s = book.stats(100 * kMs);
  EXPECT_EQ(s.redeemed, 1u);
  EXPECT_EQ(s.outstanding, 0);
}

TEST(RetryReservationsTest, TheRoomHeldIsCappedSoClientsThatNeverComeBackCostLittle) {
  RetryReservations book(On(3));
  for (int i = 0; i < 10; ++i) ASSERT_NE(book.Issue(0, 100 * kMs), 0u);
  EXPECT_EQ(book.Reserved(100 * kMs), 3);
  EXPECT_FALSE(book.Admit(0, 100 * kMs, 3).admitted);
  EXPECT_TRUE(book.Admit(0, 100 * kMs, 4).admitted);
  // Turned off live: tickets hold nothing.
  book.set_max_reserved(0);
  EXPECT_EQ(book.Reserved(100 * kMs), 0);
  EXPECT_TRUE(book.Admit(0, 100 * kMs, 1).admitted);
  EXPECT_EQ(book.Issue(100 * kMs, 200 * kMs), 0u);
}

TEST(RetryReservationsTest, OnlyTicketsDueNowHoldRoom) {
  RetryReservations book(On(100));
  // Slots spread 10 ms apart over 2 s, as RetrySlots spreads a burst of refusals.
  std::vector<uint64_t> tickets;
  RetryReservations unused(On(100));
  for (int i = 0; i < 200; ++i) {
    tickets.push_back(book.Issue(0, (100 + 10 * i) * kMs));
    unused.Issue(0, (100 + 10 * i) * kMs);
  }
  // At 1 s, with no holder back yet: slots in [0.5 s, 1.05 s] are due, 56 of them.
  EXPECT_EQ(unused.Reserved(1000 * kMs), 56);
  EXPECT_EQ(unused.Reserved(4000 * kMs), 0);  // the last slot, 2.09 s, has 1.05 s of grace
  // Their holders come back on time, in slot order: each is admitted with a single unit of room.
  int admitted = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t now = (100 + 10 * i) * kMs;
    if (book.Admit(tickets[i], now, 1).admitted) ++admitted;
  }
  EXPECT_EQ(admitted, 200);
  EXPECT_EQ(book.stats(3000 * kMs).redeemed, 200u);
}

TEST(RetryReservationsTest, TheTicketTableIsBounded) {
  RetryReservations book({.max_reserved = 4, .max_tickets = 3});
  EXPECT_NE(book.Issue(0, kMs), 0u);
  EXPECT_NE(book.Issue(0, kMs), 0u);
  EXPECT_NE(book.Issue(0, kMs), 0u);
  EXPECT_EQ(book.Issue(0, kMs), 0u);
  EXPECT_EQ(book.stats(0).issued, 3u);
}

}  // namespace
}  // namespace flowctl
