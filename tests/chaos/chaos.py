#!/usr/bin/python3
"""chaos: fault runs against a real 4-node `noded` localnet under steady load.

  tests/chaos/chaos.py short                      each fault kind once (~1-2 min), exit 1 on any
                                                  violation
  tests/chaos/chaos.py long --minutes 10 --seed 7 randomized fault schedule, prints a table
                                                  (--disk adds disk_full to it; needs root)
  tests/chaos/chaos.py disk                       the disk faults alone (~1 min; needs root)
  tests/chaos/chaos.py long --partitions 16 --rate 10 --batch-ms 100 --scan-heights 100 ...
                                                  the same on 16 partitions (p1..p16)
  tests/chaos/chaos.py byzantine                  a Byzantine replica as a real process, a
                                                  faulty primary, a diverging executor (~2 min;
                                                  long --byzantine adds them to the schedule)

Faults: kill -9 + restart of a replica; SIGSTOP/SIGCONT of a replica and of a primary for longer
than the view-change timeout; rolling restart (SIGTERM + start, one node after another); kill -9
of the current primary, repeatedly; a full disk under one partition of a replica, then of a primary (disk_full,
disk_full_primary: every partition directory is a tmpfs of this run's private mount namespace,
and one is filled up while the node runs; the partition must halt with a reason naming the disk,
everything else go on, and a restart with space catch up). Background load: build/tools/loadgen on every partition, plus
one "acked submitter" thread per partition that sends signed Put txs with wait_for_commit to a
random live node and records every tx whose commit was acknowledged (a receipt with a height).

Invariants, checked through the client and admin APIs after each fault run:
  safety    every node has the same block hash and state root at every height of every
            partition (up to the common height, after waiting for catch-up; each check reads
            the last --scan-heights heights block by block, and a block's hash covers its
            parent's, so the same block at the lowest height read means the same chain below);
  acked     every acked tx is COMMITTED on every node, at the acked height (after a restart the
            node is asked again for those in its last REVERIFY heights and a random
            REVERIFY_TXS of the older ones);
  recovery  after healing, every node commits a new height within 2x the view-change timeout
            (after a primary is killed: survivors commit within 3x, detection included);
  catch-up  a restarted node reaches the others' height (CATCHUP_S bound).
  diverge   a replica that executes one block differently (noded --test-diverge) is DIVERGED
            on that partition (status with the height and both roots, metric, log) while the
            others go on; with its ledger deleted and the failpoint off it rebuilds from its peers
            (a snapshot of the state when 1,000 blocks or more behind, else block sync).
  disk      a full disk halts only its partition on its node (HALTED, a halt_reason naming the
            disk in the status, noded_consensus_state{state="HALTED"} 1), within DISK_HALT_S; the
            node's other partition and the other nodes keep committing; clients get UNAVAILABLE.

Python stubs are generated at run time from proto/*.proto (protoc + grpc_python_plugin); txs are
signed with `cryptography` (Ed25519). Exit 0 pass, 1 violation or failure, 77 skipped (modules or
binaries missing; disk faults without root or mount namespaces). Cluster directories live in a
temp dir and are always brought down; the disk fault's tmpfs dies with the run's namespace.
"""

import argparse
import datetime
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_NODES = 4
PARTITIONS = ["hot", "steady"]
CATCHUP_S = 30.0      # a restarted / resumed node reaches the others' height within this
STUCK_S = 45.0        # the pre-check wait for every node to reach the max height
POLL_S = 0.05
SHORT_BUDGET_S = 170  # short mode starts no fault after this (ctest TIMEOUT is 300 s)
HARD_DEADLINE = [float("inf")]  # monotonic time every wait ends by (short mode: start + 240 s)
REVERIFY = 300        # heights re-read from a restarted node
REVERIFY_TXS = 500    # acked txs below those heights re-read from a restarted node (a sample)
# Heights read block by block per node and partition at each check (--scan-heights). Below them
# nothing need be read: a block's hash covers its parent's hash, so the same block at the lowest
# height read means the same chain below it.
SCAN_HEIGHTS = 1000
# disk_full: each partition directory's tmpfs. The ledger does not preallocate its files
# (allow_fallocate off): a preallocated WAL would absorb the writes that must hit the full disk.
DISK_SIZE = 60 << 20
DISK_LEFT = 16 << 10  # disk_full: free bytes left once the filler is written
DISK_HALT_S = 20.0    # disk_full: the partition halts within this of the disk filling up
BYZ_S = 40            # byzantine: how long byzantine_peer runs (4 s per misbehaviour)
FALSE_CUT_S = 6       # byzantine: then how long it claims to cut a partition's admission
# byzantine: node-wide admission on (so that the agreed cuts are in force) with thresholds no
# honest node reaches here: what cuts a partition's writes during the run is the faulty peer or
# nothing.
BYZ_NODE_EXTRA = ("resources { node_admission { enabled: true consensus_delay_target_ms: 60000 "
                  "cpu_busy_fraction: 1 } }")
BYZ_RSS_MB = 128      # byzantine: an honest node's resident memory grows less than this
DIVERGE_S = 30.0      # diverge: the replica is DIVERGED within this of its restart
EQUIV_REPLACE_VCT = 4  # equivocate: honest replicas leave the faulty view within this many
                       # view-change timeouts (request timeout = 1, view change, slack)
T0 = time.monotonic()
grpc = admin_pb2 = admin_pb2_grpc = chain_pb2 = client_pb2 = client_pb2_grpc = None


def log(msg):
    print("[%7.2fs] %s" % (time.monotonic() - T0, msg), flush=True)


def load_localnet():
    path = os.path.join(REPO, "tools", "localnet")
    loader = importlib.machinery.SourceFileLoader("localnet_mod", path)
    spec = importlib.util.spec_from_loader("localnet_mod", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def generate_stubs(out):
    global grpc, admin_pb2, admin_pb2_grpc, chain_pb2, client_pb2, client_pb2_grpc
    os.makedirs(out, exist_ok=True)
    protos = sorted(glob.glob(os.path.join(REPO, "proto", "*.proto")))
    subprocess.run(["protoc", "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin", "-I", REPO] + protos,
                   check=True)
    sys.path.insert(0, out)
    import grpc as g
    from proto import admin_pb2 as a, admin_pb2_grpc as ag, chain_pb2 as c
    from proto import client_pb2 as cl, client_pb2_grpc as clg
    grpc, admin_pb2, admin_pb2_grpc, chain_pb2, client_pb2, client_pb2_grpc = g, a, ag, c, cl, clg


CHANNEL_OPTS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 300)]


# ---------------------------------------------------------------------------------------------
# The cluster: localnet's own functions for processes, gRPC stubs for status.

