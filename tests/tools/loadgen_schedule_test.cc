// loadgen schedules: offers per second of each pattern, idle phases, burst average and peak,
// catch-up after late ticks (driven by a fake clock), and the scenario parser's errors.
#include "tools/loadgen_schedule.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/mocks/fake_clock.h"

namespace loadgen {
namespace {

using ::testing::HasSubstr;

PartitionLoad Parse1(const std::string& text, double duration = 10, uint64_t tx_bytes = 200) {
  absl::StatusOr<std::vector<PartitionLoad>> loads = ParseScenario(text, tx_bytes, duration);
  EXPECT_TRUE(loads.ok()) << loads.status();
  return loads.ok() ? (*loads)[0] : PartitionLoad{};
}

// Offers in each whole second [s, s+1), computed the way the generator does: ticks of `tick_ms`
// on a fake clock, sending floor(Cumulative(now)) minus what was already sent.
std::vector<uint64_t> PerSecond(const Schedule& s, int seconds, int tick_ms = 10,
                                int64_t late_every = 0) {
  tests::FakeClock clock(0);
  std::vector<uint64_t> out(seconds, 0);
  uint64_t sent = 0;
  int64_t k = 0;
  const int64_t end = int64_t{seconds} * flowctl::kNanosPerSecond;
  while (clock.NowNanos() < end) {
    ++k;
    // Every `late_every`-th tick wakes 35 ms late (the loop must catch up, not lose offers).
    int64_t step = int64_t{tick_ms} * 1'000'000;
    if (late_every > 0 && k % late_every == 0) step += 35'000'000;
    const int64_t before = clock.NowNanos();
    clock.SetNanos(std::min(before + step, end));
    const int64_t now = clock.NowNanos();
    const uint64_t due = s.OffersBefore(static_cast<double>(now) / flowctl::kNanosPerSecond);
    // Book the tick's offers in the second the tick began, as the generator does.
    out[std::min<int64_t>(before / flowctl::kNanosPerSecond, seconds - 1)] += due - sent;
    sent = due;
  }
  return out;
}

TEST(LoadgenScheduleTest, ConstantOffersRatePerSecond) {
  Schedule s(Parse1("a:rate=100"));
  std::vector<uint64_t> per = PerSecond(s, 10);
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(per[i], 100, 1) << "second " << i;
  EXPECT_EQ(s.TotalOffers(), 1000u);
  EXPECT_EQ(s.OffersBetween(0, 1), 100u);
  EXPECT_EQ(s.OffersBetween(3, 4), 100u);
}

TEST(LoadgenScheduleTest, FractionalRateAccumulates) {
  Schedule s(Parse1("a:rate=0.5"));
  EXPECT_EQ(s.OffersBefore(1), 0u);
  EXPECT_EQ(s.OffersBefore(2), 1u);
  EXPECT_EQ(s.TotalOffers(), 5u);
}

TEST(LoadgenScheduleTest, LateTicksCatchUp) {
  Schedule s(Parse1("a:rate=1000"));
  std::vector<uint64_t> per = PerSecond(s, 10, 10, /*late_every=*/7);
  uint64_t total = 0;
  for (uint64_t n : per) total += n;
  EXPECT_EQ(total, 10000u);
}

TEST(LoadgenScheduleTest, StepChangesRateAtGivenTime) {
  Schedule s(Parse1("a:pattern=step,rate=10,rate2=200,at=4s"));
  EXPECT_EQ(s.OffersBetween(0, 4), 40u);
  EXPECT_EQ(s.OffersBetween(4, 5), 200u);
  EXPECT_EQ(s.OffersBetween(9, 10), 200u);
  EXPECT_EQ(s.TotalOffers(), 40u + 6 * 200u);
  EXPECT_EQ(s.MaxRate(), 200);
}

TEST(LoadgenScheduleTest, RampIsLinear) {
  Schedule s(Parse1("a:pattern=ramp,rate=0,rate2=1000"));  // 0 -> 1000 tx/s over 10 s
  // Second i averages the rate at its middle: 100 * i + 50.
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(s.OffersBetween(i, i + 1), 100.0 * i + 50, 1) << i;
  EXPECT_EQ(s.TotalOffers(), 5000u);
}

TEST(LoadgenScheduleTest, BurstAverageAndPeak) {
  // 5 MB/s average, 100 MB/s peaks, period 2 s, 1000-byte txs: 5000 tx/s average, peaks of
  // 100000 tx/s lasting 2 * 5/100 = 0.1 s at the start of each period.
  Schedule s(Parse1("a:pattern=burst,rate=5MB/s,peak=100MB/s,period=2s,tx_bytes=1000", 10));
  EXPECT_DOUBLE_EQ(s.load().rate, 5000);
  EXPECT_DOUBLE_EQ(s.load().peak, 100000);
  EXPECT_EQ(s.TotalOffers(), 50000u);            // average over the run
  EXPECT_EQ(s.OffersBetween(0, 0.1), 10000u);    // the peak, at the peak rate
  EXPECT_EQ(s.OffersBetween(0.1, 2.0), 0u);      // quiet rest of the period
  EXPECT_EQ(s.OffersBetween(2.0, 2.05), 5000u);  // next period peaks again
  EXPECT_EQ(s.OffersBetween(0, 2), 10000u);      // average * period
  std::vector<uint64_t> per = PerSecond(s, 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(per[i], i % 2 == 0 ? 10000u : 0u) << i;
  EXPECT_EQ(s.MaxRate(), 100000);
}

TEST(LoadgenScheduleTest, IdlePhasesOfferNothing) {
  Schedule s(Parse1("a:rate=100,start=3s,stop=7s"));
  EXPECT_EQ(s.OffersBetween(0, 3), 0u);
  EXPECT_EQ(s.OffersBetween(3, 7), 400u);
  EXPECT_EQ(s.OffersBetween(7, 10), 0u);
  std::vector<uint64_t> per = PerSecond(s, 10);
  EXPECT_EQ(per[2], 0u);
  EXPECT_NEAR(per[3], 100, 1);
  EXPECT_EQ(per[8], 0u);
}

TEST(LoadgenScheduleTest, ParsesSeveralPartitionsAndUnits) {
  absl::StatusOr<std::vector<PartitionLoad>> loads = ParseScenario(
      "hot:rate=20000,pattern=constant; steady:rate=200/s,tx_bytes=100,keys=per_sender", 200, 60);
  ASSERT_TRUE(loads.ok()) << loads.status();
  ASSERT_EQ(loads->size(), 2u);
  EXPECT_EQ((*loads)[0].name, "hot");
  EXPECT_EQ((*loads)[0].rate, 20000);
  EXPECT_EQ((*loads)[0].stop_s, 60);
  EXPECT_EQ((*loads)[1].tx_bytes, 100u);
  EXPECT_FALSE((*loads)[0].key_per_sender);
  EXPECT_TRUE((*loads)[1].key_per_sender);
  EXPECT_EQ(*ParseRate("r", "1MiB/s", 1024), 1024);
  EXPECT_EQ(*ParseRate("r", "64KB/s", 64), 1000);
  EXPECT_EQ(*ParseSeconds("t", "1500ms"), 1.5);
  EXPECT_EQ(*ParseSeconds("t", "2m"), 120);
  EXPECT_EQ(*ParseSeconds("t", "7"), 7);
}

TEST(LoadgenScheduleTest, ReadsAreAConstantRateOverTheirOwnWindow) {
  absl::StatusOr<std::vector<PartitionLoad>> loads =
      ParseScenario("hot:rate=0,reads=500,reads_start=10s,reads_stop=20s;cold:rate=5", 200, 60);
  ASSERT_TRUE(loads.ok()) << loads.status();
  const PartitionLoad& hot = (*loads)[0];
  EXPECT_EQ(hot.reads, 500);
  EXPECT_EQ(ReadsBefore(hot, 5), 0);
  EXPECT_EQ(ReadsBefore(hot, 12), 1000);
  EXPECT_EQ(ReadsBefore(hot, 30), 5000);
  EXPECT_EQ(Schedule(hot).TotalOffers(), 0u);  // reads only
  EXPECT_EQ(ReadsBefore((*loads)[1], 30), 0);  // no reads
  absl::StatusOr<std::vector<PartitionLoad>> whole = ParseScenario("a:rate=1,reads=10", 200, 60);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(ReadsBefore((*whole)[0], 60), 600);  // the whole run by default
  EXPECT_FALSE((*whole)[0].read_blocks);
  EXPECT_TRUE((*ParseScenario("a:rate=1,reads=10,read_rpc=block", 200, 60))[0].read_blocks);
}

TEST(LoadgenScheduleTest, BadScenariosNameTheProblem) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"", "no partition"},
      {":rate=1", "missing partition name"},
      {"a:rate=1;a:rate=2", "a: partition given more than once"},
      {"a:pattern=sine,rate=1", "unknown 'sine'"},
      {"a:rate=x", "not a rate 'x'"},
      {"a:rate=5furlongs/s", "unknown rate unit"},
      {"a", "rate: required"},
      {"a:rate=1,speed=2", "unknown key 'speed'"},
      {"a:rate=1,rate=2", "given more than once"},
      {"a:pattern=step,rate=1,rate2=2", "at: required"},
      {"a:pattern=ramp,rate=1", "rate2: required"},
      {"a:pattern=burst,rate=10", "peak: required"},
      {"a:pattern=burst,rate=10,peak=5", "must be >= rate"},
      {"a:pattern=burst,rate=1,peak=5,period=0", "period: must be > 0"},
      {"a:rate=1,peak=5", "peak: only for pattern=burst"},
      {"a:rate=1,start=8s,stop=2s", "is after stop"},
      {"a:rate=1,start=soon", "not a duration 'soon'"},
      {"a:rate=1,tx_bytes=10", "tx_bytes: must be an integer in [64, 65536]"},
      {"a:rate=1,keys=some", "keys: must be 'unique' or 'per_sender'"},
      {"a:rate=1,reads=-3", "reads: must be a number of reads/s >= 0"},
      {"a:rate=1,reads_start=2s", "reads_start/reads_stop/read_rpc: give reads too"},
      {"a:rate=1,reads=5,read_rpc=scan", "read_rpc: must be 'account' or 'block', got 'scan'"},
      {"a:rate=1,reads=5,reads_start=8s,reads_stop=2s", "reads_start (8s) is after reads_stop"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<PartitionLoad>> r = ParseScenario(c.text, 200, 10);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--scenario")) << c.text;
  }
}

}  // namespace
}  // namespace loadgen
