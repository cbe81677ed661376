#!/usr/bin/env bash
# Runs the Google Benchmark binaries (tests/bench/*_bench.cc) on the optimized (-O2) build and keeps their
# output under bench-results/<date>/ (text and JSON). The figures in docs/BENCHMARKS.md come
# from this script.
#   tools/bench.sh                    # every benchmark
#   tools/bench.sh token_bucket spill # only bench_token_bucket and bench_spill_fifo...
# Then (without a filter) the headline scenarios against real 4-node localnets
# (tools/bench_scenarios.py, about 9 minutes on 2 cores).
# Environment: BUILD_DIR (default build, shared with tools/test.sh), BENCH_ARGS (extra benchmark
# flags), BENCH_SCENARIOS (0 skips the scenarios; "goodput isolation" runs only those).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/build.sh
build_dir=${BUILD_DIR:-build}

out="bench-results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
{
  echo "date: $(date -u)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') x $(nproc)"
  echo "kernel: $(uname -r)"
  echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
  echo "disk: $(df -h . | awk 'NR==2 {print $1, $2}')"
} | tee "$out/machine.txt"

shopt -s nullglob
for bin in "$build_dir"/tests/bench/bench_*; do
  name=$(basename "$bin")
  if [ $# -gt 0 ]; then
    match=0
    for want in "$@"; do [[ "$name" == *"$want"* ]] && match=1; done
    [ $match -eq 1 ] || continue
  fi
  echo "== $name"
  # shellcheck disable=SC2086
  "$bin" --benchmark_out="$out/$name.json" --benchmark_out_format=json ${BENCH_ARGS:-} \
    | tee "$out/$name.txt"
done
if [ $# -eq 0 ] && [ "${BENCH_SCENARIOS:-all}" != 0 ]; then
  echo "== scenarios"
  scen=${BENCH_SCENARIOS:-all}
  [ "$scen" = all ] && scen=
  # shellcheck disable=SC2086
  BENCH_OUT="$out" BUILD_DIR="$build_dir" tools/bench_scenarios.py $scen | tee "$out/scenarios.txt" \
    || echo "scenarios: at least one scenario failed to run (see $out/scenarios.txt)"
fi
echo "results in $out"
