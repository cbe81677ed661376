#!/usr/bin/python3
"""bench_scenarios: the headline benchmarks, each against real noded clusters.

  tools/bench_scenarios.py                     every scenario (~12-15 min on 2 cores)
  tools/bench_scenarios.py goodput isolation   only these (goodput egress isolation lossless
                                               throughput rejection scale cpu state rejoin
                                               fanout retry reads live memory lanes admission
                                               shares)

Each scenario starts its own 4-node localnet(s) in a temp dir (random ports), drives it with
loadgen, stops it on every exit path, prints one `RESULT` line with its ratio and appends a
markdown row to bench-results/scenarios.md (loadgen reports under bench-results/scenarios/<name>/).
The machine's load average is recorded with every figure: 4 nodes + loadgen share the cores, so
a busy machine (another build) shows up as lower rates; re-run a figure when the load was high.

Environment: BUILD_DIR (default build), BENCH_OUT (default bench-results); goodput: GOODPUT_MODE
(adaptive, the default: an adaptive stage driven by commit latency bounds admission; static: a
rate stage at C/4 per node), GOODPUT_RATE (per-node rate), GOODPUT_ADAPTIVE (the adaptive stage's
config body), GOODPUT_ROUNDS (held-saturation / 10x pairs, default 2), GOODPUT_SKIP_OFF=1 (skip
the limits-off run); rejection: REJECTION_RATE (offered tx/s, all refused; default 3000); scale: SCALE_RATE (total offered tx/s,
default 800), SCALE_COUNTS (partition counts, default 1,4,16), SCALE_SECONDS (default 30),
SCALE_IDLE (idle partitions for the idle-cost figure, default 64; 0 skips it), SCALE_COMMITS (poll or
watch), SCALE_EXTRA (a config fragment for every node); cpu: CPU_EXTRA (likewise), CPU_RATE
(default 800), CPU_SAT_RATE (default 2500); state: STATE_KEYS (keys loaded, default 1000000),
STATE_REPS (rounds of all eight cases, interleaved; medians reported; default 3: about 15 minutes,
no cluster); rejoin: REJOIN_BLOCKS (history lengths, default 1000,4000), REJOIN_RATE (tx/s, default
800), REJOIN_BATCH (batch_max_txs, default 10), REJOIN_MODES (default snapshot,replay); fanout:
FANOUT_STREAMS (stream counts, default 0,100,1000), FANOUT_RATE (tx/s, default 800),
FANOUT_SECONDS (default 25), FANOUT_NICE (the subscribers' niceness, default 0); retry:
RETRY_RATE (offered tx/s, default 6000), RETRY_SECONDS (default 30), RETRY_REPS (measured/fixed
pairs, default 1); reads: READS_FLOOD (reads/s, default 8000), READS_SECONDS (default 40),
READS_REPS (rounds, default 1), READS_MODES (held,refused,none: the modes of a round, the first
is ours), READS_IN_FLIGHT (loadgen's reads in flight per node, default 512), READS_MAX_STREAMS
(the nodes' client_max_streams, default 0 = none), READS_RPC (account, the default, or block:
GetBlock of the latest block with its tx bodies), READS_FLOOD_CLIENT (as ADMISSION_FLOOD_CLIENT,
for the reads); live: LIVE_REPS
(with/without pairs, default 1); memory: MEMORY_RATE (16 KiB tx/s, default 2000), MEMORY_SECONDS
(default 40), MEMORY_LIMIT_MIB (node 1's cgroup limit, default 400; needs a memory cgroup this
user may create, as root on most machines); lanes: LANES_RATE (hot's offered tx/s, default 3000),
LANES_SECONDS (default 25), LANES_REPS (off/on pairs, default 2), LANES_WEIGHTS (lane_weights
body, default the node's); admission: ADMISSION_N (partitions, default 16), ADMISSION_FLOOD
(p1's tx/s from second 15, default 1000), ADMISSION_QUIET (each other partition's tx/s, default
20), ADMISSION_REPS (rounds of every mode, default 1), ADMISSION_MODES (default off,on; also
static: measured_shares false; local: agree_with_peers false; idle: no flood, the control;
refused: the flood all refused by p1's rate stage, its own cost; split / split-local: nodes 3 and 4 never contended, with / without agreement), ADMISSION_CONFIG (more node_admission fields),
ADMISSION_SECONDS (default 40), ADMISSION_FLOOD_AT (the flood's start, default 15),
ADMISSION_FLOOD_CLIENT (same: one loadgen; own: the flood from its own loadgen process;
sched_idle: that process at SCHED_IDLE); shares:
SHARES_RATE (each flooded partition's tx/s, default 1500), SHARES_CEILING (the flooded partition's hard ceiling fraction, default 0.1), SHARES_WORKERS
(worker threads per node, default 1), SHARES_REPS (rounds, default 1), SHARES_PARTS (default
cpu,ceiling,memory,egress), SHARES_MODES (the cpu part's modes, default governed,advisory,admission),
SHARES_PRESIGN (txs pre-signed per partition in the cpu part, default 2000; 45000 for the whole flood),
SHARES_IN_FLIGHT (loadgen's --max-in-flight in the cpu part, default 64), SHARES_SECONDS (the cpu
part's run, default 30; CPU from second 10 to 5 s before its end), SHARES_TRACE (a file the cpu part appends
each node's admission status to, sampled every second instead of every 3 s), SHARES_ADMISSION_CONFIG (more node_admission fields in the
admission mode), SHARES_NODE_MIB (memory_bytes per node in the memory part, default 256),
SHARES_MEMORY_RATE (hot's 16 KiB tx/s there, default 2000), SHARES_EGRESS_CAP (bytes/s per node in
the egress part, default 1000000), SHARES_EGRESS_RATE (each partition's tx/s per node, default 60);
memtables: MEMTABLES_PARTITIONS (default 16), MEMTABLES_RATE (tx/s in all, default 800),
MEMTABLES_TX_BYTES (default 4096), MEMTABLES_SECONDS (default 90), MEMTABLES_EXTRA (a config
fragment for every node); caches: CACHES_PARTITIONS (default 2, the first loaded, the others idle),
CACHES_RATE (default 800), CACHES_TX_BYTES (default 4096), CACHES_SENDERS (its keys, default
12000), CACHES_SECONDS (default 60), CACHES_EXTRA (a config fragment for every node).
Exit: 0 every scenario ran (targets are reported, not enforced), 1 a scenario failed to run,
2 usage error. Standard library only.
"""
import json
import os
import resource
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))
LOCALNET = os.path.join(ROOT, "tools", "localnet")
LOADGEN = os.path.join(BUILD, "tools", "loadgen")
NODECTL = os.path.join(BUILD, "tools", "nodectl")
BENCH_CHAIN = os.path.join(BUILD, "tests", "bench", "bench_chain")
BENCH_STATE = os.path.join(BUILD, "tests", "bench", "bench_state")
OUT = os.path.join(ROOT, os.environ.get("BENCH_OUT", "bench-results"))
CLK = os.sysconf("SC_CLK_TCK")

LANES = "dispatcher { lane_weights { consensus: 8 sync: 4 tx_forward: 4 bulk: 1 client: 1 } }"


def hot_chain(rate, burst, in_flight=256, gates=True, adaptive=None):
    """Interceptor chain text: in-flight cap, health and pool gates, optionally an adaptive
    limit (`adaptive` is the body of its AdaptiveStageConfig), per-node rate limit."""
    stages = ['stages { name: "in_flight" concurrency { max_in_flight: %d } }' % in_flight]
    if gates:
        stages += ['stages { name: "health" gate { predicate: "consensus_normal" } }',
                   'stages { name: "pool" gate { predicate: "pool_below_high_water" } }']
    if adaptive is not None:
        stages.append('stages { name: "adaptive" adaptive { %s } }' % adaptive)
    if rate is None:
        stages.append('stages { name: "rate" rate { unlimited: true } }')
    else:
        stages.append('stages { name: "rate" rate { rate_per_second: %g burst: %g } }'
                      % (rate, burst))
    return "interceptor {\n  " + "\n  ".join(stages) + "\n}"


# The flow-control config that holds on this machine (docs/BENCHMARKS.md).
HOT_RATE = 100  # per node; loadgen spreads over the 4 nodes, so the cluster admits 4x this


def fc_extra(rate=HOT_RATE, burst=20, node="", steady="", adaptive=None):
    # FC_PARTITION_EXTRA: fields added to every partition of these scenarios, e.g.
    # "consensus { forward_interval_ms: 0 }" for a before/after in one sitting; FC_NODE_EXTRA:
    # node fields, e.g. "resources { block_budget_adaptation { enabled: false } }".
    every_partition = LANES + "\n" + os.environ.get("FC_PARTITION_EXTRA", "")
    node = node + "\n" + os.environ.get("FC_NODE_EXTRA", "")
    return "%s\n[partition *]\n%s\n[partition hot]\npool { max_txs: 3000 }\n%s\n%s" % (
        node, every_partition, hot_chain(rate, burst, adaptive=adaptive),
        ("[partition steady]\n" + steady) if steady else "")


