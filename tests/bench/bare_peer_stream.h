// What the p2p benchmarks share: a bare PeerService on loopback (no auth, no transport) and a
// sync service that counts the frames it reads.
#ifndef TESTS_BENCH_BARE_PEER_STREAM_H_
#define TESTS_BENCH_BARE_PEER_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "proto/p2p.grpc.pb.h"

namespace p2p::bench {

// Reads every stream message of a Connect call on gRPC's sync API (a handler thread blocked in
// Read) and counts their frames.
class CountingService final : public node::p2p::PeerService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<node::p2p::StreamMessage, node::p2p::StreamMessage>*
                           stream) override {
    node::p2p::StreamMessage m;
    while (stream->Read(&m)) {
      frames.fetch_add(m.frames().frames_size(), std::memory_order_release);
    }
    return grpc::Status::OK;
  }
  std::atomic<int64_t> frames{0};
};

// `service` served on 127.0.0.1 (a port the kernel picks), and a stub of a plaintext channel to
// it. The server must be shut down before `service` dies.
struct LoopbackPeerServer {
  explicit LoopbackPeerServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
    CHECK(server != nullptr && port != 0) << "cannot listen on 127.0.0.1";
    stub = node::p2p::PeerService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<node::p2p::PeerService::Stub> stub;
};

}  // namespace p2p::bench

#endif  // TESTS_BENCH_BARE_PEER_STREAM_H_
