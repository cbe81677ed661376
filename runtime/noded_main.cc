// noded: one node of a multi-partition PBFT cluster.
//
//   noded                          run with the embedded default config (one node, partitions
//                                  "hot" and "steady", data in ./data, ports on 127.0.0.1)
//   noded --config FILE            run with FILE (protobuf text format, or JSON if it ends .json)
//   noded --check --config FILE    validate FILE and exit (0 ok, 2 with FILE:LINE: field: message)
//   noded --print-default-config   print the embedded default config
//   noded --version                print the version and the git commit it was built from
//   noded --keygen FILE            write a new Ed25519 key (PEM, 0600) unless FILE exists; print
//                                  its public key as hex
//
// Test-only flags (network fault injection, p2p/fault_injector.h; off unless one is given, and
// logged as a WARNING at start when on): --p2p-fault-delay-ms N, --p2p-fault-jitter-ms N,
// --p2p-fault-loss P (0..1, whole messages), --p2p-fault-seed N, --p2p-fault-peers ID,ID (node ids
// or prefixes; default all), --p2p-fault-channels CONSENSUS,SYNC,... (default all).
// --test-equivocate PARTITION makes this node a faulty primary of PARTITION (conflicting
// pre-prepares, ConsensusDriver::Deps::equivocate) for the Byzantine fault runs;
// --test-withhold PARTITION one that withholds its proposals' tx bodies (Deps::withhold);
// --test-diverge PARTITION:HEIGHT one whose executor writes an extra value at block HEIGHT, so
// it must go DIVERGED (Executor::PlantNondeterminismForTest).
//
// SIGTERM / SIGINT: stop taking requests, drain in-flight ones (up to --drain-ms), flush, exit 0.
// Exit codes: 0 ok, 1 runtime failure (bind error, unreadable data), 2 usage or config error.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/ed25519.h"
#include "glog/logging.h"
#include "google/protobuf/text_format.h"
#include "p2p/fault_injector.h"
#include "runtime/build_info.h"
#include "runtime/config.h"
#include "runtime/node.h"

