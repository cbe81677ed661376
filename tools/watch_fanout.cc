// watch_fanout: a benchmark client that opens many ClientService.WatchCommits streams on one node
// and reports what they cost: responses and serialized bytes per stream, how late each stream
// gets each block, and how streams ended early. Two delays, both on this machine's wall clock:
//   spread  arrival - the earliest arrival of the same height on any stream of this run: what the
//           fan-out itself adds (the node's per-watcher work and queueing, plus this client's);
//   lag     arrival - the block header's timestamp_ms (the proposer's clock; comparable when
//           client and node share a clock, e.g. a localnet). The node currently builds every
//           block with timestamp_ms = 0 (replicas must build identical blocks), so such blocks
//           are only counted (blocks_without_timestamp) and lag stays empty.
//
// Each stream is a gRPC callback reactor (no thread per stream). The streams are spread over
// ceil(N / --streams-per-channel) channels, each with its own subchannel pool and so its own TCP
// connection: N subscribers look like several clients, not all one HTTP/2 connection.
// A stream that ends before the run does (RESOURCE_EXHAUSTED: the partition's watch.max_watchers
// was full at the start, or the stream was cut as too slow; UNAVAILABLE; ...) is counted by
// status code and never reopened: the benchmark wants to see the cuts.
//
// Usage:
//   watch_fanout --target 127.0.0.1:50051 --partition p1 --duration-s 10 --streams 500 --json
//
// What it measures and how: tools/watch_fanout_lib.h.
//
// Exit codes: 0 the run happened (even if streams were cut); 1 the target could not be reached,
// no stream could be opened, or the streams did not finish 10 s after being cancelled; 2 usage.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/watch_fanout_lib.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<watch_fanout::Options> options = watch_fanout::ParseFlags(args);
  if (!options.ok()) {
    std::cerr << "watch_fanout: " << options.status().message() << "\n" << watch_fanout::kUsage;
    return 2;
  }
  if (options->help) {
    std::cout << watch_fanout::kUsage;
    return 0;
  }
  int code = 0;
  absl::StatusOr<watch_fanout::Report> report = watch_fanout::Run(*options);
  if (!report.ok()) {
    std::cerr << "watch_fanout: " << report.status().message() << "\n";
    code = absl::IsInvalidArgument(report.status()) ? 2 : 1;
  } else {
    std::cout << (options->json ? watch_fanout::FormatJson(*options, *report) + "\n"
                                : watch_fanout::FormatText(*report));
    if (report->opened_ok == 0 && report->alive_at_end == 0) {
      std::cerr << "watch_fanout: no stream could be opened (all ended early, none got a "
                   "block)\n";
      code = 1;
    }
  }
  std::cout.flush();
  std::cerr.flush();
  // As loadgen does: skip static destructors while gRPC's threads may still be winding down.
  _exit(code);
}
