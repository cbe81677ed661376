#!/usr/bin/env bash
# Tests of tools/localnet, registered with ctest in tests/CMakeLists.txt (block "# localnet").
#
#   localnet_test.sh usage LOCALNET BUILD_DIR    command parsing and config generation (--dry-run),
#                                                configs checked by `noded --check` if noded exists
#   localnet_test.sh cluster LOCALNET BUILD_DIR  4 real nodes, 2 partitions: up, status, blocks,
#                                                kill + restart one node, heights keep growing, down
#   localnet_test.sh live LOCALNET BUILD_DIR     4 real nodes: a partition created on all of them
#                                                with nodectl --admins commits; refusals; stopped
#                                                on one node (the others go on) across a restart;
#                                                started, it catches up; stopped and removed on all
#
# Exit 0 pass, 1 fail, 77 skipped (cluster: no noded built yet). NODED, NODECTL and TXSEND override
# the binaries' paths. Every wait is bounded; the cluster is torn down on every exit path.
set -uo pipefail

mode=${1:?usage: localnet_test.sh usage|cluster|live LOCALNET BUILD_DIR}
localnet=${2:?}
bin=${3:?}
noded=${NODED:-$bin/runtime/noded}
nodectl=${NODECTL:-$bin/tools/nodectl}
txsend=${TXSEND:-$bin/tests/localnet_txsend}
py=/usr/bin/python3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/localnet_test.XXXXXX")
net=$tmp/net
started=0
cleanup() {
  if [ "$started" = 1 ]; then "$localnet" down --dir "$net" --timeout 10 >/dev/null 2>&1; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [ "$started" = 1 ]; then
    "$localnet" status --dir "$net" >&2 2>&1
    for log in "$net"/node*/noded.log; do
      [ -f "$log" ] && { echo "--- last lines of $log" >&2; tail -n 15 "$log" >&2; }
    done
  fi
  exit 1
}
pass() { echo "ok: $*"; }

# expect CODE CMD...: runs CMD, fails unless it exits CODE; its output is left in $out.
expect() {
  local want=$1
  shift
  out=$("$@" 2>&1)
  local rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want; output: $out"
}

