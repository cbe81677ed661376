// Crash test: a child process appends and drains a SpillFifo and reports, over a pipe, every seq
// Append acknowledged and every seq the consumer took; the parent SIGKILLs it at a random (seeded)
// point, reopens the directory and checks that every acknowledged record the consumer had not
// taken is still there, in order, and that replay of taken records is bounded.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flowctl/spill_fifo.h"
#include "gtest/gtest.h"
#include "tests/flowctl/spill_test_util.h"

namespace flowctl {
namespace {

using ::flowctl::testing::Payload;
using ::flowctl::testing::TempDir;

constexpr int kIterations = 20;  // per policy
constexpr uint64_t kPersistEvery = 8;

// One pipe message; 24 bytes < PIPE_BUF, so each write is atomic.
struct Msg {
  uint64_t kind;  // 'A': Append returned (acknowledged); 'T': consumer took it (about to Pop)
  uint64_t seq;
  uint64_t tag;  // payload tag (size in the low 16 bits)
};

SpillFifoOptions Options(const std::string& dir, SpillDurability d) {
  SpillFifoOptions o;
  o.dir = dir;
  o.durability = d;
  o.memory_bytes = 4 << 10;   // small: records go back and forth between tiers
  o.segment_bytes = 8 << 10;  // small: rotation and deletion happen all the time
  o.persist_every_records = kPersistEvery;
  o.sync_interval = absl::Milliseconds(1);
  return o;
}

void WriteMsg(int fd, const Msg& m) {
  CHECK_EQ(write(fd, &m, sizeof(m)), static_cast<ssize_t>(sizeof(m)));
}

// The child: never returns. Appends records tagged first_tag, first_tag + 1, ...; after each
// Append returns, the record is acknowledged (kEveryRecord: durable; kInterval: written, which
// survives a process kill). Consumes one record every `consume_every` appends.
[[noreturn]] void Child(const SpillFifoOptions& o, int fd, uint64_t first_tag, uint32_t seed) {
  auto fifo = SpillFifo::Open(o);
  CHECK(fifo.ok()) << fifo.status();
  std::mt19937 rng(seed);
  const int consume_every = 1 + static_cast<int>(rng() % 3);
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    const size_t size = 50 + rng() % 1500;
    const uint64_t tag = ((first_tag + i) << 16) | size;
    absl::StatusOr<uint64_t> seq = (*fifo)->Append(Payload(tag, size));
    CHECK(seq.ok()) << seq.status();
    WriteMsg(fd, {'A', *seq, tag});
    if (i % consume_every == 0) {
      absl::StatusOr<const SpillFifo::Record*> r = (*fifo)->Front();
      CHECK(r.ok()) << r.status();
      if (*r != nullptr) {
        WriteMsg(fd, {'T', (*r)->seq, 0});
        CHECK((*fifo)->Pop().ok());
      }
    }
  }
  _exit(3);  // not reached in practice: the parent kills long before
}

class SpillCrashTest : public ::testing::TestWithParam<SpillDurability> {};

INSTANTIATE_TEST_SUITE_P(DurablePolicies, SpillCrashTest,
                         ::testing::Values(SpillDurability::kEveryRecord,
                                           SpillDurability::kInterval));

TEST_P(SpillCrashTest, AcknowledgedRecordsSurviveSigkill) {
  TempDir dir;
  const SpillFifoOptions o = Options(dir.path(), GetParam());
  std::mt19937 rng(20261129 + static_cast<int>(GetParam()));
  uint64_t total_acked = 0;
  uint64_t total_replayed = 0;
  uint64_t corrupt_tails = 0;
  for (int iter = 0; iter < kIterations; ++iter) {
    SCOPED_TRACE(absl::StrCat("iteration ", iter));
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint64_t first_tag = static_cast<uint64_t>(iter) * 1'000'000;
    const uint32_t child_seed = rng();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      Child(o, fds[1], first_tag, child_seed);
    }
    close(fds[1]);
    // Kill after a random number of acknowledgements; the child keeps going meanwhile, so the
    // kill lands at an arbitrary point of an append, a rotation, a pop or a manifest write.
    const uint64_t kill_after = 1 + rng() % 60;
    std::map<uint64_t, uint64_t> acked;  // seq -> tag
    std::set<uint64_t> taken;
    bool killed = false;
    Msg m;
    while (true) {
      const ssize_t n = read(fds[0], &m, sizeof(m));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) break;  // EOF: the child is gone
      ASSERT_EQ(n, static_cast<ssize_t>(sizeof(m)));
      if (m.kind == 'A') {
        acked[m.seq] = m.tag;
      } else {
        taken.insert(m.seq);
      }
      if (!killed && acked.size() >= kill_after) {
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        killed = true;  // keep reading: acks written before the kill still count
      }
    }
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(killed) << "child ended early, status " << status;
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

    SpillFifoOptions verify = o;
    verify.persist_every_records = 1 << 20;  // the check drains all; no need to persist per 8
    auto fifo = SpillFifo::Open(verify);
    ASSERT_TRUE(fifo.ok()) << fifo.status();
    if (!(*fifo)->recovery_status().ok()) ++corrupt_tails;  // a torn, unacknowledged tail
    std::vector<SpillFifo::Record> records = testing::DrainAll(**fifo);
    uint64_t prev = 0;
    std::set<uint64_t> present;
    for (const SpillFifo::Record& r : records) {
      ASSERT_GT(r.seq, prev) << "out of order";
      prev = r.seq;
      present.insert(r.seq);
      auto it = acked.find(r.seq);
      if (it != acked.end()) {
        ASSERT_EQ(r.data, Payload(it->second, it->second & 0xFFFF)) << "seq " << r.seq;
      }
      if (taken.count(r.seq) > 0) ++total_replayed;
    }
    uint64_t replayed_here = 0;
    for (const auto& [seq, tag] : acked) {
      if (taken.count(seq) == 0) {
        ASSERT_TRUE(present.count(seq) > 0) << "acknowledged seq " << seq << " lost";
      } else if (present.count(seq) > 0) {
        ++replayed_here;
      }
    }
    // Replay: consumed records after the last persisted read position, plus the one taken
    // but not yet popped.
    EXPECT_LE(replayed_here, kPersistEvery + 1);
    total_acked += acked.size();
  }
  RecordProperty("acknowledged", static_cast<int>(total_acked));
  RecordProperty("replayed", static_cast<int>(total_replayed));
  RecordProperty("torn_tails", static_cast<int>(corrupt_tails));
  EXPECT_GT(total_acked, static_cast<uint64_t>(kIterations));
}

}  // namespace
}  // namespace flowctl
