// Directories a test or fuzz process makes under the temp dir, removed when the process exits, so
// that runs of the suite do not pile up in /tmp (snapshot_fuzz alone used to leave ~150 MiB per
// run). Removal at exit, not at scope end: fixtures built once per process (fuzz targets, suite
// setups) keep their ledgers open for the whole run.
#ifndef TESTS_TEMP_DIRS_H_
#define TESTS_TEMP_DIRS_H_

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace tests {

// Removes `dir` (recursively, ignoring errors) when the process exits. Not thread-safe: call it
// from the test's main thread.
inline void RemoveAtExit(const std::string& dir) {
  static std::vector<std::string>* dirs = nullptr;
  if (dirs == nullptr) {
    dirs = new std::vector<std::string>();
    std::atexit([] {
      for (const std::string& d : *dirs) {
        std::error_code ignored;
        std::filesystem::remove_all(d, ignored);
      }
    });
  }
  dirs->push_back(dir);
}

}  // namespace tests

#endif  // TESTS_TEMP_DIRS_H_
