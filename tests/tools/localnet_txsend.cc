// localnet_txsend: submits a few signed Put transactions to one partition of a running node and
// waits until the last one is committed. The localnet integration test uses it to make blocks
// (an idle partition proposes none) without depending on loadgen.
//
//   localnet_txsend --target 127.0.0.1:36001 --partition-id 1 --count 20 [--timeout-ms 20000]
//
// A fresh key per run, nonces 1..count. Rejections the node asks to retry (RESOURCE_EXHAUSTED,
// UNAVAILABLE: e.g. a view change after a node was killed) are retried after the hinted delay
// (100 ms when none), until the deadline. Prints "committed N txs, last at height H" and exits 0;
// exits 1 on failure, 2 on bad flags.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/ed25519.h"
#include "base/transaction.h"
#include "proto/client.grpc.pb.h"

namespace {

// gRPC deadlines take system_clock time points.
using Clock = std::chrono::system_clock;

struct Flags {
  std::string target;
  uint32_t partition_id = 0;
  uint64_t count = 10;
  int64_t timeout_ms = 20000;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const char* value = argv[i + 1];
    bool ok = true;
    if (name == "--target") {
      f->target = value;
    } else if (name == "--partition-id") {
      ok = absl::SimpleAtoi(value, &f->partition_id);
    } else if (name == "--count") {
      ok = absl::SimpleAtoi(value, &f->count);
    } else if (name == "--timeout-ms") {
      ok = absl::SimpleAtoi(value, &f->timeout_ms);
    } else {
      ok = false;
    }
    if (!ok) return false;
  }
  return argc % 2 == 1 && !f->target.empty() && f->partition_id >= 1 && f->count >= 1 &&
         f->count <= 10000 && f->timeout_ms >= 1;
}

// The retry delay the node hinted in trailing metadata, or 100 ms.
std::chrono::milliseconds RetryAfter(const grpc::ClientContext& ctx) {
  int64_t ms = 100;
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find("retry-after-ms");
  if (it != md.end()) {
    int64_t hinted = 0;
    if (absl::SimpleAtoi(std::string(it->second.data(), it->second.size()), &hinted) &&
        hinted > 0) {
      ms = std::min<int64_t>(hinted, 2000);
    }
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::cerr << "usage: localnet_txsend --target HOST:PORT --partition-id ID [--count 1..10000] "
                 "[--timeout-ms MS]\n";
    return 2;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(flags.timeout_ms);
  auto key = base::PrivateKey::Generate();
  if (!key.ok()) {
    std::cerr << "localnet_txsend: " << key.status() << "\n";
    return 1;
  }
  auto stub = node::client::ClientService::NewStub(
      grpc::CreateChannel(flags.target, grpc::InsecureChannelCredentials()));

  uint64_t last_height = 0;
  for (uint64_t nonce = 1; nonce <= flags.count; ++nonce) {
    node::chain::Transaction tx;
    tx.set_partition(flags.partition_id);
    tx.set_nonce(nonce);
    tx.mutable_put()->set_key(absl::StrCat("localnet/", nonce));
    tx.mutable_put()->set_value("x");
    node::client::SubmitTxRequest request;
    request.mutable_partition()->set_id(flags.partition_id);
    request.set_signed_tx(base::SignTx(tx, *key));
    const bool last = nonce == flags.count;
    request.set_wait_for_commit(last);
    while (true) {
      const auto now = Clock::now();
      if (now >= deadline) {
        std::cerr << "localnet_txsend: deadline passed at nonce " << nonce << "\n";
        return 1;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      node::client::SubmitTxResponse response;
      const grpc::Status s = stub->SubmitTx(&ctx, request, &response);
      if (s.ok()) {
        if (last) last_height = response.receipt().block_height();
        break;
      }
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED &&
          s.error_code() != grpc::StatusCode::UNAVAILABLE) {
        std::cerr << "localnet_txsend: nonce " << nonce << ": code " << s.error_code() << ": "
                  << s.error_message() << "\n";
        return 1;
      }
      std::this_thread::sleep_for(RetryAfter(ctx));
    }
  }
  std::cout << "committed " << flags.count << " txs, last at height " << last_height << "\n";
  return 0;
}
