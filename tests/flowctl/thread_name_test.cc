#include "flowctl/thread_name.h"

#include <pthread.h>

#include <array>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace flowctl {
namespace {

std::string CurrentName() {
  std::array<char, 32> buf{};
  EXPECT_EQ(pthread_getname_np(pthread_self(), buf.data(), buf.size()), 0);
  return std::string(buf.data());
}

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = CurrentName();
  std::string seen;
  std::thread t([&] {
    NameThisThread("worker-3");
    seen = CurrentName();
  });
  t.join();
  EXPECT_EQ(seen, "worker-3");
  EXPECT_EQ(CurrentName(), before);
}

TEST(ThreadNameTest, ALongNameIsCutToWhatTheKernelKeeps) {
  std::string seen;
  std::thread t([&] {
    NameThisThread("a-name-longer-than-fifteen-bytes");
    seen = CurrentName();
  });
  t.join();
  EXPECT_EQ(seen, "a-name-longer-t");  // 15 bytes; the kernel refuses longer ones outright
}

}  // namespace
}  // namespace flowctl
