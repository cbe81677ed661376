// Helpers shared by the spill FIFO tests: a temporary directory, draining a FIFO, file pokes,
// and running code in a child process that "crashes" (exits without destructors).
#ifndef TESTS_FLOWCTL_SPILL_TEST_UTIL_H_
#define TESTS_FLOWCTL_SPILL_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flowctl/spill_fifo.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace flowctl::testing {

// mkdtemp under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/spill_test.XXXXXX";
    CHECK(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return absl::StrCat(path_, "/", name); }

 private:
  std::string path_;
};

// The payload used throughout: the seq-independent tag `n` repeated to `size` bytes.
inline std::string Payload(uint64_t n, size_t size) {
  std::string s = absl::StrCat(n, ":");
  std::string out;
  while (out.size() < size) out += s;
  out.resize(size);
  return out;
}

// Pops everything, returning the records in order. Fails the test on an error.
inline std::vector<SpillFifo::Record> DrainAll(SpillFifo& fifo) {
  std::vector<SpillFifo::Record> out;
  for (int guard = 0; guard < 10'000'000; ++guard) {
    absl::StatusOr<const SpillFifo::Record*> r = fifo.Front();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || *r == nullptr) break;
    out.push_back(**r);
    absl::Status s = fifo.Pop();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
  }
  return out;
}

inline std::vector<std::string> SegmentFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("seg-", 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Leaves the process at once, as a crash would: no destructors, nothing persisted on the way out.
[[noreturn]] inline void CrashNow() { _exit(0); }

// Runs `fn` in a forked child. `fn` must end with CrashNow() while its FIFO is alive (a FIFO
// destroyed normally persists its state, which is no crash). Returns the child's wait status.
inline int RunInCrashingChild(const std::function<void()>& fn) {
  const pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    fn();
    _exit(0);
  }
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

}  // namespace flowctl::testing

#endif  // TESTS_FLOWCTL_SPILL_TEST_UTIL_H_
