// Fuzz target: snapshot state sync (partitions/snapshot_sync.h) with hostile peers. The fixture
// is a source ledger of kBlocks blocks (three values of 600 KB, so the state spans four chunks,
// and small puts) served by a SnapshotServer, and a joiner ledger a SnapshotFetcher stages into.
//
// Input: byte 0 picks the side.
//  - even: the rest is a SnapshotRequest from a peer. The server answers without failing: a
//    manifest either says `refused` or validates against the source's block at its seq; a chunk
//    either says `refused` or holds at most the asked entries, in strictly increasing key order,
//    from the asked key on.
//  - odd: a fetch of the state at kBlocks. The honest manifest comes from replica 0; replica 1's
//    is a fuzzed SnapshotManifest when the next blob parses as one (else the honest one). Then,
//    for at most 16 chunk requests the fetcher makes, the next byte picks the answer: the honest
//    chunk, the honest chunk with one value, key or entry changed, or fuzzed bytes parsed as a
//    SnapshotChunk (seq and index set to the request's). Invariants: a manifest is adopted only
//    if it is the honest one (f+1 = 2 identical needed, one of them honest); a chunk is staged
//    only if it is exactly the honest chunk.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/transaction.h"
#include "flowctl/clock.h"
#include "partitions/block.h"
#include "partitions/ledger.h"
#include "partitions/snapshot_sync.h"
#include "proto/partition.pb.h"
#include "tests/fuzz/chain_fixture.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using ::node::partition::PartitionMessage;
using ::node::partition::SnapshotChunk;
using ::node::partition::SnapshotManifest;
using ::node::partition::SnapshotRequest;

constexpr uint32_t kPartition = 2;
constexpr uint64_t kBlocks = 5;

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "snapshot_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

struct Fixture {
  partitions::Chain source;
  partitions::Chain joiner;
  std::unique_ptr<partitions::SnapshotServer> server;
  partitions::SnapshotTarget target;
  SnapshotManifest manifest;  // the honest one at kBlocks
};

