#!/usr/bin/python3
"""bench_ab: one scenario of tools/bench_scenarios.py against two builds, in alternating pairs.

  tools/bench_ab.py --snapshot DIR           copy build/'s noded, loadgen and nodectl into DIR
                                             (the layout BUILD_DIR expects), e.g. before a change
  tools/bench_ab.py [--pairs N] [--out DIR] A B SCENARIO [SCENARIO ...]
                                             A and B: build directories, or LABEL=DIR

Pair i runs every SCENARIO on A then B when i is odd and on B then A when it is even, so a slow
spell of the host falls on both builds and the order does not favour either. Each run is
`tools/bench_scenarios.py SCENARIO` with BUILD_DIR set to the build and BENCH_OUT to
<out>/<label>-<i>; its output goes to <out>/<label>-<i>.log. The scenario's own environment (for
example SCALE_COUNTS=1,16 SCALE_IDLE=0) passes through. At the end, for every headline figure of
the RESULT lines (the table METRICS below), it prints each pair's A and B and their ratio, the
median and the range of each side, the median of the per-pair ratios and how many pairs favour B.

On a shared 2-core machine one sitting can move a figure by more than a change does (see
docs/BENCHMARKS.md, "Debts forgiven per partition or when the pool drains", its A/A run): read
the ranges, not only the medians, and run more pairs, or a second sitting, before concluding.

Exit: 0 every run finished, 1 a run failed (the summary covers the runs before it), 2 usage.
Standard library only.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(ROOT, "tools", "bench_scenarios.py")

# For each scenario, its headline figures: (figure, regex over one of its RESULT lines with the
# value as the only group, whether lower is better: None when neither is). A figure missing from
# a run's output is left out of that pair.
METRICS = {
    "scale": [  # RESULT scale 16 vs 1 partitions: 16: ... worst p99 472 ms ...; baseline 1: ...
        ("worst p99 ms, most partitions",
         r"^RESULT scale .*?partitions: \d+: .*?p99 (\d+) ms", True),
        ("worst p99 ms, 1 partition", r"^RESULT scale .*?baseline 1: .*?p99 (\d+) ms", True),
        ("p99 ratio", r"^RESULT scale .*?ratio committed [\d.]+, p99 ([\d.]+)", True),
        ("CPU ratio", r"^RESULT scale .*?, p99 [\d.]+, CPU ([\d.]+)", True),
        ("consensus-lane queueing ms, most partitions", r"^RESULT scale .*?delay ([\d.]+) /", True),
    ],
    "cpu": [  # RESULT cpu per tx, at 800 tx/s: ...; RESULT cpu per tx, saturated (...): ...
        ("us per tx at the modest rate", r"^RESULT cpu per tx, at \d+ tx/s: (\d+) us", True),
        ("ratio to a verify at the modest rate",
         r"^RESULT cpu per tx, at .*?ratio ([\d.]+)x", True),
        ("us per tx saturated", r"^RESULT cpu per tx, saturated .*?: (\d+) us", True),
        ("p99 ms saturated", r"^RESULT cpu per tx, saturated .*?p99 (\d+) ms", True),
        ("committed tx/s saturated", r"^RESULT cpu per tx, saturated .*?ted, (\d+) tx/s", False),
    ],
    "isolation": [("steady p99 flooded / idle", r"^RESULT isolation: .*?ratio p99 ([\d.]+)", True)],
    "admission": [  # RESULT node-wide admission, ...: on: quiet partitions' p99 flood/idle: ...
        ("quiet p99 flood / idle, median", r"^RESULT node-wide .*?: on: .*?median ([\d.]+)", True),
        ("quiet p99 flood / idle, worst", r"^RESULT node-wide .*?: on: .*?worst ([\d.]+)", True),
        ("flooded partition's CPU / allocation, every node's median",
         r"^RESULT node-wide .*?: on: .*?every node's median ([\d.]+)", None),
    ],
    "goodput": [
        ("goodput / C", r"^RESULT goodput \(flow control on.*?; ratio ([\d.]+)", False),
        ("C / Ed25519 bound", r"^RESULT saturation vs the Ed25519 bound.*?ratio ([\d.]+)", False),
    ],
}


def run_order(pairs, a, b):
    """[(pair, side)] in running order: A first in odd pairs, B first in even ones."""
    order = []
    for i in range(1, pairs + 1):
        first, second = (a, b) if i % 2 == 1 else (b, a)
        order += [(i, first), (i, second)]
    return order


def figures(scenario, output):
    """{figure: value} from one run's output, for the METRICS of `scenario`."""
    found = {}
    lines = [l for l in output.splitlines() if l.startswith("RESULT")]
    for name, pattern, _ in METRICS.get(scenario, []):
        for line in lines:
            m = re.search(pattern, line)
            if m:
                found[name] = float(m.group(1))
                break
    return found


