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
# Everything runs by default, the fault runs (label chaos: tests/chaos/*.py short, real noded
# processes, RUN_SERIAL) included. `tools/test.sh -LE chaos` leaves them out for a quick loop.
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
