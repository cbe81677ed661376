#!/usr/bin/env bash
# The node's main job: installs what is missing, builds, starts a local 4-node cluster with two
# partitions and runs a partition-level load test against it (see README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tools/build.sh
build_dir=${BUILD_DIR:-build}
if [ ! -x "$build_dir/runtime/noded" ]; then
  echo "demo: not yet: the node (noded), localnet and loadgen are still being built (see the issues)."
  echo "demo: what exists today is the flow-control library, p2p, the chain core and PBFT;"
  echo "demo: run tools/test.sh to exercise them and tools/bench.sh to measure them."
  exit 0
fi