Fixture* MakeFixture() {
  auto* f = new Fixture();
  const std::string dir = tests::FixtureDir("snapshot_fuzz");
  partitions::LedgerOptions options;
  options.sync = false;
  absl::StatusOr<partitions::Chain> source =
      partitions::OpenChain(dir + "/source", kPartition, {}, options);
  absl::StatusOr<partitions::Chain> joiner =
      partitions::OpenChain(dir + "/joiner", kPartition, {}, options);
  Require(source.ok() && joiner.ok(), "the fixture's ledgers open");
  f->source = *std::move(source);
  f->joiner = *std::move(joiner);
  base::TxLimits limits;
  limits.partition = kPartition;
  limits.max_tx_bytes = 1 << 20;
  uint64_t nonce = 0;
  for (uint64_t h = 1; h <= kBlocks; ++h) {
    std::vector<partitions::TxPtr> txs;
    for (int i = 0; i < 4; ++i) {
      node::chain::Transaction tx;
      tx.set_partition(kPartition);
      tx.set_nonce(++nonce);
      tx.mutable_put()->set_key(absl::StrCat("k", h, "/", i));
      // Block 1 holds three values of 600 KB: each closes a chunk.
      tx.mutable_put()->set_value(h == 1 && i < 3 ? std::string(600'000, static_cast<char>('a' + i))
                                                  : absl::StrCat("v", h, "/", i));
      absl::StatusOr<base::DecodedTx> d =
          base::DecodeSignedTx(base::SignTx(tx, tests::FixedKey('S')), limits);
      Require(d.ok(), "the fixture's txs decode");
      txs.push_back(std::make_shared<const base::DecodedTx>(*std::move(d)));
    }
    Require(tests::CommitFixtureBlock(f->source, kPartition, txs), "the fixture's blocks commit");
  }
  f->server = std::make_unique<partitions::SnapshotServer>(
      f->source.ledger.get(), flowctl::Clock::Real(),
      partitions::SnapshotServer::Options{.serve_bytes_per_second = 1e15});
  f->target = {.seq = kBlocks,
               .chain_digest = std::string(32, 'c'),
               .state_root = f->source.executor->state_root()};
  absl::StatusOr<SnapshotManifest> m =
      partitions::BuildSnapshotManifest(*f->source.ledger, kBlocks);
  Require(m.ok() && m->chunks_size() >= 3, "the fixture's state spans three chunks");
  f->manifest = *std::move(m);
  return f;
}

void FuzzServe(Fixture& f, const SnapshotRequest& request) {
  const PartitionMessage answer = f.server->Answer(3, request);
  if (request.manifest()) {
    Require(answer.has_snapshot_manifest(), "a manifest request gets a manifest");
    const SnapshotManifest& m = answer.snapshot_manifest();
    if (!m.refused().empty()) return;
    Require(request.seq() <= kBlocks, "only kept heights are served");
    absl::StatusOr<node::chain::Block> block = f.source.ledger->GetBlock(request.seq());
    Require(block.ok(), "the served height's block exists");
    const partitions::SnapshotTarget at{
        .seq = request.seq(), .chain_digest = "", .state_root = block->header().state_root()};
    Require(partitions::ValidateSnapshotManifest(m, at, kPartition).ok(),
            "a served manifest validates against its block");
    return;
  }
  Require(answer.has_snapshot_chunk(), "a chunk request gets a chunk");
  const SnapshotChunk& c = answer.snapshot_chunk();
  if (!c.refused().empty()) return;
  Require(c.keys_size() == c.values_size(), "as many values as keys");
  Require(c.keys_size() <= static_cast<int>(request.entries()), "at most the entries asked for");
  for (int i = 0; i < c.keys_size(); ++i) {
    Require(c.keys(i) >= request.first_key(), "from the asked key on");
    Require(i == 0 || c.keys(i) > c.keys(i - 1), "keys strictly increase");
  }
}

// The honest answer to a chunk request of the fetcher.
SnapshotChunk Honest(Fixture& f, const SnapshotRequest& request) {
  return f.server->Answer(3, request).snapshot_chunk();
}

void FuzzFetch(Fixture& f, tests::FuzzInput& in) {
  Require(f.joiner.ledger->ClearStaged(partitions::kSnapshotMetaPrefix).ok(), "staging clears");
  partitions::SnapshotFetcher fetcher(f.joiner.ledger.get(), {.n = 4, .self = 3});
  std::vector<partitions::SnapshotFetcher::Send> sends;
  const int64_t now = flowctl::Clock::Real()->NowNanos();
  Require(fetcher.Start(f.target, now, &sends).ok(), "the fetch starts");
  std::vector<partitions::SnapshotFetcher::Send> more;
  Require(fetcher.OnManifest(0, f.manifest, now, &more).ok(), "the honest manifest is taken");
  SnapshotManifest other = f.manifest;
  SnapshotManifest fuzzed;
  if (fuzzed.ParseFromString(in.Blob(4096))) other = fuzzed;
  Require(fetcher.OnManifest(1, other, now, &more).ok(), "a manifest never fails the fetch");
  if (fetcher.stats().chunks_total == 0) return;  // not adopted: nothing more to check
  Require(other.SerializeAsString() == f.manifest.SerializeAsString(),
          "only the honest manifest is adopted");
  std::deque<partitions::SnapshotFetcher::Send> queue(more.begin(), more.end());
  for (int step = 0; step < 16 && !queue.empty() && !in.empty(); ++step) {
    partitions::SnapshotFetcher::Send send = std::move(queue.front());
    queue.pop_front();
    const SnapshotRequest& req = send.msg.snapshot_request();
    const SnapshotChunk honest = Honest(f, req);
    SnapshotChunk answer = honest;
    switch (in.Byte() % 3) {
      case 0:
        break;
      case 1: {
        const int n = answer.keys_size();
        if (n == 0) break;
        const int i = static_cast<int>(in.Below(static_cast<uint64_t>(n)));
        switch (in.Byte() % 4) {
          case 0:
            answer.mutable_values(i)->append(in.Bytes(1 + in.Byte() % 4));
            break;
          case 1:
            answer.set_keys(i, answer.keys(i) + "x");
            break;
          case 2:
            answer.mutable_keys()->RemoveLast();
            answer.mutable_values()->RemoveLast();
            break;
          default:
            answer.add_keys(answer.keys(n - 1) + in.Bytes(1));
            answer.add_values(in.Bytes(in.Byte()));
        }
        break;
      }
      default:
        answer.Clear();
        (void)answer.ParseFromString(in.Blob(1024));
        answer.set_seq(req.seq());
        answer.set_chunk(req.chunk());
    }
    const uint64_t before = fetcher.stats().chunks_done;
    std::vector<partitions::SnapshotFetcher::Send> next;
    Require(fetcher.OnChunk(send.to, answer, now, &next).ok(), "a chunk never fails the fetch");
    if (fetcher.stats().chunks_done > before) {
      Require(
          answer.keys_size() == honest.keys_size() && answer.values_size() == honest.values_size(),
          "only the honest chunk is staged (count)");
      for (int i = 0; i < answer.keys_size(); ++i) {
        Require(answer.keys(i) == honest.keys(i) && answer.values(i) == honest.values(i),
                "only the honest chunk is staged (entries)");
      }
    }
    for (auto& s : next) queue.push_back(std::move(s));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tests::QuietProtobufLogs();
  static Fixture* const fixture = MakeFixture();
  tests::FuzzInput in(data, size);
  if (in.Byte() % 2 == 0) {
    SnapshotRequest request;
    if (request.ParseFromString(in.Rest())) FuzzServe(*fixture, request);
  } else {
    FuzzFetch(*fixture, in);
  }
  return 0;
}
