#include "p2p/network.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace p2p {
namespace {

TEST(DeferredSendsTest, WithoutAScopeNothingIsPutOff) {
  int runs = 0;
  EXPECT_FALSE(DeferredSends::Defer(&runs, [&] { ++runs; }));
  EXPECT_EQ(runs, 0);  // the caller releases itself
}

TEST(DeferredSendsTest, TheOutermostScopeRunsEachKeyOnceInOrderAtItsEnd) {
  std::vector<std::string> ran;
  const int a = 0, b = 0;
  {
    DeferredSends outer;
    EXPECT_TRUE(DeferredSends::Defer(&a, [&] { ran.push_back("a"); }));
    {
      DeferredSends inner;
      EXPECT_TRUE(DeferredSends::Defer(&b, [&] { ran.push_back("b"); }));
      EXPECT_TRUE(DeferredSends::Defer(&a, [&] { ran.push_back("a again"); }));
    }
    EXPECT_TRUE(ran.empty()) << "an inner scope's end runs nothing";
  }
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));
  // The scope is gone: releases happen at once again.
  EXPECT_FALSE(DeferredSends::Defer(&a, [&] { ran.push_back("late"); }));
}

TEST(DeferredSendsTest, AScopeIsPerThread) {
  DeferredSends hold;
  bool deferred_elsewhere = true;
  std::thread other([&] { deferred_elsewhere = DeferredSends::Defer(&hold, [] {}); });
  other.join();
  EXPECT_FALSE(deferred_elsewhere);
}

}  // namespace
}  // namespace p2p