class Cluster:
    def __init__(self, ln, d, build, vct_ms, batch_ms, disk=False, snapshot_min_blocks=200,
                 retain_blocks=0, node_extra=""):
        self.ln, self.d, self.build, self.vct_ms = ln, d, build, vct_ms
        self.node_extra = node_extra  # top-level config lines for every node
        self.disk = disk
        self.snapshot_min_blocks = snapshot_min_blocks
        self.retain_blocks = retain_blocks
        self.batch_ms = batch_ms
        self.state = None
        self.procs = {}
        self.down_nodes = set()    # killed / stopped: not "live"
        self.paused = set()        # SIGSTOPped: not "live"
        self.restarted = set()     # restarted since the last check (re-verify their history)
        self.lock = threading.Lock()
        self.ids = {}
        self.mounts = []           # disk_full's tmpfs mount points, unmounted by down()

    def partition_dir(self, i, p):
        """Node i's data directory of partition p (ids 1.. in PARTITIONS order, as localnet)."""
        return os.path.join(self.ln.node_paths(self.d, i)["data"],
                            "partition-%d" % (PARTITIONS.index(p) + 1))

    def up(self):
        if self.disk:
            # disk_full: every partition directory its own small file system, so one can fill up
            # while the rest of the node has room (mounted in this run's namespace only).
            for i in self.indices():
                for p in PARTITIONS:
                    pdir = self.partition_dir(i, p)
                    os.makedirs(pdir)
                    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % DISK_SIZE, "tmpfs",
                                    pdir], check=True)
                    self.mounts.append(pdir)
        extra = os.path.join(os.path.dirname(self.d), "extra.conf")
        with open(extra, "w") as f:
            f.write("[node]\n%s\n" % self.node_extra)
            f.write("[partition *]\nconsensus { view_change_timeout_ms: %d batch_timeout_ms: %d "
                    "snapshot_sync_min_blocks: %d }\nstate { retain_blocks: %d }\n"
                    % (self.vct_ms, self.batch_ms, self.snapshot_min_blocks,
                       self.retain_blocks))
        cmd = [os.path.join(REPO, "tools", "localnet"), "up", str(N_NODES), "--partitions",
               str(len(PARTITIONS)),
               "--base-port", "0", "--dir", self.d, "--config-extra", extra, "--clean",
               "--noded", os.path.join(self.build, "runtime", "noded"),
               "--nodectl", os.path.join(self.build, "tools", "nodectl"), "--timeout", "90"]
        subprocess.run(cmd, check=True)
        self.state = self.ln.load_state(self.d)
        self.client, self.admin, self.token = {}, {}, {}
        for i in self.indices():
            ports = self.state["nodes"][i - 1]["ports"]
            self.client[i] = client_pb2_grpc.ClientServiceStub(
                grpc.insecure_channel("127.0.0.1:%d" % ports["client"], options=CHANNEL_OPTS))
            self.admin[i] = admin_pb2_grpc.AdminServiceStub(
                grpc.insecure_channel("127.0.0.1:%d" % ports["admin"], options=CHANNEL_OPTS))
            with open(self.ln.node_paths(self.d, i)["token"]) as f:
                self.token[i] = [("authorization", "Bearer " + f.read().strip())]
        for i in self.indices():
            st = self.status(i, timeout=5)
            if st is None:
                raise RuntimeError("node %d does not answer GetNodeStatus after up" % i)
            self.ids[i] = st.node_id
        self.sorted_ids = sorted(self.ids.values())
        ids = {x.name: x.id for x in self.status(1, timeout=5).partitions}
        if ids != {p: k + 1 for k, p in enumerate(PARTITIONS)}:
            raise RuntimeError("partition ids %s are not 1.. in the order of %s" % (ids, PARTITIONS))

    def down(self):
        if not self.state:
            return
        for i in self.indices():
            pid = self.ln.running_pid(self.d, i)
            if pid:
                self.ln.signal_pid(pid, signal.SIGCONT)
        self.ln.stop_nodes(self.d, self.indices(), signal.SIGTERM, 15)
        self.ln.reap(self.procs)
        for m in self.mounts:
            subprocess.run(["umount", "-l", m], check=False)

    def indices(self):
        return list(range(1, N_NODES + 1))

    def rss_kib(self, i):
        """Resident memory of node i's process, KiB (0 when it does not run)."""
        pid = self.ln.running_pid(self.d, i)
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, TypeError, ValueError):
            pass
        return 0

    def metrics_text(self, i):
        """Node i's Prometheus text, "" if it cannot be read."""
        port = self.state["nodes"][i - 1]["ports"]["metrics"]
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
                return r.read().decode()
        except OSError as e:
            log("metrics of node %d: %s" % (i, e))
            return ""

    def refused_by_reason(self, i, peer):
        """{reason: count} of noded_peer_messages_refused_total{peer=...} on node i's metrics."""
        text = self.metrics_text(i)
        out = {}
        prefix = 'noded_peer_messages_refused_total{peer="%s",reason="' % peer
        for line in text.splitlines():
            if line.startswith(prefix):
                reason, value = line[len(prefix):].split('"}')
                out[reason] = float(value)
        return out

    def live(self):
        with self.lock:
            return [i for i in self.indices() if i not in self.down_nodes and i not in self.paused]

    def addrs(self, kind):
        return ",".join("127.0.0.1:%d" % n["ports"][kind] for n in self.state["nodes"])

    def status(self, i, timeout=1.0):
        try:
            return self.admin[i].GetNodeStatus(admin_pb2.GetNodeStatusRequest(),
                                               metadata=self.token[i], timeout=timeout)
        except grpc.RpcError:
            return None

    def heights(self, nodes, timeout=1.0):
        """{i: {partition: PartitionStatus}} for nodes that answered."""
        out = {}
        for i in nodes:
            st = self.status(i, timeout)
            if st is not None:
                out[i] = {p.name: p for p in st.partitions}
        return out

    def primaries(self, ahead=0):
        """{partition: node index of its primary in the highest view any live node reports}; with
        `ahead`, of the primary that many views after it."""
        hs = self.heights(self.live())
        out = {}
        for p in PARTITIONS:
            v = max((h[p].view for h in hs.values()), default=0) + ahead
            pid = self.sorted_ids[v % N_NODES]
            out[p] = next(i for i, nid in self.ids.items() if nid == pid)
        return out

    def primary(self, partition):
        return self.primaries()[partition]

    def kill(self, i, sig=signal.SIGKILL):
        with self.lock:
            self.down_nodes.add(i)
        self.ln.stop_nodes(self.d, [i], sig, 15)
        self.ln.reap(self.procs)

    def start(self, i, extra_args=()):
        # The binary may be being relinked by a concurrent build (EACCES / ETXTBSY): retry.
        for attempt in range(60):
            try:
                self.procs[i] = self.ln.start_node(self.state, self.d, i, extra_args)
                break
            except OSError as e:
                if attempt == 59:
                    raise
                log("start node %d: %s; retrying" % (i, e))
                time.sleep(0.5)
        with self.lock:
            self.down_nodes.discard(i)
            self.restarted.add(i)

    def pause(self, i):
        with self.lock:
            self.paused.add(i)
        self.ln.signal_pid(self.ln.running_pid(self.d, i), signal.SIGSTOP)

    def resume(self, i):
        self.ln.signal_pid(self.ln.running_pid(self.d, i), signal.SIGCONT)
        with self.lock:
            self.paused.discard(i)

    def evidence(self, i, lines=15):
        out = ["---- node %d log tail ----" % i,
               self.ln.tail(self.ln.node_paths(self.d, i)["log"], lines)]
        try:
            r = subprocess.run(self.ln.nodectl_cmd(self.state, self.d, i, ["status"], 2000),
                               capture_output=True, text=True, timeout=5)
            out += ["---- nodectl status (node %d) ----" % i, r.stdout.strip() + r.stderr.strip()]
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append("nodectl: %s" % e)
        return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Acked submitter: one thread per partition.

