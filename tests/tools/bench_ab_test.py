#!/usr/bin/python3
"""Tests of tools/bench_ab.py: the run order, the figures read from RESULT lines, the summary, and
whole runs against a stand-in for tools/bench_scenarios.py (no cluster)."""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_ab",
                                              os.path.join(ROOT, "tools", "bench_ab.py"))
bench_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_ab)

# RESULT lines as bench_scenarios.py printed them on 2026-12-06 (shortened after the figures).
SCALE = ("RESULT scale 16 vs 1 partitions: 16: 798 tx/s committed (24000 of 24000 offered), worst "
         "p99 472 ms, 0 VC, 1.27 cores; baseline 1: 801 tx/s committed (24000 of 24000), worst p99 "
         "191 ms, 0 VC, 0.91 cores; ratio committed 1.00, p99 2.47, CPU 1.39 (target committed = "
         "offered, 0 VC, p99 <= 2x, CPU <= 1.25x); node 2's consensus-lane mean queueing delay 7.6 "
         "/ 1.7 ms; load 5.07 2.91 2.38")
CPU = ("RESULT cpu per tx, at 800 tx/s: 430 us CPU per committed tx per node (20000 committed, 800 "
       "tx/s; nodes 1.24 cores; p99 386 ms, 0 VC); baseline Ed25519 verify 141.0 us; ratio 3.05x "
       "(target <= 2.0x at 800 tx/s, <= 1.5x saturated)\n"
       "RESULT cpu per tx, saturated (2500 tx/s offered): 190 us CPU per committed tx per node "
       "(62262 committed, 2490 tx/s; nodes 1.52 cores; p99 2847 ms, 0 VC); baseline Ed25519 verify "
       "145.7 us; ratio 1.31x (target <= 2.0x at 800 tx/s, <= 1.5x saturated)")
ISOLATION = ("RESULT isolation: steady flooded: p99 176 ms, 50.0 tx/s; baseline steady hot-idle: "
             "p99 233 ms, 49.5 tx/s; ratio p99 0.75, rate 1.01 (target p99 <= 1.2)")
ADMISSION = ("RESULT node-wide admission, 16 partitions, one flooded (round 1): on: quiet "
             "partitions' p99 flood/idle: median 1.06, worst 1.20 (14 of 15 <= 1.2); 0 VC; "
             "p1 CPU / allocation while cut, median 1.16 (7 samples), every node's median 1.10 "
             "(28 samples)")
GOODPUT = ("RESULT goodput (flow control on, adaptive): 2108 tx/s at 25485 tx/s offered = 10.0x C "
           "(runs: ...); baseline C = 2548 tx/s = max(...); ratio 0.83 (vs the ramp's 5-s peak: "
           "0.91, 10-s: 0.99) (target >= 0.95)\n"
           "RESULT saturation vs the Ed25519 bound (held protocol): C = 2548 tx/s; baseline bound "
           "4364 tx/s; ratio 0.58 (target >= 0.5)")


class FiguresTest(unittest.TestCase):
    def test_each_scenario(self):
        self.assertEqual(bench_ab.figures("scale", "noise\n" + SCALE), {
            "worst p99 ms, most partitions": 472, "worst p99 ms, 1 partition": 191,
            "p99 ratio": 2.47, "CPU ratio": 1.39,
            "consensus-lane queueing ms, most partitions": 7.6})
        self.assertEqual(bench_ab.figures("cpu", CPU), {
            "us per tx at the modest rate": 430, "ratio to a verify at the modest rate": 3.05,
            "us per tx saturated": 190, "p99 ms saturated": 2847,
            "committed tx/s saturated": 2490})
        self.assertEqual(bench_ab.figures("isolation", ISOLATION),
                         {"steady p99 flooded / idle": 0.75})
        self.assertEqual(bench_ab.figures("admission", ADMISSION), {
            "quiet p99 flood / idle, median": 1.06, "quiet p99 flood / idle, worst": 1.20,
            "flooded partition's CPU / allocation, every node's median": 1.10})
        self.assertEqual(bench_ab.figures("goodput", GOODPUT),
                         {"goodput / C": 0.83, "C / Ed25519 bound": 0.58})

    def test_other_scenarios_lines_and_missing_figures(self):
        self.assertEqual(bench_ab.figures("cpu", SCALE + "\n" + ISOLATION), {})
        self.assertEqual(bench_ab.figures("scale", "bench: scale took 71 s"), {})


