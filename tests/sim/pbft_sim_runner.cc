// pbft_sim_runner: runs many seeded PBFT simulations and reports pass counts per fault kind.
//
//   pbft_sim_runner --runs 10000 [--first-seed 1] [--jobs 2]   # fault kind and n from the seed
//   pbft_sim_runner --seed 42 --fault partition --n 4           # replay one run, verbose
//
// Exit status: 0 when every run passed, 1 on any failure, 2 on a safety violation.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/sim/pbft_sim.h"

namespace {

sim::SimOptions OptionsForSeed(uint64_t seed) {
  sim::SimOptions o;
  o.seed = seed;
  const auto& kinds = sim::AllFaultKinds();
  o.fault = kinds[seed % kinds.size()];
  o.n = (seed / kinds.size()) % 4 == 3 ? 7 : 4;
  return o;
}

int Usage() {
  std::fprintf(stderr,
               "usage: pbft_sim_runner --runs N [--first-seed S] [--jobs J]\n"
               "       pbft_sim_runner --seed S [--fault KIND] [--n N]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 0, first_seed = 1, seed = 0;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  std::string fault;
  uint32_t n = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : nullptr;
    if (val == nullptr) return Usage();
    if (arg == "--runs")
      runs = std::strtoull(val, nullptr, 10);
    else if (arg == "--first-seed")
      first_seed = std::strtoull(val, nullptr, 10);
    else if (arg == "--jobs")
      jobs = static_cast<unsigned>(std::atoi(val));
    else if (arg == "--seed")
      seed = std::strtoull(val, nullptr, 10);
    else if (arg == "--fault")
      fault = val;
    else if (arg == "--n")
      n = static_cast<uint32_t>(std::atoi(val));
    else
      return Usage();
    ++i;
  }
  if (seed != 0) {
    sim::SimOptions o;
    o.seed = seed;
    o.n = n;
    if (!fault.empty()) {
      auto kind = sim::ParseFaultKind(fault);
      if (!kind) return Usage();
      o.fault = *kind;
    }
    const sim::SimResult r = sim::RunSimulation(o);
    std::printf(
        "seed %llu fault %s n %u: %s%s\n  max seq %llu, txs %llu/%llu, view changes %llu, "
        "synced batches %llu, snapshots %llu, messages %llu, dropped by replicas %llu, redundant "
        "votes dropped %llu, fetched bodies certified %llu, invalid bodies refused %llu\n",
        static_cast<unsigned long long>(seed), sim::FaultKindName(o.fault), o.n,
        r.ok ? "PASS" : (r.safety_violation ? "SAFETY VIOLATION: " : "FAIL: "), r.failure.c_str(),
        static_cast<unsigned long long>(r.max_committed_seq),
        static_cast<unsigned long long>(r.committed_txs),
        static_cast<unsigned long long>(r.submitted),
        static_cast<unsigned long long>(r.view_changes),
        static_cast<unsigned long long>(r.synced_batches),
        static_cast<unsigned long long>(r.snapshots_installed),
        static_cast<unsigned long long>(r.messages_delivered),
        static_cast<unsigned long long>(r.dropped_by_replicas),
        static_cast<unsigned long long>(r.redundant_dropped),
        static_cast<unsigned long long>(r.certified_fetches),
        static_cast<unsigned long long>(r.invalid_bodies_refused));
    return r.ok ? 0 : (r.safety_violation ? 2 : 1);
  }
  if (runs == 0) return Usage();

  std::mutex mu;
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_kind;  // kind -> (pass, total)
  std::vector<std::string> failures;
  uint64_t safety = 0;
  uint64_t snapshots = 0;
  uint64_t runs_with_snapshots = 0;
  uint64_t pruned = 0;
  uint64_t certified_fetches = 0;
  uint64_t invalid_refused = 0;
  std::atomic<uint64_t> next{0};
  auto worker = [&] {
    for (uint64_t i = next++; i < runs; i = next++) {
      const sim::SimOptions o = OptionsForSeed(first_seed + i);
      const sim::SimResult r = sim::RunSimulation(o);
      std::lock_guard<std::mutex> lock(mu);
      auto& counts = per_kind[sim::FaultKindName(o.fault)];
      counts.second++;
      snapshots += r.snapshots_installed;
      runs_with_snapshots += r.snapshots_installed > 0 ? 1 : 0;
      pruned += r.batches_pruned;
      certified_fetches += r.certified_fetches;
      invalid_refused += r.invalid_bodies_refused;
      if (r.ok) {
        counts.first++;
      } else {
        if (r.safety_violation) ++safety;
        failures.push_back(std::string(r.safety_violation ? "SAFETY " : "") + r.failure +
                           "\n    replay: " + sim::ReplayCommand(o));
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < std::max(1u, jobs); ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();

  uint64_t passed = 0;
  std::printf("%-12s %8s %8s\n", "fault", "passed", "runs");
  for (const auto& [kind, counts] : per_kind) {
    std::printf("%-12s %8llu %8llu\n", kind.c_str(), static_cast<unsigned long long>(counts.first),
                static_cast<unsigned long long>(counts.second));
    passed += counts.first;
  }
  std::printf("total: %llu/%llu passed, safety violations: %llu\n",
              static_cast<unsigned long long>(passed), static_cast<unsigned long long>(runs),
              static_cast<unsigned long long>(safety));
  std::printf("snapshots installed: %llu, in %llu runs\n",
              static_cast<unsigned long long>(snapshots),
              static_cast<unsigned long long>(runs_with_snapshots));
  std::printf("batches pruned: %llu\n", static_cast<unsigned long long>(pruned));
  std::printf(
      "fetched bodies taken on a certificate: %llu; bodies failing their check refused: "
      "%llu\n",
      static_cast<unsigned long long>(certified_fetches),
      static_cast<unsigned long long>(invalid_refused));
  for (size_t i = 0; i < failures.size() && i < 30; ++i) {
    std::printf("  %s\n", failures[i].c_str());
  }
  return safety > 0 ? 2 : (passed == runs ? 0 : 1);
}
