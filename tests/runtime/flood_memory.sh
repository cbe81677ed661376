#!/usr/bin/env bash
# Memory under flood: one noded with resources.memory_bytes set, loadgen offering 10x the
# partition's admitted rate for DURATION seconds; samples noded's VmRSS every second and prints
# the maximum against the configured budget. Exit 0 iff max RSS <= budget + SLACK_MB.
#
#   tests/runtime/flood_memory.sh [BUILD_DIR]      (default: build)
#   env: BUDGET_MB (256) ADMITTED (1000 tx/s) FACTOR (10) DURATION (60) TX_BYTES (200) SLACK_MB (256)
#        UNLIMITED=1: no rate stage, so only the pool / memory limits hold the flood back (the
#        harder case: the pool fills up to its share of the budget); ADMITTED then only sets the
#        offer (ADMITTED * FACTOR).
#        KEYS (per_sender): loadgen's keys= (per_sender: each sender overwrites one key, so the
#        state stays a fixed size; unique: every committed tx adds a key and its value to the
#        state, which lives on disk behind bounded caches, so RSS should not grow with it).
#
# Not run by ctest (it takes a minute and a whole machine); the figure goes to docs/RELIABILITY.md.
set -euo pipefail

BUILD=${1:-build}
BUDGET_MB=${BUDGET_MB:-256}
ADMITTED=${ADMITTED:-1000}
FACTOR=${FACTOR:-10}
DURATION=${DURATION:-60}
TX_BYTES=${TX_BYTES:-200}
SLACK_MB=${SLACK_MB:-256}
KEYS=${KEYS:-per_sender}
NODED=$BUILD/runtime/noded
LOADGEN=$BUILD/tools/loadgen
[[ -x $NODED && -x $LOADGEN ]] || { echo "need $NODED and $LOADGEN" >&2; exit 2; }

if [[ ${UNLIMITED:-0} == 1 ]]; then RATE="unlimited: true"; else
  RATE="rate_per_second: $ADMITTED burst: $ADMITTED"; fi
DIR=$(mktemp -d /tmp/flood_memory.XXXXXX)
BASE=$((20000 + RANDOM % 30000))
CLIENT=127.0.0.1:$BASE
ADMIN=127.0.0.1:$((BASE + 1))
cat >"$DIR/node.textproto" <<EOF
data_dir: "$DIR/data"
key_file: "$DIR/node.key"
p2p_listen: "127.0.0.1:$((BASE + 2))"
client_listen: "$CLIENT"
admin_listen: "$ADMIN"
metrics_listen: ""
resources { cpu_workers: 2 memory_bytes: $((BUDGET_MB << 20)) }
partitions {
  id: 1
  name: "hot"
  interceptor {
    stages { name: "in_flight" concurrency { max_in_flight: 1024 } }
    stages { name: "health" gate { predicate: "consensus_normal" } }
    stages { name: "pool" gate { predicate: "pool_below_high_water" } }
    stages { name: "rate" rate { $RATE } }
  }
}
EOF

"$NODED" --config "$DIR/node.textproto" >"$DIR/noded.log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status" 2>/dev/null || echo 0; }
for _ in $(seq 1 100); do  # up to 10 s for the ports to open
  (exec 3<>"/dev/tcp/127.0.0.1/$BASE") 2>/dev/null && break
  sleep 0.1
done
IDLE_KB=$(rss_kb)

OFFER=$((ADMITTED * FACTOR))
"$LOADGEN" --targets "$CLIENT" --duration "${DURATION}s" --drain 5s --tx-bytes "$TX_BYTES" \
  --presign 20000 --scenario "hot:rate=$OFFER,keys=$KEYS" --quiet >"$DIR/loadgen.out" 2>&1 &
LG=$!
MAX_KB=$IDLE_KB
SAMPLES=0
while kill -0 "$LG" 2>/dev/null && ((SAMPLES < DURATION + 60)); do
  kb=$(rss_kb)
  ((kb > MAX_KB)) && MAX_KB=$kb
  SAMPLES=$((SAMPLES + 1))
  kill -0 "$PID" 2>/dev/null || { echo "noded died under flood" >&2; tail -20 "$DIR/noded.log" >&2; exit 1; }
  sleep 1
done
wait "$LG" || true
tail -15 "$DIR/loadgen.out"

MAX_MB=$((MAX_KB / 1024))
printf '\n| budget (memory_bytes) | offered | keys | rate stage | idle RSS | max RSS | max RSS - budget | samples |\n'
printf '|---|---|---|---|---|---|---|---|\n'
printf '| %d MiB | %d tx/s x %d B | %s | %s | %d MiB | %d MiB | %+d MiB | %d |\n' "$BUDGET_MB" "$OFFER" "$TX_BYTES" "$KEYS" \
  "$([[ ${UNLIMITED:-0} == 1 ]] && echo unlimited || echo "$ADMITTED tx/s")" $((IDLE_KB / 1024)) "$MAX_MB" $((MAX_MB - BUDGET_MB)) "$SAMPLES"
if ((MAX_MB > BUDGET_MB + SLACK_MB)); then
  echo "FAIL: max RSS ${MAX_MB} MiB > budget ${BUDGET_MB} MiB + ${SLACK_MB} MiB" >&2
  exit 1
fi
echo "OK: max RSS within budget + ${SLACK_MB} MiB"
