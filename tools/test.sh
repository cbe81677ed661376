#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what is missing, configures, builds, runs ctest.
#   tools/test.sh                 # everything
#   tools/test.sh -R flowctl      # extra arguments go to ctest
# Environment: BUILD_DIR (default build), NODE_SANITIZE (address|undefined|thread).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tools/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