def summarize(values_a, values_b, lower_is_better):
    """values_*: {pair: value}. The figures of one metric over the pairs that have both sides."""
    pairs = sorted(set(values_a) & set(values_b))
    if not pairs:
        return None
    ratios = {p: values_b[p] / values_a[p] for p in pairs if values_a[p] != 0}
    a = [values_a[p] for p in pairs]
    b = [values_b[p] for p in pairs]
    favour = None
    if lower_is_better is not None:
        favour = sum(1 for p in pairs if values_b[p] != values_a[p]
                     and (values_b[p] < values_a[p]) == lower_is_better)
    return {
        "pairs": pairs,
        "median_a": statistics.median(a), "range_a": (min(a), max(a)),
        "median_b": statistics.median(b), "range_b": (min(b), max(b)),
        "ratios": ratios,  # per pair; none where A is 0
        "median_ratio": statistics.median(ratios.values()) if ratios else None,
        "favour_b": favour,
    }


def fmt(v):
    return ("%.0f" % v) if abs(v) >= 100 else ("%.2f" % v)


def report(results, scenario, a, b):
    """results: {(pair, label): {figure: value}}. Lines of text for one scenario."""
    out = []
    for name, _, lower in METRICS.get(scenario, []):
        va = {p: f[name] for (p, l), f in results.items() if l == a and name in f}
        vb = {p: f[name] for (p, l), f in results.items() if l == b and name in f}
        s = summarize(va, vb, lower)
        if s is None:
            continue
        out.append("%s: %s" % (scenario, name))
        for p in s["pairs"]:
            ratio = ("%.2f" % s["ratios"][p]) if p in s["ratios"] else "-"
            out.append("  pair %d: %s %s, %s %s, %s/%s %s" % (p, a, fmt(va[p]), b, fmt(vb[p]), b,
                                                              a, ratio))
        line = "  median %s %s (%s-%s), %s %s (%s-%s)" % (
            a, fmt(s["median_a"]), fmt(s["range_a"][0]), fmt(s["range_a"][1]),
            b, fmt(s["median_b"]), fmt(s["range_b"][0]), fmt(s["range_b"][1]))
        if s["median_ratio"] is not None:
            line += "; per-pair %s/%s median %.2f" % (b, a, s["median_ratio"])
        if s["favour_b"] is not None:
            line += "; %s better in %d of %d pairs (%s is better)" % (
                b, s["favour_b"], len(s["pairs"]), "lower" if lower else "higher")
        out.append(line)
    return out


def parse_side(arg):
    label, sep, path = arg.partition("=")
    if not sep:
        path = arg
        label = os.path.basename(os.path.normpath(arg))
    return label, os.path.abspath(path)


def snapshot(dest):
    build = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))
    for rel in ("runtime/noded", "tools/loadgen", "tools/nodectl"):
        src = os.path.join(build, rel)
        if not os.path.exists(src):
            sys.exit("bench_ab: %s not built (run tools/build.sh)" % src)
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    print("bench_ab: %s holds a copy of %s's noded, loadgen and nodectl" % (dest, build))


def main(argv):
    parser = argparse.ArgumentParser(
        prog="tools/bench_ab.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshot", metavar="DIR", help="copy the current build into DIR, exit")
    parser.add_argument("--pairs", type=int, default=4, help="alternating pairs (default 4)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-results", "ab"),
                        help="where each run's log and reports go")
    parser.add_argument("sides", nargs="*", metavar="A B SCENARIO")
    args = parser.parse_args(argv)
    if args.snapshot:
        snapshot(os.path.abspath(args.snapshot))
        return 0
    if len(args.sides) < 3 or args.pairs < 1:
        parser.print_usage(sys.stderr)
        print("bench_ab: need A, B, at least one scenario and --pairs >= 1", file=sys.stderr)
        return 2
    (a, dir_a), (b, dir_b) = parse_side(args.sides[0]), parse_side(args.sides[1])
    if a == b:
        print("bench_ab: both builds are labelled %r; use LABEL=DIR" % a, file=sys.stderr)
        return 2
    for label, path in ((a, dir_a), (b, dir_b)):
        if not os.path.exists(os.path.join(path, "runtime", "noded")):
            print("bench_ab: %s (%s) has no runtime/noded; see --snapshot" % (label, path),
                  file=sys.stderr)
            return 2
    scenarios = args.sides[2:]
    dirs = {a: dir_a, b: dir_b}
    os.makedirs(args.out, exist_ok=True)
    results = {scen: {} for scen in scenarios}
    rc = 0
    for pair, label in run_order(args.pairs, a, b):
        env = dict(os.environ, BUILD_DIR=dirs[label],
                   BENCH_OUT=os.path.join(args.out, "%s-%d" % (label, pair)))
        log = os.path.join(args.out, "%s-%d.log" % (label, pair))
        print("bench_ab: pair %d, %s: %s" % (pair, label, " ".join(scenarios)), flush=True)
        proc = subprocess.run([sys.executable, SCENARIOS] + scenarios, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with open(log, "w") as f:
            f.write(proc.stdout)
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT"):
                print("  " + line[:200], flush=True)
        if proc.returncode != 0:
            print("bench_ab: pair %d on %s failed (exit %d); see %s" % (
                pair, label, proc.returncode, log), file=sys.stderr)
            rc = 1
            break
        for scen in scenarios:
            results[scen][(pair, label)] = figures(scen, proc.stdout)
    print()
    for scen in scenarios:
        if scen not in METRICS:
            print("%s: no headline figures known to bench_ab; the RESULT lines above and the logs "
                  "in %s have them" % (scen, args.out))
        for line in report(results[scen], scen, a, b):
            print(line)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
