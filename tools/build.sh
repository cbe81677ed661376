#!/usr/bin/env bash
# Installs what is missing, configures and builds. Shared by test.sh, demo.sh and bench.sh.
# Environment: BUILD_DIR (default build), CMAKE_BUILD_TYPE (default RelWithDebInfo),
# NODE_SANITIZE (address|undefined|thread, default none).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Let ccache hit across clones in other folders (CI builds a fresh clone).
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

tools/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DNODE_SANITIZE="${NODE_SANITIZE:-}"
cmake --build "$build_dir" -j "$(nproc)"