class Submitter(threading.Thread):
    def __init__(self, cluster, partition, pid, rate, seed):
        super().__init__(daemon=True)
        self.c, self.partition, self.pid, self.rate = cluster, partition, pid, rate
        self.rng = random.Random("%s-%s" % (seed, partition))
        self.seed = seed
        self.stop_ev = threading.Event()
        self.acked = []          # (tx_hash, height)
        self.failed = 0
        self.sender_no = 0
        self._new_sender()

    def _new_sender(self):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        self.sender_no += 1
        raw = hashlib.sha256(("chaos-%s-%s-%d" % (self.seed, self.partition,
                                                  self.sender_no)).encode()).digest()
        self.key = Ed25519PrivateKey.from_private_bytes(raw)
        self.sender = self.key.public_key().public_bytes(serialization.Encoding.Raw,
                                                         serialization.PublicFormat.Raw)
        self.nonce = 1

    def run(self):
        ref = client_pb2.PartitionRef(name=self.partition)
        while not self.stop_ev.is_set():
            live = self.c.live()
            if live:
                i = self.rng.choice(live)
                tx = chain_pb2.Transaction(partition=self.pid, sender=self.sender, nonce=self.nonce,
                                           put=chain_pb2.Put(key=b"chaos-%d" % self.nonce,
                                                             value=b"v"))
                txb = tx.SerializeToString(deterministic=True)
                signed = chain_pb2.SignedTransaction(tx=txb, signature=self.key.sign(txb))
                req = client_pb2.SubmitTxRequest(partition=ref, wait_for_commit=True,
                                                 wait_timeout_ms=4000,
                                                 signed_tx=signed.SerializeToString(
                                                     deterministic=True))
                try:
                    r = self.c.client[i].SubmitTx(req, timeout=6)
                    if r.HasField("receipt") and r.receipt.block_height > 0:
                        self.acked.append((r.tx_hash, r.receipt.block_height))
                        self.nonce += 1
                    else:
                        self.failed += 1
                        self._new_sender()  # it may still commit later: never reuse its nonce
                except grpc.RpcError:
                    self.failed += 1
                    self._new_sender()
            self.stop_ev.wait(1.0 / self.rate)


# ---------------------------------------------------------------------------------------------
# Invariant checks.

class Checker:
    def __init__(self, cluster, submitters):
        self.c, self.subs = cluster, submitters
        self.ref = {p: {} for p in PARTITIONS}        # height -> (block_hash, state_root)
        self.verified = {i: {p: 0 for p in PARTITIONS} for i in cluster.indices()}
        self.tx_ok = {i: set() for i in cluster.indices()}
        self.safety = []
        self.lost = set()
        self.diverged = {}   # (node, partition) -> first height whose block hash differs
        self.liveness = []
        self.scan = SCAN_HEIGHTS
        self.rng = random.Random(1)  # which older acked txs a restarted node is asked for
        self.reads = 0       # GetBlock calls

    def violation(self, kind, msg, nodes=()):
        log("VIOLATION (%s): %s" % (kind, msg))
        n = len(self.safety) + len(self.liveness)
        for i in nodes if n < 3 else ():  # evidence for the first few only
            print(self.c.evidence(i), flush=True)
        (self.safety if kind == "safety" else self.liveness).append(msg)

    def wait_caught_up(self, nodes, timeout):
        """Waits until every node in `nodes` reaches, on every partition, the max height seen at
        the start. Returns {partition: min height} or reports the stuck nodes."""
        hs = self.c.heights(nodes)
        target = {p: max((h[p].height for h in hs.values()), default=0) for p in PARTITIONS}
        deadline = min(time.monotonic() + timeout, HARD_DEADLINE[0])
        while True:
            hs = self.c.heights(nodes)
            behind = [(i, p) for i in nodes for p in PARTITIONS
                      if i not in hs or hs[i][p].height < target[p]]
            if not behind:
                return {p: min(h[p].height for h in hs.values()) for p in PARTITIONS}
            if time.monotonic() > deadline:
                desc = ", ".join("node %d %s at %s (%s)" % (
                    i, p, hs[i][p].height if i in hs else "?",
                    hs[i][p].consensus_state if i in hs else "no answer") for i, p in behind)
                self.violation("liveness", "not caught up within %gs to %s: %s"
                               % (timeout, target, desc), sorted({i for i, _ in behind}))
                return None
            time.sleep(0.2)

    def verified_text(self):
        """Heights verified on every node, per partition (a table cell)."""
        low = {p: min(v[p] for v in self.verified.values()) for p in PARTITIONS}
        if len(PARTITIONS) <= 4:
            text = ", ".join("%s %d" % (p, low[p]) for p in PARTITIONS)
        else:
            text = "%d partitions, %d..%d each, %d in all" % (
                len(PARTITIONS), min(low.values()), max(low.values()), sum(low.values()))
        return text + " (every node; %d GetBlock reads)" % self.reads

    def describe(self, p, h, bad):
        """Prints block `h` of `p` as every live node serves it (evidence for a mismatch)."""
        if len(self.safety) >= 3:
            return
        for i in self.c.live():
            try:
                r = self.c.client[i].GetBlock(client_pb2.GetBlockRequest(
                    partition=client_pb2.PartitionRef(name=p), height=h), timeout=5)
            except grpc.RpcError as e:
                print("  node %d: %s" % (i, e.code()))
                continue
            hd = r.block.header
            print("  node %d%s %s h=%d hash=%s parent=%s tx_root=%s root=%s proposer=%s view=%d "
                  "ts=%d txs=%d" % (i, "*" if i == bad else " ", p, hd.height, r.block_hash.hex()[:12],
                                    hd.parent_hash.hex()[:12], hd.tx_root.hex()[:12],
                                    hd.state_root.hex()[:12], hd.proposer.hex()[:12], hd.view,
                                    hd.timestamp_ms, hd.tx_count), flush=True)

    def earliest(self, i, p):
        """The lowest height node i holds every block of p from (its snapshot's, or 0)."""
        try:
            return self.c.client[i].GetChainStatus(client_pb2.GetChainStatusRequest(
                partition=client_pb2.PartitionRef(name=p)), timeout=5).earliest_height
        except grpc.RpcError:
            return 0  # GetBlock below reports what is wrong

    def block(self, i, p, h):
        r = self.c.client[i].GetBlock(client_pb2.GetBlockRequest(
            partition=client_pb2.PartitionRef(name=p), height=h), timeout=5)
        return r.block_hash, r.block.header.state_root

    def check(self, final=False):
        nodes = self.c.live()
        common = self.wait_caught_up(nodes, STUCK_S)
        if common is None:
            return
        with self.c.lock:
            restarted, self.c.restarted = self.c.restarted, set()
        for i in restarted:
            # Re-verify what a restarted node serves from its own disk: the last REVERIFY heights
            # of every partition, every acked tx in them and REVERIFY_TXS older acked txs drawn
            # at random (all of them would cost minutes in long runs with many partitions).
            for p in PARTITIONS:
                self.verified[i][p] = max(0, self.verified[i][p] - REVERIFY)
            older = []
            for sub in self.subs:
                for tx_hash, height in list(sub.acked):
                    if height > self.verified[i][sub.partition]:
                        self.tx_ok[i].discard(tx_hash)
                    elif tx_hash in self.tx_ok[i]:
                        older.append(tx_hash)
            for tx_hash in self.rng.sample(older, min(REVERIFY_TXS, len(older))):
                self.tx_ok[i].discard(tx_hash)
        # A node that installed a snapshot holds no blocks (nor txs) below it.
        earliest = {(i, p): self.earliest(i, p) for i in nodes for p in PARTITIONS}
        n_blocks = 0
        for p in PARTITIONS:
            for i in nodes:
                if (i, p) in self.diverged:
                    continue  # reported once at its first height; every later parent differs
                # A restarted node is re-read from its reset height whatever the scan window:
                # the hash chain says the blocks were the same when built, not that its disk
                # still serves them.
                first = (self.verified[i][p] if i in restarted
                         else max(self.verified[i][p], common[p] - self.scan)) + 1
                first = max(first, earliest[(i, p)])
                cut = first > self.verified[i][p] + 1  # heights skipped below `first`
                for h in range(first, common[p] + 1):
                    try:
                        got = self.block(i, p, h)
                    except grpc.RpcError as e:
                        if (e.code() == grpc.StatusCode.OUT_OF_RANGE and self.c.retain_blocks
                                and h < self.earliest(i, p)):
                            break  # pruned since `earliest` was read (--retain-blocks)
                        self.violation("liveness", "node %d GetBlock %s/%d: %s %s"
                                       % (i, p, h, e.code(), e.details()))
                        break
                    n_blocks += 1
                    self.reads += 1
                    want = self.ref[p].setdefault(h, got)
                    if got != want:
                        self.describe(p, h, i)
                        self.diverged[(i, p)] = h
                        where = ("the lowest height read, so the first divergence is here or "
                                 "below" if h == first and cut else "the first divergence")
                        self.violation("safety", "node %d %s height %d (%s): block %s root %s, "
                                       "others %s root %s" % (i, p, h, where, got[0].hex()[:16],
                                                       got[1].hex()[:16], want[0].hex()[:16],
                                                       want[1].hex()[:16]), [i])
                        break
                    self.verified[i][p] = h
        n_tx = 0
        for sub in self.subs:
            p = sub.partition
            for tx_hash, height in list(sub.acked):
                for i in nodes:
                    if tx_hash in self.tx_ok[i] or (height > common[p] and not final):
                        continue
                    if height < earliest[(i, p)]:
                        continue  # below the snapshot it installed: other nodes hold it
                    try:
                        r = self.c.client[i].GetTx(client_pb2.GetTxRequest(
                            partition=client_pb2.PartitionRef(name=p), tx_hash=tx_hash), timeout=5)
                    except grpc.RpcError as e:
                        pruned = (self.c.retain_blocks and height < self.earliest(i, p) and
                                  e.code() in (grpc.StatusCode.OUT_OF_RANGE,
                                               grpc.StatusCode.NOT_FOUND))
                        if not pruned:  # else pruned since `earliest` was read
                            self.violation("liveness", "node %d GetTx: %s" % (i, e.code()))
                        continue
                    n_tx += 1
                    if (r.state != client_pb2.GetTxResponse.COMMITTED
                            or r.receipt.block_height != height):
                        self.lost.add(tx_hash)
                        self.violation("safety", "acked tx %s (%s height %d) on node %d: state %d "
                                       "height %d" % (tx_hash.hex()[:16], p, height, i, r.state,
                                                      r.receipt.block_height), [i])
                    else:
                        self.tx_ok[i].add(tx_hash)
        log("check: common heights %s; %d blocks and %d tx lookups verified; acked %d"
            % (common, n_blocks, n_tx, sum(len(s.acked) for s in self.subs)))


