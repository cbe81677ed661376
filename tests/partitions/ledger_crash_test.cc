// Crash test: a child process commits blocks in a loop and is SIGKILLed at seeded random moments;
// after each kill the reopened ledger must hold exactly a prefix of the deterministic block
// sequence (heights 0..H without gaps, H >= the last height the child reported committed), with
// the state and state root the parent gets by re-executing the same blocks.
//
// The child is this same test binary re-executed with --gtest_filter selecting
// LedgerCrashChild.CommitForever and the ledger dir / progress pipe in the environment (a fresh
// process: forking a parent that already ran RocksDB's background threads would not be safe).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "partitions/block.h"
#include "partitions/ledger.h"
#include "tests/partitions/chain_test_util.h"

extern char** environ;

namespace partitions {
namespace {

constexpr uint32_t kPartition = 1;
constexpr uint64_t kSeed = 20261129;
constexpr int kKills = 12;
constexpr char kDirEnv[] = "CHAIN_CRASH_DIR";
constexpr char kFdEnv[] = "CHAIN_CRASH_FD";

std::vector<base::PrivateKey> CrashKeys() { return chaintest::Keys(5); }
node::chain::GenesisConfig CrashGenesis() { return chaintest::Genesis(CrashKeys(), 10'000); }

// Child side: only runs when the parent set the environment.
TEST(LedgerCrashChild, CommitForever) {
  const char* dir = std::getenv(kDirEnv);
  const char* fd_text = std::getenv(kFdEnv);
  if (dir == nullptr || fd_text == nullptr) GTEST_SKIP() << "only run as the crash test's child";
  const int fd = std::atoi(fd_text);
  absl::StatusOr<Chain> chain = OpenChain(dir, kPartition, CrashGenesis());
  if (!chain.ok()) {
    fprintf(stderr, "child: %s\n", chain.status().ToString().c_str());
    _exit(3);
  }
  const std::vector<base::PrivateKey> keys = CrashKeys();
  // Bounded: the parent kills long before; a vanished parent ends us through EPIPE.
  for (int i = 0; i < 100'000; ++i) {
    const uint64_t height = chain->ledger->last_height() + 1;
    absl::Status s = chaintest::CommitTxs(
        *chain, chaintest::SeededBlockTxs(kSeed, height, *chain->executor, keys),
        {{"last", absl::StrCat(height)}});
    if (!s.ok()) {
      fprintf(stderr, "child: %s\n", s.ToString().c_str());
      _exit(4);
    }
    if (write(fd, &height, sizeof(height)) != sizeof(height)) _exit(5);
  }
  _exit(6);
}

// Reads committed heights from the child until it reports `target`. Returns the last reported
// height, or 0 if the child died first.
uint64_t WaitForHeight(int fd, uint64_t target) {
  uint64_t last = 0;
  while (last < target) {
    uint64_t h = 0;
    const ssize_t n = read(fd, &h, sizeof(h));
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof(h)) break;
    last = h;
  }
  return last;
}

class LedgerCrashTest : public ::testing::Test {
 protected:
  LedgerCrashTest() {
    std::string tmpl = "/tmp/chain_crash_test_XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
  }
  ~LedgerCrashTest() override { std::filesystem::remove_all(dir_); }

  // Starts the child; returns its pid and the read end of its progress pipe.
  pid_t StartChild(int* read_fd) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    // Everything the child needs is built before fork(): the parent may have RocksDB threads, so
    // the child only calls async-signal-safe functions until execve.
    const std::string self = std::filesystem::read_symlink("/proc/self/exe");
    std::vector<std::string> args = {self, "--gtest_filter=LedgerCrashChild.CommitForever"};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back(absl::StrCat(kDirEnv, "=", dir_, "/ledger"));
    env.push_back(absl::StrCat(kFdEnv, "=", fds[1]));
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      execve(self.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    *read_fd = fds[0];
    return pid;
  }

  std::string dir_;
};

TEST_F(LedgerCrashTest, ReopenedLedgerHoldsAPrefixOfCommittedBlocks) {
  std::mt19937 rng(kSeed);
  // The parent's own copy of the deterministic chain, extended as the child gets further.
  absl::StatusOr<std::unique_ptr<Executor>> ref = Executor::FromGenesis(kPartition, CrashGenesis());
  ASSERT_TRUE(ref.ok());
  std::vector<std::string> ref_hashes;  // block hash by height
  std::vector<std::string> ref_roots;   // state root by height
  {
    node::chain::Block genesis = chaintest::MakeBlock(kPartition, 0, "", {}, (*ref)->state_root());
    genesis.mutable_header()->clear_proposer();
    genesis.mutable_header()->set_view(0);
    genesis.mutable_header()->set_timestamp_ms(0);
    ref_hashes.push_back(BlockHash(genesis.header()));
    ref_roots.push_back((*ref)->state_root());
  }
  const std::vector<base::PrivateKey> keys = CrashKeys();
  auto extend_reference_to = [&](uint64_t height) {
    while (ref_hashes.size() <= height) {
      const uint64_t h = ref_hashes.size();
      std::vector<TxPtr> txs = chaintest::SeededBlockTxs(kSeed, h, **ref, keys);
      BlockExecution r = *(*ref)->Execute(h, txs);
      (*ref)->Apply(r);
      ref_hashes.push_back(BlockHash(
          chaintest::MakeBlock(kPartition, h, ref_hashes.back(), txs, r.state_root).header()));
      ref_roots.push_back(r.state_root);
    }
  };

  uint64_t reported = 0;
  int kills_mid_run = 0;
  int in_flight_found = 0;  // rounds whose unreported in-flight block turned out durable
  for (int round = 0; round < kKills; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    int fd = -1;
    const pid_t pid = StartChild(&fd);
    // Kill after the child reports a few more blocks, then a seeded 0..3 ms later, so the kill
    // lands at varying points inside a commit (usually during its fsync).
    const uint64_t target = reported + 1 + rng() % 6;
    const uint64_t seen = WaitForHeight(fd, target);
    ASSERT_EQ(seen, target) << "child stopped early";
    absl::SleepFor(absl::Microseconds(rng() % 3000));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "child ended on its own, status " << wstatus;
    ++kills_mid_run;
    // Heights the child reported after `seen` are durable too.
    reported = std::max(seen, WaitForHeight(fd, UINT64_MAX));
    close(fd);

    absl::StatusOr<Chain> chain = OpenChain(dir_ + "/ledger", kPartition, CrashGenesis());
    ASSERT_TRUE(chain.ok()) << chain.status();  // includes the state-root check
    const uint64_t last = chain->ledger->last_height();
    ASSERT_GE(last, reported) << "a reported commit was lost";
    ASSERT_LE(last, reported + 1) << "at most the block in flight may be extra";
    if (last == reported + 1) ++in_flight_found;
    extend_reference_to(last);
    for (uint64_t h = 0; h <= last; ++h) {
      absl::StatusOr<node::chain::Block> b = chain->ledger->GetBlock(h);
      ASSERT_TRUE(b.ok()) << "gap at height " << h << ": " << b.status();
      ASSERT_EQ(BlockHash(b->header()), ref_hashes[h]) << "height " << h;
    }
    EXPECT_EQ(chain->ledger->GetBlock(last + 1).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(chain->executor->state_root(), ref_roots[last]);
    EXPECT_EQ(chain->ledger->GetConsensusMeta("last").value_or(""), absl::StrCat(last))
        << "consensus meta committed with its block";
    // Same state, entry by entry, as the reference at that height (the next round's child
    // resumes from here).
    absl::StatusOr<StateMap> stored = chain->ledger->LoadState();
    ASSERT_TRUE(stored.ok()) << stored.status();
    const std::map<std::string, std::string> sorted(stored->begin(), stored->end());
    EXPECT_EQ(sorted, (*ref)->SnapshotForTest());
    reported = last;
  }
  EXPECT_EQ(kills_mid_run, kKills);
  RecordProperty("final_height", static_cast<int>(reported));
  RecordProperty("in_flight_block_durable", in_flight_found);
  printf("crash test: %d kills, final height %llu, %d kills left an unreported block durable\n",
         kKills, static_cast<unsigned long long>(reported), in_flight_found);
  EXPECT_GE(reported, static_cast<uint64_t>(kKills));
}

}  // namespace
}  // namespace partitions