json() {  # json FILE EXPR: evaluates a Python expression over the JSON object `j` in FILE
  "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

usage_tests() {
  expect 0 "$localnet" --help
  local help=$out
  for cmd in up status down kill stop restart wait-ready addrs logs ctl; do
    [[ $help == *"$cmd"* ]] || fail "--help does not mention $cmd"
    expect 0 "$localnet" "$cmd" --help
  done
  expect 2 "$localnet"
  expect 2 "$localnet" bogus
  expect 2 "$localnet" up
  expect 2 "$localnet" up four
  expect 2 "$localnet" addrs gossip
  expect 1 "$localnet" status --dir "$tmp/none"
  [[ $out == *"no cluster"* ]] || fail "status without a cluster: $out"
  expect 1 "$localnet" up 0 --dir "$tmp/zero" --dry-run
  pass "usage and usage errors"

  cat >"$tmp/extra.conf" <<'EOF'
# Node-wide settings come first.
resources { cpu_workers: 2 }
[partition *]
consensus { batch_timeout_ms: 20 }
[partition hot]
pool { max_txs: 5000 }
[node 3]
client_max_streams: 77
EOF
  expect 0 "$localnet" up 4 --partitions 2 --dir "$net" --base-port 0 --dry-run \
    --config-extra "$tmp/extra.conf" --noded "$noded" --nodectl "$nodectl"
  [ "$(json "$net/localnet.json" 'j["n"]')" = 4 ] || fail "localnet.json n"
  [ "$(json "$net/localnet.json" '",".join(p["name"] for p in j["partitions"])')" = hot,steady ] ||
    fail "partition names"
  local ports keys
  ports=$(json "$net/localnet.json" 'len({v for n in j["nodes"] for v in n["ports"].values()})')
  [ "$ports" = 16 ] || fail "want 16 distinct ports, got $ports"
  keys=$(json "$net/localnet.json" '" ".join(n["public_key_hex"] for n in j["nodes"])')
  for i in 1 2 3 4; do
    local d=$net/node$i conf=$net/node$i/noded.conf own
    for f in "$conf" "$d/node.key" "$d/admin.token"; do [ -s "$f" ] || fail "missing $f"; done
    [ -d "$d/data" ] || fail "missing $d/data"
    [ "$(stat -c %a "$d/node.key")" = 600 ] || fail "$d/node.key not mode 600"
    [ "$(stat -c %a "$d/admin.token")" = 600 ] || fail "$d/admin.token not mode 600"
    [ "$(grep -c '^peers {' "$conf")" = 3 ] || fail "$conf: want 3 peers"
    own=$(echo "$keys" | cut -d' ' -f"$i")
    ! grep -q "$own" "$conf" || fail "$conf lists its own key"
    for other in $keys; do
      [ "$other" = "$own" ] || grep -q "$other" "$conf" || fail "$conf misses peer key $other"
    done
    local admin
    admin=$(json "$net/localnet.json" "j['nodes'][$i-1]['ports']['admin']")
    grep -q "admin_listen: \"127.0.0.1:$admin\"" "$conf" || fail "$conf: admin port"
    [ "$(grep -c 'batch_timeout_ms: 20' "$conf")" = 2 ] || fail "$conf: [partition *] not in both"
    [ "$(grep -c 'max_txs: 5000' "$conf")" = 1 ] || fail "$conf: [partition hot] not once"
    grep -q '^resources { cpu_workers: 2 }' "$conf" || fail "$conf: [node] fragment"
    [ "$(grep -c '^client_max_streams: 77' "$conf")" = "$([ "$i" = 3 ] && echo 1 || echo 0)" ] ||
      fail "$conf: [node 3] fragment"
    if [ -x "$noded" ]; then
      expect 0 "$noded" --check --config "$conf"
    fi
  done
  pass "dry run: 4 configs, keys, tokens, peers, extras$([ -x "$noded" ] && echo ', noded --check')"

  expect 0 "$localnet" addrs client --dir "$net"
  [[ $out =~ ^127\.0\.0\.1:[0-9]+(,127\.0\.0\.1:[0-9]+){3}$ ]] || fail "addrs: $out"
  expect 0 "$localnet" status --dir "$net"
  [ "$(echo "$out" | grep -c ' no ')" = 4 ] || fail "status of a stopped cluster: $out"
  expect 0 "$localnet" down --dir "$net"
  expect 1 "$localnet" kill 5 --dir "$net"
  pass "addrs, status and down of a stopped cluster"

  # Re-running keeps the keys; another shape needs --clean.
  expect 0 "$localnet" up 4 --dir "$net" --base-port 0 --dry-run --noded "$noded"
  local keys2
  keys2=$(json "$net/localnet.json" '" ".join(n["public_key_hex"] for n in j["nodes"])')
  [ "$keys2" = "$keys" ] || fail "re-running up changed the keys"
  expect 1 "$localnet" up 3 --partitions 3 --dir "$net" --dry-run --noded "$noded"
  [[ $out == *"--clean"* ]] || fail "shape change without --clean: $out"
  expect 0 "$localnet" up 3 --partitions 3 --dir "$net" --base-port 0 --dry-run --clean \
    --noded "$noded"
  [ "$(json "$net/localnet.json" '",".join(p["name"] for p in j["partitions"])')" = p1,p2,p3 ] ||
    fail "3 partitions are not p1..p3"
  [ ! -e "$net/node4" ] || fail "--clean left node4"
  pass "idempotent re-run, --clean"

  printf '[partition nope]\npool { max_txs: 1 }\n' >"$tmp/bad.conf"
  expect 1 "$localnet" up 1 --dir "$tmp/bad" --dry-run --config-extra "$tmp/bad.conf"
  [[ $out == *"bad.conf:1: unknown partition"* ]] || fail "unknown partition: $out"
  printf '[node 2]\nclient_max_streams: 5\n' >"$tmp/bad.conf"
  expect 1 "$localnet" up 1 --dir "$tmp/bad" --dry-run --config-extra "$tmp/bad.conf"
  [[ $out == *"[node 2]: there are nodes 1 to 1"* ]] || fail "node out of range: $out"
  mkdir -p "$tmp/other" && touch "$tmp/other/precious.txt"
  expect 1 "$localnet" up 1 --dir "$tmp/other" --dry-run
  [ -e "$tmp/other/precious.txt" ] || fail "up touched a foreign directory"
  pass "bad --config-extra and foreign directory refused"
}

# status_json: `localnet status --json` into $tmp/status.json.
status_json() {
  "$localnet" status --json --dir "$net" >"$tmp/status.json" || fail "status --json"
}

# min_height PART [NODES]: smallest height of PART over NODES (default all live nodes).
min_height() {
  status_json
  "$py" - "$tmp/status.json" "$1" "${2:-}" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
nodes = [int(x) for x in sys.argv[3].split(",")] if sys.argv[3] else None
hs = [p["height"] for n in j["nodes"] if n["alive"] and (nodes is None or n["node"] in nodes)
      for p in n["partitions"] if p["name"] == sys.argv[2]]
print(min(hs) if hs else -1)
EOF
}

# send PART_ID NODE COUNT: submits COUNT transactions through NODE's client port.
send() {
  local addr
  addr=$("$localnet" addrs client --dir "$net" | cut -d, -f"$2")
  expect 0 "$txsend" --target "$addr" --partition-id "$1" --count "$3" --timeout-ms 30000
}

# wait_height PART MIN NODES SECONDS: waits until every node in NODES has PART at height >= MIN.
wait_height() {
  local deadline=$((SECONDS + $4)) h
  while :; do
    h=$(min_height "$1" "$3")
    [ "$h" -ge "$2" ] && return 0
    [ $SECONDS -ge $deadline ] && fail "$1 on nodes $3 at height $h after $4 s, want >= $2"
    sleep 0.5
  done
}

cluster_tests() {
  if [ ! -x "$noded" ]; then
    echo "SKIP: $noded does not exist yet (the runtime issue builds it)"
    exit 77
  fi
  [ -x "$nodectl" ] || { echo "SKIP: no nodectl at $nodectl"; exit 77; }
  [ -x "$txsend" ] || { echo "SKIP: no localnet_txsend at $txsend"; exit 77; }

  started=1
  expect 0 "$localnet" up 4 --partitions 2 --dir "$net" --base-port 0 --timeout 60 \
    --noded "$noded" --nodectl "$nodectl"
  pass "up 4 --partitions 2: ready"
  expect 1 "$localnet" up 4 --dir "$net" --noded "$noded" --nodectl "$nodectl"
  [[ $out == *"already running"* ]] || fail "second up: $out"
  status_json
  [ "$(json "$tmp/status.json" 'sum(n["alive"] and n["ready"] for n in j["nodes"])')" = 4 ] ||
    fail "status --json: not 4 live ready nodes: $(cat "$tmp/status.json")"
  expect 0 "$localnet" status --dir "$net"
  [ "$(echo "$out" | grep -c NORMAL)" = 4 ] || fail "status table: $out"
  pass "second up refused; status shows 4 ready nodes"

  local h1 h2 hs
  send 1 1 20
  send 2 1 20
  h1=$(min_height hot 1)
  hs=$(min_height steady 1)
  [ "$h1" -ge 1 ] && [ "$hs" -ge 1 ] || fail "no blocks after 20 txs each: hot $h1 steady $hs"
  wait_height hot "$h1" 1,2,3,4 20
  wait_height steady "$hs" 1,2,3,4 20
  pass "blocks committed on every node (hot $h1, steady $hs)"

  expect 0 "$localnet" kill 2 --dir "$net"
  status_json
  [ "$(json "$tmp/status.json" 'j["nodes"][1]["alive"]')" = False ] || fail "node 2 still alive"
  send 1 1 20
  send 2 3 20
  h2=$(min_height hot 1,3,4)
  [ "$h2" -gt "$h1" ] || fail "hot did not grow with node 2 down: $h1 -> $h2"
  pass "node 2 killed; 3 nodes keep committing (hot $h1 -> $h2)"

  expect 0 "$localnet" restart 2 --dir "$net" --timeout 60
  send 1 4 20
  send 2 4 20
  local h3 hs3
  h3=$(min_height hot 1,3,4)
  hs3=$(min_height steady 1,3,4)
  [ "$h3" -gt "$h2" ] || fail "hot did not grow after the restart: $h2 -> $h3"
  wait_height hot "$h3" 1,2,3,4 30
  wait_height steady "$hs3" 1,2,3,4 30
  expect 0 "$localnet" wait-ready --dir "$net" --timeout 30
  pass "node 2 restarted, ready, caught up (hot $h3, steady $hs3 on all 4)"

  expect 0 "$localnet" down --dir "$net" --timeout 15
  [[ $out != *SIGKILL* ]] || fail "down needed SIGKILL: $out"
  started=0
  for i in 1 2 3 4; do
    grep -q "starting node $i" "$net/node$i/noded.log" || fail "node $i log lacks the start line"
  done
  status_json
  [ "$(json "$tmp/status.json" 'sum(n["alive"] for n in j["nodes"])')" = 0 ] ||
    fail "nodes alive after down"
  pass "down: every node exited on SIGTERM"
}

# Partitions created, stopped, started and removed live, through nodectl as an operator would.
live_tests() {
  if [ ! -x "$noded" ]; then
    echo "SKIP: $noded does not exist yet"
    exit 77
  fi
  [ -x "$nodectl" ] || { echo "SKIP: no nodectl at $nodectl"; exit 77; }
  [ -x "$txsend" ] || { echo "SKIP: no localnet_txsend at $txsend"; exit 77; }

  started=1
  expect 0 "$localnet" up 4 --partitions 1 --dir "$net" --base-port 0 --timeout 60 \
    --noded "$noded" --nodectl "$nodectl"
  local admins tokens i
  admins=$("$localnet" addrs admin --dir "$net")
  tokens=$net/node1/admin.token,$net/node2/admin.token,$net/node3/admin.token,$net/node4/admin.token
  # ctl I ARGS: nodectl against node I; all ARGS: against every node (--admins).
  ctl() {
    local who=$1
    shift
    if [ "$who" = all ]; then
      "$nodectl" --timeout-ms 60000 "$@" --admins "$admins" --token-files "$tokens"
    else
      "$nodectl" --timeout-ms 60000 --admin "$(echo "$admins" | cut -d, -f"$who")" \
        --token-file "$net/node$who/admin.token" "$@"
    fi
  }
  # A replica that missed blocks syncs when it sees the others' next stable checkpoint: a short
  # checkpoint interval lets the test's few blocks reach one.
  local orders='id: 9 name: "orders" consensus { batch_timeout_ms: 10 checkpoint_interval: 2 }
                share { weight: 2 }'

  expect 0 ctl all create-partition --config "$orders"
  [ "$(echo "$out" | grep -c 'created partition orders (9)')" = 4 ] || fail "create on 4: $out"
  send 9 1 20
  local h1 h2 h3
  h1=$(min_height orders 1)
  [ "$h1" -ge 1 ] || fail "orders made no block after 20 txs"
  wait_height orders "$h1" 1,2,3,4 30
  pass "orders created on all 4 nodes with one nodectl --admins call; commits (height $h1)"

  expect 1 ctl 1 create-partition --config "$orders"
  [[ $out == *ALREADY_EXISTS*"id 9"* ]] || fail "second create: $out"
  expect 1 ctl 1 create-partition --config 'id: 10 name: "bad" pool { max_txs: 10 max_per_sender: 20 }'
  [[ $out == *INVALID_ARGUMENT*"partitions[bad].pool.max_per_sender"* ]] || fail "bad config: $out"
  expect 1 ctl 1 remove-partition orders
  [[ $out == *FAILED_PRECONDITION*"stop it first"* ]] || fail "remove running: $out"
  expect 1 ctl 1 stop-partition nosuch
  [[ $out == *NOT_FOUND* ]] || fail "stop unknown: $out"
  pass "refused: id in use, bad config (field named), removing a running one, unknown"

  expect 0 ctl 4 stop-partition orders
  [[ $out == *STOPPED* ]] || fail "stop on node 4: $out"
  send 9 1 20
  h2=$(min_height orders 1,2,3)
  [ "$h2" -gt "$h1" ] || fail "orders did not grow with node 4 stopped: $h1 -> $h2"
  expect 0 "$localnet" restart 4 --dir "$net" --timeout 60
  status_json
  [ "$(json "$tmp/status.json" '[p["consensus_state"] for p in j["nodes"][3]["partitions"] if p["name"] == "orders"]')" = "['STOPPED']" ] ||
    fail "orders not STOPPED on node 4 after its restart: $(cat "$tmp/status.json")"
  pass "stopped on node 4: the other 3 commit ($h1 -> $h2); still stopped after a restart"

  expect 0 ctl 4 start-partition orders
  # Node 4 syncs when it sees the others' next stable checkpoint; its peers may still be
  # reconnecting after its restart, so they keep committing (bounded) until it has caught up.
  local round
  for round in 1 2 3 4 5 6 7 8 9 10; do
    send 9 $((round % 3 + 1)) 5
    h3=$(min_height orders 1,2,3)
    [ "$(min_height orders 4)" -ge "$h3" ] && break
    sleep 2
    [ "$(min_height orders 4)" -ge "$h3" ] && break
  done
  [ "$h3" -gt "$h2" ] || fail "orders did not grow after node 4 started it: $h2 -> $h3"
  wait_height orders "$h3" 4 30
  send 9 4 10
  pass "started on node 4: caught up ($h2 -> $h3) and takes clients again"

  expect 0 ctl all stop-partition orders
  expect 0 ctl all remove-partition orders --delete-data
  [ "$(echo "$out" | grep -c 'data deleted')" = 4 ] || fail "remove on 4: $out"
  for i in 1 2 3 4; do
    [ ! -e "$net/node$i/data/partition-9" ] || fail "node $i kept partition-9 after --delete-data"
  done
  expect 0 "$localnet" restart 2 --dir "$net" --timeout 60
  status_json
  [ "$(json "$tmp/status.json" 'sum(p["name"] == "orders" for n in j["nodes"] for p in n["partitions"])')" = 0 ] ||
    fail "orders listed after removal: $(cat "$tmp/status.json")"
  send 1 2 20
  pass "stopped and removed on all 4 with its data; gone after a restart; hot still commits"

  expect 0 "$localnet" down --dir "$net" --timeout 15
  started=0
}

case "$mode" in
  usage) usage_tests ;;
  cluster) cluster_tests ;;
  live) live_tests ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
echo "PASS: localnet $mode"
