#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what is missing, configures, builds, runs ctest.
#   tools/test.sh                 # everything
#   tools/test.sh -R flowctl      # extra arguments go to ctest
# Environment: BUILD_DIR (default build), NODE_SANITIZE (address|undefined|thread).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Let ccache hit across clones in other folders (CI builds a fresh clone).
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

tools/install-deps.sh

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} \
  -DNODE_SANITIZE="${NODE_SANITIZE:-}"
cmake --build "$build_dir" -j "$(nproc)"
cd "$build_dir"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