namespace {

constexpr char kUsage[] =
    "usage: noded [--config FILE] [--drain-ms N]\n"
    "       noded --check --config FILE\n"
    "       noded --print-default-config\n"
    "       noded --keygen FILE\n"
    "       noded --version\n"
    "\n"
    "Runs one node of a multi-partition PBFT cluster. Without --config it runs the embedded\n"
    "default: one node, partitions \"hot\" and \"steady\", data under ./data, ports on 127.0.0.1.\n"
    "SIGTERM or SIGINT drains in-flight requests (up to --drain-ms, default 5000) and exits 0.\n"
    "Exit codes: 0 ok, 1 runtime failure, 2 usage or config error.\n"
    "\n"
    "Tests only (p2p fault injection, off by default): --p2p-fault-delay-ms N,\n"
    "--p2p-fault-jitter-ms N, --p2p-fault-loss P (0..1), --p2p-fault-seed N,\n"
    "--p2p-fault-peers ID,ID (node id prefixes), --p2p-fault-channels CONSENSUS,SYNC,...\n"
    "Tests only (a faulty primary): --test-equivocate PARTITION, --test-withhold PARTITION\n"
    "Tests only (a replica that executes differently): --test-diverge PARTITION:HEIGHT\n";

int Usage(const std::string& problem) {
  std::cerr << "noded: " << problem << "\n\n" << kUsage;
  return 2;
}

int KeyGen(const std::string& path) {
  absl::StatusOr<base::PrivateKey> key = std::filesystem::exists(path)
                                             ? base::PrivateKey::ReadPemFile(path)
                                             : base::PrivateKey::Generate();
  if (!key.ok()) {
    std::cerr << "noded: " << path << ": " << key.status().message() << "\n";
    return 1;
  }
  if (!std::filesystem::exists(path)) {
    if (absl::Status s = key->WritePemFile(path); !s.ok()) {
      std::cerr << "noded: " << s.message() << "\n";
      return 1;
    }
  }
  std::cout << absl::BytesToHexString(key->public_key().bytes()) << "\n";
  return 0;
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // Debian's Abseil is a release build, but keep the per-lock-acquisition graph off explicitly:
  // it costs on every Mutex and the lock order is documented and tested instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  std::string config_path;
  std::string keygen_path;
  bool check = false;
  bool print_default = false;
  int64_t drain_ms = 5000;
  runtime::NodeOptions node_options;
  p2p::FaultOptions& fault = node_options.p2p_fault;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    std::string v;
    if (absl::StartsWith(a, "--p2p-fault-")) {
      // --flag VALUE or --flag=VALUE.
      std::string flag = a;
      if (size_t eq = a.find('='); eq != std::string::npos) {
        flag = a.substr(0, eq);
        v = a.substr(eq + 1);
      } else if (!value(&v)) {
        return Usage(absl::StrCat(a, " needs a value"));
      }
      bool ok = true;
      if (flag == "--p2p-fault-delay-ms") {
        ok = absl::SimpleAtoi(v, &fault.delay_ms);
      } else if (flag == "--p2p-fault-jitter-ms") {
        ok = absl::SimpleAtoi(v, &fault.jitter_ms);
      } else if (flag == "--p2p-fault-loss") {
        ok = absl::SimpleAtod(v, &fault.loss);
      } else if (flag == "--p2p-fault-seed") {
        ok = absl::SimpleAtoi(v, &fault.seed);
      } else if (flag == "--p2p-fault-peers") {
        for (absl::string_view id : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
          fault.peers.emplace_back(absl::StripAsciiWhitespace(id));
        }
      } else if (flag == "--p2p-fault-channels") {
        absl::StatusOr<std::vector<p2p::Channel>> c = p2p::ParseFaultChannels(v);
        if (!c.ok()) return Usage(absl::StrCat(flag, ": ", c.status().message()));
        fault.channels = *std::move(c);
      } else {
        return Usage(absl::StrCat("unknown argument '", a, "'"));
      }
      if (!ok) return Usage(absl::StrCat(flag, ": not a number: '", v, "'"));
      continue;
    }
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--version") {
      std::cout << "noded " << runtime::kBuildVersion << " (commit " << runtime::kBuildCommit
                << ")\n";
      return 0;
    } else if (a == "--config") {
      if (!value(&config_path)) return Usage("--config needs a FILE");
    } else if (absl::StartsWith(a, "--config=")) {
      config_path = a.substr(9);
    } else if (a == "--keygen") {
      if (!value(&keygen_path)) return Usage("--keygen needs a FILE");
    } else if (a == "--check") {
      check = true;
    } else if (a == "--print-default-config") {
      print_default = true;
    } else if (a == "--test-equivocate") {
      if (!value(&node_options.test_equivocate_partition)) {
        return Usage("--test-equivocate needs a partition name");
      }
    } else if (a == "--test-withhold") {
      if (!value(&node_options.test_withhold_partition)) {
        return Usage("--test-withhold needs a partition name");
      }
    } else if (a == "--test-diverge") {
      if (!value(&v)) return Usage("--test-diverge needs PARTITION:HEIGHT");
      const std::pair<std::string, std::string> parts = absl::StrSplit(v, absl::MaxSplits(':', 1));
      if (parts.first.empty() ||
          !absl::SimpleAtoi(parts.second, &node_options.test_diverge_height) ||
          node_options.test_diverge_height == 0) {
        return Usage("--test-diverge needs PARTITION:HEIGHT with a height > 0");
      }
      node_options.test_diverge_partition = parts.first;
    } else if (a == "--drain-ms") {
      if (!value(&v) || !absl::SimpleAtoi(v, &drain_ms) || drain_ms < 0 || drain_ms > 600'000) {
        return Usage("--drain-ms needs a number of milliseconds in [0, 600000]");
      }
    } else {
      return Usage(absl::StrCat("unknown argument '", a, "'"));
    }
  }
  if (!keygen_path.empty()) return KeyGen(keygen_path);
  if (print_default) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(runtime::DefaultNodeConfig(), &text);
    std::cout << text;
    return 0;
  }
  if (check && config_path.empty()) return Usage("--check needs --config FILE");
  if (absl::Status s = p2p::ValidateFaultOptions(fault); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (!fault.enabled() && (!fault.peers.empty() || !fault.channels.empty())) {
    return Usage("--p2p-fault-peers/--p2p-fault-channels need a delay, jitter or loss flag");
  }

  absl::StatusOr<node::config::NodeConfig> config =
      config_path.empty() ? absl::StatusOr<node::config::NodeConfig>(runtime::DefaultNodeConfig())
                          : runtime::LoadConfigFile(config_path);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 2;
  }
  for (const auto& [flag, name] :
       {std::pair{"--test-equivocate", node_options.test_equivocate_partition},
        std::pair{"--test-withhold", node_options.test_withhold_partition},
        std::pair{"--test-diverge", node_options.test_diverge_partition}}) {
    const auto& ps = config->partitions();
    if (!name.empty() &&
        std::none_of(ps.begin(), ps.end(), [&](const auto& p) { return p.name() == name; })) {
      return Usage(absl::StrCat(flag, ": no partition named '", name, "'"));
    }
  }
  if (check) {
    std::cout << config_path << ": ok (" << config->partitions_size() << " partitions, "
              << config->peers_size() << " peers)\n";
    return 0;
  }

  // Signals are taken synchronously by this thread; every other thread has them blocked.
  sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<runtime::Node>> node =
      runtime::Node::Create(*std::move(config), node_options);
  if (!node.ok()) {
    std::cerr << "noded: " << node.status().message() << "\n";
    return node.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (absl::Status s = (*node)->Start(); !s.ok()) {
    LOG(ERROR) << "start failed: " << s;
    (*node)->Stop(absl::ZeroDuration());
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  LOG(INFO) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", draining";
  (*node)->Stop(absl::Milliseconds(drain_ms));
  node->reset();
  LOG(INFO) << "exit 0";
  return 0;
}