# ---------------------------------------------------------------------------------------------
# Fault runs. Each returns {"kind", "recovery_s", "catchup_s"} and reports liveness violations.

class Faults:
    def __init__(self, cluster, checker, rng):
        self.c, self.chk, self.rng = cluster, checker, rng
        self.vct = cluster.vct_ms / 1000.0

    def wait_new_height(self, nodes, since, bound, what):
        """Time from `since` until every node in `nodes` commits a height above the max height
        any of them had at call time, on every partition. Reports a violation over `bound`."""
        hs = self.c.heights(nodes)
        base = {p: max((h[p].height for h in hs.values()), default=0) for p in PARTITIONS}
        deadline = min(time.monotonic() + max(bound, CATCHUP_S), HARD_DEADLINE[0])
        while time.monotonic() < deadline:
            hs = self.c.heights(nodes, timeout=0.5)
            if all(i in hs and hs[i][p].height > base[p] for i in nodes for p in PARTITIONS):
                break
            time.sleep(POLL_S)
        took = time.monotonic() - since
        if took > bound:
            self.chk.violation("liveness", "%s: commits resumed on nodes %s after %.2fs > %.2fs"
                               % (what, nodes, took, bound),
                               nodes if took >= max(bound, CATCHUP_S) else [])
        return took

    def wait_catchup(self, i, since, what):
        """Time from `since` until node i reaches the live nodes' height (all partitions) and
        every partition is NORMAL."""
        others = [j for j in self.c.live() if j != i]
        hs = self.c.heights(others)
        target = {p: max((h[p].height for h in hs.values()), default=0) for p in PARTITIONS}
        deadline = min(since + CATCHUP_S, HARD_DEADLINE[0])
        while time.monotonic() < deadline:
            h = self.c.heights([i], timeout=0.5).get(i)
            if h and all(h[p].height >= target[p] and h[p].consensus_state == "NORMAL"
                         for p in PARTITIONS):
                return time.monotonic() - since
            time.sleep(POLL_S)
        self.chk.violation("liveness", "%s: node %d did not catch up to %s within %gs"
                           % (what, i, target, CATCHUP_S), [i])
        return CATCHUP_S

    def non_primary(self, exclude=()):
        """A live node that is no partition's primary. With many partitions (each at its own
        view) there may be none: then one of those that lead the fewest partitions. Nodes in
        `exclude` are not picked unless every live node is there."""
        live = [i for i in self.c.live() if i not in exclude] or self.c.live()
        leads = {i: 0 for i in live}
        for j in self.c.primaries().values():
            if j in leads:
                leads[j] += 1
        fewest = min(leads.values())
        if fewest > 0:
            log("every live node is some partition's primary; picking one that leads %d" % fewest)
        return self.rng.choice([i for i in live if leads[i] == fewest])

    def kill_restart(self):
        i = self.non_primary()
        log("fault kill_restart: kill -9 node %d" % i)
        self.c.kill(i)
        time.sleep(self.vct * 1.5)
        t = time.monotonic()
        self.c.start(i)
        took = self.wait_catchup(i, t, "kill_restart")
        rec = self.wait_new_height(self.c.live(), time.monotonic(), 2 * self.vct, "kill_restart")
        return {"kind": "kill_restart", "recovery_s": rec, "catchup_s": took}

    def pause(self, primary):
        p = self.rng.choice(PARTITIONS)
        i = self.c.primary(p) if primary else self.non_primary()
        kind = "pause_primary" if primary else "pause_replica"
        log("fault %s: SIGSTOP node %d (%s primary: %s) for %.1fs"
            % (kind, i, p, primary, 2.5 * self.vct))
        self.c.pause(i)
        time.sleep(2.5 * self.vct)
        self.c.resume(i)
        t = time.monotonic()
        rec = self.wait_new_height(self.c.indices(), t, 2 * self.vct, kind)
        took = self.wait_catchup(i, t, kind)
        return {"kind": kind, "recovery_s": rec, "catchup_s": took}

    def rolling_restart(self):
        log("fault rolling_restart: SIGTERM + start each node in turn")
        worst_c = worst_r = 0.0
        for i in self.c.indices():
            self.c.kill(i, signal.SIGTERM)
            t = time.monotonic()
            self.c.start(i)
            worst_c = max(worst_c, self.wait_catchup(i, t, "rolling_restart"))
            worst_r = max(worst_r, self.wait_new_height(self.c.live(), time.monotonic(),
                                                        2 * self.vct, "rolling_restart"))
        return {"kind": "rolling_restart", "recovery_s": worst_r, "catchup_s": worst_c}

    def kill_primary(self, times=3):
        worst_c = worst_r = 0.0
        for k in range(times):
            p = PARTITIONS[k % len(PARTITIONS)]
            i = self.c.primary(p)
            log("fault kill_primary %d/%d: kill -9 node %d (primary of %s)" % (k + 1, times, i, p))
            t = time.monotonic()
            self.c.kill(i)
            # Survivors must detect the dead primary (one timeout) and change view.
            worst_r = max(worst_r, self.wait_new_height(self.c.live(), t, 3 * self.vct,
                                                        "kill_primary failover"))
            t = time.monotonic()
            self.c.start(i)
            worst_c = max(worst_c, self.wait_catchup(i, t, "kill_primary"))
        return {"kind": "kill_primary", "recovery_s": worst_r, "catchup_s": worst_c}

    def disk_full(self, primary):
        """A replica's disk fills up under one partition: a filler file takes all but DISK_LEFT
        bytes of that partition's tmpfs (Cluster.up mounted one per partition directory). With
        `primary`, the replica is that partition's primary. The partition must halt there with a
        reason naming the disk (status and metric) while the node's other partition and the other
        replicas go on (after a view change when the primary halted); with the filler gone, a
        restart catches up (the Checker then re-verifies its blocks)."""
        kind = "disk_full_primary" if primary else "disk_full"
        p = self.rng.choice(PARTITIONS)
        i = self.c.primary(p) if primary else self.non_primary()
        others = [j for j in self.c.live() if j != i]
        pdir = self.c.partition_dir(i, p)
        log("fault %s: fill node %d's disk under %s (%s)" % (kind, i, p, pdir))
        # Fill it: every later ledger or consensus-store write of this partition fails.
        filler = os.path.join(pdir, "disk-filler")
        st = os.statvfs(pdir)
        free = st.f_bavail * st.f_frsize
        log("%s: %d of %d bytes used" % (kind, st.f_blocks * st.f_frsize - free,
                                         st.f_blocks * st.f_frsize))
        with open(filler, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, max(free - DISK_LEFT, 1))
        t = time.monotonic()
        base = {q: h.height for q, h in self.c.heights([i])[i].items()}
        halted = self.wait_state(i, p, "HALTED", t + DISK_HALT_S)
        halt_s = time.monotonic() - t
        if halted is None:
            self.chk.violation("liveness", "%s: node %d's %s did not halt within %gs of its "
                               "disk filling up" % (kind, i, p, DISK_HALT_S), [i])
        else:
            log("%s: node %d's %s halted after %.2fs at height %d: %s"
                % (kind, i, p, halt_s, halted.height, halted.halt_reason))
            if "No space left on device" not in halted.halt_reason:
                self.chk.violation("liveness", "%s: node %d's %s halted, but its halt_reason "
                                   "does not name the disk: %r"
                                   % (kind, i, p, halted.halt_reason), [i])
            self.check_halted_visible(i, p)
        # Everything else goes on: this node's other partitions, and p on the other replicas
        # (which first detect a halted primary and change view, as after kill_primary).
        self.wait_progress({j: PARTITIONS for j in others}, (3 if primary else 2) * self.vct,
                           "%s (others)" % kind)
        rest = [q for q in PARTITIONS if q != p]
        self.wait_progress({i: rest}, 2 * self.vct, "%s (node %d's other partition)" % (kind, i))
        h = self.c.heights([i]).get(i)
        if halted is not None and h and h[p].height != halted.height:
            self.chk.violation("safety", "%s: node %d's halted %s moved from height %d to %d"
                               % (kind, i, p, halted.height, h[p].height), [i])
        # Space again, and a restart: the partition catches up from its last durable block.
        self.c.kill(i, signal.SIGTERM)
        os.unlink(filler)
        t = time.monotonic()
        self.c.start(i)
        took = self.wait_catchup(i, t, kind)
        rec = self.wait_new_height(self.c.live(), time.monotonic(), 2 * self.vct, kind)
        log("%s: heights before the fill %s; halted after %.2fs; caught up in %.2fs"
            % (kind, base, halt_s, took))
        return {"kind": kind, "recovery_s": rec, "catchup_s": took}

    def byzantine(self):
        """A replica turns Byzantine: its node stops and tests/byzantine/byzantine_peer takes
        its place (its key, its p2p port) for BYZ_S seconds, running every misbehaviour in turn.
        The honest three must keep committing on every partition throughout (each wait bounded
        by 2x the view-change timeout), keep their memory (RSS growth under BYZ_RSS_MB), and
        count what it sent against it by reason (noded_peer_messages_refused_total); then the
        node comes back honest and catches up."""
        i = self.non_primary()
        honest = [j for j in self.c.live() if j != i]
        bad_id = self.c.ids[i]
        log("fault byzantine: node %d (%s) replaced by byzantine_peer for %ds"
            % (i, bad_id, BYZ_S))
        self.c.kill(i, signal.SIGTERM)
        rss0 = {j: self.c.rss_kib(j) for j in honest}
        cmd = [os.path.join(self.c.build, "tests", "byzantine_peer"), "--config",
               self.c.ln.node_paths(self.c.d, i)["config"], "--mode", "all", "--seconds",
               str(BYZ_S), "--rate", "200"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        waits = 0
        worst = 0.0
        try:
            while proc.poll() is None and time.monotonic() < HARD_DEADLINE[0]:
                t = time.monotonic()
                self.wait_progress({j: PARTITIONS for j in honest}, 2 * self.vct,
                                   "byzantine (honest nodes under attack)")
                worst = max(worst, time.monotonic() - t)
                waits += 1
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log("byzantine: %s" % " / ".join(l for l in out.splitlines() if l))
        if proc.returncode != 0:
            self.chk.violation("liveness", "byzantine_peer exited %d: %s"
                               % (proc.returncode, out.strip()[-400:]))
        rss1 = {j: self.c.rss_kib(j) for j in honest}
        growth = max((rss1[j] - rss0[j]) / 1024.0 for j in honest)
        log("byzantine: honest progress checked %d times, slowest %.2fs; RSS MiB before %s, "
            "after %s" % (waits, worst, {j: rss0[j] // 1024 for j in honest},
                          {j: rss1[j] // 1024 for j in honest}))
        if growth > BYZ_RSS_MB:
            self.chk.violation("liveness", "byzantine: an honest node's RSS grew by %.0f MiB "
                               "(bound %d)" % (growth, BYZ_RSS_MB), honest)
        for j in honest:
            refused = self.c.refused_by_reason(j, bad_id)
            log("byzantine: node %d refused from %s: %s" % (j, bad_id, refused))
            for reason in ("bad_signature", "malformed", "wrong_channel", "unknown_partition",
                           "bad_tx", "bad_frame"):
                if refused.get(reason, 0) <= 0:
                    self.chk.violation("liveness", "byzantine: node %d counted no %s from %s"
                                       % (j, reason, bad_id), [j])
        self.false_cut(i, honest, bad_id)
        t = time.monotonic()
        self.c.start(i)
        took = self.wait_catchup(i, t, "byzantine")
        return {"kind": "byzantine", "recovery_s": worst, "catchup_s": took}

    def false_cut(self, i, honest, bad_id):
        """byzantine_peer (in node i's place) claims for FALSE_CUT_S seconds that it cuts the
        first partition's client writes to nothing (node-wide admission's agreed cuts, on with
        BYZ_NODE_EXTRA). One replica of four cannot cut the others: on every honest node the
        fraction let through must stay its own (1 unless it cuts itself), while its metrics show
        the faulty peer cutting. Every fourth claim is out of range and must count as malformed.
        Sampled from the honest nodes' metrics; a node that never shows the peer cutting did not
        test anything, which is a violation too."""
        p = PARTITIONS[0]
        lab = '{partition="%s"}' % p

        def sample(j):
            vals = {}
            for line in self.c.metrics_text(j).splitlines():
                for name in ("noded_node_admission_fraction", "noded_node_admission_local_fraction",
                             "noded_node_admission_peers_cutting"):
                    if line.startswith(name + lab + " "):
                        vals[name] = float(line.split()[-1])
                if line.startswith("noded_node_admission_episodes_total "):
                    vals["episodes"] = float(line.split()[-1])
            return vals

        malformed0 = {j: self.c.refused_by_reason(j, bad_id).get("malformed", 0) for j in honest}
        episodes0 = {j: sample(j).get("episodes") for j in honest}
        if any(e is None for e in episodes0.values()):
            self.chk.violation("liveness", "false_cut: node-wide admission is off on an honest "
                               "node (no noded_node_admission_episodes_total): %s" % episodes0)
            return
        cmd = [os.path.join(self.c.build, "tests", "byzantine_peer"), "--config",
               self.c.ln.node_paths(self.c.d, i)["config"], "--mode", "false_cut", "--seconds",
               str(FALSE_CUT_S), "--rate", "50"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        heard = {j: 0 for j in honest}
        checked = {j: 0 for j in honest}
        lowest = {j: 1.0 for j in honest}
        cut = {j: False for j in honest}
        own_cut = False
        try:
            while proc.poll() is None and time.monotonic() < HARD_DEADLINE[0]:
                for j in honest:
                    v = sample(j)
                    if v.get("episodes") != episodes0[j]:
                        own_cut = True  # an honest node's own episode: its cuts are not ours
                    if own_cut or len(v) < 4:
                        continue
                    checked[j] += 1
                    frac = v["noded_node_admission_fraction"]
                    lowest[j] = min(lowest[j], frac)
                    if v["noded_node_admission_peers_cutting"] >= 1:
                        heard[j] += 1
                    if frac < v["noded_node_admission_local_fraction"] - 1e-9 and not cut[j]:
                        cut[j] = True  # once per node
                        self.chk.violation("liveness", "false_cut: node %d lets %.3f of %s's "
                                           "writes through, below its own %.3f, with %d peer(s) "
                                           "cutting: the faulty replica alone cut it"
                                           % (j, frac, p, v["noded_node_admission_local_fraction"],
                                              v["noded_node_admission_peers_cutting"]), [j])
                time.sleep(0.25)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = " / ".join(l for l in out.splitlines() if l.startswith("byzantine_peer:"))
        log("false_cut: %s; samples per honest node %s, showing the peer cutting %s, lowest "
            "fraction let through %s%s" % (said, checked, heard, lowest,
                                           " (an honest node's own episode ended the check)"
                                           if own_cut else ""))
        if proc.returncode != 0:
            self.chk.violation("liveness", "byzantine_peer --mode false_cut exited %d: %s"
                               % (proc.returncode, out.strip()[-400:]))
        for j in honest:
            if heard[j] == 0:
                self.chk.violation("liveness", "false_cut: node %d never showed %s cutting %s in "
                                   "%d samples: nothing was tested" % (j, bad_id, p, checked[j]),
                                   [j])
            malformed = self.c.refused_by_reason(j, bad_id).get("malformed", 0)
            if malformed <= malformed0[j]:
                self.chk.violation("liveness", "false_cut: node %d counted no out-of-range cut "
                                   "from %s as malformed" % (j, bad_id), [j])

    def log_lines(self, i, marker):
        """(glog time as seconds since the epoch, local time, line) of node i's log lines
        containing `marker` (glog's prefix: a level letter, yyyymmdd, hh:mm:ss.uuuuuu)."""
        out = []
        try:
            with open(self.c.ln.node_paths(self.c.d, i)["log"], errors="replace") as f:
                for line in f:
                    if marker in line:
                        day, clock = line.split()[:2]
                        t = datetime.datetime.strptime(day[1:] + " " + clock, "%Y%m%d %H:%M:%S.%f")
                        out.append((t.timestamp(), line))
        except (OSError, ValueError, IndexError):
            pass
        return out

    def equivocations(self, i, p, kind="equivocate"):
        """(time, view) of each faulty proposal node i logged on partition p (its failpoint:
        "equivocate" or "withhold")."""
        return [(t, int(line.rsplit(" of view ", 1)[1].split()[0])) for t, line in
                self.log_lines(i, "partition %s: TEST FAILPOINT %s: seq " % (p, kind))]

    def equivocate(self, kind="equivocate"):
        """A faulty primary: node i restarts with noded --test-<kind> P. Whenever it is P's
        primary, with "equivocate" it proposes each batch as is to one replica and, to the other
        two, a second validly signed pre-prepare for the same seq without the batch's last tx
        (neither batch can gather a commit quorum); with "withhold" it never sends the bodies of
        the txs its own clients gave it and answers no fetch (a backup missing one cannot
        prepare). Views are moved on to it by pausing the primaries before it. Once it has
        misbehaved, the honest replicas must replace it (a view change within EQUIV_REPLACE_VCT
        view-change timeouts, detection included) and then commit a new height on every
        partition within 2x the view-change timeout; the Checker then finds the same blocks
        everywhere, the faulty node's included."""
        p = self.rng.choice(PARTITIONS)
        i = self.non_primary()
        honest = [j for j in self.c.live() if j != i]
        log("fault %s: node %d restarted as a faulty primary of %s" % (kind, i, p))
        self.c.kill(i, signal.SIGTERM)
        t = time.monotonic()
        self.c.start(i, ["--test-" + kind, p])
        self.wait_catchup(i, t, "%s (restarted with the failpoint)" % kind)
        before = len(self.equivocations(i, p, kind))
        pushes = 0
        deadline = min(time.monotonic() + 60, HARD_DEADLINE[0])
        while len(self.equivocations(i, p, kind)) == before and time.monotonic() < deadline:
            prim = self.c.primary(p)
            if prim != i and pushes < 2 * N_NODES:
                # Move the view on: the others replace a silent primary.
                pushes += 1
                self.c.pause(prim)
                time.sleep(2.5 * self.vct)
                self.c.resume(prim)
            time.sleep(0.2)
        views = self.equivocations(i, p, kind)[before:]
        if not views:
            self.chk.violation("liveness", "%s: node %d never proposed as %s's primary "
                               "(%d views pushed)" % (kind, i, p, pushes), [i])
            rec = took = 0.0
        else:
            t_eq, v = views[0]
            log("%s: node %d misbehaved as the primary of view %d of %s (%d views pushed)"
                % (kind, i, v, p, pushes))
            # Replaced: every honest replica installs a later view (NORMAL again), measured on
            # the nodes' own log clocks from the first equivocation.
            t = time.monotonic()
            limit = min(t + EQUIV_REPLACE_VCT * self.vct + 5, HARD_DEADLINE[0])
            while time.monotonic() < limit:
                hs = self.c.heights(honest, timeout=0.5)
                if len(hs) == len(honest) and all(h[p].view > v and h[p].consensus_state ==
                                                  "NORMAL" for h in hs.values()):
                    break
                time.sleep(POLL_S)
            # The first time each honest replica went NORMAL in a view above v (from a view
            # change, from recovery, or straight from NORMAL when it joined the others' view
            # change without timing out itself); before the faulty proposal counts as 0: it had
            # left v already (the faulty node lagged behind in it).
            installed = []
            for j in honest:
                later = [tt for tt, line in self.log_lines(j, "partition %s: consensus " % p)
                         if "-> NORMAL (view " in line and
                         int(line.rsplit("(view ", 1)[1].split(")")[0]) > v]
                installed.append(max(0.0, min(later) - t_eq) if later else float("inf"))
            replaced = max(installed)
            if replaced > EQUIV_REPLACE_VCT * self.vct:
                self.chk.violation("liveness", "%s: the honest replicas installed a view after "
                                   "the faulty %d of %s only %.2fs after its first faulty "
                                   "proposal" % (kind, v, p, replaced), honest)
            rec = self.wait_new_height(honest, time.monotonic(), 2 * self.vct,
                                       "%s (after the faulty primary was replaced)" % kind)
            log("%s: the honest replicas installed the next view %.2fs after the first faulty "
                "proposal (request timeout %.1fs), then committed; %d faulty proposals sent"
                % (kind, replaced, self.vct, len(self.equivocations(i, p, kind)) - before))
        # Honest again.
        self.c.kill(i, signal.SIGTERM)
        t = time.monotonic()
        self.c.start(i)
        took = self.wait_catchup(i, t, kind)
        return {"kind": kind, "recovery_s": rec, "catchup_s": took}

    def wait_state(self, i, p, state, until):
        """Node i's status of partition p once it is in `state`; None if not by `until`
        (monotonic time)."""
        while time.monotonic() < min(until, HARD_DEADLINE[0]):
            h = self.c.heights([i], timeout=0.5).get(i)
            if h and h[p].consensus_state == state:
                return h[p]
            time.sleep(POLL_S)
        return None

    def check_halted_visible(self, i, p, state="HALTED", reason="No space left",
                             what="disk_full"):
        """A halted partition shows in the client API (`state`, a halt_reason containing
        `reason`), in the metrics, and refuses new txs with UNAVAILABLE."""
        ref = client_pb2.PartitionRef(name=p)
        try:
            cs = self.c.client[i].GetChainStatus(client_pb2.GetChainStatusRequest(partition=ref),
                                                 timeout=2)
            if cs.consensus_state != state or reason not in cs.halt_reason:
                self.chk.violation("liveness", "%s: GetChainStatus on node %d says %s, %r"
                                   % (what, i, cs.consensus_state, cs.halt_reason), [i])
        except grpc.RpcError as e:
            self.chk.violation("liveness", "%s: GetChainStatus on node %d failed: %s"
                               % (what, i, e.code()), [i])
        want = 'noded_consensus_state{partition="%s",state="%s"} 1' % (p, state)
        if want not in self.c.metrics_text(i):  # "" (and a logged error) if unreadable
            self.chk.violation("liveness", "%s: node %d's metrics lack %r" % (what, i, want), [i])
        try:
            self.c.client[i].SubmitTx(client_pb2.SubmitTxRequest(partition=ref,
                                                                 signed_tx=b"x"), timeout=2)
            self.chk.violation("liveness", "%s: node %d's halted %s accepted a tx" % (what, i, p),
                               [i])
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                self.chk.violation("liveness", "%s: node %d's halted %s refused a tx with "
                                   "%s, not UNAVAILABLE: %s" % (what, i, p, e.code(), e.details()),
                                   [i])

    def diverge(self):
        """A replica that executes differently: node i restarts with noded --test-diverge P:H,
        so its executor writes one extra value at block H (a planted nondeterminism). Checkpoint
        votes carry the state root, so once the others make a checkpoint at or above H stable,
        node i must be DIVERGED on P within DIVERGE_S (status with the height and both roots,
        metric, an ERROR log line), refuse txs there, and keep serving P's other partitions;
        the others keep committing. The remedy is the operator's: stop it, delete that
        partition's ledger (the consensus store stays, so it contradicts nothing it signed),
        start it without the failpoint; it rebuilds from its peers (by a snapshot when far
        behind) and the Checker then finds the others' blocks on it (from its earliest height)."""
        p = self.rng.choice(PARTITIONS)
        i = self.non_primary()
        others = [j for j in self.c.live() if j != i]
        self.c.kill(i, signal.SIGTERM)
        top = max(h[p].height for h in self.c.heights(others).values())
        at = top + 20
        log("fault diverge: node %d restarted to execute %s's block %d differently" % (i, p, at))
        t = time.monotonic()
        self.c.start(i, ["--test-diverge", "%s:%d" % (p, at)])
        diverged = self.wait_state(i, p, "DIVERGED", t + DIVERGE_S)
        found_s = time.monotonic() - t
        if diverged is None:
            self.chk.violation("safety", "diverge: node %d's %s was not DIVERGED within %gs of "
                               "executing block %d differently" % (i, p, DIVERGE_S, at), [i])
        else:
            log("diverge: node %d's %s DIVERGED %.2fs after its restart, at height %d: %s"
                % (i, p, found_s, diverged.height, diverged.halt_reason))
            self.check_halted_visible(i, p, "DIVERGED", "state diverged at height", "diverge")
            if not self.log_lines(i, "partition %s: consensus DIVERGED: state diverged" % p):
                self.chk.violation("liveness", "diverge: node %d logged no DIVERGED line" % i,
                                   [i])
        self.wait_progress({j: PARTITIONS for j in others}, 2 * self.vct, "diverge (others)")
        rest = [q for q in PARTITIONS if q != p]
        self.wait_progress({i: rest}, 2 * self.vct, "diverge (node %d's other partition)" % i)
        # The remedy: a ledger rebuilt from the peers, with the executor fixed.
        self.c.kill(i, signal.SIGTERM)
        shutil.rmtree(os.path.join(self.c.partition_dir(i, p), "ledger"))
        t = time.monotonic()
        self.c.start(i)
        took = self.wait_catchup(i, t, "diverge (ledger rebuilt)")
        rec = self.wait_new_height(self.c.live(), time.monotonic(), 2 * self.vct, "diverge")
        how = "by block sync"
        try:
            base = self.c.client[i].GetChainStatus(client_pb2.GetChainStatusRequest(
                partition=client_pb2.PartitionRef(name=p)), timeout=5).earliest_height
            if base > 0:
                how = "from a snapshot at height %d" % base
        except grpc.RpcError:
            pass
        log("diverge: found after %.2fs; the rebuilt ledger caught up in %.2fs (%s)"
            % (found_s, took, how))
        return {"kind": "diverge", "recovery_s": rec, "catchup_s": took}

    def wait_progress(self, want, bound, what):
        """Waits until each node in `want` ({node: [partitions]}) commits a new height on each of
        its partitions; a violation past `bound` seconds."""
        hs = self.c.heights(list(want))
        base = {(j, q): hs[j][q].height if j in hs else 0 for j, qs in want.items() for q in qs}
        t = time.monotonic()
        deadline = min(t + max(bound, CATCHUP_S), HARD_DEADLINE[0])
        while time.monotonic() < deadline:
            hs = self.c.heights(list(want), timeout=0.5)
            if all(j in hs and hs[j][q].height > base[(j, q)] for (j, q) in base):
                break
            time.sleep(POLL_S)
        took = time.monotonic() - t
        if took > bound:
            self.chk.violation("liveness", "%s: no new height on %s within %.2fs (took %.2fs)"
                               % (what, sorted(base), bound, took), list(want))

    def run(self, kind):
        return {"byzantine": self.byzantine,
                "equivocate": self.equivocate,
                "withhold": lambda: self.equivocate("withhold"),
                "diverge": self.diverge,
                "disk_full": lambda: self.disk_full(False),
                "disk_full_primary": lambda: self.disk_full(True),
                "kill_restart": self.kill_restart,
                "pause_replica": lambda: self.pause(False),
                "pause_primary": lambda: self.pause(True),
                "rolling_restart": self.rolling_restart,
                "kill_primary": self.kill_primary}[kind]()


KINDS = ["kill_restart", "pause_replica", "pause_primary", "rolling_restart", "kill_primary"]


# ---------------------------------------------------------------------------------------------
# Background load: loadgen, restarted if it exits.

class Load:
    # Run in the loadgen child before exec (netns.py: die with the test); None: nothing.
    preexec = None

    def __init__(self, cluster, rate, seconds, out):
        self.c, self.rate, self.seconds, self.out = cluster, rate, seconds, out
        self.proc, self.n = None, 0

    def ensure(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        self.n += 1
        cmd = [os.path.join(self.c.build, "tools", "loadgen"), "--targets",
               self.c.addrs("client"), "--scenario",
               ";".join("%s:rate=%d" % (p, self.rate) for p in PARTITIONS),
               "--duration", "%ds" % self.seconds, "--drain", "1s", "--quiet",
               "--seed", str(1000 + self.n), "--rpc-timeout-ms", "2000"]
        self.log = open(self.out, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=self.preexec)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------------

def finish(subs, load, chk):
    """Stops the submitters and the load, runs the final check; returns the acked tx count."""
    for s in subs:
        s.stop_ev.set()
    for s in subs:
        s.join(10)
    load.stop()
    chk.check(final=True)
    return sum(len(s.acked) for s in subs)


def main_run(a, tmp):
    generate_stubs(os.path.join(tmp, "gen"))
    ln = load_localnet()
    cluster = Cluster(ln, os.path.join(tmp, "localnet"), a.build, a.vct_ms, a.batch_ms, a.disk,
                      a.snapshot_min_blocks, a.retain_blocks,
                      BYZ_NODE_EXTRA if a.byzantine else "")
    rng = random.Random(a.seed)
    runs, injected, recov, catch = 0, {}, 0.0, 0.0
    load = subs = None
    start = time.monotonic()
    try:
        cluster.up()
        log("cluster up in %s; node ids %s" % (cluster.d, cluster.ids))
        seconds = int(a.minutes * 60 + 120) if a.mode == "long" else 300
        load = Load(cluster, a.rate, seconds, os.path.join(tmp, "loadgen.log"))
        load.ensure()
        subs = [Submitter(cluster, p, k + 1, a.submit_rate, a.seed)
                for k, p in enumerate(PARTITIONS)]
        for s in subs:
            s.start()
        chk = Checker(cluster, subs)
        chk.scan = a.scan_heights
        faults = Faults(cluster, chk, rng)
        time.sleep(2)
        kinds = KINDS + (["disk_full", "disk_full_primary"] if a.disk else []) + (
            ["byzantine", "equivocate", "withhold", "diverge"] if a.byzantine else [])
        if a.mode == "short":
            schedule = list(KINDS)
        elif a.mode == "disk":
            schedule = ["disk_full", "disk_full_primary"]
        elif a.mode == "byzantine":
            schedule = ["byzantine", "equivocate", "withhold", "diverge"]
        else:
            schedule = None
        end = start + a.minutes * 60
        if a.mode in ("short", "disk", "byzantine"):
            HARD_DEADLINE[0] = start + 240
        while True:
            if schedule is not None:
                if not schedule:
                    break
                if time.monotonic() > start + SHORT_BUDGET_S:
                    # Stay inside ctest's TIMEOUT: a killed test would orphan its nodes.
                    chk.violation("liveness", "short run over its %ds budget; faults not run: %s"
                                  % (SHORT_BUDGET_S, ", ".join(schedule)))
                    break
                kind = schedule.pop(0)
            else:
                if time.monotonic() >= end:
                    break
                kind = rng.choice(kinds)
                time.sleep(rng.uniform(0, 2))
            load.ensure()
            r = faults.run(kind)
            runs += 1
            injected[kind] = injected.get(kind, 0) + (3 if kind == "kill_primary" else
                                                      4 if kind == "rolling_restart" else 1)
            recov, catch = max(recov, r["recovery_s"]), max(catch, r["catchup_s"])
            log("run %d %s: recovery %.2fs, catch-up %.2fs" % (runs, kind, r["recovery_s"],
                                                                 r["catchup_s"]))
            chk.check()
        acked = finish(subs, load, chk)
        print()
        print("| metric | value |")
        print("|---|---|")
        print("| mode / seed / minutes / partitions | %s / %d / %.1f / %d |"
              % (a.mode, a.seed, (time.monotonic() - start) / 60, len(PARTITIONS)))
        print("| runs | %d |" % runs)
        print("| faults injected | %s |" % ", ".join("%s %d" % kv for kv in sorted(
            injected.items())))
        print("| safety violations | %d (ledger divergences: %s) |" % (len(chk.safety), ", ".join(
            "node %d %s from height %d" % (i, p, h) for (i, p), h in sorted(chk.diverged.items()))
            or "none"))
        print("| liveness violations | %d |" % len(chk.liveness))
        print("| max recovery time (s) | %.2f (bound %.1f; kill_primary failover %.1f) |"
              % (recov, 2 * a.vct_ms / 1000, 3 * a.vct_ms / 1000))
        print("| max catch-up time (s) | %.2f |" % catch)
        print("| acked txs / lost | %d / %d |" % (acked, len(chk.lost)))
        print("| submit failures (not acked) | %d |" % sum(s.failed for s in subs))
        print("| blocks verified | %s |" % chk.verified_text())
        print("| load | loadgen %d tx/s per partition + %g acked tx/s per partition; "
              "loadavg %s |" % (a.rate, a.submit_rate, os.getloadavg()[0]))
        ok = not chk.safety and not chk.lost and (not chk.liveness or a.mode == "long")
        if a.mode == "disk" and len(injected) < 2 or a.mode == "byzantine" and len(injected) < 4:
            ok = False
        return 0 if ok else 1
    finally:
        if subs:
            for s in subs:
                s.stop_ev.set()
        if load:
            load.stop()
        cluster.down()
        if a.keep:
            log("kept %s" % tmp)


def enter_mount_namespace():
    """disk_full mounts a tmpfs: re-executes this run in a private mount namespace of its own
    (unshare -m), so the mount is invisible outside and disappears with the run. Returns why it
    cannot (then nothing was changed), or does not return."""
    if os.environ.get("CHAOS_MOUNT_NS") == "1":
        return None
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        return "unshare or mount missing (Debian package util-linux / mount)"
    probe = subprocess.run([unshare, "-m", "--propagation", "private", "mount", "-t", "tmpfs",
                            "-o", "size=1m", "tmpfs", "/mnt"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot mount a tmpfs in a new mount namespace: %s" % probe.stderr.strip()
    sys.stdout.flush()
    os.execve(unshare, [unshare, "-m", "--propagation", "private", sys.executable,
                        os.path.abspath(__file__)] + sys.argv[1:],
              dict(os.environ, CHAOS_MOUNT_NS="1"))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["short", "long", "disk", "byzantine"])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", default=os.path.join(REPO, os.environ.get("BUILD_DIR", "build")))
    ap.add_argument("--vct-ms", type=int, default=1000, help="view_change_timeout_ms")
    ap.add_argument("--batch-ms", type=int, default=50, help="batch_timeout_ms")
    ap.add_argument("--rate", type=int, default=50, help="loadgen tx/s per partition")
    ap.add_argument("--snapshot-min-blocks", type=int, default=200,
                    help="consensus.snapshot_sync_min_blocks: a node this far behind (the "
                    "diverge fault's rebuilt ledger) joins by a snapshot; huge: block sync only")
    ap.add_argument("--retain-blocks", type=int, default=0,
                    help="state.retain_blocks: every node prunes all but its last N blocks (at "
                    "least snapshot-min-blocks + 64); 0: keep every block")
    ap.add_argument("--submit-rate", type=float, default=5, help="acked submits/s per partition")
    ap.add_argument("--partitions", type=int, default=2,
                    help="partitions per node (2: hot and steady, else p1..pN, as localnet)")
    ap.add_argument("--scan-heights", type=int, default=SCAN_HEIGHTS,
                    help="heights read block by block per node and partition at each check "
                    "(the parent-hash chain covers the rest)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    ap.add_argument("--disk", action="store_true", help="long: disk_full among the faults")
    ap.add_argument("--byzantine", action="store_true",
                    help="long: a byzantine_peer run among the faults")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if not 1 <= a.partitions <= 64:
        ap.error("--partitions must be 1..64")
    PARTITIONS[:] = ["hot", "steady"] if a.partitions == 2 else [
        "p%d" % k for k in range(1, a.partitions + 1)]
    a.disk = a.disk or a.mode == "disk"
    if a.disk:
        why = enter_mount_namespace()
        if why:
            print("SKIP: disk faults: %s" % why)
            return 77
    try:
        import grpc as _g  # noqa: F401
        import google.protobuf  # noqa: F401
        import cryptography  # noqa: F401
    except ImportError as e:
        print("SKIP: %s (install python3-grpcio python3-protobuf python3-cryptography)" % e)
        return 77
    a.byzantine = a.byzantine or a.mode == "byzantine"
    needed = ("runtime/noded", "tools/loadgen", "tools/nodectl") + (
        ("tests/byzantine_peer",) if a.byzantine else ())
    for b in needed:
        if not os.access(os.path.join(a.build, b), os.X_OK):
            print("SKIP: %s not built" % os.path.join(a.build, b))
            return 77
    if not shutil.which("protoc") or not os.path.exists("/usr/bin/grpc_python_plugin"):
        print("SKIP: protoc or grpc_python_plugin missing")
        return 77
    tmp = tempfile.mkdtemp(prefix="chaos_")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        return main_run(a, tmp)
    except Exception as e:
        log("FAIL: %r" % e)
        import traceback
        traceback.print_exc()
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
