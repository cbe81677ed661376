// SpillFifo append throughput per durability policy, side by side with plain sequential write()s
// of the same bytes to the same directory, in the same run.
//
// Each benchmark iteration appends one batch of 4 KiB records to the FIFO (the timed part, manual
// time), then writes the same batch with plain write() to baseline files in the same directory:
//   plain          write() only, no sync                          (the raw page-cache speed)
//   plain_sync10ms write(), fdatasync when 10 ms passed since the last one (= kInterval's policy)
//   plain_sync_each write() + fdatasync per record                 (= kEveryRecord; every only)
// Interleaving batches gives the FIFO and its baselines the same disk and the same machine load.
// The memory tier is 0, so every record goes to a segment file under every policy. Counters:
// *_MBps per variant and ratio_vs_* = FIFO MB/s / baseline MB/s (target >= 0.5 vs plain_sync10ms
// for kInterval). Every 256 MiB the FIFO is drained and the baselines truncated (untimed).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "benchmark/benchmark.h"
#include "flowctl/spill_fifo.h"
#include "glog/logging.h"

namespace flowctl {
namespace {

constexpr size_t kRecordBytes = 4096;
constexpr uint64_t kResetBytes = 256ull << 20;

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class Baseline {
 public:
  Baseline(const std::string& path, bool sync_each, double sync_every_s)
      : path_(path), sync_each_(sync_each), sync_every_s_(sync_every_s) {
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK_GE(fd_, 0);
    last_sync_ = Clock::now();
  }
  ~Baseline() { close(fd_); }

  // Writes `n` records; returns the seconds it took.
  double WriteBatch(const std::string& record, int n) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      CHECK_EQ(write(fd_, record.data(), record.size()), static_cast<ssize_t>(record.size()));
      if (sync_each_) {
        CHECK_EQ(fdatasync(fd_), 0);
      } else if (sync_every_s_ > 0 && Since(last_sync_) >= sync_every_s_) {
        CHECK_EQ(fdatasync(fd_), 0);
        last_sync_ = Clock::now();
      }
    }
    const double s = Since(t0);
    seconds_ += s;
    return s;
  }
  void Reset() {
    CHECK_EQ(ftruncate(fd_, 0), 0);
    CHECK_EQ(lseek(fd_, 0, SEEK_SET), 0);
  }
  double seconds() const { return seconds_; }
  void ResetTimer() { seconds_ = 0; }

 private:
  const std::string path_;
  const bool sync_each_;
  const double sync_every_s_;
  int fd_;
  Clock::time_point last_sync_;
  double seconds_ = 0;
};

void BM_SpillAppend(benchmark::State& state, SpillDurability durability, int batch) {
  char tmpl[] = "/tmp/spill_bench.XXXXXX";
  CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  {
    SpillFifoOptions o;
    o.dir = dir + "/fifo";
    o.durability = durability;
    o.memory_bytes = 0;
    o.segment_bytes = 64 << 20;
    auto fifo = SpillFifo::Open(o);
    CHECK(fifo.ok()) << fifo.status();
    Baseline plain(dir + "/plain", false, 0);
    Baseline plain_sync10ms(dir + "/plain_sync10ms", false, 0.010);
    const bool every = durability == SpillDurability::kEveryRecord;
    std::unique_ptr<Baseline> plain_sync_each;
    if (every) plain_sync_each = std::make_unique<Baseline>(dir + "/plain_sync_each", true, 0);

    const std::string record(kRecordBytes, 'r');
    // Warm-up, untimed: the FIFO creates its first segment (and syncs the directory) on the first
    // append, as the baselines created their files above.
    CHECK((*fifo)->Append(record).ok());
    plain.WriteBatch(record, 1);
    plain_sync10ms.WriteBatch(record, 1);
    if (plain_sync_each) plain_sync_each->WriteBatch(record, 1);
    plain.ResetTimer();
    plain_sync10ms.ResetTimer();
    if (plain_sync_each) plain_sync_each->ResetTimer();
    double fifo_seconds = 0;
    uint64_t bytes = 0;
    uint64_t since_reset = 0;
    for (auto _ : state) {
      const auto t0 = Clock::now();
      for (int i = 0; i < batch; ++i) {
        auto seq = (*fifo)->Append(record);
        if (!seq.ok()) {
          state.SkipWithError(std::string(seq.status().message()).c_str());
          break;
        }
      }
      const double s = Since(t0);
      fifo_seconds += s;
      state.SetIterationTime(s);
      plain.WriteBatch(record, batch);
      plain_sync10ms.WriteBatch(record, batch);
      if (plain_sync_each) plain_sync_each->WriteBatch(record, batch);
      bytes += batch * kRecordBytes;
      since_reset += batch * kRecordBytes;
      if (since_reset >= kResetBytes) {  // bound disk use; untimed
        while (!(*fifo)->empty()) CHECK((*fifo)->Pop().ok());
        plain.Reset();
        plain_sync10ms.Reset();
        if (plain_sync_each) plain_sync_each->Reset();
        since_reset = 0;
      }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
    const double mb = static_cast<double>(bytes) / 1e6;
    auto rate = [&](double seconds) { return seconds > 0 ? mb / seconds : 0; };
    state.counters["fifo_MBps"] = rate(fifo_seconds);
    state.counters["plain_MBps"] = rate(plain.seconds());
    state.counters["plain_sync10ms_MBps"] = rate(plain_sync10ms.seconds());
    state.counters["ratio_vs_plain"] = plain.seconds() / fifo_seconds;
    state.counters["ratio_vs_plain_sync10ms"] = plain_sync10ms.seconds() / fifo_seconds;
    if (plain_sync_each) {
      state.counters["plain_sync_each_MBps"] = rate(plain_sync_each->seconds());
      state.counters["ratio_vs_plain_sync_each"] = plain_sync_each->seconds() / fifo_seconds;
    }
  }
  std::filesystem::remove_all(dir);
}

// Batches: 256 records (1 MiB) per iteration; 16 under kEveryRecord, whose fdatasync per
// record makes a batch slow.
BENCHMARK_CAPTURE(BM_SpillAppend, none, SpillDurability::kNone, 256)->UseManualTime();
BENCHMARK_CAPTURE(BM_SpillAppend, interval_10ms, SpillDurability::kInterval, 256)->UseManualTime();
BENCHMARK_CAPTURE(BM_SpillAppend, every_record, SpillDurability::kEveryRecord, 16)->UseManualTime();

}  // namespace
}  // namespace flowctl