def log(msg):
    print("bench: " + msg, flush=True)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def proc_cpu_seconds(pid):
    """CPU seconds (utime + stime, fields 14 and 15 of /proc/PID/stat) a process has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


class Cluster:
    """A localnet in a temp dir; always stopped by __exit__ (and by the SIGTERM/SIGINT handler)."""
    live = []

    def __init__(self, name, extra, partitions=2, nodes=4):
        self.dir = tempfile.mkdtemp(prefix="bench_%s_" % name)
        self.net = os.path.join(self.dir, "net")
        self.extra = os.path.join(self.dir, "extra.conf")
        with open(self.extra, "w") as f:
            f.write(extra + "\n")
        self.partitions, self.nodes = partitions, nodes

    def ln(self, *args, check=True):
        env = dict(os.environ, LOCALNET_DIR=self.net)
        r = subprocess.run([LOCALNET] + list(args), env=env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("localnet %s: %s %s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout.strip()

    def __enter__(self):
        Cluster.live.append(self)
        self.ln("up", str(self.nodes), "--partitions", str(self.partitions), "--base-port", "0",
                "--config-extra", self.extra)
        self.client = self.ln("addrs", "client")
        self.admin = self.ln("addrs", "admin")
        self.tokens = ",".join(os.path.join(self.net, "node%d" % i, "admin.token")
                               for i in range(1, self.nodes + 1))
        self.pids = []
        for i in range(1, self.nodes + 1):
            with open(os.path.join(self.net, "node%d" % i, "noded.pid")) as f:
                self.pids.append(int(f.read().split()[0]))
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def down(self):
        if self in Cluster.live:
            Cluster.live.remove(self)
            self.ln("down", "--timeout", "15", check=False)
            shutil.rmtree(self.dir, ignore_errors=True)

    def cpu_seconds(self):
        return sum(proc_cpu_seconds(pid) for pid in self.pids)

    def rss_bytes(self):
        out = []
        for pid in self.pids:
            with open("/proc/%d/status" % pid) as f:
                m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
            out.append(int(m.group(1)) * 1024 if m else 0)
        return out

    def stats(self, i, command="stats"):
        r = subprocess.run([NODECTL, "--admin", self.admin.split(",")[i], "--token-file",
                            self.tokens.split(",")[i], "--json", command],
                           capture_output=True, text=True, timeout=20)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def loadgen(self, name, scenario, duration, drain=10, presign=None, expect=(), extra=(),
                targets=None, nodes=None):
        return self.loadgen_finish(self.loadgen_start(name, scenario, duration, drain, presign,
                                                      expect, extra, targets, nodes))

    def loadgen_start(self, name, scenario, duration, drain=10, presign=None, expect=(),
                      extra=(), targets=None, nodes=None, prefix=()):
        """Starts loadgen; loadgen_finish waits for it. `nodes` (0-based indices) limits its
        client targets and admin addresses to those nodes (e.g. while another one is down);
        `prefix` runs it under another command (e.g. chrt)."""
        out = os.path.join(OUT, "scenarios", name)
        shutil.rmtree(out, ignore_errors=True)
        admin, tokens = self.admin, self.tokens
        if nodes is not None:
            pick = lambda csv: ",".join(csv.split(",")[i] for i in nodes)
            targets, admin, tokens = targets or pick(self.client), pick(admin), pick(tokens)
        cmd = [LOADGEN, "--targets", targets or self.client, "--admin", admin,
               "--admin-token-file", tokens, "--duration", "%ds" % duration, "--drain",
               "%ds" % drain, "--scenario", scenario, "--out", out, "--quiet"]
        if presign is not None:
            cmd += ["--presign", str(presign)]
        for e in expect:
            cmd += ["--expect", e]
        cmd += list(extra)
        log("$ " + " ".join(list(prefix) + cmd[:1] + ["..."] + cmd[7:]))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.Popen(list(prefix) + cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        return {"proc": proc, "out": out, "before": before, "t0": t0}

    def loadgen_finish(self, run):
        """Waits for a loadgen_start run; ({partition name: summary}, whole summary)."""
        try:
            stdout, stderr = run["proc"].communicate()
        except BaseException:  # e.g. stop_all's SystemExit: never leave loadgen running
            run["proc"].kill()
            run["proc"].wait()
            raise
        r = subprocess.CompletedProcess(run["proc"].args, run["proc"].returncode, stdout, stderr)
        out, before, t0 = run["out"], run["before"], run["t0"]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - t0
        with open(os.path.join(out, "loadgen.txt"), "w") as f:
            f.write(r.stdout + r.stderr)
        tail = [l for l in r.stdout.splitlines() if l.strip()][-8:]
        print("\n".join("    " + l for l in tail), flush=True)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        s["_rc"], s["_stdout"] = r.returncode, r.stdout
        # loadgen's own CPU (it shares the machine with the nodes): cores used on average.
        s["_loadgen_cores"] = ((after.ru_utime - before.ru_utime) +
                               (after.ru_stime - before.ru_stime)) / max(wall, 1e-9)
        return {p["name"]: p for p in s["partitions"]}, s


def stop_all(*_):
    for c in list(Cluster.live):
        c.down()
    sys.exit(1)


def flood_client_from_env(var):
    """Who sends a scenario's flood, from environment variable `var`: "same" (the default: one
    loadgen for all the load), "own" (the flood from a loadgen process of its own) or
    "sched_idle" (that process at SCHED_IDLE, `chrt --idle 0`: it runs only on CPU the nodes and
    the other loadgen leave, as a client on another machine would take none of theirs; the
    nodes still receive and answer every call it gets out)."""
    value = os.environ.get(var, "same")
    if value not in ("same", "own", "sched_idle"):
        sys.exit("%s: unknown value %r (same, own, sched_idle)" % (var, value))
    return value


def start_flood_loadgen(c, flood_client, name, scenario, seconds, extra=()):
    """The flood's own loadgen on cluster `c` for flood_client "own" or "sched_idle" (see
    flood_client_from_env), None for "same". It does not pre-sign, and neither may the other
    loadgen, so that their clocks start together."""
    if flood_client == "same":
        return None
    return c.loadgen_start(name, scenario, seconds, drain=10, presign=0, extra=extra,
                           prefix=("chrt", "--idle", "0") if flood_client == "sched_idle" else ())


def loadgens_cpu_seconds(run, flood_run):
    """(CPU seconds of loadgen `run` and of `flood_run` together, those of `flood_run` alone: 0
    without one)."""
    own = proc_cpu_seconds(flood_run["proc"].pid) if flood_run else 0.0
    return proc_cpu_seconds(run["proc"].pid) + own, own


def flood_client_note(flood_client, cores):
    """" (the flood's own loadgen[ at SCHED_IDLE] <cores>)" for a result line; "" for "same"."""
    if flood_client == "same":
        return ""
    return " (the flood's own loadgen%s %.2f)" % (
        " at SCHED_IDLE" if flood_client == "sched_idle" else "", cores)


def window_rate(p, key, t0, t1):
    """Mean per-second `key` of partition summary p over seconds [t0, t1)."""
    vals = [row[key] for row in p["series"] if t0 <= row["t"] < t1]
    return sum(vals) / max(1, len(vals))


def peak_window(p, key, width):
    s = [row[key] for row in sorted(p["series"], key=lambda r: r["t"])]
    best = 0
    for i in range(0, max(1, len(s) - width + 1)):
        best = max(best, sum(s[i:i + width]) / width)
    return best


def window_p99(p, t0, t1):
    """Count-weighted mean and max of the per-second p99 over [t0, t1) (loadgen keeps per-second
    p99 only; a window's exact p99 comes from its --expect line when one is given)."""
    rows = [r for r in p["series"] if t0 <= r["t"] < t1 and r["committed"] > 0]
    if not rows:
        return 0.0, 0.0
    n = sum(r["committed"] for r in rows)
    return sum(r["p99_ms"] * r["committed"] for r in rows) / n, max(r["p99_ms"] for r in rows)


def expect_value(stdout, text):
    """(measured, limit) of the first --expect line loadgen printed for `text`, e.g.
    'FAIL steady.p99@18s-45s<=1.2*steady.p99@3s-14s (measured 236.1ms, limit 211.2ms)'."""
    for line in stdout.splitlines():
        if text in line:
            m = re.search(r"measured ([0-9.]+)\S*, limit ([0-9.]+)", line)
            if m:
                return float(m.group(1)), float(m.group(2))
    return None


RESULTS = []


def result(name, ours, baseline, ratio, target, note):
    row = "| %s | %s | %s | %s | %s | %s | load %s |" % (name, ours, baseline, ratio, target,
                                                         note, load())
    RESULTS.append(row)
    print("RESULT %s: %s; baseline %s; ratio %s (target %s); %s; load %s"
          % (name, ours, baseline, ratio, target, note, load()), flush=True)


# 1. Overload goodput ----------------------------------------------------------------------
# The "on" run's adaptive stage (GOODPUT_ADAPTIVE replaces the body of its config). max_limit x 4
# nodes stays below the pool's high water (0.9 x 3000), so the limit, not the pool gate, refuses;
# target 700 ms: at 250-500 ms the limit held admission below what the cluster commits at
# saturation, where blocks of 500 txs queue behind each other; max_latency_ms keeps the window p50
# below the 2 s request timeout.
GOODPUT_ADAPTIVE = ("initial_limit: 64 min_limit: 16 max_limit: 600 tolerance: 2 "
                    "target_latency_ms: 700 max_latency_ms: 1500 window_ms: 500 max_hold_ms: 2000")


def adaptive_gauges(stats, partition="hot"):
    """The adaptive stage's gauges of `partition` in a `nodectl --json stats` object, or None."""
    found = [st.get("gauges", {}) for st in partition_items(stats, partition, "stages")
             if st.get("kind") == "adaptive"]
    return found[0] if found else None


def localnet_names(n):
    """The names `tools/localnet up --partitions n` gives its partitions."""
    return ["hot", "steady"] if n == 2 else ["p%d" % i for i in range(1, n + 1)]


def named_objects(obj, names):
    """Every dict whose "name" is in `names`, found anywhere in a `nodectl --json` object."""
    found = []

    def walk(o):
        if isinstance(o, dict):
            if o.get("name") in names:
                found.append(o)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(obj)
    return found


def partition_items(stats, partition, key):
    """The dicts in list `key` (e.g. "stages", "lanes") of every object named `partition`, found
    anywhere in a `nodectl --json` object."""
    return [x for o in named_objects(stats, (partition,)) if isinstance(o.get(key), list)
            for x in o[key] if isinstance(x, dict)]


ROUND_PHASES = ("cut_wait", "accept", "prepare", "commit", "apply", "interval")


def round_phases(c, partition):
    """One line per node: the phases of its rounds of consensus in `partition` (nodectl --json
    stats' consensus_rounds) as p50/p99/max in ms, for the phases it timed; its consensus and
    tx_forward lanes' queueing delay (p50/p99 ms) and CPU per message handled (us); the tx
    bodies it fetched, admitted with their signature checked or on a certified batch; its count
    of slow rounds (consensus.slow_round_log_ms, default 1 s) and the first slow-round lines of
    its log (one a second at most)."""
    lines = []
    for i in range(c.nodes):
        st = c.stats(i)
        found = [o for o in named_objects(st or {}, (partition,)) if "consensus_rounds" in o]
        if not found:
            lines.append("n%d: -" % (i + 1))
            continue
        rounds = found[0]["consensus_rounds"]
        parts = []
        for ph in ROUND_PHASES:
            l = rounds.get(ph, {})
            if int(l.get("count", 0)):
                parts.append("%s %.0f/%.0f/%.0f" % (ph, l.get("p50_us", 0) / 1e3,
                                                   l.get("p99_us", 0) / 1e3,
                                                   l.get("max_us", 0) / 1e3))
        for l in found[0].get("lanes", []):
            if l.get("name") in ("consensus", "tx_forward"):
                q = l.get("queueing_delay", {})
                parts.append("lane %s %.1f/%.1f, %.0f us/msg" % (
                    l["name"], q.get("p50_us", 0) / 1e3, q.get("p99_us", 0) / 1e3,
                    int(l.get("cpu_nanos", 0)) / 1e3 / max(1, int(l.get("processed", 0)))))
        parts.append("%d slow rounds" % int(rounds.get("slow_rounds", 0)))
        parts.append("fetched bodies %d checked, %d certified" % (
            int(found[0].get("fetched_txs_checked", 0)),
            int(found[0].get("fetched_txs_certified", 0))))
        logged = []
        try:
            with open(os.path.join(c.net, "node%d" % (i + 1), "noded.log"),
                      errors="replace") as f:
                logged = [ln[ln.index("slow round:"):].strip() for ln in f
                          if "slow round:" in ln and ("partition %s:" % partition) in ln]
        except OSError:
            pass
        lines.append("n%d: %s%s" % (i + 1, ", ".join(parts),
                                    "".join("\n    " + ln for ln in logged[:5])))
    return lines


def goodput():
    mode = os.environ.get("GOODPUT_MODE", "adaptive")
    if mode not in ("adaptive", "static"):
        raise RuntimeError("GOODPUT_MODE must be adaptive or static, got %r" % mode)
    # The knee: a ramp with the gates, in-flight cap and pool limit on but no admission limit
    # (a rate limit here would make the knee the admission rate).
    with Cluster("goodput_cap", fc_extra(rate=None)) as c:
        p, s = c.loadgen("goodput_ramp", "hot:pattern=ramp,rate=100,rate2=3000", 40,
                         presign=40000)
        lg_ramp = s["_loadgen_cores"]
        ramp5 = peak_window(p["hot"], "committed", 5)
        ramp10 = peak_window(p["hot"], "committed", 10)
        vc_ramp = p["hot"]["view_changes"]
    if mode == "static":
        # As an operator would set a static limit: the per-node rate at the knee
        # (GOODPUT_RATE overrides), plus the gates.
        rate = int(os.environ.get("GOODPUT_RATE", "0")) or max(1, int(ramp5 / 4))
        adaptive = None
        how = "rate %d/node burst 50, in_flight 256, health+pool gates, pool 3000" % rate
    else:
        # Adaptive admission: the limit follows commit latency; the rate stage is unlimited
        # (GOODPUT_RATE sets one) so the adaptive limit is what bounds admission.
        rate = int(os.environ.get("GOODPUT_RATE", "0")) or None
        adaptive = os.environ.get("GOODPUT_ADAPTIVE", GOODPUT_ADAPTIVE)
        how = ("adaptive {%s}, rate %s, in_flight 256, health+pool gates, pool 3000"
               % (adaptive, "%d/node" % rate if rate else "unlimited"))
    on_cfg = fc_extra(rate=rate, burst=50, adaptive=adaptive)
    gates_cfg = fc_extra(rate=None)

    def held(name, cfg, offer, sample=False):
        """Committed tx/s over seconds [5, 25) of a 25-s constant `offer` on a fresh cluster."""
        with Cluster(name, cfg) as c:
            stop = threading.Event()

            def sampler():  # the adaptive limit of every node over the run, for the notes
                while not stop.wait(2):
                    row = []
                    for i in range(c.nodes):
                        try:
                            g = adaptive_gauges(c.stats(i)) or {}
                        except Exception:  # a node busy past the timeout: skip the sample
                            g = {}
                        row.append((g.get("limit", 0), g.get("in_flight", 0),
                                    g.get("window_latency_ms", 0),
                                    g.get("baseline_latency_ms", 0)))
                    samples.append(row)
            t = threading.Thread(target=sampler, daemon=True)
            if sample:
                t.start()
            # Pre-signed enough for 25 s of admissions, so the signer never runs dry (offers
            # it cannot fill count as client_dropped, reported with the result).
            c0 = c.cpu_seconds()
            p, s = c.loadgen(name, "hot:rate=%d" % offer, 25, presign=80000)
            used = c.cpu_seconds() - c0
            stop.set()
            if sample:
                t.join()
            for line in round_phases(c, "hot"):
                log("%s: rounds p50/p99/max ms %s" % (name, line))
            h = p["hot"]
            mean = window_rate(h, "committed", 5, 25)
            per_s = [r["committed"] for r in h["series"] if 5 <= r["t"] < 25]
            log("%s: committed per second over [5, 25): min %d, mean %.0f, %d of %d seconds under "
                "half the mean" % (name, min(per_s, default=0), mean,
                                   sum(1 for v in per_s if v < mean / 2), len(per_s)))
            return {"committed": mean, "vc": h["view_changes"],
                    "p99": h["p99_ms"], "lg": s["_loadgen_cores"],
                    "dropped": h["client_dropped"] / max(1, h["offered"]),
                    # as the cpu scenario: the nodes' CPU over the run (drain included)
                    "us_per_tx": used / max(1, h["committed"]) / c.nodes * 1e6}

    # Saturation held against 10x on fresh clusters, each measured over the same 20 s. Committed
    # tx/s swings with a period of about 2 s at saturation and by +-10% from one cluster to the
    # next, so a ramp's 5-s peak overstates what the cluster sustains (and a view change in the
    # ramp understates it), and one pair of runs says little. Saturation is held at 1.5x the
    # knee, with flow control on and once with the gates only (no admission limit, so a limit
    # that holds the cluster below its capacity cannot lower C); C is the larger of the two
    # (flow control on: the mean of its rounds), and the 10x runs offer 10x the first estimate.
    rounds = int(os.environ.get("GOODPUT_ROUNDS", "2"))
    samples = []
    sat_load = int(1.5 * ramp5)
    verify_before = openssl_verify_us()
    gates = held("goodput_sat_gates", gates_cfg, sat_load)
    sat_runs, on_runs = [held("goodput_sat0", on_cfg, sat_load)], []
    offered = int(10 * max(gates["committed"], sat_runs[0]["committed"]))
    for k in range(rounds):
        if k > 0:
            sat_runs.append(held("goodput_sat%d" % k, on_cfg, sat_load))
        on_runs.append(held("goodput_on%d" % k, on_cfg, offered,
                            sample=(k == 0 and adaptive is not None)))
    verify_after = openssl_verify_us()
    sat = sum(r["committed"] for r in sat_runs) / rounds
    g_on = sum(r["committed"] for r in on_runs) / rounds
    cap = max(sat, gates["committed"])
    vc_on = sum(r["vc"] for r in on_runs)
    p99_on = max(r["p99"] for r in on_runs)
    lg_on = sum(r["lg"] for r in on_runs) / rounds
    lg_sat = sum(r["lg"] for r in sat_runs) / rounds
    for k, row in enumerate(samples):
        log("adaptive t=%2ds limit/in_flight/window p50 ms/baseline ms per node: %s" % (
            2 * (k + 1), "  ".join("%.0f/%.0f/%.0f/%.0f" % x for x in row)))
    # Lane weights as above, limits off: no gates, unlimited rate, 1e6 in flight / pool.
    off = "[partition hot]\n%s\npool { max_txs: 1000000 }\n%s" % (
        LANES.replace("lane_weights", "budget_messages: 1000000 budget_bytes: 4294967296 "
                      "lane_weights"), hot_chain(None, 0, in_flight=1000000, gates=False))
    if os.environ.get("GOODPUT_SKIP_OFF"):
        g_off = None
    else:
        with Cluster("goodput_off", off) as c:
            p, _ = c.loadgen("goodput_off", "hot:rate=%d" % offered, 25, drain=15,
                             presign=min(100000, offered * 12))
            g_off = window_rate(p["hot"], "committed", 5, 25)
            vc_off, p99_off = p["hot"]["view_changes"], p["hot"]["p99_ms"]
    fmt = lambda runs: ", ".join("%.0f (%d VC, p99 %.0f ms, %.1f%% of offers dropped by loadgen)"
                                 % (r["committed"], r["vc"], r["p99"], 100 * r["dropped"])
                                 for r in runs)
    baseline = ("C = %.0f tx/s = max(held at 1.5x the knee, flow control on: %s, mean %.0f; "
                "held, gates only: %.0f (%d VC)); the ramp's peak 5-s %.0f, 10-s %.0f tx/s "
                "(%d VC)" % (cap, fmt(sat_runs), sat, gates["committed"], gates["vc"], ramp5,
                             ramp10, vc_ramp))
    result("goodput (flow control on, %s)" % mode,
           "%.0f tx/s at %d tx/s offered = %.1fx C (runs: %s; p99 up to %.0f ms)"
           % (g_on, offered, offered / cap, fmt(on_runs), p99_on), baseline,
           "%.2f (vs the ramp's 5-s peak: %.2f, 10-s: %.2f)"
           % (g_on / cap, g_on / ramp5, g_on / ramp10), ">= 0.95",
           how + "; loadgen used %.2f cores during the ramp, %.2f held at 1.5x, %.2f at 10x (of "
           "2 shared with the nodes; pre-signing included)" % (lg_ramp, lg_sat, lg_on))
    # Issue 17, target 3: C against the Ed25519 bound (every node verifies every tx once: the
    # machine's verifications per second / 4 nodes), from the slower of the two `openssl speed`
    # readings around the runs.
    floor_us = max(verify_before, verify_after)
    cores = os.cpu_count()
    bound = cores * 1e6 / floor_us / 4
    # The runs that give C: flow control on (their mean), or the gates-only run if it is larger.
    c_runs = sat_runs if sat >= gates["committed"] else [gates]
    result("saturation vs the Ed25519 bound (held protocol)",
           "C = %.0f tx/s from %s: %s" % (cap, "the held runs with flow control on"
                                          if c_runs is sat_runs else "the gates-only run",
                                          fmt(c_runs)),
           "bound %.0f tx/s (Ed25519 verify %.1f / %.1f us before / after, x %d cores / 4 "
           "nodes)" % (bound, verify_before, verify_after, cores), "%.2f" % (cap / bound),
           ">= 0.5 with p99 <= 2 s and 0 VC (issue 17, target 3)",
           "C's runs: worst p99 %.0f ms, %d VC; CPU per committed tx per node (as the cpu "
           "scenario counts it): %s us = %s x the verification (target 2: <= 1.5x saturated); "
           "the gates-only run: %s, %.0f us per tx"
           % (max(r["p99"] for r in c_runs), sum(r["vc"] for r in c_runs),
              ", ".join("%.0f" % r["us_per_tx"] for r in c_runs),
              ", ".join("%.2f" % (r["us_per_tx"] / floor_us) for r in c_runs),
              fmt([gates]), gates["us_per_tx"]))
    if g_off is not None:
        result("goodput (limits off)", "%.0f tx/s at %d tx/s offered (p99 %.0f ms, %d view "
               "changes)" % (g_off, offered, p99_off, vc_off), "C = %.0f tx/s" % cap,
               "%.2f" % (g_off / cap), "collapse expected", "no gates, rate unlimited, "
               "in_flight 1e6, pool 1e6, dispatcher budget 1e6 msgs")


# 2. Consensus under a tx flood, priority egress vs FIFO -------------------------------------
def egress():
    # Forwarding each admitted 4 KiB tx to 3 peers must fit under the cap on average:
    # EGRESS_HOT_RATE tx/s per node x 4 KiB x 3 peers = 0.6 MB/s of TX_FORWARD, with bursts (burst
    # 50 = 0.6 MB at once) that fill the queue. At EGRESS_CAP = 2 MB/s the cap hardly binds (FIFO
    # and priority differ by ~1.1x); at 1 MB/s it binds in every burst, and whether consensus waits
    # behind forwarding decides whether the cluster keeps committing. At 100-150/node (1.2-1.8
    # MB/s) both modes collapse into view changes on this machine. The primary of each partition
    # sends its own clients' txs with its proposals (runtime/partition_impl.h, held_), so the
    # figure compares the schedulers, not a proposal overtaking its data.
    #
    # The figure is steady's p99 commit latency over the txs it *offered*: a tx that never
    # committed counts as slower than the run (duration + drain), so a mode that stops committing
    # cannot look fast on the few txs that made it; the ratio is then a lower bound.
    cap = int(os.environ.get("EGRESS_CAP", "1000000"))
    rate = int(os.environ.get("EGRESS_HOT_RATE", "50"))
    duration, drain = 40, 10
    rows = {}
    for mode in ("priority", "fifo"):
        node = "resources { egress_bytes_per_second: %d%s }" % (
            cap, " egress_fifo_mode: true" if mode == "fifo" else "")
        with Cluster("egress_" + mode, fc_extra(rate=rate, burst=50, node=node)) as c:
            p, _ = c.loadgen("egress_" + mode, "hot:rate=%d,tx_bytes=4096;steady:rate=20"
                             % (rate * 40), duration, drain=drain, presign=8000)
            st, hot = p["steady"], p["hot"]
            # p99 over offered: known only if at least 99% of what was offered committed.
            censored = st["committed"] < 0.99 * st["offered"]
            rows[mode] = {"p50": st["p50_ms"], "p99": st["p99_ms"], "censored": censored,
                          "committed": st["committed"], "offered": st["offered"],
                          "rate": st["committed_rate"],
                          "vc": st["view_changes"] + hot["view_changes"],
                          "hot_rate": hot["committed_rate"], "hot_p99": hot["p99_ms"]}

    def fmt(r):
        p99 = ("> %d s (only %d of %d committed)" % (duration + drain, r["committed"], r["offered"])
               if r["censored"] else "%.0f ms" % r["p99"])
        return ("steady p99 over offered %s, p50 of committed %.0f ms, %.1f tx/s, %d view changes "
                "(hot %.0f tx/s committed, p99 %.0f ms)"
                % (p99, r["p50"], r["rate"], r["vc"], r["hot_rate"], r["hot_p99"]))

    pr, ff = rows["priority"], rows["fifo"]
    if pr["censored"]:
        ratio = "n/a (priority itself did not commit 99%)"
    elif ff["censored"]:
        ratio = ">= %.1f (FIFO's p99 is past the run)" % ((duration + drain) * 1e3 / max(pr["p99"], 1))
    else:
        ratio = "%.2f" % (ff["p99"] / max(pr["p99"], 1e-9))
    result("egress cap %.1f MB/s, 4 KiB tx flood" % (cap / 1e6), "priority: " + fmt(pr),
           "FIFO: " + fmt(ff), "p99 FIFO/priority " + ratio,
           ">= 3 (issue 17), priority with no view changes",
           "hot offered %d tx/s, limit %d/node burst 50; round time proxy = commit latency of "
           "steady (20 tx/s, 200 B)" % (rate * 40, rate))


# 3. Partition isolation -------------------------------------------------------------------
def isolation():
    with Cluster("isolation", fc_extra()) as c:
        idle, flood = "steady.p99@3s-14s", "steady.p99@18s-45s"
        p, s = c.loadgen("isolation", "steady:rate=50;hot:rate=%d,start=15s" % (HOT_RATE * 40),
                         45, presign=10000,
                         expect=["%s<=1.2*%s" % (flood, idle), "view_changes==0"])
    st = p["steady"]
    a, b = window_rate(st, "committed", 3, 14), window_rate(st, "committed", 18, 45)
    m = expect_value(s["_stdout"], flood)
    if m:  # exact window p99s from loadgen's histogram: limit = 1.2 x the idle window's p99
        pf, pi = m[0], m[1] / 1.2
    else:  # fall back to the per-second p99s
        pi, pf = window_p99(st, 3, 14)[0], window_p99(st, 18, 45)[0]
    result("isolation", "steady flooded: p99 %.0f ms, %.1f tx/s" % (pf, b),
           "steady hot-idle: p99 %.0f ms, %.1f tx/s" % (pi, a),
           "p99 %.2f, rate %.2f" % (pf / max(pi, 1e-9), b / max(a, 1e-9)), "p99 <= 1.2",
           "hot offered %d tx/s = 10x its limit, committed %.0f tx/s, %d view changes"
           % (HOT_RATE * 40, window_rate(p["hot"], "committed", 18, 45),
              p["hot"]["view_changes"] + st["view_changes"]))


# 4. Lossless partition, scaled 1:20 -------------------------------------------------------
def lossless():
    mem = 256 << 20
    drain = 2500000
    egress_cap = 8000000
    node = "resources { memory_bytes: %d egress_bytes_per_second: %d }" % (mem, egress_cap)
    extra = ("%s\n[partition *]\n%s\n[partition hot]\n"
             "lossless { enabled: true memory_bytes: 1048576 segment_bytes: 4194304 "
             "durability: INTERVAL drain_bytes_per_second: %d }" % (node, LANES, drain))
    with Cluster("lossless", extra) as c:
        samples = []  # (t, [rss], [spill json], [egress sent bytes])
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                t = time.time()
                rss = c.rss_bytes()
                sp, eg = [], []
                for i in range(len(c.pids)):
                    j = c.stats(i) or {}
                    part = (j.get("partitions") or [{}])[0]
                    sp.append(part.get("spill", {}))
                    eg.append(sum(int(ch.get("bytes_sent", 0))
                                  for ch in (j.get("egress") or {}).get("channels", [])))
                samples.append((t, rss, sp, eg))
                stop.wait(0.5)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        try:
            # One target: the drain cap is per node, so node 1 takes the whole burst.
            p, _ = c.loadgen("lossless", "hot:pattern=burst,rate=250KB/s,peak=5MB/s,period=10s",
                             60, drain=90, presign=5000, extra=["--tx-bytes", "4096"],
                             targets=c.client.split(",")[0])
        finally:
            stop.set()
            th.join()
    h = p["hot"]
    max_rss = max(max(s[1]) for s in samples)
    # Per node: the largest spill drain (bytes) and egress over any ~1 s between samples.
    drain_peak = eg_peak = 0.0
    keys = set()
    spill_max = [0, 0]  # records appended (max over nodes), disk bytes peak
    for a, b in zip(samples, samples[1:]):
        dt = b[0] - a[0]
        if dt <= 0.2:
            continue
        for i in range(len(a[2])):
            keys |= set(b[2][i].keys())
            # `drained` counts records; each is one 4096-byte SignedTransaction.
            db = (int(b[2][i].get("drained", 0)) - int(a[2][i].get("drained", 0))) * 4096
            drain_peak = max(drain_peak, db / dt)
            spill_max[0] = max(spill_max[0], int(b[2][i].get("appended", 0)))
            spill_max[1] = max(spill_max[1], int(b[2][i].get("disk_bytes", 0)))
            eg_peak = max(eg_peak, (b[3][i] - a[3][i]) / dt)
    ok = h["accepted"] == h["committed"]
    result("lossless (scaled 1:20)", "accepted %d, committed %d, rejected %d; drain peak %.2f "
           "MB/s; egress peak %.2f MB/s/node; max RSS %.0f MiB"
           % (h["accepted"], h["committed"], h["rejected"], drain_peak / 1e6, eg_peak / 1e6,
              max_rss / 2**20),
           "drain cap %.1f MB/s, egress cap %.0f MB/s, memory %d MiB"
           % (drain / 1e6, egress_cap / 1e6, mem >> 20),
           "in==committed %s, drain %.2f of cap, RSS %.2f of memory"
           % ("yes" if ok else "NO", drain_peak / drain, max_rss / mem),
           "in == committed, drain <= cap, RSS < memory",
           "0.25 MB/s avg, 5 MB/s peaks (period 10 s), 4 KiB txs, 60 s, all into node 1; spill appended %d "
           "records/node max, disk peak %.1f MiB" % (spill_max[0], spill_max[1] / 2**20))


# 5. Throughput vs the machine's Ed25519 verify rate -----------------------------------------
def throughput():
    r = subprocess.run([BENCH_CHAIN, "--benchmark_filter=BM_Ed25519VerifyTx$",
                        "--benchmark_min_time=1", "--benchmark_format=json"],
                       capture_output=True, text=True, check=True)
    b = json.loads(r.stdout)["benchmarks"][0]
    verify_per_core = 1e9 / b["cpu_time"] if b["time_unit"] == "ns" else b["items_per_second"]
    cores = os.cpu_count()
    ref = verify_per_core * cores / 4
    # Per-node limit (x4 nodes) at the cluster's capacity: 400/node overran it (3 view changes).
    rate = int(os.environ.get("THROUGHPUT_RATE", "250"))
    with Cluster("throughput", fc_extra(rate=rate, burst=50)) as c:
        p, _ = c.loadgen("throughput", "hot:rate=2000", 30, presign=20000)
        tput = window_rate(p["hot"], "committed", 5, 30)
        vc = p["hot"]["view_changes"]
    result("throughput (hot; steady idle; 4 nodes)", "%.0f tx/s committed (offered 2000, limit "
           "%d/node, %d view changes)" % (tput, rate, vc), "%.0f verify/s/core x %d cores / 4 nodes = %.0f"
           % (verify_per_core, cores, ref), "%.3f" % (tput / ref), "-",
           "BM_Ed25519VerifyTx cpu %.1f us" % (b["cpu_time"] / 1e3))


# 6. Rejection cost ------------------------------------------------------------------------
def rejection():
    extra = ("[partition *]\n%s\n[partition hot]\ninterceptor {\n"
             '  stages { name: "rate" rate { rate_per_second: 0 } }\n}' % LANES)
    with Cluster("rejection", extra) as c:
        time.sleep(3)
        c0 = c.cpu_seconds()
        time.sleep(10)
        idle = (c.cpu_seconds() - c0) / 10  # cluster CPU s per s, idle
        t0, c0 = time.time(), c.cpu_seconds()
        rate = int(os.environ.get("REJECTION_RATE", "3000"))
        p, _ = c.loadgen("rejection_a", "hot:rate=%d" % rate, 15, drain=1,
                         presign=min(rate, 30000))
        ta, ca = time.time() - t0, c.cpu_seconds() - c0
        rej = p["hot"]["rejected"]
        t0, c0 = time.time(), c.cpu_seconds()
        p, _ = c.loadgen("rejection_b", "steady:rate=200", 15, drain=10, presign=3000)
        tb, cb = time.time() - t0, c.cpu_seconds() - c0
        adm = p["steady"]["committed"]
    per_rej = max(ca - idle * ta, 0) / max(rej, 1)
    per_adm = max(cb - idle * tb, 0) / max(adm, 1)
    raw_rej, raw_adm = ca / max(rej, 1), cb / max(adm, 1)
    result("rejection cost", "%.1f us CPU per rejected tx (%d rejected at %d tx/s offered; raw "
           "%.1f us)" % (per_rej * 1e6, rej, rate, raw_rej * 1e6),
           "%.1f us per admitted+verified+committed tx (%d; raw %.1f us)"
           % (per_adm * 1e6, adm, raw_adm * 1e6),
           "1/%.0f (raw 1/%.0f)" % (per_adm / max(per_rej, 1e-12), raw_adm / max(raw_rej, 1e-12)),
           "<= 1/50", "all 4 noded utime+stime, idle cluster CPU (%.3f cores) subtracted; "
           "hot rate stage closed (rate 0)" % idle)


# 7. Partition scale ------------------------------------------------------------------------
def lane_mean_delay_ms(stats, partitions, lane):
    """Mean queueing delay (ms) of `lane` over `partitions` in one node's stats, and its count."""
    count, total_us = 0, 0.0
    for nm in partitions:
        for l in partition_items(stats, nm, "lanes"):
            if l.get("name") == lane:
                q = l.get("queueing_delay", {})
                count += int(q.get("count", 0))
                total_us += float(q.get("sum_us", 0))
    return (total_us / 1e3 / count if count else 0.0), count


def partition_sum(obj, partitions, field):
    """The sum of numeric `field` over the objects named in `partitions`, found anywhere in a
    `nodectl --json` object (uint64 fields come as strings)."""
    return sum(int(o[field] or 0) for o in named_objects(obj, partitions) if field in o)


def scale():
    """One total offered rate split evenly over N partitions (SCALE_COUNTS, default 1,4,16) on a
    fresh default-config 4-node localnet each, then SCALE_IDLE idle partitions (default 64)."""
    rate = int(os.environ.get("SCALE_RATE", "800"))
    counts = [int(x) for x in os.environ.get("SCALE_COUNTS", "1,4,16").split(",")]
    duration = int(os.environ.get("SCALE_SECONDS", "30"))
    # How loadgen finds commits: "poll" (GetChainStatus on every node and GetBlock, per partition
    # every 100 ms) or "watch" (WatchCommits streams).
    commits = os.environ.get("SCALE_COMMITS", "poll")
    # A --config-extra fragment for every node, e.g. "resources { consensus_blocks_per_second: 0 }"
    # (no block budget) for a before/after in one sitting.
    extra = os.environ.get("SCALE_EXTRA", "")
    rows = {}
    for n in counts:
        with Cluster("scale%d" % n, extra, partitions=n) as c:
            names = localnet_names(n)
            each = rate / n
            scen = ";".join("%s:rate=%g" % (nm, each) for nm in names)
            t0, c0 = time.monotonic(), c.cpu_seconds()
            p, s = c.loadgen("scale%d" % n, scen, duration, drain=10,
                             presign=int(each * (duration + 5)) + 10,
                             extra=("--commits", commits))
            cores = (c.cpu_seconds() - c0) / (time.monotonic() - t0)
            # Where the latency goes: node 2's consensus and tx_forward lanes, mean queueing delay
            # over the run (docs/BENCHMARKS.md, "Where a 16-partition node's latency goes").
            st = c.stats(1) or {}
            cons_ms, _ = lane_mean_delay_ms(st, names, "consensus")
            fwd_ms, _ = lane_mean_delay_ms(st, names, "tx_forward")
            # Node 2's consensus-message signature checks per block it committed.
            blocks = max(partition_sum(c.stats(1, "status") or {}, names, "height"), 1)
            verifies = partition_sum(st, names, "consensus_verifications") / blocks
            redundant = partition_sum(st, names, "consensus_redundant_votes") / blocks
            committed = sum(window_rate(p[nm], "committed", 5, duration) for nm in names)
            rows[n] = {"committed": committed,
                       "all": sum(p[nm]["committed"] for nm in names),
                       "offered": sum(p[nm]["offered"] for nm in names),
                       "p99": max(p[nm]["p99_ms"] for nm in names),
                       "vc": sum(p[nm]["view_changes"] or 0 for nm in names),
                       "cores": cores, "lg": s["_loadgen_cores"], "cons_ms": cons_ms,
                       "fwd_ms": fwd_ms}
            r = rows[n]
            for line in round_phases(c, names[0]):
                log("scale %d partitions, %s's rounds p50/p99/max ms %s" % (n, names[0], line))
            log("scale %d partitions: committed %.0f tx/s (seconds 5-%d), all %d of %d offered, "
                "worst p99 %.0f ms, %d view changes, nodes %.2f cores, loadgen %.2f cores; node 2's "
                "mean lane queueing delay: consensus %.1f ms, tx_forward %.1f ms; node 2 per block: "
                "%.2f consensus verifications, %.2f redundant votes dropped unverified (%d blocks, "
                "drain included: %.0f per second of the %d s of load, so about %.0f ms apart in "
                "each partition)"
                % (n, r["committed"], duration, r["all"], r["offered"], r["p99"], r["vc"],
                   r["cores"], r["lg"], cons_ms, fwd_ms, verifies, redundant, blocks,
                   blocks / duration, duration, 1000.0 * duration * n / blocks))
    idle_n = int(os.environ.get("SCALE_IDLE", "64"))
    idle = None
    if idle_n > 0:
        with Cluster("scale_idle", "", partitions=idle_n) as c:
            time.sleep(3)
            t0, c0 = time.monotonic(), c.cpu_seconds()
            time.sleep(15)
            idle = (c.cpu_seconds() - c0) / (time.monotonic() - t0) / c.nodes
            log("scale %d idle partitions: %.3f cores per node" % (idle_n, idle))
    base = rows[counts[0]]
    for n in counts[1:]:
        r = rows[n]
        result("scale %d vs %d partitions" % (n, counts[0]),
               "%d: %.0f tx/s committed (%d of %d offered), worst p99 %.0f ms, %d VC, %.2f cores"
               % (n, r["committed"], r["all"], r["offered"], r["p99"], r["vc"], r["cores"]),
               "%d: %.0f tx/s committed (%d of %d), worst p99 %.0f ms, %d VC, %.2f cores"
               % (counts[0], base["committed"], base["all"], base["offered"], base["p99"],
                  base["vc"], base["cores"]),
               "committed %.2f, p99 %.2f, CPU %.2f" % (
                   r["committed"] / max(base["committed"], 1e-9),
                   r["p99"] / max(base["p99"], 1e-9), r["cores"] / max(base["cores"], 1e-9)),
               "committed = offered, 0 VC, p99 <= 2x, CPU <= 1.25x",
               "%d tx/s total split evenly, %d s, default config, 4 nodes; CPU = the 4 noded "
               "processes' utime+stime over the loadgen run; loadgen %.2f / %.2f cores; node 2's "
               "consensus-lane mean queueing delay %.1f / %.1f ms"
               % (rate, duration, r["lg"], base["lg"], r["cons_ms"], base["cons_ms"]))
    if idle is not None:
        result("idle partitions", "%d idle partitions: %.3f cores per node" % (idle_n, idle),
               "-", "-", "<= 0.05 core per node", "default config, 4 nodes, 15 s")


# 8. CPU per committed transaction vs the Ed25519 floor ---------------------------------------
def openssl_verify_us():
    """Microseconds per Ed25519 verification on this machine now (`openssl speed`, 2 s)."""
    r = subprocess.run(["openssl", "speed", "-seconds", "2", "ed25519"], capture_output=True,
                       text=True, check=True)
    for line in r.stdout.splitlines():
        if "Ed25519" in line:
            return 1e6 / float(line.split()[-1])  # the last column is verify/s
    raise RuntimeError("openssl speed ed25519: no Ed25519 line in %r" % r.stdout)


def cpu():
    """One partition, default config, 4 nodes: CPU per committed tx per node at CPU_RATE (800)
    and at CPU_SAT_RATE (2500: past saturation until 12-04, about 0.85 of it since; the held
    protocol of `goodput` reports the same figure at saturation with flow control on), each
    divided by an Ed25519 verification measured right before the run (every node verifies every
    tx once, so 1.0 is the floor)."""
    rate = int(os.environ.get("CPU_RATE", "800"))
    sat = int(os.environ.get("CPU_SAT_RATE", "2500"))
    for label, offer in (("at %d tx/s" % rate, rate), ("saturated (%d tx/s offered)" % sat, sat)):
        floor = openssl_verify_us()
        with Cluster("cpu", os.environ.get("CPU_EXTRA", ""), partitions=1) as c:
            t0, c0 = time.monotonic(), c.cpu_seconds()
            p, s = c.loadgen("cpu_%d" % offer, "p1:rate=%d" % offer, 25, drain=10,
                             presign=offer * 26)
            used, wall = c.cpu_seconds() - c0, time.monotonic() - t0
            h = p["p1"]
            per_tx = used / max(h["committed"], 1) / c.nodes * 1e6
        result("cpu per tx, %s" % label,
               "%.0f us CPU per committed tx per node (%d committed, %.0f tx/s; nodes %.2f cores; "
               "p99 %.0f ms, %d VC)" % (per_tx, h["committed"], h["committed"] / 25.0,
                                        used / wall, h["p99_ms"], h["view_changes"] or 0),
               "Ed25519 verify %.1f us (openssl speed, just before)" % floor,
               "%.2fx" % (per_tx / floor), "<= 2.0x at 800 tx/s, <= 1.5x saturated",
               "1 partition, default config, 4 nodes, 25 s; all 4 noded utime+stime over the "
               "loadgen run (drain included) / committed / 4; loadgen %.2f cores"
               % s["_loadgen_cores"])


# 9. State on disk: memory and execution over a large state ----------------------------------
def state_case(keys, disk, uniform):
    """One bench_state case in its own process (RSS is per process): (tx/s, RSS MiB, load s)."""
    r = subprocess.run([BENCH_STATE, "--benchmark_format=json",
                        "--benchmark_filter=keys:%d/disk:%d/uniform:%d/" % (keys, disk, uniform)],
                       capture_output=True, text=True, check=True)
    runs = json.loads(r.stdout)["benchmarks"]
    if len(runs) != 1:
        raise RuntimeError("bench_state keys:%d/disk:%d/uniform:%d: %d results"
                           % (keys, disk, uniform, len(runs)))
    b = runs[0]
    return b["items_per_second"], b["rss_mib"], b["load_s"]


def state():
    """Blocks of 500 txs executed and committed (fsync) over an empty state and over STATE_KEYS
    (1,000,000) loaded keys, with the state on disk behind the bounded cache (ours) and wholly in
    memory beside the ledger (the executor before, the baseline); each case its own process,
    STATE_REPS rounds of all cases interleaved (one case's single run varies by a third between
    runs on a shared machine), medians reported with the range. The empty state's overwrites are
    Puts of new keys at random positions (uniform:1); the sequential new keys that figures before
    2026-12-03 used (uniform:2) run too and are reported beside them."""
    keys = int(os.environ.get("STATE_KEYS", "1000000"))
    reps = max(1, int(os.environ.get("STATE_REPS", "3")))
    runs = {}
    cases = [(k, disk, uniform) for uniform in (0, 1) for disk in (1, 0) for k in (0, keys)]
    cases += [(0, 1, 2), (0, 0, 2)]
    for rep in range(reps):
        for k, disk, uniform in cases:
            r = state_case(k, disk, uniform)
            runs.setdefault((k, disk, uniform), []).append(r)
            log("state round %d keys=%d disk=%d uniform=%d: %.0f tx/s, RSS %.0f MiB, load %.0f s"
                % ((rep + 1, k, disk, uniform) + r))

    def med(case, i):
        values = sorted(r[i] for r in runs[case])
        return values[len(values) // 2]

    def spread(case):
        values = [r[0] for r in runs[case]]
        return "%.0f-%.0f" % (min(values), max(values))

    for uniform, workload in ((0, "transfers among 500 active senders"),
                              (1, "puts overwriting uniformly drawn loaded keys (empty: new keys "
                                  "drawn uniformly)")):
        e, f = (0, 1, uniform), (keys, 1, uniform)
        me, mf = (0, 0, uniform), (keys, 0, uniform)
        ratios = sorted(a[0] / b[0] for a, b in zip(runs[f], runs[e]))
        sequential = ""
        if uniform == 1:
            q, mq = (0, 1, 2), (0, 0, 2)
            sequential = ("; against new keys in sequence (the baseline before 2026-12-03): "
                          "empty %.0f tx/s (%s), %.2fx (per round %s); in memory %.0f tx/s, "
                          "%.2fx" % (med(q, 0), spread(q), med(f, 0) / med(q, 0),
                                     ", ".join("%.2f" % x for x in sorted(
                                         a[0] / b[0] for a, b in zip(runs[f], runs[q]))),
                                     med(mq, 0), med(mf, 0) / med(mq, 0)))
        result("state on disk, %s" % workload,
               "%d keys: %.0f tx/s (%s), RSS %.0f MiB; empty: %.0f tx/s (%s), RSS %.0f MiB"
               % (keys, med(f, 0), spread(f), med(f, 1), med(e, 0), spread(e), med(e, 1)),
               "state in memory: %d keys %.0f tx/s, RSS %.0f MiB; empty %.0f tx/s, RSS %.0f MiB"
               % (keys, med(mf, 0), med(mf, 1), med(me, 0), med(me, 1)),
               "throughput %.2fx of empty (median of medians; per round %s); RSS %.2fx of "
               "in-memory%s" % (med(f, 0) / med(e, 0), ", ".join("%.2f" % x for x in ratios),
                                med(f, 1) / med(mf, 1), sequential),
               ">= 0.8x of empty; RSS not growing with state beyond the caches",
               "bench_state, 500-tx blocks, fsync per block, default caches (64 MiB state, "
               "32 MiB block cache), steady state after a 5 s warm-up, tcmalloc; %d rounds" % reps)


# 9b. A wiped node rejoins under load: snapshot vs replay, against history length -------------
def partition_status(c, i, partition="p1"):
    """(height, earliest_height) of `partition` on node i (0-based) from `nodectl --json
    status`, or None while the node does not answer."""
    try:
        st = c.stats(i, "status")
    except (subprocess.TimeoutExpired, ValueError):
        return None
    for p in (st or {}).get("partitions", []):
        if p.get("name") == partition:
            return int(p.get("height", 0)), int(p.get("earliest_height", 0))
    return None


def rejoin_run(mode, blocks, rate, batch, limit_s):
    """One fresh 4-node localnet, one partition: node 4 is stopped and its data directory
    deleted (a new node with the old key), loadgen offers `rate` tx/s to nodes 1-3 until the
    chain holds `blocks` blocks, node 4 starts again while the load goes on. Returns the times
    to reach the height the others had at its start (caught up) and to follow their tip within
    2 blocks, how it joined, and the others' commits just before and during the join."""
    min_blocks = 200 if mode == "snapshot" else 2 ** 64 - 1
    extra = ("[partition *]\nconsensus { batch_max_txs: %d snapshot_sync_min_blocks: %d }"
             % (batch, min_blocks))
    with Cluster("rejoin_%s_%d" % (mode, blocks), extra, partitions=1) as c:
        c.ln("stop", "4")
        shutil.rmtree(os.path.join(c.net, "node4", "data"))
        # Sender keys per sender: the state stays the same size (256 keys) while history grows.
        name = "rejoin_%s_%d" % (mode, blocks)
        run = c.loadgen_start(name, "p1:rate=%d,keys=per_sender" % rate, limit_s, drain=5,
                              nodes=[0, 1, 2])
        try:
            t_load = time.monotonic()
            tip0 = 0
            while time.monotonic() - t_load < limit_s - 30:
                st = partition_status(c, 0)
                tip0 = st[0] if st else tip0
                if tip0 >= blocks:
                    break
                time.sleep(0.5)
            history_s = time.monotonic() - t_load
            if tip0 < blocks:
                log("rejoin %s: the chain reached only %d of %d blocks in %.0f s; joining anyway"
                    % (mode, tip0, blocks, history_s))
            others0 = sum(proc_cpu_seconds(pid) for pid in c.pids[:3])
            t_start = time.monotonic()
            starter = threading.Thread(target=lambda: c.ln("restart", "4", "--timeout", "120",
                                                             check=False), daemon=True)
            starter.start()
            caught = follow = None
            earliest = 0
            while time.monotonic() - t_start < 150 and run["proc"].poll() is None:
                st, top = partition_status(c, 3), partition_status(c, 0)
                now = time.monotonic() - t_start
                if st:
                    earliest = max(earliest, st[1])
                    if caught is None and st[0] >= tip0:
                        caught = now
                    if caught is not None and top and st[0] + 2 >= top[0]:
                        follow = now
                        break
                time.sleep(0.2)
            t_end = time.monotonic()
            # How node 4 admitted the bodies it fetched: checked, or on a certified batch.
            st4 = c.stats(3) or {}
            fetched = (partition_sum(st4, ["p1"], "fetched_txs_checked"),
                       partition_sum(st4, ["p1"], "fetched_txs_certified"))
            # The joining node's CPU (its process started with the join) and the others' during it.
            try:
                with open(os.path.join(c.net, "node4", "noded.pid")) as f:
                    joiner = proc_cpu_seconds(int(f.read().split()[0])) / (t_end - t_start)
            except (OSError, ValueError):
                joiner = None
            others = sum(proc_cpu_seconds(pid) for pid in c.pids[:3]) - others0
            others /= 3 * (t_end - t_start)
            # 10 s more of load, so that loadgen's seconds cover the join and its commits.
            while time.monotonic() < t_end + 10 and run["proc"].poll() is None:
                time.sleep(0.2)
            run["proc"].send_signal(signal.SIGINT)
            p, _ = c.loadgen_finish(run)
        except BaseException:  # never leave loadgen running on the shared cores
            if run["proc"].poll() is None:
                run["proc"].kill()
                run["proc"].wait()
            raise
        starter.join(timeout=30)
        h = p["p1"]
        # loadgen's second 0 is about when it was started (it signs as it goes: no presign).
        rel = lambda t: t - run["t0"]
        before = (max(0, rel(t_start) - 15), rel(t_start))
        during = (rel(t_start), rel(t_end) + 1)
        return {"mode": mode, "blocks": tip0, "history_s": history_s, "caught_s": caught,
                "follow_s": follow, "snapshot_at": earliest,
                "rate_before": window_rate(h, "committed", *before),
                "rate_during": window_rate(h, "committed", *during),
                "p99_before": window_p99(h, *before)[0], "p99_during": window_p99(h, *during)[0],
                "vc": h["view_changes"] or 0, "joiner_cores": joiner, "others_cores": others,
                "fetched_checked": fetched[0], "fetched_certified": fetched[1]}


def rejoin():
    """A wiped node joining a 4-node cluster under load, by a snapshot (the default path for a
    node far behind) and by replaying every block (snapshot_sync_min_blocks above the chain's
    length), after REJOIN_BLOCKS blocks of history (default 1000,4000) at a fixed state: the
    snapshot's time should not grow with history, the replay's should (issue 19, item 3)."""
    rate = int(os.environ.get("REJOIN_RATE", "800"))
    batch = int(os.environ.get("REJOIN_BATCH", "10"))
    lengths = [int(x) for x in os.environ.get("REJOIN_BLOCKS", "1000,4000").split(",")]
    modes = os.environ.get("REJOIN_MODES", "snapshot,replay").split(",")
    if not modes or any(m not in ("snapshot", "replay") for m in modes):
        raise RuntimeError("REJOIN_MODES: snapshot and/or replay, got %r" % modes)
    runs = []
    for blocks in lengths:
        # A bound on each run: the history at no less than a fifth of rate / batch blocks/s,
        # plus the join.
        limit = int(blocks / max(1.0, rate / batch / 5)) + 200
        for mode in modes:
            r = rejoin_run(mode, blocks, rate, batch, limit)
            log("rejoin %s after %d blocks (%.0f s of load): caught up %s s, following %s s, "
                "earliest height %d; the others %.0f -> %.0f tx/s, p99 (per-second, weighted) "
                "%.0f -> %.0f ms, %d VC; during the join node 4 used %s cores, the others %.2f "
                "each; node 4's fetched bodies: %d checked, %d taken on a certified batch"
                % (mode, r["blocks"], r["history_s"], r["caught_s"], r["follow_s"],
                   r["snapshot_at"], r["rate_before"], r["rate_during"], r["p99_before"],
                   r["p99_during"], r["vc"], "%.2f" % r["joiner_cores"]
                   if r["joiner_cores"] is not None else "?", r["others_cores"],
                   r["fetched_checked"], r["fetched_certified"]))
            runs.append(r)
    fmt = lambda r: ("%s after %d blocks: caught up in %s, following the tip in %s (%s); the "
                     "others %.0f -> %.0f tx/s, p99 %.0f -> %.0f ms, %d VC; node 4 %s cores"
                     % (r["mode"], r["blocks"],
                        "%.2f s" % r["caught_s"] if r["caught_s"] is not None else "NOT",
                        "%.2f s" % r["follow_s"] if r["follow_s"] is not None else "NOT",
                        "snapshot at %d" % r["snapshot_at"] if r["snapshot_at"] else
                        "replayed from genesis", r["rate_before"], r["rate_during"],
                        r["p99_before"], r["p99_during"], r["vc"],
                        "%.2f" % r["joiner_cores"] if r["joiner_cores"] is not None else "?"))
    snap = [r for r in runs if r["mode"] == "snapshot"]
    rep = [r for r in runs if r["mode"] == "replay"]
    ratio = lambda rs: ("%.2fx" % (rs[-1]["caught_s"] / rs[0]["caught_s"])
                        if len(rs) > 1 and rs[0]["caught_s"] and rs[-1]["caught_s"] else "-")
    result("wiped node rejoins under load (snapshot)", "; ".join(fmt(r) for r in snap),
           "; ".join(fmt(r) for r in rep),
           "catch-up time at the longest / shortest history: snapshot %s, replay %s"
           % (ratio(snap), ratio(rep)),
           "snapshot time flat in history; the others keep committing",
           "4 nodes, 1 partition, %d tx/s to nodes 1-3 (keys per sender: a 256-key state), "
           "batch_max_txs %d; node 4's data directory deleted, started at the given height"
           % (rate, batch))


# 9c. Commit subscription fan-out: what WatchCommits streams cost the node they watch ----------
WATCH_FANOUT = os.path.join(BUILD, "tools", "watch_fanout")


def fanout_run(streams, txs, rate, seconds):
    """One fresh 4-node localnet, one partition at `rate` tx/s for `seconds`, with `streams`
    WatchCommits streams (with tx bodies and receipts if `txs`) open on node 1 from 2 s before
    the load until 20 s after its offers end (a late subscriber catches up then). Node 1's CPU
    is taken over that whole span, the same length with no streams."""
    extra = "[partition *]\nwatch { max_watchers: %d }" % min(100000, max(64, streams + 16))
    span = seconds + 20
    with Cluster("fanout_%d" % streams, extra, partitions=1) as c:
        watcher = None
        try:
            t_w0, n1, all0 = time.monotonic(), proc_cpu_seconds(c.pids[0]), c.cpu_seconds()
            if streams:
                # FANOUT_NICE: the subscribers' niceness, so that on a shared machine they can be
                # kept from competing with the nodes for the cores.
                nice = int(os.environ.get("FANOUT_NICE", "0"))
                cmd = (["nice", "-n", str(nice)] if nice else []) + [
                       WATCH_FANOUT, "--target", c.client.split(",")[0], "--partition", "p1",
                       "--streams", str(streams), "--duration-s", str(span), "--json"]
                if txs:
                    cmd += ["--include-txs", "--include-receipts"]
                watcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
            time.sleep(2)  # the streams open before the load starts
            p, s = c.loadgen("fanout_%d" % streams, "p1:rate=%d" % rate, seconds, drain=5,
                             presign=rate * (seconds + 1))
            w, client = {}, 0.0
            if watcher is not None:
                # The subscribers' own CPU (they share the machine's 2 cores), read before the
                # process exits, then their report.
                while watcher.poll() is None and time.monotonic() < t_w0 + span - 1:
                    time.sleep(0.2)
                try:
                    client = proc_cpu_seconds(watcher.pid)
                except OSError:
                    client = 0.0
                out, err = watcher.communicate(timeout=60)
                if watcher.returncode != 0:
                    raise RuntimeError("watch_fanout exited %d: %s" % (watcher.returncode, err))
                w = json.loads(out)
            else:
                while time.monotonic() < t_w0 + span:
                    time.sleep(0.2)
            wall = time.monotonic() - t_w0
            node1 = (proc_cpu_seconds(c.pids[0]) - n1) / wall
            others = (c.cpu_seconds() - all0) / wall - node1
        finally:
            if watcher is not None and watcher.poll() is None:
                watcher.kill()
                watcher.wait()
        h = p["p1"]
        return {"streams": streams, "txs": txs, "node1": node1, "others": others / 3,
                "committed": h["committed"] / seconds, "p99": h["p99_ms"],
                "vc": h["view_changes"] or 0, "responses": w.get("responses_total", 0),
                "bytes": w.get("bytes_total", 0), "alive": w.get("alive_at_end", 0),
                "cut": w.get("ended_early", {}), "spread_p99": w.get("spread_ms_p99"),
                "per_stream": (w.get("responses_per_stream_min", 0),
                               w.get("responses_per_stream_max", 0), w.get("blocks_seen", 0)),
                "wall": wall, "lg": s["_loadgen_cores"], "client": client / wall}


def fanout():
    """Commit subscribers on one node: FANOUT_STREAMS (default 0,100,1000) WatchCommits streams
    on node 1 of a 4-node localnet at FANOUT_RATE (800) tx/s, block hashes only, then the
    largest count again with tx bodies and receipts, and no streams again; node 1's CPU beside
    the other nodes' mean, what it delivered, and the commit p99 (issue 19, item 4)."""
    rate = int(os.environ.get("FANOUT_RATE", "800"))
    seconds = int(os.environ.get("FANOUT_SECONDS", "25"))
    counts = [int(x) for x in os.environ.get("FANOUT_STREAMS", "0,100,1000").split(",")]
    plan = [(n, False) for n in counts] + [(max(counts), True), (0, False)]
    runs = []
    for n, txs in plan:
        r = fanout_run(n, txs, rate, seconds)
        log("fanout %d streams%s: node 1 %.3f cores over %.0f s (others %.3f each; subscribers "
            "%.3f), %d responses (%.1f MB; per stream %d-%d of %d blocks seen), %d open at the "
            "end, cut %s, spread p99 %s ms; committed %.0f tx/s, p99 %.0f ms, %d VC"
            % ((n, " with txs" if txs else "", r["node1"], r["wall"], r["others"], r["client"],
                r["responses"], r["bytes"] / 1e6) + r["per_stream"] +
               (r["alive"], r["cut"] or "none", r["spread_p99"], r["committed"], r["p99"],
                r["vc"])))
        runs.append(r)
    base = [r for r in runs if r["streams"] == 0]
    b_node1 = sum(r["node1"] for r in base) / len(base)
    b_p99 = sum(r["p99"] for r in base) / len(base)
    rows = []
    for r in runs:
        if r["streams"] == 0:
            continue
        extra_cores = r["node1"] - b_node1
        rows.append("%d streams%s: node 1 +%.3f cores (%.0f us per delivered block), %.1f MB/s "
                    "out, %d-%d of %d blocks per stream, %d of %d open at the end, subscribers' "
                    "process %.2f cores, commit p99 %.0f ms (%.2fx)"
                    % ((r["streams"], " with txs and receipts" if r["txs"] else "", extra_cores,
                        extra_cores * r["wall"] / max(1, r["responses"]) * 1e6,
                        r["bytes"] / r["wall"] / 1e6) + r["per_stream"] +
                       (r["alive"], r["streams"], r["client"], r["p99"],
                        r["p99"] / max(b_p99, 1e-9))))
    result("commit subscription fan-out", "; ".join(rows),
           "no streams: node 1 %s cores, commit p99 %s ms" % (
               ", ".join("%.3f" % r["node1"] for r in base),
               ", ".join("%.0f" % r["p99"] for r in base)),
           "node 1's extra CPU per delivered block (above)", "no effect on consensus",
           "4 nodes, 1 partition, %d tx/s, %d s; streams from tools/watch_fanout on node 1 "
           "(callback reactors, 100 per connection) from 2 s before the load to 20 s after it; "
           "CPU over that span" % (rate, seconds))


# 10. Retry-after hints: measured vs fixed ----------------------------------------------------
RETRY_MODES = {  # node config, hot's pool config
    # Measured hints whose refusals carry retry tickets (pool.retry_reserve_fraction 0.1).
    "reserved": ("", " retry_reserve_fraction: 0.1"),
    # The default: measured hints, no reservations.
    "measured": ("", ""),
    "fixed": ("resources { fixed_retry_after: true }", ""),
}


def retry_run(name, mode, honour, rate, seconds):
    # in_flight high enough that the pool gate, whose hint is measured, is what refuses.
    node_cfg, pool_cfg = RETRY_MODES[mode]
    extra_cfg = "%s\n[partition *]\n%s\n[partition hot]\npool { max_txs: 3000%s }\n%s" % (
        node_cfg, LANES, pool_cfg, hot_chain(None, 0, in_flight=8192))
    with Cluster(name, extra_cfg) as c:
        extra = ["--honour-retry-after"] if honour else []
        p, _ = c.loadgen(name, "hot:rate=%d" % rate, seconds, drain=15, presign=rate * 4,
                         extra=extra)
        tickets = {}
        for i in range(4):  # the nodes' retry reservations (RetryHintStats), summed
            for o in named_objects(c.stats(i) or {}, ("hot",)):
                h = o.get("retry_hints") or o.get("retryHints") or {}
                for k in ("issued", "redeemed", "refused", "expired", "unknown"):
                    v = h.get("tickets_" + k, h.get("tickets" + k.capitalize(), 0))
                    tickets[k] = tickets.get(k, 0) + int(v)
        p["hot"]["tickets"] = tickets
        return p["hot"]


def retry_summary(h, seconds):
    after = h.get("reoffers_after_hint", 0)
    acc = h.get("accepted_after_hint", 0) / max(after, 1)
    t = h.get("tickets") or {}
    tickets = ("; tickets issued %d, redeemed %d, refused %d, expired %d, unknown %d"
               % tuple(t.get(k, 0) for k in ("issued", "redeemed", "refused", "expired",
                                              "unknown")) if t else "")
    return acc, ("accepted on re-offer after the hint %.1f%% (%d of %d), mean hint %.0f ms; "
                 "%d rejected for %d committed (%.2f per commit), %.0f tx/s, p99 %.0f ms, %d VC%s"
                 % (100 * acc, h.get("accepted_after_hint", 0), after, h.get("mean_hint_ms", 0),
                    h["rejected"], h["committed"], h["rejected"] / max(h["committed"], 1),
                    h["committed"] / seconds, h["p99_ms"], h["view_changes"] or 0, tickets))


def retry():
    """A pool-bound flood (hot, pool 3000, gates on, in_flight 8192, no rate limit) offered
    RETRY_RATE (6000) tx/s for RETRY_SECONDS (30), loadgen honouring retry-after (and sending
    retry tickets back): hints from the measured commit rate with retry reservations
    (pool.retry_reserve_fraction 0.1), the same hints without (the default), and the fixed ones
    (resources.fixed_retry_after); RETRY_MODES (all three) interleaved, RETRY_REPS (1) rounds."""
    rate = int(os.environ.get("RETRY_RATE", "6000"))
    seconds = int(os.environ.get("RETRY_SECONDS", "30"))
    reps = int(os.environ.get("RETRY_REPS", "1"))
    modes = os.environ.get("RETRY_MODES", "reserved,measured,fixed").split(",")
    for i in range(reps):
        runs = {m: retry_run("retry_%s_%d" % (m, i), m, True, rate, seconds) for m in modes}
        texts = {m: retry_summary(h, seconds) for m, h in runs.items()}
        base = "fixed" if "fixed" in runs else modes[-1]
        for m in modes:
            if m == base:
                continue
            acc, text = texts[m]
            acc_b, text_b = texts[base]
            waste = runs[m]["rejected"] / max(runs[m]["committed"], 1)
            waste_b = runs[base]["rejected"] / max(runs[base]["committed"], 1)
            result("retry-after accuracy (round %d): %s vs %s" % (i + 1, m, base),
                   "%s hints: %s" % (m, text), "%s hints: %s" % (base, text_b),
                   "acceptance %.2fx; rejections per commit %.2fx; goodput %.2fx"
                   % (acc / max(acc_b, 1e-9), waste / max(waste_b, 1e-9),
                      runs[m]["committed"] / max(runs[base]["committed"], 1)),
                   "hint predicts acceptance; fewer wasted offers at equal goodput",
                   "hot pool 3000 (high water 0.9), in_flight 8192, health+pool gates, no rate "
                   "limit; %d tx/s offered for %d s, loadgen --honour-retry-after" % (rate, seconds))


# 11. Read flood: the read chain vs no read limit -------------------------------------------
READ_LIMIT = 200  # reads/s per node that the steady partition's read chain admits


READ_HOLD_MS = 3000  # the held mode's read_hold.max_wait_ms (below loadgen's 5 s call deadline)


def reads_run(name, mode, flood, seconds, rpc="account", flood_client="same"):
    """mode: "held" (the read chain, reads refused for now wait: read_hold), "refused" (the read
    chain, refusals at once) or "none" (no read limit). flood_client: "same" (one loadgen for the
    writes and the reads), "own" (the reads from a loadgen of their own) or "sched_idle" (that
    loadgen at SCHED_IDLE, on the CPU the nodes and the writes' loadgen leave)."""
    chain = ('read_interceptor { stages { name: "read_rate" rate { rate_per_second: %d '
             'burst: 50 } } }' % READ_LIMIT if mode != "none" else
             'read_interceptor { stages { name: "read_rate" rate { unlimited: true } } }')
    if mode == "held":
        chain += " read_hold { max_wait_ms: %d }" % READ_HOLD_MS
    streams = int(os.environ.get("READS_MAX_STREAMS", "0"))
    extra = "%s[partition *]\n%s\n[partition steady]\n%s" % (
        "client_max_streams: %d\n" % streams if streams else "", LANES, chain)
    idle, busy = "steady.p99@4s-14s", "steady.p99@18s-%ds" % seconds
    reads = "reads=%d,reads_start=15s,read_rpc=%s" % (flood, rpc)
    in_flight = ["--reads-in-flight", os.environ.get("READS_IN_FLIGHT", "512")]
    with Cluster(name, extra) as c:
        # Commits from WatchCommits streams (opened once), not polled reads the flood would crowd.
        if flood_client == "same":
            run = c.loadgen_start(name, "steady:rate=200," + reads, seconds,
                                  presign=200 * (seconds + 2),
                                  expect=["%s<=1.2*%s" % (busy, idle)],
                                  extra=["--commits", "watch"] + in_flight)
        else:
            run = c.loadgen_start(name, "steady:rate=200", seconds, presign=0,
                                  expect=["%s<=1.2*%s" % (busy, idle)],
                                  extra=["--commits", "watch"])
        flood_run = start_flood_loadgen(c, flood_client, name + "_reads",
                                        "steady:rate=0," + reads, seconds, extra=in_flight)
        # CPU in the flood, seconds 20 to seconds-2 after loadgen started (its pre-signing first).
        cpu = {}
        try:
            time.sleep(max(0, run["t0"] + 20 - time.monotonic()))
            n0, (l0, f0) = c.cpu_seconds(), loadgens_cpu_seconds(run, flood_run)
            w0 = time.monotonic()
            time.sleep(max(0, run["t0"] + seconds - 2 - time.monotonic()))
            n1, (l1, f1) = c.cpu_seconds(), loadgens_cpu_seconds(run, flood_run)
            w1 = time.monotonic()
            cpu = {"nodes": (n1 - n0) / (w1 - w0), "loadgen": (l1 - l0) / (w1 - w0),
                   "flood_loadgen": (f1 - f0) / (w1 - w0)}
        except (OSError, ValueError):
            pass
        p, s = c.loadgen_finish(run)
        if flood_run:
            reads_p = c.loadgen_finish(flood_run)[0]["steady"]
            for k in ("reads_offered", "reads_ok", "reads_rejected", "reads_failed",
                      "reads_client_dropped", "read_p50_ms", "read_p99_ms"):
                p["steady"][k] = reads_p.get(k, 0)
        held = {}
        try:
            for n in c.stats(1, "stats").get("partitions", []):
                if n.get("name") == "steady":
                    held = n.get("readHold", {}) or n.get("read_hold", {})
        except Exception:  # pylint: disable=broad-except
            pass
    st = p["steady"]
    st["held"] = held
    st["cpu"] = cpu
    m = expect_value(s["_stdout"], busy)
    pf, pi = (m[0], m[1] / 1.2) if m else (window_p99(st, 18, seconds)[0],
                                           window_p99(st, 4, 14)[0])
    return st, pi, pf


def reads():
    """Writes to steady (200 tx/s) while a read flood (GetAccount) hits the same partition from
    15 s at READS_FLOOD (10x the read chain's cluster-wide limit, 4 x READ_LIMIT): write commit p99
    in the flood vs before it, with the read chain holding the reads it refuses for now
    (read_hold), refusing them at once, and with no read limit (READS_MODES, default all three,
    in that order); READS_REPS (1) interleaved rounds."""
    flood = int(os.environ.get("READS_FLOOD", str(10 * 4 * READ_LIMIT)))
    seconds = int(os.environ.get("READS_SECONDS", "40"))
    rpc = os.environ.get("READS_RPC", "account")
    modes = os.environ.get("READS_MODES", "held,refused,none").split(",")
    flood_client = flood_client_from_env("READS_FLOOD_CLIENT")
    labels = {"held": "read chain %d reads/s per node, refused reads held up to %d ms"
                      % (READ_LIMIT, READ_HOLD_MS),
              "refused": "read chain %d reads/s per node, refused at once" % READ_LIMIT,
              "none": "no read limit"}

    def text(st, pi, pf):
        held = st.get("held", {})
        return ("write p99 %.0f ms in the flood vs %.0f ms before (%.2fx); reads ok %d, "
                "refused %d, not sent %d, read p99 %.0f ms; node 2 held %s (answered %s, ran out "
                "%s, full %s); in the flood nodes %.2f cores, loadgen %.2f%s; %d VC"
                % (pf, pi, pf / max(pi, 1e-9), st.get("reads_ok", 0),
                   st.get("reads_rejected", 0), st.get("reads_client_dropped", 0),
                   st.get("read_p99_ms", 0), held.get("held", 0), held.get("answered", 0),
                   held.get("expired", 0), held.get("full", 0), st["cpu"].get("nodes", 0),
                   st["cpu"].get("loadgen", 0),
                   flood_client_note(flood_client, st["cpu"].get("flood_loadgen", 0)),
                   st["view_changes"] or 0))
    for i in range(int(os.environ.get("READS_REPS", "1"))):
        runs = [(m, reads_run("reads_%s_%d" % (m, i), m, flood, seconds, rpc, flood_client))
                for m in modes]
        ours = runs[0]
        result("read flood isolation (round %d)" % (i + 1),
               labels[ours[0]] + ": " + text(*ours[1]),
               "; ".join(labels[m] + ": " + text(*r) for m, r in runs[1:]),
               "flood/idle write p99 " + " vs ".join(
                   "%.2f (%s)" % (r[2] / max(r[1], 1e-9), m) for m, r in runs),
               "<= 1.2 with the read chain",
               "steady 200 tx/s writes, %d %s reads/s on steady from 15 s (10x the read "
               "chain's 4 x %d), %d s" % (flood, "GetBlock (latest, with bodies)"
                                          if rpc == "block" else "GetAccount", READ_LIMIT,
                                          seconds))


# 12. Live partitions ------------------------------------------------------------------------
TXSEND = os.path.join(BUILD, "tests", "localnet_txsend")
LIVE_ORDERS = ('id: 9 name: "orders" share { weight: 2 } '
               'consensus { batch_timeout_ms: 10 checkpoint_interval: 2 }')


def live_ops(c, t0, out):
    """From t0 + 15 s: create `orders` on all 4 nodes, commit into it, stop it on node 4 (22 s),
    commit on the other 3, start it on node 4 (28 s), commit again and time node 4's catch-up.
    Fills `out` with the timings (seconds); raises nothing (errors go into out["error"])."""
    admins, tokens = c.admin.split(","), c.tokens.split(",")
    clients = c.client.split(",")

    def ctl(node, *args):
        t = time.monotonic()
        cmd = [NODECTL, "--timeout-ms", "60000", "--json"] + (
            list(args) + ["--admins", c.admin, "--token-files", c.tokens] if node == 0 else
            ["--admin", admins[node - 1], "--token-file", tokens[node - 1]] + list(args))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("nodectl %s: %s %s" % (" ".join(args), r.stdout, r.stderr))
        return time.monotonic() - t

    def send(node, count):
        t = time.monotonic()
        r = subprocess.run([TXSEND, "--target", clients[node - 1], "--partition-id", "9",
                            "--count", str(count), "--timeout-ms", "30000"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("txsend: %s %s" % (r.stdout, r.stderr))
        return time.monotonic() - t

    def height(node):
        r = subprocess.run([NODECTL, "--admin", admins[node - 1], "--token-file", tokens[node - 1],
                            "--json", "status"], capture_output=True, text=True, timeout=20)
        for p in json.loads(r.stdout).get("partitions", []) if r.returncode == 0 else []:
            if p.get("name") == "orders":
                return int(p.get("height", 0) or 0)
        return 0

    try:
        time.sleep(max(0, t0 + 15 - time.monotonic()))
        out["create_s"] = ctl(0, "create-partition", "--config", LIVE_ORDERS)
        out["first_commit_s"] = send(1, 10)
        time.sleep(max(0, t0 + 22 - time.monotonic()))
        out["stop_s"] = ctl(4, "stop-partition", "orders")
        send(2, 10)
        send(3, 10)
        time.sleep(max(0, t0 + 28 - time.monotonic()))
        out["start_s"] = ctl(4, "start-partition", "orders")
        t = time.monotonic()
        send(1, 10)
        send(2, 10)
        target = height(1)
        while height(4) < target and time.monotonic() - t < 30:
            time.sleep(0.1)
        out["catch_up_s"] = time.monotonic() - t if height(4) >= target else None
        out["orders_height"] = target
    except Exception as e:  # reported in the result row
        out["error"] = str(e)


def live():
    """steady at 200 tx/s for 40 s on a 4-node localnet; from 15 s a partition is created on
    every node (nodectl --admins), committed into, stopped on node 4 and started again there.
    steady's commit p99 over 15-35 s against the same run with no partition changes, LIVE_REPS
    (1) interleaved pairs; the create, stop and start call times, the new partition's first
    commit and node 4's catch-up."""
    seconds = 40
    extra = "[partition *]\n%s" % LANES
    idle, busy = "steady.p99@4s-14s", "steady.p99@15s-35s"
    for i in range(int(os.environ.get("LIVE_REPS", "1"))):
        runs = {}
        for ops in (True, False):
            name = "live_%s_%d" % ("ops" if ops else "none", i)
            with Cluster(name, extra) as c:
                timings = {}
                th = None
                if ops:
                    th = threading.Thread(target=live_ops, args=(c, time.monotonic(), timings))
                    th.start()
                try:
                    p, s = c.loadgen(name, "steady:rate=200", seconds,
                                     presign=200 * (seconds + 2),
                                     expect=["%s<=1.2*%s" % (busy, idle)])
                finally:
                    if th:
                        th.join()
            st = p["steady"]
            m = expect_value(s["_stdout"], busy)
            runs[ops] = (st, m[0] if m else window_p99(st, 15, 35)[0],
                         m[1] / 1.2 if m else window_p99(st, 4, 14)[0], timings)
        st, p_ops, idle_ops, t = runs[True]
        st0, p_none, idle_none, _ = runs[False]
        if "error" in t:
            note = "ops failed: %s" % t["error"][:200]
        else:
            note = ("create on 4 nodes %.2f s (one nodectl --admins call), first 10 txs committed "
                    "%.2f s after; stop on node 4 %.2f s, start %.2f s, node 4 caught up to "
                    "height %d %s after start; steady 200 tx/s, 40 s"
                    % (t["create_s"], t["first_commit_s"], t["stop_s"], t["start_s"],
                       t["orders_height"], "in %.2f s" % t["catch_up_s"]
                       if t.get("catch_up_s") is not None else "NOT within 30 s"))
        result("live partition changes under load (round %d)" % (i + 1),
               "steady p99 %.0f ms in 15-35 s with the changes (%.0f ms before; %d VC)"
               % (p_ops, idle_ops, st["view_changes"] or 0),
               "%.0f ms in 15-35 s without (%.0f ms before; %d VC)"
               % (p_none, idle_none, st0["view_changes"] or 0),
               "%.2f" % (p_ops / max(p_none, 1e-9)), "<= 1.2", note)


# 13. Memory pressure -----------------------------------------------------------------------
def memory_cgroup():
    """(directory, version) of this process's memory cgroup (v2 when its memory controller is
    there, else v1), or (None, reason)."""
    v1 = v2 = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            ident, controllers, path = line.rstrip("\n").split(":", 2)
            if ident == "0" and controllers == "":
                v2 = path
            if "memory" in controllers.split(","):
                v1 = path
    if v2 is not None:
        for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
            d = mount + ("" if v2 == "/" else v2)
            if os.path.exists(d + "/memory.current"):
                return d, 2
    if v1 is not None:
        d = "/sys/fs/cgroup/memory" + ("" if v1 == "/" else v1)
        if os.path.exists(d + "/memory.usage_in_bytes"):
            return d, 1
    return None, "no memory cgroup (v2 memory controller or v1 memory hierarchy) found"


class MemoryGroup:
    """A child memory cgroup with a limit; processes moved in; peak and OOM kills read back."""

    def __init__(self, name, limit):
        parent, self.version = memory_cgroup()
        if parent is None:
            raise RuntimeError(self.version)
        self.dir = os.path.join(parent, "noded_bench_%s_%d" % (name, os.getpid()))
        os.mkdir(self.dir)
        v = self.version
        try:
            self.write("memory.max" if v == 2 else "memory.limit_in_bytes", str(limit))
        except OSError:
            os.rmdir(self.dir)
            raise
        if v == 1:
            try:  # charges made before the move follow it, where the kernel still can
                self.write("memory.move_charge_at_immigrate", "3")
            except OSError:
                pass
        self.peak = 0
        self.kills = 0
        self.stop = threading.Event()
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()

    def write(self, f, text):
        with open(os.path.join(self.dir, f), "w") as out:
            out.write(text)

    def read(self, f):
        try:
            with open(os.path.join(self.dir, f)) as inp:
                return inp.read()
        except OSError:
            return ""

    def current(self):
        t = self.read("memory.current" if self.version == 2 else "memory.usage_in_bytes")
        return int(t) if t.strip() else 0

    def sample(self):
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, self.current())

    def add(self, pid):
        self.write("cgroup.procs", str(pid))

    def oom_kills(self):
        text = self.read("memory.events" if self.version == 2 else "memory.oom_control")
        m = re.search(r"oom_kill (\d+)", text)
        return int(m.group(1)) if m else 0

    def close(self):
        self.stop.set()
        self.sampler.join()
        self.kills = self.oom_kills()  # before the group's files go
        if self.version == 1:
            m = self.read("memory.max_usage_in_bytes").strip()
            if m:
                self.peak = max(self.peak, int(m))
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


MEMORY_LIMIT_MIB = 400


def memory_run(name, disabled, rate, seconds, limit):
    """One flood with node 1 in a memory group of `limit` bytes: (summary, survived, peak bytes,
    OOM kills, node 1's memory status or None)."""
    extra = ("[node]\nresources { memory_bytes: 4294967296 memory_pressure { disabled: %s } }\n"
             "[partition *]\npool { max_txs: 1000000 max_bytes: 2147483648 }\n%s"
             % ("true" if disabled else "false", LANES))
    group = MemoryGroup(name, limit)
    try:
        with Cluster(name, extra, partitions=1) as c:
            group.add(c.pids[0])
            p, s = c.loadgen(name, "p1:rate=%d,tx_bytes=16384" % rate, seconds, drain=5)
            alive = os.path.exists("/proc/%d" % c.pids[0])
            status = None
            if alive:
                r = subprocess.run([NODECTL, "--admin", c.admin.split(",")[0], "--token-file",
                                    c.tokens.split(",")[0], "--json", "status"],
                                   capture_output=True, text=True, timeout=20)
                status = json.loads(r.stdout).get("memory") if r.returncode == 0 else None
    finally:
        group.close()
    return p["p1"], alive, group.peak, group.kills, status


def memory():
    """Node 1 of a 4-node localnet runs in a memory cgroup of MEMORY_LIMIT_MIB (400) MiB while
    its config promises 4 GiB (resources.memory_bytes) and a 2 GiB pool: a flood of 16 KiB txs at
    MEMORY_RATE (2000) tx/s for MEMORY_SECONDS (40), with memory pressure on (the default) and
    off. Does node 1 survive, how close to its limit did it get, what did the cluster commit."""
    rate = int(os.environ.get("MEMORY_RATE", "2000"))
    seconds = int(os.environ.get("MEMORY_SECONDS", "40"))
    limit = int(os.environ.get("MEMORY_LIMIT_MIB", str(MEMORY_LIMIT_MIB))) << 20
    if memory_cgroup()[0] is None:
        raise RuntimeError("memory scenario: " + memory_cgroup()[1])
    on = memory_run("memory_on", False, rate, seconds, limit)
    off = memory_run("memory_off", True, rate, seconds, limit)

    def text(r):
        p, alive, peak, kills, status = r
        extra = ""
        if status:
            extra = "; pressure %.2f, pool scale %.2f, refused writes %s, dropped %s" % (
                status.get("pressure", 0), status.get("pool_scale", 1),
                status.get("refused_writes", 0), status.get("dropped_messages", 0))
        return ("node 1 %s, peak %.0f MiB of %d, %d OOM kills; committed %.0f tx/s, %d VC%s"
                % ("alive" if alive else "DEAD", peak / 2**20, limit >> 20, kills,
                   window_rate(p, "committed", 0, seconds), p["view_changes"] or 0, extra))
    result("memory pressure (node 1 in a %d MiB cgroup)" % (limit >> 20),
           "pressure on: " + text(on), "pressure off: " + text(off),
           "survived %s vs %s" % (on[1], off[1]), "node 1 survives with pressure on",
           "16 KiB txs at %d tx/s for %d s; memory_bytes 4 GiB, pool 2 GiB; cgroup v%d"
           % (rate, seconds, memory_cgroup()[1]))


# 14. Adaptive lane weights: on vs off under a saturating flood -------------------------------
def lane_stats(stats, partition, lane):
    """The LaneStats dict of `lane` in `partition` of a `nodectl --json stats` object, or {}."""
    found = [x for x in partition_items(stats, partition, "lanes") if x.get("name") == lane]
    return found[0] if found else {}


def lanes_run(name, adaptive, rate, seconds, weights):
    extra = "[partition *]\ndispatcher { %s adaptive_weights { enabled: %s } }\n" \
            "[partition hot]\npool { max_txs: 3000 }\n%s" % (
                ("lane_weights { %s }" % weights) if weights else "",
                "true" if adaptive else "false", hot_chain(None, 0, in_flight=8192))
    with Cluster(name, extra) as c:
        stop, peaks = threading.Event(), {}

        def sampler():  # the highest scheduled consensus weight any node reached
            while not stop.wait(2):
                for i in range(c.nodes):
                    try:
                        st = c.stats(i)
                    except Exception:  # a node busy past the timeout: skip the sample
                        continue
                    for part in ("hot", "steady"):
                        w = lane_stats(st, part, "consensus").get("effective_weight", 0)
                        peaks[part] = max(peaks.get(part, 0), w)
        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        p, s = c.loadgen(name, "hot:rate=%d;steady:rate=20" % rate, seconds, drain=10,
                         presign=rate * 8)
        stop.set()
        t.join()
        row = {"steady_p99": p["steady"]["p99_ms"], "hot_rate": p["hot"]["committed_rate"],
               "hot_p99": p["hot"]["p99_ms"], "steady_rate": p["steady"]["committed_rate"],
               "vc": (p["hot"]["view_changes"] or 0) + (p["steady"]["view_changes"] or 0),
               "peaks": peaks}
        # Queueing delay of the consensus and tick lanes since the cluster started (fresh), the
        # worst node's p99; and the weight changes the adaptation made.
        for part in ("hot", "steady"):
            for lane in ("consensus", "tick"):
                vals, raises, cpu, handled = [], 0, 0, 0
                for i in range(c.nodes):
                    ls = lane_stats(c.stats(i) or {}, part, lane)
                    vals.append(ls.get("queueing_delay", {}).get("p99_us", 0) / 1e3)
                    raises += int(ls.get("weight_raises", 0))
                    cpu += int(ls.get("cpu_nanos", 0))
                    handled += int(ls.get("processed", 0))
                row["%s_%s_p99" % (part, lane)] = max(vals)
                row["%s_%s_raises" % (part, lane)] = raises
                # Mean worker CPU per handled message (all nodes): a lane is serial, so one
                # long handler delays every message queued behind it, whatever the weight.
                row["%s_%s_cpu_us" % (part, lane)] = cpu / 1e3 / max(handled, 1)
        return row


def lanes():
    """Adaptive lane weights on vs off (LANES_REPS interleaved pairs, default 2): hot flooded at
    LANES_RATE (default 3000) tx/s, beyond what the cluster commits, with gates and pool 3000 but
    no rate limit; steady at 20 tx/s; LANES_SECONDS (default 25). LANES_WEIGHTS replaces the lane
    weights (default: the node's defaults, consensus 8, client 4)."""
    rate = int(os.environ.get("LANES_RATE", "3000"))
    seconds = int(os.environ.get("LANES_SECONDS", "25"))
    reps = int(os.environ.get("LANES_REPS", "2"))
    weights = os.environ.get("LANES_WEIGHTS", "")
    rows = {"off": [], "on": []}
    for i in range(reps):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            rows[mode].append(lanes_run("lanes_%s_%d" % (mode, i), mode == "on", rate, seconds,
                                        weights))

    def med(mode, key):
        vals = sorted(r[key] for r in rows[mode])
        return vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] +
                                                           vals[len(vals) // 2]) / 2

    def fmt(mode):
        rs = rows[mode]
        return ("consensus-lane queueing p99 hot %s ms, steady %s ms; tick lane hot %s ms; "
                "steady commit p99 %s ms; hot %s tx/s (p99 %s ms); %s VC; consensus weight "
                "raises %s, peak weight hot %s; mean CPU per hot consensus-lane message %s us"
                % ("/".join("%.1f" % r["hot_consensus_p99"] for r in rs),
                   "/".join("%.1f" % r["steady_consensus_p99"] for r in rs),
                   "/".join("%.1f" % r["hot_tick_p99"] for r in rs),
                   "/".join("%.0f" % r["steady_p99"] for r in rs),
                   "/".join("%.0f" % r["hot_rate"] for r in rs),
                   "/".join("%.0f" % r["hot_p99"] for r in rs),
                   "/".join("%d" % r["vc"] for r in rs),
                   "/".join("%d" % r["hot_consensus_raises"] for r in rs),
                   "/".join("%g" % r["peaks"].get("hot", 0) for r in rs),
                   "/".join("%.0f" % r["hot_consensus_cpu_us"] for r in rs)))
    ratio = ("hot consensus-lane p99 on/off %.2f; steady commit p99 on/off %.2f; hot committed "
             "on/off %.2f (medians of %d)"
             % (med("on", "hot_consensus_p99") / max(med("off", "hot_consensus_p99"), 1e-9),
                med("on", "steady_p99") / max(med("off", "steady_p99"), 1e-9),
                med("on", "hot_rate") / max(med("off", "hot_rate"), 1e-9), reps))
    result("adaptive lane weights%s" % (" (weights %s)" % weights if weights else ""),
           "on: " + fmt("on"), "off: " + fmt("off"), ratio,
           "decide the default (issue 18 item 4)",
           "hot %d tx/s offered (gates, pool 3000, in_flight 8192, no rate limit), steady 20 tx/s, "
           "%d s; per run values listed in run order" % (rate, seconds))


# 15. Node-wide admission: one of N partitions flooded ----------------------------------------
def admission_run(name, mode, n, quiet_rate, flood_rate, seconds, flood_at, flood_client="same"):
    def admission_extra(fields):
        return "resources { node_admission { enabled: %s%s %s } }" % (
            "false" if mode == "off" else "true", fields,
            os.environ.get("ADMISSION_CONFIG", "") if mode != "off" else "")
    if mode in ("split", "split-local"):
        # Nodes 3 and 4 see a CPU to spare (they never judge by measured shares), as on bigger
        # machines: they never cut p1 themselves, nodes 1 and 2 do.
        local = " agree_with_peers: false" if mode == "split-local" else ""
        extra = "\n".join("[node %d]\n%s" % (i, admission_extra(
            local + (" cpu_pressure_percent: 100" if i > 2 else ""))) for i in range(1, 5))
    else:
        extra = admission_extra({"static": " measured_shares: false",
                                 "local": " agree_with_peers: false"}.get(mode, ""))
    names = localnet_names(n)
    flooded, quiet = names[0], names[1:]
    if mode == "refused":  # the flood's own cost: its rate stage refuses every write it is sent
        extra += ('\n[partition %s]\ninterceptor {\n'
                  '  stages { name: "rate" rate { rate_per_second: 0 } }\n}' % flooded)
    with Cluster(name, extra, partitions=n) as c:
        idle_w, flood_w = "@3s-%ds" % (flood_at - 1), "@%ds-%ds" % (flood_at + 3, seconds)
        expect = ["%s.p99%s<=1.2*%s.p99%s" % (nm, flood_w, nm, idle_w) for nm in quiet]
        if mode == "idle":  # the control: the same run with no flood (1 tx/s)
            flood_rate = 1
        flood_scen = "%s:rate=%d,start=%ds" % (flooded, flood_rate, flood_at)
        quiet_scen = ["%s:rate=%g" % (nm, quiet_rate) for nm in quiet]
        stop, samples = threading.Event(), []

        admins, tokens = c.admin.split(","), c.tokens.split(",")
        others = []  # (node index, status) of nodes 2..4
        # (seconds since loadgen started, the nodes' CPU seconds, the loadgens' (both, when the
        # flood has its own), the flood's own loadgen's (0 when it has none))
        cpu = []
        if flood_client == "same":
            run = c.loadgen_start(name, ";".join([flood_scen] + quiet_scen), seconds, drain=10,
                                  expect=expect)
        else:  # the flood's client signs only what it sends (pre-signing: in the idle window)
            run = c.loadgen_start(name, ";".join(quiet_scen), seconds, drain=10, expect=expect,
                                  presign=0)
        flood_run = start_flood_loadgen(c, flood_client, name + "_flood", flood_scen, seconds)

        def cpu_sampler():  # the nodes' and loadgen's CPU, every second
            while not stop.wait(1):
                try:
                    cpu.append((time.monotonic() - run["t0"], c.cpu_seconds()) +
                               loadgens_cpu_seconds(run, flood_run))
                except OSError:  # loadgen gone: the run is over
                    pass

        def sampler():  # every node's admission status, every 3 s
            while not stop.wait(3):
                for k, (admin, token) in enumerate(zip(admins, tokens)):
                    try:
                        status = subprocess.run(
                            [NODECTL, "--admin", admin, "--token-file", token, "--json",
                             "status"], capture_output=True, text=True, timeout=20)
                        st = json.loads(status.stdout) if status.returncode == 0 else {}
                    except Exception:  # a node busy past the timeout: skip the sample
                        continue
                    if k == 0:
                        samples.append((None, st))
                    else:
                        others.append((k, st))
        threads = [threading.Thread(target=f, daemon=True) for f in (sampler, cpu_sampler)]
        for t in threads:
            t.start()
        p, s = c.loadgen_finish(run)
        if flood_run:
            p.update(c.loadgen_finish(flood_run)[0])
        stop.set()
        for t in threads:
            t.join()

        def window_cores(lo, hi, k):  # cores used from lo to hi s in (k: 1 nodes, 2 loadgen,
            # 3 the flood's own loadgen)
            w = [x for x in cpu if lo <= x[0] <= hi]
            return (w[-1][k] - w[0][k]) / (w[-1][0] - w[0][0]) if len(w) > 1 else 0.0
        ratios = []
        for nm in quiet:
            m = expect_value(s["_stdout"], "%s.p99%s" % (nm, flood_w))
            if m:
                ratios.append(m[0] / max(m[1] / 1.2, 1e-9))
        ratios.sort()
        # The flooded partition's admission on node 1, sampled every 3 s: its fraction and its
        # CPU over its allocation (what the admission holds it to) while cut, and both in cores.
        fractions, refused, over, cores = [], 0, [], []
        # Every node's p1 while its admission lets through less than all: CPU over allocation.
        every_node = []
        # Every node's quiet partitions while p1 contended there: how often one contended beside
        # it (the contenders then divide what they use together, which can tighten p1's
        # allocation).
        quiet_samples = quiet_contending = 0
        for _, status in samples + others:
            parts = status.get("admission", {}).get("partitions", [])
            for a in parts:
                if a.get("name") == flooded and a.get("admit_fraction", 1) < 1:
                    every_node.append(float(a.get("cpu_over_entitlement", 0)))
            if any(a.get("name") == flooded and a.get("contending") for a in parts):
                for a in parts:
                    if a.get("name") in quiet:
                        quiet_samples += 1
                        quiet_contending += 1 if a.get("contending") else 0
        pressure = [float(st.get("admission", {})["cpu_pressure_percent"]) for _, st in samples
                    if "cpu_pressure_percent" in st.get("admission", {})]
        measured = sum(1 for _, st in samples if st.get("admission", {}).get("measured_allocation"))
        for _, status in samples:  # min and max over the run: the flood is where they move
            for a in status.get("admission", {}).get("partitions", []):
                if a.get("name") == flooded:
                    fractions.append(a.get("admit_fraction", 1))
                    refused = max(refused, int(a.get("refused", 0)))
                    if a.get("admit_fraction", 1) < 1:
                        over.append(float(a.get("cpu_over_entitlement", 0)))
                        cores.append((float(a.get("cpu_cores", 0)),
                                      float(a.get("allocation_cores", 0))))
        return {"ratios": ratios,
                "vc": sum(p[nm]["view_changes"] or 0 for nm in names),
                "flood_rate": window_rate(p[flooded], "committed", flood_at + 3, seconds),
                # what reached the nodes of the flood: offered less what loadgen's own in-flight
                # bound dropped
                "flood_arrived": window_rate(p[flooded], "offered", flood_at + 3, seconds) -
                window_rate(p[flooded], "client_dropped", flood_at + 3, seconds),
                "flood_p99": p[flooded]["p99_ms"],
                "quiet_rate": sum(window_rate(p[nm], "committed", flood_at + 3, seconds)
                                  for nm in quiet),
                "fractions": fractions, "refused": refused, "over": sorted(over),
                "cores": cores, "pressure": sorted(pressure), "measured": measured,
                "every_node": sorted(every_node),
                "quiet_contending": (quiet_contending, quiet_samples),
                "samples": len(samples),
                "nodes_cores": (window_cores(3, flood_at - 1, 1),
                                window_cores(flood_at + 3, seconds, 1)),
                "loadgen_cores": (window_cores(3, flood_at - 1, 2),
                                  window_cores(flood_at + 3, seconds, 2)),
                "flood_client": flood_client,
                "flood_loadgen_cores": window_cores(flood_at + 3, seconds, 3),
                "episodes": max([int(st2.get("admission", {}).get("episodes", 0))
                                 for _, st2 in samples] or [0])}


def admission():
    """Node-wide admission on vs off (ADMISSION_REPS rounds, default 1, each mode once per round,
    the order reversed every other round): ADMISSION_N (default 16) partitions on a 4-node
    localnet, p1 flooded at ADMISSION_FLOOD (default 1000) tx/s from second ADMISSION_FLOOD_AT
    (default 15), the others at ADMISSION_QUIET (default 20) tx/s each, ADMISSION_SECONDS
    (default 40) s. ADMISSION_MODES (default "off,on"): off, on
    (the default node_admission), static (on with measured_shares false: allocations from
    the worker pool's capacity alone), local (on with agree_with_peers false: each node cuts
    only its own clients), idle (on, with p1 offered 1 tx/s instead of the flood: the control
    for what the quiet partitions' p99 does later in a run with no flood at all), refused (on,
    the flood sent but every one of its writes refused by p1's own rate stage: what the flood
    costs the quiet partitions with nothing of it admitted), split (on, but
    nodes 3 and 4 never judge their CPU contended, so only nodes 1 and 2 cut p1 themselves) and
    split-local (split with agree_with_peers false). ADMISSION_CONFIG: more node_admission fields
    for every mode but off (e.g. "exit_ticks: 200"). Every node's status is sampled every 3 s."""
    n = int(os.environ.get("ADMISSION_N", "16"))
    flood = int(os.environ.get("ADMISSION_FLOOD", "1000"))
    quiet = float(os.environ.get("ADMISSION_QUIET", "20"))
    reps = int(os.environ.get("ADMISSION_REPS", "1"))
    modes = [m for m in os.environ.get("ADMISSION_MODES", "off,on").split(",") if m]
    for m in modes:
        if m not in ("off", "on", "static", "local", "idle", "refused", "split", "split-local"):
            sys.exit("ADMISSION_MODES: unknown mode %r (off, on, static, local, idle, refused, "
                     "split, split-local)" % m)
    if len(set(modes)) != len(modes):
        sys.exit("ADMISSION_MODES: a mode given twice: %s" % ",".join(modes))
    seconds = int(os.environ.get("ADMISSION_SECONDS", "40"))
    flood_at = int(os.environ.get("ADMISSION_FLOOD_AT", "15"))
    flood_client = flood_client_from_env("ADMISSION_FLOOD_CLIENT")
    if not 5 <= flood_at <= seconds - 5:
        sys.exit("ADMISSION_FLOOD_AT must be in [5, ADMISSION_SECONDS - 5], got %d" % flood_at)
    for i in range(reps):
        rows = {}
        for mode in modes if i % 2 == 0 else modes[::-1]:
            rows[mode] = admission_run("admission_%s_%d" % (mode, i), mode, n, quiet,
                                       flood, seconds, flood_at, flood_client)

        def fmt(r):
            q = r["ratios"]
            cores = r["cores"]
            mid = sorted(cores)[len(cores) // 2] if cores else None
            return ("quiet partitions' p99 flood/idle: median %.2f, worst %.2f (%d of %d <= 1.2); "
                    "%d VC; flooded p1 %.0f tx/s (p99 %.0f ms), quiet total %.0f tx/s; p1 admit "
                    "fraction on node 1 min %.2f, %d refused, %d episodes; p1 CPU / allocation "
                    "while cut, median %s (%d samples; CPU %s of %s cores), every node's median %s "
                    "(%d samples, within 10%%: %d); quiet partitions contending beside p1 in %d of %d; "
                    "node 1's CPU pressure median %s%%, measured shares in %d of %d samples; "
                    "cores before / in the flood: nodes %.2f / %.2f, loadgen %.2f / %.2f%s; "
                    "flood arrived %.0f tx/s"
                    % ((q[len(q) // 2] if q else 0, q[-1] if q else 0,
                        sum(1 for x in q if x <= 1.2), len(q), r["vc"], r["flood_rate"],
                        r["flood_p99"], r["quiet_rate"],
                        min(r["fractions"] or [1]), r["refused"], r["episodes"],
                        "%.2f" % r["over"][len(r["over"]) // 2] if r["over"] else "-",
                        len(r["over"]), "%.3f" % mid[0] if mid else "-",
                        "%.3f" % mid[1] if mid else "-",
                        "%.2f" % r["every_node"][len(r["every_node"]) // 2]
                        if r["every_node"] else "-", len(r["every_node"]),
                        sum(1 for x in r["every_node"] if abs(x - 1) <= 0.1),
                        r["quiet_contending"][0], r["quiet_contending"][1],
                        "%.0f" % r["pressure"][len(r["pressure"]) // 2] if r["pressure"] else "-",
                        r["measured"], r["samples"]) + r["nodes_cores"] + r["loadgen_cores"] +
                       (flood_client_note(r["flood_client"], r["flood_loadgen_cores"]),
                        r["flood_arrived"])))
        ours = [m for m in modes if m not in ("off", "idle", "refused")]

        def worst(r):
            return "%.2f" % r["ratios"][-1] if r["ratios"] else "-"
        ratio = "-"
        if ours and "off" in rows:
            ratio = "worst quiet p99 ratio %s %s vs off %s; VC %d vs %d" % (
                ours[0], worst(rows[ours[0]]), worst(rows["off"]), rows[ours[0]]["vc"],
                rows["off"]["vc"])
        result("node-wide admission, %d partitions, one flooded (round %d)" % (n, i + 1),
               "; ".join("%s: %s" % (m, fmt(rows[m])) for m in ours) or "-",
               "; ".join("%s: %s" % (m, fmt(rows[m])) for m in ("off", "idle", "refused")
                         if m in rows)
               or "-", ratio,
               "0 VC; other partitions' p99 <= 1.2x; CPU within 10% of allocation (issue 18)",
               "p1 %d tx/s from %d s, %d others at %g tx/s, %d s, default config otherwise"
               % (flood, flood_at, n - 1, quiet, seconds))


def lanes_cpu_nanos(stats, partition):
    """Worker-pool CPU charged to all lanes of `partition` in one node's stats (ns)."""
    return sum(int(l.get("cpu_nanos", 0)) for l in partition_items(stats, partition, "lanes"))


def partition_cpu_nanos(stats, partition):
    """All the CPU charged to `partition` in one node's stats (ns): its lanes' on the worker pool
    and its client calls' and drain's (PartitionFlowStats.cpu_nanos)."""
    return sum(int(o.get("cpu_nanos", 0)) for o in named_objects(stats, (partition,))
               if isinstance(o.get("lanes"), list))


def shares_run(name, extra, names, scen, seconds, window=(10, 25), loadgen_extra=(),
               presign=2000):
    """One flood on a 4-node localnet; per partition, the worker-pool CPU each node charged to it
    over `window` (seconds from the start), in cores averaged over the nodes, its fraction of the
    partitions' total, the same for all its CPU (pool, client calls, drain), the arbiter's share
    at the end, and the committed rate. With node_admission on, every node's status is sampled
    every 3 s in the window: each partition's CPU over its allocation while it is cut; with
    SHARES_TRACE=path, every second instead (three times the status calls, so its sample counts
    are not those of a run without it), each sample appended to that file as a JSON line."""
    trace = os.environ.get("SHARES_TRACE")
    with Cluster(name, extra, partitions=len(names)) as c:
        marks = {}
        over = {nm: [] for nm in names}
        seen = {nm: {"samples": 0, "contending": 0, "fractions": []} for nm in names}

        def sample(key):
            marks[key] = [c.stats(i) or {} for i in range(c.nodes)]
            marks[key + "_t"] = time.monotonic()

        def sampler():
            time.sleep(window[0])
            sample("a")
            end = time.monotonic() + window[1] - window[0]
            period = 1 if trace else 3
            while time.monotonic() + period < end:
                time.sleep(period)
                for i in range(c.nodes):
                    admission = (c.stats(i, "status") or {}).get("admission", {})
                    if trace:
                        with open(trace, "a") as out:
                            out.write(json.dumps({"t": round(time.monotonic() - t0, 2), "node": i,
                                                  "admission": admission}) + "\n")
                    for a in admission.get("partitions", []):
                        if a.get("name") not in over:
                            continue
                        seen[a["name"]]["samples"] += 1
                        seen[a["name"]]["contending"] += 1 if a.get("contending") else 0
                        seen[a["name"]]["fractions"].append(float(a.get("admit_fraction", 1)))
                        if a.get("admit_fraction", 1) < 1:
                            over[a["name"]].append(float(a.get("cpu_over_entitlement", 0)))
            time.sleep(max(0.0, end - time.monotonic()))
            sample("b")
        t = threading.Thread(target=sampler, daemon=True)
        t0 = time.monotonic()
        t.start()
        p, _ = c.loadgen(name, scen, seconds, drain=5, presign=presign, extra=loadgen_extra)
        t.join()
        if "b" not in marks:
            raise RuntimeError("stats were not sampled (load ran %.0f s)" % (time.monotonic() - t0))
        span = marks["b_t"] - marks["a_t"]
        row = {}
        for nm in names:
            cores = [(lanes_cpu_nanos(b, nm) - lanes_cpu_nanos(a, nm)) / 1e9 / span
                     for a, b in zip(marks["a"], marks["b"])]
            shares = [ps.get("cpu", {}).get("share", 0) for b in marks["b"]
                      for ps in b.get("partitions", []) if ps.get("name") == nm]
            limits = [ps.get("cpu", {}).get("limit", 0) for b in marks["b"]
                      for ps in b.get("partitions", []) if ps.get("name") == nm]
            all_cores = [(partition_cpu_nanos(b, nm) - partition_cpu_nanos(a, nm)) / 1e9 / span
                         for a, b in zip(marks["a"], marks["b"])]
            row[nm] = {"cores": sum(cores) / len(cores), "share": sum(shares) / max(len(shares), 1),
                       "all_cores": sum(all_cores) / len(all_cores),
                       "limit": max(limits or [0]),
                       "rate": p[nm]["committed_rate"] if nm in p else 0,
                       "vc": (p[nm]["view_changes"] or 0) if nm in p else 0,
                       "over": sorted(over[nm]),
                       "contending": seen[nm]["contending"], "samples": seen[nm]["samples"],
                       "fraction_median": sorted(seen[nm]["fractions"])[
                           len(seen[nm]["fractions"]) // 2] if seen[nm]["fractions"] else 1}
        total = sum(r["cores"] for r in row.values())
        all_total = sum(r["all_cores"] for r in row.values())
        committed = sum(r["rate"] for r in row.values())
        for r in row.values():
            r["fraction"] = r["cores"] / max(total, 1e-9)
            r["all_fraction"] = r["all_cores"] / max(all_total, 1e-9)
            r["tx_fraction"] = r["rate"] / max(committed, 1e-9)
        return row


def shares():
    """The arbiter governing CPU, side by side with it advisory (SHARES_REPS rounds, default 1):
    (a) weights: p1, p2, p3 with share weights 1, 2, 4, each flooded (SHARES_RATE tx/s, default
    1500; no gates or rate stage, in-flight 8192): each partition's fraction of the worker-pool CPU
    and of all its CPU (pool, client calls) vs its allocation (weight / 7), governed, with
    resources.arbiter_advisory, and governed with node_admission on (SHARES_MODES; every other
    run sets node_admission off, so the shares' own effect is what is compared); (b) hard ceiling: p1
    flooded alone with ceiling_fraction SHARES_CEILING (default 0.1), hard vs soft: its worker CPU
    per node vs ceiling x cpu_workers. Nodes run SHARES_WORKERS (default 1) worker threads, so
    the pool, which the arbiter divides, is where the partitions meet; (c) memory: hot flooded
    with 16 KiB txs beside a light steady, nodes with SHARES_NODE_MIB (256) MiB of memory_bytes
    and 512 MiB pools: hot's accounted memory against its memory share, and the nodes' RSS.
    (d) egress: hot, steady with weights 1, 3 each flooded with 4 KiB txs under an egress cap of
    SHARES_EGRESS_CAP (1 MB/s) per node, SHARES_EGRESS_RATE (60) tx/s per node each: each
    partition's fraction of the bytes sent. SHARES_PARTS (default "cpu,ceiling,memory,egress")
    picks the parts."""
    rate = int(os.environ.get("SHARES_RATE", "1500"))
    ceiling = float(os.environ.get("SHARES_CEILING", "0.1"))
    reps = int(os.environ.get("SHARES_REPS", "1"))
    workers = int(os.environ.get("SHARES_WORKERS", "1"))
    # loadgen's calls in flight per node in the weights part (default 64, loadgen's own). With
    # loadgen signing as it goes, its window rather than the node can cap what a partition is
    # offered, and a partition whose client lane keeps up with that does not contend: pre-sign
    # (SHARES_PRESIGN) for a flood that reaches the nodes.
    in_flight = os.environ.get("SHARES_IN_FLIGHT", "64")
    # Txs loadgen signs before the clock starts, per partition, in the weights part (default
    # 2000; the rest it signs as it goes, with CPU the nodes' would otherwise have).
    presign = int(os.environ.get("SHARES_PRESIGN", "2000"))
    admission_config = os.environ.get("SHARES_ADMISSION_CONFIG", "")
    # The cpu part's run length (its CPU window is from second 10 to 5 s before the end).
    seconds = int(os.environ.get("SHARES_SECONDS", "30"))
    if seconds < 20:
        sys.exit("SHARES_SECONDS must be at least 20, got %d" % seconds)
    # No gates: the flood's txs queue for verification in the client lanes, so every partition has
    # work waiting in the worker pool, which is what the arbiter divides (with the pool gate on,
    # the flood is refused on gRPC threads and the pool is never the bottleneck).
    chain = hot_chain(None, 0, in_flight=8192, gates=False)
    names = ["p1", "p2", "p3"]
    weights = {"p1": 1, "p2": 2, "p3": 4}
    parts = os.environ.get("SHARES_PARTS", "cpu,ceiling,memory,egress").split(",")
    for i in range(reps if "cpu" in parts else 0):
        part_extra = "[partition *]\npool { max_txs: 3000 }\n%s\n" % chain + "".join(
            "[partition %s]\nshare { weight: %d }\n" % (nm, w) for nm, w in weights.items())
        scen = ";".join("%s:rate=%d" % (nm, rate) for nm in names)
        rows = {}
        modes = [m for m in os.environ.get("SHARES_MODES", "governed,advisory,admission").split(",")
                 if m]
        for mode in modes if i % 2 == 0 else modes[::-1]:
            node = "resources { cpu_workers: %d arbiter_advisory: %s%s }\n" % (
                workers, "true" if mode == "advisory" else "false",
                " node_admission { enabled: true %s }" % admission_config
                if mode == "admission" else
                " node_admission { enabled: false }" if mode == "governed" else "")
            rows[mode] = shares_run("shares_weights_%s_%d" % (mode, i), node + part_extra, names,
                                    scen, seconds, window=(10, seconds - 5),
                                    loadgen_extra=("--max-in-flight", in_flight), presign=presign)
        alloc = {nm: w / sum(weights.values()) for nm, w in weights.items()}

        def fmt(r):
            return ", ".join("%s %.2f of worker CPU (%.2f cores), %.2f of all its CPU (%.2f cores), "
                             "%.2f of commits (%.0f tx/s)%s"
                             % (nm, r[nm]["fraction"], r[nm]["cores"], r[nm]["all_fraction"],
                                r[nm]["all_cores"], r[nm]["tx_fraction"], r[nm]["rate"],
                                ", CPU / allocation while cut: median %.2f of %d samples"
                                % (r[nm]["over"][len(r[nm]["over"]) // 2], len(r[nm]["over"]))
                                if r[nm]["over"] else "") +
                             (" (admit fraction median %.2f, contending in %d of %d samples)"
                              % (r[nm]["fraction_median"], r[nm]["contending"], r[nm]["samples"])
                              if r[nm]["samples"] else "") for nm in names)

        def worst(r, key, to=None):
            to = to or alloc
            return max(abs(r[nm][key] - to[nm]) / max(to[nm], 1e-9) for nm in names)

        def water(r):
            """A weighted max-min (water-filled) reference for all the partitions' CPU, from the
            outside: a partition node admission did not hold (admit fraction median >= 0.95) and
            that used less than its weighted share of what is left has what it used; the others
            divide the rest by weight. The node's own division also counts a partition whose
            consensus lane is late as wanting more, which the scenario does not see."""
            out, left, pending = {}, 1.0, set(names)
            while pending:
                level = left / sum(weights[nm] for nm in pending)
                done = [nm for nm in sorted(pending) if r[nm]["fraction_median"] >= 0.95
                        and r[nm]["all_fraction"] < level * weights[nm]]
                if not done:
                    break
                for nm in done:
                    out[nm] = r[nm]["all_fraction"]
                    left -= out[nm]
                    pending.discard(nm)
            for nm in pending:
                out[nm] = left * weights[nm] / sum(weights[x] for x in pending)
            return out
        waters = {m: water(rows[m]) for m in modes if m == "admission"}
        result("arbiter CPU shares, weights 1:2:4, all flooded (round %d)" % (i + 1),
               " || ".join("%s: %s" % (m, fmt(rows[m])) for m in modes if m != "advisory"),
               "advisory: " + fmt(rows["advisory"]) if "advisory" in rows else "-",
               "worst |fraction - allocation| / allocation: %s; allocation %s%s"
               % ("; ".join("%s: worker CPU %.2f, all CPU %.2f, commits %.2f, %d VC"
                            % (m, worst(rows[m], "fraction"), worst(rows[m], "all_fraction"),
                               worst(rows[m], "tx_fraction"), sum(r["vc"] for r in rows[m].values()))
                            for m in modes),
                  ", ".join("%s %.2f" % (nm, alloc[nm]) for nm in names),
                  "".join("; %s water-filled (partitions not held have what they used): %s, "
                          "worst all CPU %.2f" % (m, ", ".join("%s %.3f" % (nm, w[nm])
                                                               for nm in names),
                                                  worst(rows[m], "all_fraction", w))
                          for m, w in waters.items())),
               "per-partition CPU within 10% of its allocation (issue 18, item 1)",
               "p1..p3 weights 1, 2, 4, each offered %d tx/s, %d s, CPU over seconds 10-%d, "
               "mean of 4 nodes; admission: node_admission on" % (rate, seconds, seconds - 5))

    for i in range(reps if "ceiling" in parts else 0):
        rows = {}
        for hard in (True, False) if i % 2 == 0 else (False, True):
            extra = ("resources { cpu_workers: %d node_admission { enabled: false } }\n"
                     "[partition *]\npool { max_txs: 3000 }\n%s\n"
                     "[partition hot]\nshare { ceiling_fraction: %g hard_ceiling: %s }\n"
                     % (workers, chain, ceiling, "true" if hard else "false"))
            rows[hard] = shares_run("shares_ceiling_%s_%d" % ("hard" if hard else "soft", i),
                                    extra, ["hot", "steady"], "hot:rate=%d" % rate, 30)
        h, sft = rows[True]["hot"], rows[False]["hot"]
        result("arbiter hard ceiling %g, hot flooded alone (round %d)" % (ceiling, i + 1),
               "hard: hot %.3f cores/node of worker CPU (limit %.3f), %.0f tx/s, %d VC"
               % (h["cores"], h["limit"], h["rate"], h["vc"]),
               "soft: hot %.3f cores/node, %.0f tx/s, %d VC" % (sft["cores"], sft["rate"],
                                                               sft["vc"]),
               "hard / limit %.2f; soft / hard %.2f" % (h["cores"] / max(h["limit"], 1e-9),
                                                       sft["cores"] / max(h["cores"], 1e-9)),
               "hard: worker CPU <= ceiling x workers; soft: lends the idle rest",
               "hot offered %d tx/s for 30 s, steady idle, CPU over seconds 10-25, mean of 4 nodes"
               % rate)

    if "memory" in parts:
        shares_memory(reps)
    if "egress" in parts:
        shares_egress(reps)


def shares_memory_run(name, advisory, node_bytes, pool_bytes, rate, seconds):
    """`hot` flooded with 16 KiB txs beside a light `steady` on a 4-node localnet whose nodes have
    resources.memory_bytes = node_bytes and a pool of pool_bytes per partition (memory pressure
    off, so only the arbiter's shares act). Every second: each node's accounted memory of `hot`
    (pool + lanes + state cache, the arbiter's usage figure) and its memory share, its pool, and
    the node's RSS."""
    extra = ("resources { memory_bytes: %d memory_pressure { disabled: true } "
             "arbiter_advisory: %s node_admission { enabled: false } }\n"
             "[partition *]\npool { max_txs: 1000000 max_bytes: %d }\n"
             % (node_bytes, "true" if advisory else "false", pool_bytes))
    samples = []
    with Cluster(name, extra, partitions=2) as c:
        stop = threading.Event()

        def sampler():
            t0 = time.monotonic()
            while not stop.wait(1.0) and time.monotonic() - t0 < seconds + 5:
                row = {"t": time.monotonic() - t0, "rss": c.rss_bytes(), "nodes": []}
                for i in range(c.nodes):
                    st = c.stats(i) or {}
                    for ps in st.get("partitions", []):
                        if ps.get("name") == "hot":
                            m = ps.get("memory", {})
                            row["nodes"].append({
                                "usage": float(m.get("usage", 0)), "share": float(m.get("share", 0)),
                                "pool": int(ps.get("pool", {}).get("bytes", 0)),
                                "pool_max": int(ps.get("pool", {}).get("max_bytes", 0))})
                samples.append(row)
        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        p, _ = c.loadgen(name, "hot:rate=%d,tx_bytes=16384;steady:rate=50" % rate, seconds,
                         drain=5)
        stop.set()
        t.join()
    nodes = [n for row in samples for n in row["nodes"]]
    if not nodes:
        raise RuntimeError("no stats sampled for hot")
    worst = max(nodes, key=lambda n: n["usage"] / max(n["share"], 1))
    fullest = max(nodes, key=lambda n: n["pool"])
    return {"held": max(n["usage"] for n in nodes), "pool": fullest["pool"],
            "pool_max": fullest["pool_max"],
            "share": min([n["share"] for n in nodes if n["share"] > 0] or [0]),
            "over": worst["usage"] / max(worst["share"], 1),
            "rss": max(max(row["rss"]) for row in samples),
            "hot": p["hot"]["committed_rate"], "steady": p["steady"]["committed_rate"],
            "steady_p99": p["steady"]["p99_ms"],
            "vc": (p["hot"]["view_changes"] or 0) + (p["steady"]["view_changes"] or 0)}


def shares_memory(reps):
    """Memory share held under a flood, governed vs advisory (see shares_memory_run)."""
    node_bytes = int(os.environ.get("SHARES_NODE_MIB", "256")) << 20
    pool_bytes = 512 << 20
    rate = int(os.environ.get("SHARES_MEMORY_RATE", "2000"))
    seconds = 30
    mib = 2.0 ** 20
    for i in range(reps):
        rows = {}
        for advisory in (False, True) if i % 2 == 0 else (True, False):
            rows[advisory] = shares_memory_run(
                "shares_memory_%s_%d" % ("advisory" if advisory else "governed", i), advisory,
                node_bytes, pool_bytes, rate, seconds)

        def fmt(r):
            return ("hot held at most %.0f MiB accounted (pool at most %.0f MiB, its cap then "
                    "%.0f MiB), its "
                    "share %.0f MiB, held / share at most %.2f; node RSS at most %.0f MiB; "
                    "committed hot %.0f, steady %.0f tx/s (p99 %.0f ms), %d VC"
                    % (r["held"] / mib, r["pool"] / mib, r["pool_max"] / mib, r["share"] / mib,
                       r["over"], r["rss"] / mib, r["hot"], r["steady"], r["steady_p99"], r["vc"]))
        g, a = rows[False], rows[True]
        result("arbiter memory share, hot flooded with 16 KiB txs (round %d)" % (i + 1),
               "governed: " + fmt(g), "advisory: " + fmt(a),
               "held / share: governed %.2f, advisory %.2f; RSS advisory / governed %.2f"
               % (g["over"], a["over"], a["rss"] / max(g["rss"], 1)),
               "a partition's memory held within its share under a flood (issue 18, item 1)",
               "memory_bytes %d MiB per node, pools of %d MiB, hot %d tx/s of 16 KiB for %d s, "
               "steady 50 tx/s, memory pressure off, 1 s samples of 4 nodes"
               % (node_bytes >> 20, pool_bytes >> 20, rate, seconds))


def shares_egress_run(name, advisory, cap, rate, seconds, weights, window=(10, 25)):
    """The partitions of `weights` (share weights), each flooded with 4 KiB txs (a per-node rate stage of
    `rate` tx/s: forwarding alone is rate x 4 KiB x 3 peers per node), under one egress cap per
    node. Per partition: the bytes each node sent for it over `window` (the arbiter's measured
    egress rate, sampled every second), averaged over the nodes."""
    extra = ("resources { egress_bytes_per_second: %d arbiter_advisory: %s "
             "node_admission { enabled: false } }\n"
             "[partition *]\n%s\npool { max_txs: 3000 }\n%s\n"
             % (cap, "true" if advisory else "false", LANES, hot_chain(rate, 50)) +
             "".join("[partition %s]\nshare { weight: %d }\n" % (nm, w)
                     for nm, w in weights.items()))
    names = list(weights)
    samples = []
    with Cluster(name, extra, partitions=len(names)) as c:
        stop = threading.Event()

        def sampler():
            t0 = time.monotonic()
            while not stop.wait(1.0) and time.monotonic() - t0 < window[1]:
                if time.monotonic() - t0 < window[0]:
                    continue
                row = {}
                for i in range(c.nodes):
                    for ps in (c.stats(i) or {}).get("partitions", []):
                        if ps.get("name") in weights:
                            row.setdefault(ps["name"], []).append(
                                float(ps.get("egress", {}).get("usage", 0)))
                samples.append(row)
        t = threading.Thread(target=sampler, daemon=True)
        t.start()
        # Twice what the 4 nodes' rate stages admit, so each stays at its rate.
        p, _ = c.loadgen(name, ";".join("%s:rate=%d,tx_bytes=4096" % (nm, rate * 8)
                                        for nm in names), seconds, drain=5, presign=4000)
        stop.set()
        t.join()
    row = {}
    for nm in names:
        vals = [v for r in samples for v in r.get(nm, [])]
        row[nm] = {"bytes": sum(vals) / max(len(vals), 1),
                   "rate": p[nm]["committed_rate"] if nm in p else 0,
                   "vc": (p[nm]["view_changes"] or 0) if nm in p else 0}
    total = sum(r["bytes"] for r in row.values())
    for r in row.values():
        r["fraction"] = r["bytes"] / max(total, 1e-9)
    return row


def shares_egress(reps):
    """Egress divided by share weight under a binding cap, governed vs advisory."""
    cap = int(os.environ.get("SHARES_EGRESS_CAP", "1000000"))
    rate = int(os.environ.get("SHARES_EGRESS_RATE", "60"))
    weights = {"hot": 1, "steady": 3}  # a 2-partition localnet's names
    seconds = 30
    alloc = {nm: w / sum(weights.values()) for nm, w in weights.items()}
    for i in range(reps):
        rows = {}
        for advisory in (False, True) if i % 2 == 0 else (True, False):
            rows[advisory] = shares_egress_run(
                "shares_egress_%s_%d" % ("advisory" if advisory else "governed", i), advisory,
                cap, rate, seconds, weights)

        def fmt(r):
            return ", ".join("%s %.2f of egress (%.0f KB/s per node), %.0f tx/s, %d VC"
                             % (nm, r[nm]["fraction"], r[nm]["bytes"] / 1e3, r[nm]["rate"],
                                r[nm]["vc"]) for nm in weights)
        g, a = rows[False], rows[True]

        def worst(r):
            return max(abs(r[nm]["fraction"] - alloc[nm]) / alloc[nm] for nm in weights)
        result("arbiter egress shares, weights 1:3 (hot:steady), both flooded (round %d)" % (i + 1),
               "governed: " + fmt(g), "advisory: " + fmt(a),
               "worst |fraction - allocation| / allocation: governed %.2f, advisory %.2f "
               "(allocation %s)" % (worst(g), worst(a),
                                    ", ".join("%s %.2f" % (nm, alloc[nm]) for nm in weights)),
               "per-partition egress by share under a binding cap (issue 18, item 1)",
               "egress cap %d B/s per node, each partition %d tx/s of 4 KiB per node (rate "
               "stage), %d s, egress sampled over seconds 10-25 on 4 nodes" % (cap, rate, seconds))


# Ledger memtables at many partitions (resources.ledger_write_buffer_bytes) -------------------
def memtables():
    """MEMTABLES_PARTITIONS (16) partitions on a fresh default-config 4-node localnet, offered
    MEMTABLES_RATE (800) tx/s in all of MEMTABLES_TX_BYTES (4096) each for MEMTABLES_SECONDS (90):
    at the end, the nodes' resident memory, what their ledgers' memtables and block caches hold and
    the block caches' capacities (NodeStatus.ledger_memory; 0 from a build without them), and over
    the run the nodes' CPU, the commits and the worst p99; 11 s after the load, what the state
    caches hold, their capacities, their hit ratio over the run and the capacity the caches borrow
    of the pools' and lanes' room, summed per node; then what the consensus stores' memtables and
    their shared block cache hold (0 from a build without them). Run it on two builds
    (BUILD_DIR) for a before/after: before resources.ledger_write_buffer_bytes every ledger had
    RocksDB's default 64 MiB write buffer, and before the memory share bounded it a 32 MiB block
    cache."""
    n = int(os.environ.get("MEMTABLES_PARTITIONS", "16"))
    rate = int(os.environ.get("MEMTABLES_RATE", "800"))
    tx_bytes = int(os.environ.get("MEMTABLES_TX_BYTES", "4096"))
    seconds = int(os.environ.get("MEMTABLES_SECONDS", "90"))
    names = ["p%d" % i for i in range(1, n + 1)]
    each = rate / n
    with Cluster("memtables", os.environ.get("MEMTABLES_EXTRA", ""), partitions=n) as c:
        t0, c0 = time.monotonic(), c.cpu_seconds()
        p, s = c.loadgen("memtables", ";".join("%s:rate=%g,tx_bytes=%d" % (nm, each, tx_bytes)
                                               for nm in names),
                         seconds, drain=5, presign=int(each * (seconds + 5)) + 10)
        cores = (c.cpu_seconds() - c0) / (time.monotonic() - t0)
        rss = c.rss_bytes()
        memtables, caches, capacities, stores = [], [], [], []
        # Per node, summed over its partitions' StateCacheStats (0 from a build without a field).
        sums = []
        for i in range(c.nodes):
            lm = (c.stats(i, "status") or {}).get("ledger_memory", {})
            memtables.append(int(lm.get("memtable_bytes", 0) or 0))
            caches.append(int(lm.get("block_cache_bytes", 0) or 0))
            capacities.append(int(lm.get("block_cache_capacity_bytes", 0) or 0))
            stores.append((int(lm.get("consensus_store_memtable_bytes", 0) or 0),
                           int(lm.get("consensus_store_cache_bytes", 0) or 0)))
        # The caches borrow against the most the pools and lanes held over the last 5-10 s: read
        # them once the load's window has passed.
        time.sleep(11)
        for i in range(c.nodes):
            sc = [o.get("state_cache") or {} for o in named_objects(c.stats(i) or {}, names)]
            sums.append({k: sum(int(x.get(k, 0) or 0) for x in sc)
                         for k in ("bytes", "capacity_bytes", "hits", "misses",
                                   "borrowed_capacity_bytes")})
    committed = sum(p[nm]["committed"] for nm in names)
    offered = sum(p[nm]["offered"] for nm in names)
    p99 = max(p[nm]["p99_ms"] for nm in names)
    vc = sum(p[nm]["view_changes"] or 0 for nm in names)
    mib = 1 << 20
    result("ledger memtables, %d partitions, %d tx/s of %d B for %d s" % (n, rate, tx_bytes,
                                                                           seconds),
           "nodes' RSS %s MiB (max %.0f); memtables %s MiB; block caches %s of %s MiB; "
           "state caches hold %s of %s MiB, %s of reads hits; borrowed capacity 11 s after "
           "the load %s MiB; consensus stores' memtables %s MiB, their cache %s MiB" % (
               "/".join("%.0f" % (r / mib) for r in rss), max(rss) / mib,
               "/".join("%.0f" % (m / mib) for m in memtables),
               "/".join("%.0f" % (m / mib) for m in caches),
               "/".join("%.0f" % (m / mib) for m in capacities),
               "/".join("%.0f" % (x["bytes"] / mib) for x in sums),
               "/".join("%.0f" % (x["capacity_bytes"] / mib) for x in sums),
               "/".join("%.3f" % (x["hits"] / max(x["hits"] + x["misses"], 1)) for x in sums),
               "/".join("%.0f" % (x["borrowed_capacity_bytes"] / mib) for x in sums),
               "/".join("%.1f" % (m / mib) for m, _ in stores),
               "/".join("%.1f" % (k / mib) for _, k in stores)),
           "%d of %d committed, worst p99 %.0f ms, %d VC, nodes %.2f cores" % (
               committed, offered, p99, vc, cores),
           "-", "memory bounded by resources.ledger_write_buffer_bytes",
           "binaries from %s; loadgen %.2f cores" % (BUILD, s["_loadgen_cores"]))


# A partition's caches and the memory idle partitions lend (runtime/cache_demand.h) -----------
def caches():
    """CACHES_PARTITIONS (2) partitions on a fresh default-config 4-node localnet; the first
    (hot, or p1) alone is
    offered CACHES_RATE (800) tx/s of CACHES_TX_BYTES (4096), each a put of its sender's one key
    (keys=per_sender) over CACHES_SENDERS (12000) senders, so its state is about 12,000 values
    its executor reads back every 15 s, for CACHES_SECONDS (60); the other partitions idle. From
    nodectl on every node, halfway and at the end: its state cache (bytes, capacity, the hit
    ratio of the second half), its memory share and demand and what its caches ask for; over the
    run the nodes' CPU, its commits, p99 and view changes. Run it on two builds (BUILD_DIR) for a
    before/after."""
    n = int(os.environ.get("CACHES_PARTITIONS", "2"))
    rate = int(os.environ.get("CACHES_RATE", "800"))
    tx_bytes = int(os.environ.get("CACHES_TX_BYTES", "4096"))
    senders = int(os.environ.get("CACHES_SENDERS", "12000"))
    seconds = int(os.environ.get("CACHES_SECONDS", "60"))
    mib = 1 << 20
    loaded = localnet_names(n)[0]

    def sample(c):
        out = []
        for i in range(c.nodes):
            objs = named_objects(c.stats(i) or {}, [loaded])
            o = objs[0] if objs else {}
            sc, mem = o.get("state_cache") or {}, o.get("memory") or {}
            out.append({"hits": int(sc.get("hits", 0) or 0),
                        "misses": int(sc.get("misses", 0) or 0),
                        "bytes": int(sc.get("bytes", 0) or 0),
                        "capacity": int(sc.get("capacity_bytes", 0) or 0),
                        "asks": int(sc.get("memory_demand_bytes", 0) or 0),
                        "share": float(mem.get("share", 0) or 0),
                        "demand": float(mem.get("demand", 0) or 0)})
        return out

    with Cluster("caches", os.environ.get("CACHES_EXTRA", ""), partitions=n) as c:
        t0, c0 = time.monotonic(), c.cpu_seconds()
        run = c.loadgen_start("caches", "%s:rate=%d,tx_bytes=%d,keys=per_sender" % (loaded, rate, tx_bytes),
                              seconds, drain=5, presign=rate * (seconds + 5) + 10,
                              extra=["--senders", str(senders)])
        time.sleep(seconds / 2)
        half = sample(c)
        p, s = c.loadgen_finish(run)
        cores = (c.cpu_seconds() - c0) / (time.monotonic() - t0)
        end = sample(c)
        rss = c.rss_bytes()
    ratios = []
    for a, b in zip(half, end):
        h, m = b["hits"] - a["hits"], b["misses"] - a["misses"]
        ratios.append(h / max(h + m, 1))
    r = p[loaded]
    result("a partition's state cache beside %d idle partitions, %d tx/s of %d B over %d keys for "
           "%d s" % (n - 1, rate, tx_bytes, senders, seconds),
           "the loaded partition's state cache: hits in the second half %s; holds %s of %s MiB; memory share %s MiB "
           "(demand %s, its caches ask %s MiB); nodes' RSS %s MiB" % (
               "/".join("%.3f" % x for x in ratios),
               "/".join("%.0f" % (x["bytes"] / mib) for x in end),
               "/".join("%.0f" % (x["capacity"] / mib) for x in end),
               "/".join("%.0f" % (x["share"] / mib) for x in end),
               "/".join("%.0f" % (x["demand"] / mib) for x in end),
               "/".join("%.0f" % (x["asks"] / mib) for x in end),
               "/".join("%.0f" % (x / mib) for x in rss)),
           "%d of %d committed, p99 %.0f ms, %d VC, nodes %.2f cores" % (
               r["committed"], r["offered"], r["p99_ms"], r["view_changes"] or 0, cores),
           "-", "idle partitions lend their memory; a cache that evicts gets it",
           "binaries from %s; loadgen %.2f cores" % (BUILD, s["_loadgen_cores"]))


SCENARIOS = {"goodput": goodput, "egress": egress, "isolation": isolation,
             "lossless": lossless, "throughput": throughput, "rejection": rejection,
             "scale": scale, "cpu": cpu, "state": state, "rejoin": rejoin, "fanout": fanout,
             "retry": retry, "reads": reads,
             "live": live, "memory": memory, "lanes": lanes, "admission": admission,
             "shares": shares, "memtables": memtables, "caches": caches}


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    names = argv or list(SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        print("bench_scenarios: unknown scenario %s; known: %s" % (bad, " ".join(SCENARIOS)),
              file=sys.stderr)
        return 2
    for b in (LOADGEN, NODECTL, os.path.join(BUILD, "runtime", "noded")):
        if not os.access(b, os.X_OK):
            print("bench_scenarios: %s not built" % b, file=sys.stderr)
            return 1
    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    os.makedirs(os.path.join(OUT, "scenarios"), exist_ok=True)
    failed = []
    for n in names:
        log("== %s (load %s)" % (n, load()))
        t = time.time()
        try:
            SCENARIOS[n]()
        except Exception as e:  # report and go on with the next scenario
            failed.append(n)
            print("RESULT %s: FAILED: %s" % (n, e), flush=True)
        finally:
            for c in list(Cluster.live):
                c.down()
        log("%s took %.0f s" % (n, time.time() - t))
    md = os.path.join(OUT, "scenarios.md")
    new = not os.path.exists(md)
    with open(md, "a") as f:
        if new:
            f.write("| scenario | ours | baseline | ratio | target | setup | machine |\n"
                    "|---|---|---|---|---|---|---|\n")
        f.write("<!-- %s, %s -->\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      " ".join(names)))
        for r in RESULTS:
            f.write(r + "\n")
    log("rows appended to %s" % md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
