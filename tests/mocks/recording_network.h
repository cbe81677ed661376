// RecordingNetwork: a p2p::Network that delivers nothing and records every Send and Broadcast in
// order (a broadcast has an empty `to`). `refuse` makes both fail with ResourceExhausted, as a
// full egress queue would. For tests of what a component sends, without a peer on the other end.
//
// Thread-safety: thread-safe.
//
//   tests::RecordingNetwork net("a", {"b", "c", "d"});
//   ... component sends ...
//   for (const tests::RecordingNetwork::Sent& s : net.log()) { ... s.channel, s.payload ... }
#ifndef TESTS_MOCKS_RECORDING_NETWORK_H_
#define TESTS_MOCKS_RECORDING_NETWORK_H_

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "p2p/network.h"

namespace tests {

class RecordingNetwork final : public p2p::Network {
 public:
  struct Sent {
    std::string to;  // empty for a broadcast
    p2p::PartitionId partition = 0;
    p2p::Channel channel = p2p::Channel::CONSENSUS;
    std::string payload;
  };

  RecordingNetwork(p2p::NodeId self, std::vector<p2p::NodeId> peers)
      : self_(std::move(self)), peers_(std::move(peers)) {}

  const p2p::NodeId& self() const override { return self_; }
  std::vector<p2p::NodeId> peers() const override { return peers_; }
  std::vector<p2p::NodeId> connected_peers() const override { return peers_; }
  absl::Status Send(const p2p::NodeId& peer, p2p::PartitionId partition, p2p::Channel channel,
                    std::string payload) override {
    return Record(peer, partition, channel, std::move(payload));
  }
  absl::Status Broadcast(p2p::PartitionId partition, p2p::Channel channel,
                         std::string payload) override {
    return Record("", partition, channel, std::move(payload));
  }
  void SetHandlers(MessageHandler, PeerEventHandler) override {}

  std::vector<Sent> log() const {
    absl::MutexLock lock(&mu_);
    return log_;
  }
  std::atomic<bool> refuse{false};

 private:
  absl::Status Record(std::string to, p2p::PartitionId partition, p2p::Channel channel,
                      std::string payload) {
    if (refuse.load()) return absl::ResourceExhaustedError("recording network: refusing");
    absl::MutexLock lock(&mu_);
    log_.push_back({std::move(to), partition, channel, std::move(payload)});
    return absl::OkStatus();
  }

  const p2p::NodeId self_;
  const std::vector<p2p::NodeId> peers_;
  mutable absl::Mutex mu_;
  std::vector<Sent> log_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tests

#endif  // TESTS_MOCKS_RECORDING_NETWORK_H_
