#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz for longer than ctest does, and prints their figures.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s each, every target)
#   tools/fuzz.sh 120 frame tx                         (targets: names of tests/fuzz/*_fuzz.cc)
#
# Installs clang and libFuzzer if missing (apt-get, only then), configures build-fuzz with
# clang and -DNODE_FUZZ=ON (ASan + UBSan + coverage on our code), builds the targets, and runs
# each one on a fresh copy of its seed corpus (tests/fuzz/corpus/<target>/) in
# fuzz-results/<target>/corpus with -max_total_time. A crash does not end a target's run: the
# input is kept as fuzz-results/<target>/crash-* (leak-*, timeout-*, oom-*) and fuzzing resumes
# for the rest of the time. Prints, and writes to fuzz-results/summary.md, one row per target:
# execs, execs/s, seconds, crashes, corpus size. Exit status 1 if any target crashed.
# Env: BUILD_DIR (build-fuzz), RESULTS (fuzz-results), JOBS (2), FUZZ_ARGS (extra libFuzzer flags, e.g.
# "-len_control=0 -max_len=2048" for longer consensus event sequences), SKIP_BUILD=1 (run the
# binaries already in BUILD_DIR; no install, configure or build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_TARGET=${1:-60}
shift || true
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}
RESULTS=${RESULTS:-$ROOT/fuzz-results}

if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=()
  for f in tests/fuzz/*_fuzz.cc; do
    n=$(basename "$f" .cc)
    TARGETS+=("${n%_fuzz}")
  done
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # clang + libFuzzer runtime (Debian: libclang-rt-dev), installed only when missing.
  missing=()
  for p in clang libclang-rt-dev; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fuzz: installing ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  bash tools/install-deps.sh >/dev/null

  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DNODE_FUZZ=ON -DNODE_BUILD_BENCHMARKS=OFF >/dev/null
  ninja -C "$BUILD_DIR" -j "$JOBS" $(printf 'fuzz_%s ' "${TARGETS[@]}")
fi

mkdir -p "$RESULTS"
rows=()
any_crash=0
for t in "${TARGETS[@]}"; do
  bin=$BUILD_DIR/tests/fuzz_$t
  out=$RESULTS/$t
  rm -rf "$out"
  mkdir -p "$out/corpus"
  cp tests/fuzz/corpus/"$t"/* "$out/corpus/"
  execs=0
  start=$(date +%s.%N)
  deadline=$(( $(date +%s) + SECONDS_PER_TARGET ))
  run=0
  while :; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -ge 1 ] || break
    run=$((run + 1))
    log=$out/run$run.log
    set +e
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$left" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$out/" ${FUZZ_ARGS:-} "$out/corpus" >"$log" 2>&1
    rc=$?
    set -e
    n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
    if [ -z "$n" ]; then  # died without final stats: take the last status line
      n=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    fi
    execs=$((execs + ${n:-0}))
    [ "$rc" -eq 0 ] && break
    if [ "$run" -ge 20 ]; then break; fi  # a target that crashes at once: stop retrying
  done
  end=$(date +%s.%N)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}')
  crashes=$(find "$out" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  [ "$crashes" -eq 0 ] || any_crash=1
  files=$(find "$out/corpus" -type f | wc -l)
  kb=$(du -sk --apparent-size "$out/corpus" | awk '{print $1}')
  rate=$(awk -v e="$execs" -v s="$secs" 'BEGIN{printf "%.0f", (s > 0 ? e / s : 0)}')
  rows+=("| $t | $execs | $rate | $secs | $crashes | $files files, $kb KiB |")
  echo "fuzz: $t: $execs execs in $secs s, $crashes crashes (logs: $out/run*.log)"
done

{
  echo "| target | execs | execs/s | seconds | crashes | corpus |"
  echo "|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$RESULTS/summary.md"
exit "$any_crash"