class SummaryTest(unittest.TestCase):
    def test_run_order_alternates(self):
        self.assertEqual(bench_ab.run_order(3, "a", "b"),
                         [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")])

    def test_lower_is_better(self):
        s = bench_ab.summarize({1: 500, 2: 400, 3: 600}, {1: 450, 2: 440, 3: 300, 4: 1}, True)
        self.assertEqual(s["pairs"], [1, 2, 3])  # pair 4 has no A side
        self.assertEqual(s["median_a"], 500)
        self.assertEqual(s["range_b"], (300, 450))
        self.assertAlmostEqual(s["median_ratio"], 0.9)  # 0.9, 1.1, 0.5
        self.assertEqual(s["favour_b"], 2)

    def test_higher_is_better_ties_and_no_direction(self):
        self.assertEqual(bench_ab.summarize({1: 0.9, 2: 1.0}, {1: 0.95, 2: 1.0}, False)["favour_b"],
                         1)
        self.assertIsNone(bench_ab.summarize({1: 1.1}, {1: 1.0}, None)["favour_b"])
        self.assertIsNone(bench_ab.summarize({1: 1.0}, {2: 1.0}, True))


FAKE = r'''#!/usr/bin/python3
import os, sys
build = os.path.basename(os.environ["BUILD_DIR"])
pair = os.environ["BENCH_OUT"].rsplit("-", 1)[1]
with open(os.environ["FAKE_ORDER"], "a") as f:
    f.write("%s-%s %s\n" % (build, pair, " ".join(sys.argv[1:])))
if os.environ.get("FAKE_FAIL") == build + "-" + pair:
    sys.exit(1)
print("RESULT isolation: steady flooded: p99 1 ms; ratio p99 %s, rate 1.0" %
      {"old": "1.10", "new": "0.90"}[build])
'''


class WholeRunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        for side in ("old", "new"):
            os.makedirs(os.path.join(d, side, "runtime"))
            open(os.path.join(d, side, "runtime", "noded"), "w").close()
        fake = os.path.join(d, "fake_scenarios.py")
        with open(fake, "w") as f:
            f.write(FAKE)
        self.saved = bench_ab.SCENARIOS
        bench_ab.SCENARIOS = fake
        self.order = os.path.join(d, "order")
        os.environ["FAKE_ORDER"] = self.order

    def tearDown(self):
        bench_ab.SCENARIOS = self.saved
        os.environ.pop("FAKE_ORDER", None)
        os.environ.pop("FAKE_FAIL", None)
        self.tmp.cleanup()

    def run_main(self, *args):
        d = self.tmp.name
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = bench_ab.main(["--out", os.path.join(d, "out")] + list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_alternates_and_summarizes(self):
        d = self.tmp.name
        rc, out, _ = self.run_main("--pairs", "2", os.path.join(d, "old"), os.path.join(d, "new"),
                                   "isolation")
        self.assertEqual(rc, 0)
        with open(self.order) as f:
            self.assertEqual(f.read().split("\n")[:4], [
                "old-1 isolation", "new-1 isolation", "new-2 isolation", "old-2 isolation"])
        self.assertIn("pair 2: old 1.10, new 0.90, new/old 0.82", out)
        self.assertIn("new better in 2 of 2 pairs (lower is better)", out)
        self.assertTrue(os.path.exists(os.path.join(d, "out", "new-2.log")))

    def test_a_scenario_without_known_figures_says_so(self):
        d = self.tmp.name
        rc, out, _ = self.run_main("--pairs", "1", os.path.join(d, "old"), os.path.join(d, "new"),
                                   "lossless")
        self.assertEqual(rc, 0)
        self.assertIn("lossless: no headline figures known to bench_ab", out)

    def test_a_failed_run_stops_with_exit_1(self):
        d = self.tmp.name
        os.environ["FAKE_FAIL"] = "new-1"
        rc, _, err = self.run_main("--pairs", "3", os.path.join(d, "old"),
                                   os.path.join(d, "new"), "isolation")
        self.assertEqual(rc, 1)
        self.assertIn("pair 1 on new failed (exit 1)", err)
        with open(self.order) as f:
            self.assertEqual(len(f.read().split()), 4)  # old-1, new-1 and nothing after

    def test_usage_errors(self):
        d = self.tmp.name
        self.assertEqual(self.run_main(os.path.join(d, "old"), "isolation")[0], 2)
        rc, _, err = self.run_main(os.path.join(d, "old"), os.path.join(d, "old"), "isolation")
        self.assertEqual(rc, 2)
        self.assertIn("use LABEL=DIR", err)
        rc, _, err = self.run_main(os.path.join(d, "old"), os.path.join(d, "missing"), "cpu")
        self.assertEqual(rc, 2)
        self.assertIn("has no runtime/noded", err)
        self.assertFalse(os.path.exists(self.order))  # nothing ran


if __name__ == "__main__":
    unittest.main()
