// A node for tests that drive it by hand: one partition ("one", id 1), one worker, no gRPC or
// metrics servers, the given (in-memory) network and clock, egress released by the test
// (EgressValve::ReleaseDue).
//
//   node::config::NodeConfig config = testing::InMemoryNodeConfig(dir);  // dir holds node.key
//   config.mutable_resources()->set_egress_bytes_per_second(100'000);   // any changes
//   absl::StatusOr<std::unique_ptr<Node>> n = testing::CreateInMemoryNode(config, net, &clock);
#ifndef TESTS_RUNTIME_IN_MEMORY_NODE_H_
#define TESTS_RUNTIME_IN_MEMORY_NODE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flowctl/clock.h"
#include "p2p/network.h"
#include "runtime/config.h"
#include "runtime/node.h"

namespace runtime::testing {

// Data in dir/data, key dir/node.key, one partition; ApplyDefaults is left to the caller.
inline node::config::NodeConfig InMemoryNodeConfig(const std::string& dir) {
  node::config::NodeConfig config;
  config.set_data_dir(dir + "/data");
  config.set_key_file(dir + "/node.key");
  config.set_metrics_listen("");
  config.mutable_resources()->set_cpu_workers(1);
  auto* p = config.add_partitions();
  p->set_id(1);
  p->set_name("one");
  return config;
}

// Applies the defaults and creates the node (not started).
inline absl::StatusOr<std::unique_ptr<Node>> CreateInMemoryNode(node::config::NodeConfig config,
                                                                p2p::Network* network,
                                                                const flowctl::Clock* clock) {
  ApplyDefaults(&config);
  return Node::Create(std::move(config), NodeOptions{.network = network,
                                                     .serve_grpc = false,
                                                     .serve_metrics = false,
                                                     .clock = clock,
                                                     .egress_by_hand = true});
}

}  // namespace runtime::testing

#endif  // TESTS_RUNTIME_IN_MEMORY_NODE_H_
