// Unit tests for the PBFT vocabulary: counting refused messages by PbftAdmission.
#include "partitions/pbft_types.h"

#include "gtest/gtest.h"

namespace partitions {
namespace {

TEST(PbftCountersTest, AdmittedCountsEachRefusalUnderItsField) {
  PbftCounters c;
  EXPECT_TRUE(c.Admitted(PbftAdmission::kAdded));
  EXPECT_FALSE(c.Admitted(PbftAdmission::kInvalid));
  EXPECT_FALSE(c.Admitted(PbftAdmission::kOutsideWatermarks));
  EXPECT_FALSE(c.Admitted(PbftAdmission::kOutsideWatermarks));
  EXPECT_FALSE(c.Admitted(PbftAdmission::kDuplicate));
  EXPECT_FALSE(c.Admitted(PbftAdmission::kConflicting));
  EXPECT_EQ(c.dropped_invalid, 1u);
  EXPECT_EQ(c.dropped_outside_watermarks, 2u);
  EXPECT_EQ(c.dropped_duplicate, 1u);
  EXPECT_EQ(c.dropped_conflicting, 1u);
  EXPECT_EQ(c.dropped_stale_view + c.dropped_not_replica + c.buffered_future, 0u);
}

}  // namespace
}  // namespace partitions
