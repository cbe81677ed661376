#!/usr/bin/env bash
# Load-test integration test, registered with ctest in tests/CMakeLists.txt (block
# "# load test integration"):
#
#   loadtest_integration_test.sh LOCALNET BUILD_DIR
#
# Starts a 4-node localnet with partitions hot and steady and the flow-control config that holds
# on 2 cores (hot: in-flight 256, health and pool gates, rate 100/s per node = 400/s for the
# cluster, pool 3000; lane weights consensus first), then runs loadgen for 30 s: hot offered
# 4000 tx/s (10x its limit), steady 50 tx/s. loadgen's --expect sets the verdict:
#   view_changes==0                      consensus never left its view
#   hot.committed_rate@5s-30s >= 300/s   hot keeps committing near its 400/s limit
#   hot.committed_rate@5s-30s <= 480/s   ... and the limit holds
#   steady.committed == steady.offered   nothing of the modest partition is lost
#   steady.p99 < 2s                      generous bound: must never flake on a busy machine
# Exit 0 pass, 1 fail, 77 skipped (binaries not built). NODED, NODECTL, LOADGEN override paths. The cluster is torn down on every exit.
set -uo pipefail

localnet=${1:?usage: loadtest_integration_test.sh LOCALNET BUILD_DIR}
bin=${2:?}
export NODED=${NODED:-$bin/runtime/noded}
export NODECTL=${NODECTL:-$bin/tools/nodectl}
loadgen=${LOADGEN:-$bin/tools/loadgen}
for b in "$NODED" "$NODECTL" "$loadgen"; do
  if [ ! -x "$b" ]; then echo "SKIP: $b not built"; exit 77; fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/loadtest_integration.XXXXXX")
export LOCALNET_DIR=$tmp/net
started=0
cleanup() {
  if [ "$started" = 1 ]; then "$localnet" down --timeout 10 >/dev/null 2>&1; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*" >&2
  if [ "$started" = 1 ]; then
    "$localnet" status >&2 2>&1
    for log in "$LOCALNET_DIR"/node*/noded.log; do
      [ -f "$log" ] && { echo "--- last lines of $log" >&2; tail -n 15 "$log" >&2; }
    done
  fi
  exit 1
}

# The demo's flow-control overlay (hot: 100 tx/s per node, pool 3000, 256 in flight).
flow_conf="$(cd "$(dirname "$0")/../.." && pwd)/tools/demo.conf"

started=1
"$localnet" up 4 --partitions 2 --base-port 0 --config-extra "$flow_conf" \
  || fail "localnet up"
client=$("$localnet" addrs client) || fail "addrs client"
admin=$("$localnet" addrs admin) || fail "addrs admin"
tokens=$(printf "%s," "$LOCALNET_DIR"/node{1,2,3,4}/admin.token)
tokens=${tokens%,}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$loadgen" --targets "$client" --admin "$admin" --admin-token-file "$tokens" \
  --duration 30s --drain 15s --presign 4000 --quiet --out "$tmp/report" \
  --scenario 'hot:rate=4000;steady:rate=50' \
  --expect 'view_changes==0' \
  --expect 'hot.committed_rate@5s-30s>=300/s' \
  --expect 'hot.committed_rate@5s-30s<=480/s' \
  --expect 'steady.committed==steady.offered' \
  --expect 'steady.p99<2s'
rc=$?
[ "$rc" = 0 ] || fail "loadgen expectations (exit $rc)"
echo "ok: 4 nodes, hot at 10x its limit, steady unharmed, no view changes"
