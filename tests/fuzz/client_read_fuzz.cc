// Fuzz target: the client API's reads of committed history, with arbitrary requests: a
// node.client.WatchCommitsRequest (the subscription, runtime/commit_stream.h) and a
// node.client.GetValueRequest (a value at a height, Ledger::GetValueAt), both as the client
// service hands them on once parsed, against one partition's ledger of kBlocks blocks (built once
// per process in a temporary directory, with puts of keys "k0".."k5" whose values change per
// block).
//
// Input: byte 0 picks the request (even: WatchCommits, odd: GetValue); the rest is that message.
// Invariants:
//  - WatchCommits: Watch refuses only with OUT_OF_RANGE (from_height beyond the tip + 1). A
//    watcher writes the heights from_height (or nothing, for 0 = "the next block") to the tip in
//    order, each a WatchCommitsResponse of that height with tx bodies only if include_txs and
//    receipts (one per tx) only if include_receipts, then waits; it never ends by itself.
//  - GetValue: heights beyond the tip are OUT_OF_RANGE; otherwise the value is the one the
//    fixture wrote at or below that height (or absent), whatever the key's bytes.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/transaction.h"
#include "partitions/block.h"
#include "partitions/ledger.h"
#include "proto/client.pb.h"
#include "runtime/commit_stream.h"
#include "tests/fuzz/chain_fixture.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

constexpr uint32_t kPartition = 1;
constexpr uint64_t kBlocks = 6;
constexpr int kKeys = 6;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "client_read_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

struct Fixture {
  partitions::Chain chain;
  std::shared_ptr<runtime::CommitStreamHub> hub;
  // key -> height -> the value the block at that height wrote.
  std::map<std::string, std::map<uint64_t, std::string>> written;
};

// Commits kBlocks blocks of puts by one sender: block h writes "k<i>" = "v<h>" for i < h.
Fixture* MakeFixture() {
  auto* f = new Fixture();
  const std::string dir = tests::FixtureDir("client_read_fuzz");
  node::chain::GenesisConfig genesis;
  absl::StatusOr<partitions::Chain> chain = partitions::OpenChain(dir, kPartition, genesis);
  Require(chain.ok(), "the fixture's ledger opens");
  f->chain = *std::move(chain);
  base::TxLimits limits;
  limits.partition = kPartition;
  uint64_t nonce = 0;
  for (uint64_t h = 1; h <= kBlocks; ++h) {
    std::vector<partitions::TxPtr> txs;
    for (int i = 0; i < static_cast<int>(h) && i < kKeys; ++i) {
      node::chain::Transaction tx;
      tx.set_partition(kPartition);
      tx.set_nonce(++nonce);
      tx.mutable_put()->set_key(absl::StrCat("k", i));
      tx.mutable_put()->set_value(absl::StrCat("v", h));
      absl::StatusOr<base::DecodedTx> d =
          base::DecodeSignedTx(base::SignTx(tx, tests::FixedKey('W')), limits);
      Require(d.ok(), "the fixture's txs decode");
      txs.push_back(std::make_shared<const base::DecodedTx>(*std::move(d)));
      f->written[absl::StrCat("k", i)][h] = absl::StrCat("v", h);
    }
    Require(tests::CommitFixtureBlock(f->chain, kPartition, txs), "the fixture's blocks commit");
  }
  f->hub = std::make_shared<runtime::CommitStreamHub>("fuzz", f->chain.ledger.get(),
                                                      runtime::CommitStreamLimits{});
  return f;
}

void FuzzWatch(Fixture& f, const node::client::WatchCommitsRequest& request) {
  const runtime::CommitWatcher::Options options{.from_height = request.from_height(),
                                                .include_txs = request.include_txs(),
                                                .include_receipts = request.include_receipts()};
  absl::StatusOr<std::shared_ptr<runtime::CommitWatcher>> w = f.hub->Watch(options, [] {});
  if (!w.ok()) {
    Require(w.status().code() == absl::StatusCode::kOutOfRange, "Watch refuses with OUT_OF_RANGE");
    Require(request.from_height() > kBlocks + 1, "Watch refuses only beyond the tip + 1");
    return;
  }
  Require(request.from_height() <= kBlocks + 1, "Watch accepts up to the tip + 1");
  runtime::CommitWatcher& watcher = **w;
  uint64_t want = request.from_height();
  for (int steps = 0; steps <= static_cast<int>(kBlocks) + 1; ++steps) {
    runtime::CommitWatcher::Step step = watcher.Next();
    Require(step.kind != runtime::CommitWatcher::Step::kEnd, "a watcher does not end by itself");
    if (step.kind == runtime::CommitWatcher::Step::kWait) break;
    Require(want != 0 && step.height == want, "heights in order from from_height");
    node::client::WatchCommitsResponse m;
    Require(m.ParseFromString(*step.message), "each write is a WatchCommitsResponse");
    Require(m.height() == want && m.block().header().height() == want, "of that height");
    const int txs = m.block().tx_hashes_size();
    Require(m.block().txs_size() == (request.include_txs() ? txs : 0), "bodies only if asked");
    Require(m.receipts_size() == (request.include_receipts() ? txs : 0), "receipts only if asked");
    ++want;
  }
  Require(want == 0 || want == kBlocks + 1, "a watcher writes everything up to the tip");
  watcher.End(absl::CancelledError("fuzz input done"));
  watcher.Close();
}

void FuzzGetValue(Fixture& f, const node::client::GetValueRequest& request) {
  const uint64_t at = request.height() == 0 ? kBlocks : request.height();
  absl::StatusOr<std::optional<std::string>> got = f.chain.ledger->GetValueAt(request.key(), at);
  if (at > kBlocks) {
    Require(!got.ok() && got.status().code() == absl::StatusCode::kOutOfRange,
            "beyond the tip: OUT_OF_RANGE");
    return;
  }
  Require(got.ok(), "a value at a retained height reads");
  std::optional<std::string> want;
  auto it = f.written.find(request.key());
  if (it != f.written.end()) {
    auto upto = it->second.upper_bound(at);
    if (upto != it->second.begin()) want = std::prev(upto)->second;
  }
  Require(*got == want, "the value written at or below the height");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  static Fixture* const fixture = MakeFixture();
  tests::FuzzInput in(data, size);
  const uint8_t op = in.Byte();
  const std::string rest = in.Rest();
  if (op % 2 == 0) {
    node::client::WatchCommitsRequest request;
    if (request.ParseFromString(rest)) FuzzWatch(*fixture, request);
  } else {
    node::client::GetValueRequest request;
    if (request.ParseFromString(rest)) FuzzGetValue(*fixture, request);
  }
  return 0;
}
