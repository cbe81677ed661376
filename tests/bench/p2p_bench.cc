// 1 KiB frames between two nodes over loopback, unlimited egress cap:
//   BM_P2pTransport   through an EgressValve over GrpcTransport, as the node sends (handshake
//                     done once; egress scheduler, sender thread, the link's writes batching
//                     frames into stream messages, its read completions, reassembler, handler)
//   BM_BareGrpcStream the same frames (same Frame messages, one per stream message) over a bare
//                     PeerService.Connect stream: no scheduler, no batching, no auth.
// Each iteration moves kFramesPerIteration frames and waits until the receiver has all of them,
// so the time includes draining. Overhead ratio = BM_P2pTransport time / BM_BareGrpcStream time.
//
//   build-p2p/tests/bench/bench_p2p --benchmark_min_time=0.5
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "p2p/egress_valve.h"
#include "p2p/grpc_transport.h"
#include "tests/bench/bare_peer_stream.h"

namespace p2p {
namespace {

constexpr int kFramesPerIteration = 20'000;
constexpr size_t kFrameBytes = 1024;
// Frames in flight at most (sent, not yet received), so BULK never drops: below what a peer's
// link queue holds before it is reported blocked (peer_release_bytes, 512 KiB) plus what the
// scheduler keeps for a blocked peer (blocked_peer_bytes, 1 MiB); beyond that the scheduler drops
// the oldest BULK messages by design.
constexpr int64_t kWindow = 1024;

base::PrivateKey Key(char c) {
  absl::StatusOr<base::PrivateKey> k = base::PrivateKey::FromSeed(std::string(32, c));
  CHECK(k.ok());
  return *std::move(k);
}

void WaitFor(const std::atomic<int64_t>& counter, int64_t target) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (counter.load(std::memory_order_acquire) < target) {
    CHECK(absl::Now() < deadline) << "frames lost: " << counter.load() << " of " << target;
    std::this_thread::yield();
  }
}

void BM_P2pTransport(benchmark::State& state) {
  const base::PrivateKey ka = Key('a'), kb = Key('b');
  GrpcTransportOptions oa, ob;
  oa.peers.push_back({kb.public_key().bytes(), ""});
  ob.peers.push_back({ka.public_key().bytes(), ""});
  GrpcTransport a(ka, oa), b(kb, ob);
  absl::StatusOr<std::unique_ptr<EgressValve>> valve =
      EgressValve::Create(&a, &a, EgressValveOptions{});
  CHECK(valve.ok()) << valve.status();
  EgressValve& av = **valve;
  av.SetHandlers(nullptr, nullptr);
  std::atomic<int64_t> received{0};
  b.SetHandlers([&](const NodeId&, PartitionId, Channel,
                    std::string payload) { received.fetch_add(1, std::memory_order_release); },
                nullptr);
  CHECK(a.Start().ok());
  CHECK(av.Start().ok());
  CHECK(b.Start().ok());
  a.SetPeerAddress(b.self(), absl::StrCat("127.0.0.1:", b.port()));
  b.SetPeerAddress(a.self(), absl::StrCat("127.0.0.1:", a.port()));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (a.connected_peers().empty() || b.connected_peers().empty()) {
    CHECK(absl::Now() < deadline) << "nodes did not connect";
    absl::SleepFor(absl::Milliseconds(1));
  }
  const std::string payload(kFrameBytes, 'x');
  int64_t sent = 0;
  for (auto _ : state) {
    for (int i = 0; i < kFramesPerIteration; ++i) {
      while (sent - received.load(std::memory_order_acquire) >= kWindow) std::this_thread::yield();
      CHECK(av.Send(b.self(), 1, node::p2p::BULK, payload).ok());
      ++sent;
    }
    WaitFor(received, sent);
  }
  const TransportStats st = a.Stats();
  state.SetItemsProcessed(sent);
  state.SetBytesProcessed(sent * static_cast<int64_t>(kFrameBytes));
  state.counters["frames_per_batch"] =
      st.streams_written == 0
          ? 0
          : static_cast<double>(st.frames_written) / static_cast<double>(st.streams_written);
  b.Stop();
  av.Stop();
  a.Stop();
}
BENCHMARK(BM_P2pTransport)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_BareGrpcStream(benchmark::State& state) {
  bench::CountingService service;
  bench::LoopbackPeerServer loop(&service);
  grpc::ClientContext ctx;
  auto stream = loop.stub->Connect(&ctx);
  // The same frame our transport writes: header + 1 KiB payload.
  node::p2p::StreamMessage msg;
  node::p2p::Frame* f = msg.mutable_frames()->add_frames();
  f->mutable_header()->set_partition(1);
  f->mutable_header()->set_channel(node::p2p::BULK);
  f->mutable_header()->set_length(kFrameBytes);
  f->mutable_header()->set_chunk_count(1);
  const std::string payload(kFrameBytes, 'x');
  int64_t sent = 0;
  for (auto _ : state) {
    for (int i = 0; i < kFramesPerIteration; ++i) {
      f->mutable_header()->set_message_id(static_cast<uint64_t>(sent));
      f->set_payload(payload);  // a copy per frame, as our writer makes
      CHECK(stream->Write(msg));
      ++sent;
    }
    WaitFor(service.frames, sent);
  }
  state.SetItemsProcessed(sent);
  state.SetBytesProcessed(sent * static_cast<int64_t>(kFrameBytes));
  stream->WritesDone();
  stream->Finish();
  loop.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}
BENCHMARK(BM_BareGrpcStream)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace p2p
