// The real `noded` binary as an operator runs it: start with a config file, commit transactions
// through the client port, SIGTERM (drain, exit 0), restart (resumes from the ledger: height and
// transactions kept, next nonce accepted), SIGKILL and restart (nothing committed lost), and a
// bad config (exit 2 with FILE:LINE: field).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/client.grpc.pb.h"
#include "tests/runtime/runtime_test_util.h"

extern char** environ;

namespace {

using ::runtime::testing::WaitFor;

using ::testing::HasSubstr;

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = 0;
  CHECK_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits up to `timeout` for the child; returns its wait status, or -1 on timeout (then kills it).
int WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

std::string SignedPut(uint64_t nonce) {
  absl::StatusOr<base::PrivateKey> key = base::PrivateKey::FromSeed(std::string(32, 'p'));
  CHECK(key.ok());
  node::chain::Transaction tx;
  tx.set_partition(1);
  tx.set_nonce(nonce);
  tx.mutable_put()->set_key(absl::StrCat("key-", nonce));
  tx.mutable_put()->set_value("value");
  return base::SignTx(std::move(tx), *key);
}

class NodedProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/noded_process_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_ = dir_ + "/node.conf";
    WriteConfig("partitions { id: 1 name: \"main\" consensus { batch_timeout_ms: 5 } }");
    log_ = dir_ + "/noded.log";
  }
  // Every port is bound as port 0; Start() reads the client port back from noded's log.
  void WriteConfig(const std::string& partition) {
    std::ofstream(config_) << "data_dir: \"" << dir_ << "/data\"\n"
                           << "p2p_listen: \"127.0.0.1:0\"\n"
                           << "client_listen: \"127.0.0.1:0\"\n"
                           << "admin_listen: \"127.0.0.1:0\"\n"
                           << "metrics_listen: \"\"\n"
                           << partition << "\n";
  }
  void TearDown() override {
    if (HasFailure()) {
      std::ifstream in(log_);
      std::string line;
      while (std::getline(in, line)) std::cerr << line << "\n";
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts noded and waits until it logs its bound ports ("... started: ..., client port N, ...",
  // appended to the log at every start): client_ is then the port this run listens on.
  pid_t Start() {
    const size_t starts = ClientPorts().size();
    const pid_t pid = Spawn({NODED_PATH, "--config", config_}, log_);
    EXPECT_TRUE(WaitFor([&] { return ClientPorts().size() > starts; }, absl::Seconds(30)))
        << "noded did not log its ports";
    const std::vector<int> ports = ClientPorts();
    client_ = ports.empty() ? "" : absl::StrCat("127.0.0.1:", ports.back());
    return pid;
  }

  // The client port of every start logged so far, in order.
  std::vector<int> ClientPorts() const {
    std::ifstream in(log_);
    std::vector<int> out;
    std::string line;
    const std::string kMark = ", client port ";
    while (std::getline(in, line)) {
      const size_t at = line.find(kMark);
      if (at == std::string::npos || line.find(" started: ") == std::string::npos) continue;
      int port = 0;
      const std::string rest = line.substr(at + kMark.size());
      if (absl::SimpleAtoi(rest.substr(0, rest.find(',')), &port) && port > 0) out.push_back(port);
    }
    return out;
  }

  std::unique_ptr<node::client::ClientService::Stub> Stub() {
    return node::client::ClientService::NewStub(
        grpc::CreateChannel(client_, grpc::InsecureChannelCredentials()));
  }

  // Height of partition "main", or -1 while the node does not answer.
  int64_t Height() {
    node::client::GetChainStatusRequest req;
    req.mutable_partition()->set_name("main");
    node::client::GetChainStatusResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    if (!Stub()->GetChainStatus(&ctx, req, &out).ok()) return -1;
    return static_cast<int64_t>(out.height());
  }

  grpc::Status Submit(uint64_t nonce, node::client::SubmitTxResponse* out) {
    node::client::SubmitTxRequest req;
    req.mutable_partition()->set_name("main");
    req.set_signed_tx(SignedPut(nonce));
    req.set_wait_for_commit(true);
    req.set_wait_timeout_ms(10000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
    return Stub()->SubmitTx(&ctx, req, out);
  }

  node::client::GetTxResponse::State TxState(const std::string& hash) {
    node::client::GetTxRequest req;
    req.mutable_partition()->set_name("main");
    req.set_tx_hash(hash);
    node::client::GetTxResponse out;
    grpc::ClientContext ctx;
    if (!Stub()->GetTx(&ctx, req, &out).ok()) return node::client::GetTxResponse::STATE_UNSPECIFIED;
    return out.state();
  }

  std::string dir_, config_, client_, log_;
};

TEST_F(NodedProcessTest, SigtermDrainsAndRestartResumesFromTheLedger) {
  pid_t pid = Start();
  ASSERT_TRUE(WaitFor([&] { return Height() >= 0; }, absl::Seconds(30))) << "noded did not start";
  std::vector<std::string> hashes;
  for (uint64_t n = 1; n <= 3; ++n) {
    node::client::SubmitTxResponse out;
    grpc::Status s = Submit(n, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.receipt().status(), node::chain::Receipt::SUCCESS);
    hashes.push_back(out.tx_hash());
  }
  const int64_t height = Height();
  EXPECT_GE(height, 1);

  kill(pid, SIGTERM);
  int status = WaitExit(pid, absl::Seconds(20));
  ASSERT_NE(status, -1) << "noded did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);

  pid = Start();
  ASSERT_TRUE(WaitFor([&] { return Height() >= 0; }, absl::Seconds(30)));
  EXPECT_EQ(Height(), height);
  for (const std::string& h : hashes) EXPECT_EQ(TxState(h), node::client::GetTxResponse::COMMITTED);
  node::client::SubmitTxResponse out;
  ASSERT_TRUE(Submit(4, &out).ok());  // the executor state came back: nonce 4 is next
  EXPECT_EQ(out.receipt().status(), node::chain::Receipt::SUCCESS);
  EXPECT_EQ(Height(), height + 1);

  // A crash loses nothing committed.
  kill(pid, SIGKILL);
  WaitExit(pid, absl::Seconds(10));
  pid = Start();
  ASSERT_TRUE(WaitFor([&] { return Height() >= 0; }, absl::Seconds(30)));
  EXPECT_EQ(Height(), height + 1);
  EXPECT_EQ(TxState(out.tx_hash()), node::client::GetTxResponse::COMMITTED);
  kill(pid, SIGTERM);
  status = WaitExit(pid, absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Lossless mode through SIGKILL: every tx acknowledged (appended to the spill FIFO and synced)
// commits after the restart, though the node was killed with most of them still spilled (the
// drain is 4 KB/s, about 20 txs a second).
TEST_F(NodedProcessTest, LosslessAcknowledgedTxsSurviveSigkillAndCommitAfterRestart) {
  WriteConfig(
      "partitions { id: 1 name: \"main\" consensus { batch_timeout_ms: 5 } lossless { enabled: "
      "true durability: INTERVAL sync_interval_ms: 5 drain_bytes_per_second: 4000 } }");
  pid_t pid = Start();
  ASSERT_TRUE(WaitFor([&] { return Height() >= 0; }, absl::Seconds(30))) << "noded did not start";
  constexpr uint64_t kTxs = 40;
  std::vector<std::string> hashes;
  for (uint64_t n = 1; n <= kTxs; ++n) {
    node::client::SubmitTxRequest req;
    req.mutable_partition()->set_name("main");
    req.set_signed_tx(SignedPut(n));
    node::client::SubmitTxResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
    grpc::Status s = Stub()->SubmitTx(&ctx, req, &out);
    ASSERT_TRUE(s.ok()) << n << ": " << s.error_message();  // acknowledged: durable in the FIFO
    hashes.push_back(out.tx_hash());
  }
  // The drain lets about 20 txs a second into the pool: the last one is still spilled.
  EXPECT_NE(TxState(hashes.back()), node::client::GetTxResponse::COMMITTED);
  kill(pid, SIGKILL);
  ASSERT_NE(WaitExit(pid, absl::Seconds(10)), -1);

  pid = Start();
  ASSERT_TRUE(WaitFor([&] { return Height() >= 0; }, absl::Seconds(30)));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& h : hashes) {
          if (TxState(h) != node::client::GetTxResponse::COMMITTED) return false;
        }
        return true;
      },
      absl::Seconds(60)))
      << "an acknowledged tx was lost";
  // Each executed once, in order: the sender's account stands at nonce kTxs.
  node::client::GetAccountRequest req;
  req.mutable_partition()->set_name("main");
  req.set_address(base::PrivateKey::FromSeed(std::string(32, 'p'))->public_key().bytes());
  node::client::GetAccountResponse account;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = Stub()->GetAccount(&ctx, req, &account);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(account.account().nonce(), kTxs);
  kill(pid, SIGTERM);
  const int status = WaitExit(pid, absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(NodedProcessTest, BadConfigExitsTwoNamingFileLineAndField) {
  std::ofstream(config_) << "data_dir: \"" << dir_ << "/data\"\n"
                         << "partitions {\n  id: 1\n  name: \"bad name\"\n}\n";
  pid_t pid = Spawn({NODED_PATH, "--check", "--config", config_}, log_);
  int status = WaitExit(pid, absl::Seconds(10));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream in(log_);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("node.conf:4: partitions[0].name"));
}

}  // namespace
