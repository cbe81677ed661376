// Unit tests for ViewState: view changes, observer mode, installs, restore and the timeout.
#include "partitions/pbft_view_state.h"

#include "gtest/gtest.h"
#include "partitions/pbft_messages.h"
#include "tests/partitions/pbft_test_util.h"

namespace partitions {
namespace {

using ::tests::SignedAs;

ConsensusMessage OwnVc(uint64_t view) { return SignedAs(1, ViewChangeMessage(view, {}, {})); }
ConsensusMessage Nv(uint64_t view) { return SignedAs(view % 4, NewViewMessage(view, {}, {})); }

class ViewStateTest : public ::testing::Test {
 protected:
  PbftConfig config_{.n = 4, .self = 1, .view_change_timeout_ms = 100, .max_backoff_shift = 2};
  ViewState views_{config_};
};

TEST_F(ViewStateTest, StartsInstalledInViewZero) {
  EXPECT_EQ(views_.view(), 0u);
  EXPECT_TRUE(views_.installed());
  EXPECT_FALSE(views_.is_primary());
  EXPECT_FALSE(views_.observing());
  EXPECT_FALSE(views_.new_view().has_value());
  EXPECT_EQ(views_.own_view_change_view(), 0u);
  EXPECT_TRUE(views_.Stale(0));
  EXPECT_FALSE(views_.Stale(1));
}

TEST_F(ViewStateTest, ViewChangeThenInstall) {
  views_.Enter(1, /*installed=*/false);
  views_.SetOwnViewChange(OwnVc(1));
  EXPECT_TRUE(views_.is_primary());
  EXPECT_TRUE(views_.NewViewDue());
  EXPECT_FALSE(views_.Stale(1));
  EXPECT_TRUE(views_.Stale(0));
  views_.MarkNewViewSent();
  EXPECT_FALSE(views_.NewViewDue());

  views_.Install(1, Nv(1));
  EXPECT_TRUE(views_.installed());
  EXPECT_FALSE(views_.own_view_change().has_value());
  ASSERT_TRUE(views_.new_view().has_value());
  EXPECT_EQ(views_.last_installed_view(), 1u);
  EXPECT_TRUE(views_.Stale(1));
  EXPECT_FALSE(views_.observing());
}

TEST_F(ViewStateTest, ObserverModeKeepsTheHigherOwnViewChange) {
  views_.Enter(3, false);
  views_.SetOwnViewChange(OwnVc(3));
  views_.Enter(0, /*installed=*/true);  // observe view 0
  EXPECT_TRUE(views_.observing());
  EXPECT_EQ(views_.own_view_change_view(), 3u);
  views_.Install(2, Nv(2));  // a NewView for 2 < 3: still observing
  EXPECT_TRUE(views_.observing());
  views_.Install(3, Nv(3));
  EXPECT_FALSE(views_.observing());
  EXPECT_FALSE(views_.own_view_change().has_value());
}

TEST_F(ViewStateTest, EnterDropsTheNewView) {
  views_.Install(4, Nv(4));
  views_.Enter(5, false);
  EXPECT_FALSE(views_.new_view().has_value());
  EXPECT_EQ(views_.last_installed_view(), 4u);
}

TEST_F(ViewStateTest, TimeoutDoublesUpToTheCapAndResets) {
  EXPECT_EQ(views_.timeout_ms(), 100);
  views_.Backoff();
  EXPECT_EQ(views_.timeout_ms(), 200);
  views_.Backoff();
  views_.Backoff();
  EXPECT_EQ(views_.timeout_ms(), 400);
  views_.ResetBackoff();
  EXPECT_EQ(views_.timeout_ms(), 100);
  views_.Backoff();
  views_.Install(1, Nv(1));
  EXPECT_EQ(views_.timeout_ms(), 100);
}

TEST_F(ViewStateTest, RestoresFromThePersistedView) {
  ViewState in_change(config_);
  in_change.Restore(ViewChangeRecord(2, OwnVc(2)));
  EXPECT_EQ(in_change.view(), 2u);
  EXPECT_FALSE(in_change.installed());
  EXPECT_EQ(in_change.own_view_change_view(), 2u);
  EXPECT_EQ(in_change.last_installed_view(), 0u);

  ViewState installed(config_);
  installed.Restore(InstalledViewRecord(3, Nv(3)));
  EXPECT_TRUE(installed.installed());
  EXPECT_TRUE(installed.new_view().has_value());
  EXPECT_EQ(installed.last_installed_view(), 3u);

  ViewState fresh(config_);
  fresh.Restore(node::consensus::PersistedView{});  // nothing persisted: view 0 is installed
  EXPECT_TRUE(fresh.installed());
}

}  // namespace
}  // namespace partitions
