#!/usr/bin/python3
"""An independent client against a real `noded`: Python gRPC stubs generated from proto/*.proto at
test time (protoc + grpc_python_plugin), a transaction signed here with Ed25519 (`cryptography`),
the admin API with and without the token, and /metrics over HTTP. Ends with SIGTERM -> exit 0.

Usage: python_client_test.py --noded PATH --repo DIR
Exit 0 = pass, 1 = fail, 77 = skipped (python3-grpcio / python3-protobuf / cryptography missing).
"""
import argparse
import glob
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import e2e  # noqa: E402  (tests/e2e.py)

TOKEN = "python-client-test-token-0123456789"
READY_TIMEOUT_S = 30
COMMIT_TIMEOUT_S = 20
EXIT_TIMEOUT_S = 30


T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def fail(msg):
    raise AssertionError(msg)


def bound_ports(log_path, proc):
    """noded binds every port as port 0 and logs them once serving ("... started: ..., client port
    C, admin port A, p2p port P, metrics port M"): (P, C, A, M), read back from its log."""
    pattern = re.compile(r" started: .*client port (\d+), admin port (\d+), p2p port (\d+), "
                         r"metrics port (\d+)")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        with open(log_path) as f:
            m = pattern.search(f.read())
        if m:
            client, admin, p2p, metrics = (int(g) for g in m.groups())
            return p2p, client, admin, metrics
        if proc.poll() is not None:
            fail(f"noded exited early with {proc.returncode}")
        if time.monotonic() > deadline:
            fail(f"noded did not log its ports after {READY_TIMEOUT_S}s")
        time.sleep(0.05)


def generate_stubs(repo, out):
    os.makedirs(out, exist_ok=True)
    protos = sorted(glob.glob(os.path.join(repo, "proto", "*.proto")))
    cmd = ["protoc", "--python_out=" + out, "--grpc_out=" + out,
           "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin", "-I", repo] + protos
    subprocess.run(cmd, check=True)
    sys.path.insert(0, out)


def write_config(tmp):
    with open(os.path.join(tmp, "admin.token"), "w") as f:
        f.write(TOKEN + "\n")
    path = os.path.join(tmp, "node.textproto")
    with open(path, "w") as f:
        f.write(f'''data_dir: "{tmp}/data"
p2p_listen: "127.0.0.1:0"
client_listen: "127.0.0.1:0"
admin_listen: "127.0.0.1:0"
metrics_listen: "127.0.0.1:0"
admin_token_file: "{tmp}/admin.token"
resources {{ cpu_workers: 2 }}
partitions {{ id: 1 name: "hot" consensus {{ batch_timeout_ms: 5 }} }}
partitions {{ id: 2 name: "steady" }}
''')
    return path


def sign_put(chain_pb2, partition, seed, nonce, key, value):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    priv = Ed25519PrivateKey.from_private_bytes(seed)
    sender = priv.public_key().public_bytes(serialization.Encoding.Raw,
                                            serialization.PublicFormat.Raw)
    tx = chain_pb2.Transaction(partition=partition, sender=sender, nonce=nonce,
                               put=chain_pb2.Put(key=key, value=value))
    tx_bytes = tx.SerializeToString(deterministic=True)
    signed = chain_pb2.SignedTransaction(tx=tx_bytes, signature=priv.sign(tx_bytes))
    return signed.SerializeToString(deterministic=True), sender


def check_histograms(metrics):
    """Latencies are Prometheus histograms (cumulative buckets, +Inf = _count), the committed tx
    and the calls above included, so histogram_quantile can aggregate them."""
    families = ["noded_commit_latency_seconds", "noded_stage_decision_seconds",
                "noded_lane_queueing_delay_seconds", "noded_rpc_duration_seconds"]
    if "noded_egress_bytes_sent_total" in metrics:  # a node with peers
        families.append("noded_egress_queueing_delay_seconds")
    for family in families:
        if f"# TYPE {family} histogram" not in metrics:
            fail(f"/metrics: {family} is not a histogram")
    # (prometheus-cpp's own exposer_request_latencies is a summary, with quantiles by right.)
    if any(line.startswith("noded_") and "quantile=" in line for line in metrics.splitlines()):
        fail("/metrics still exports noded_ quantile series")
    series = {}
    for line in metrics.splitlines():
        m = re.match(r'noded_commit_latency_seconds_(bucket|count)\{partition="hot"(?:,le="([^"]+)")?\} (\S+)',
                     line)
        if m:
            series[m.group(2) or "count"] = float(m.group(3))
    if series.get("count", 0) < 1 or series.get("+Inf") != series["count"]:
        fail(f"commit latency histogram of hot: {series}")
    counts = [v for k, v in series.items() if k != "count"]
    if counts != sorted(counts):
        fail(f"commit latency buckets not cumulative: {series}")
    submit = re.search(r'noded_rpc_handled_total\{method="SubmitTx",'
                       r'service="node.client.ClientService",code="OK"\} (\S+)', metrics)
    if not submit or float(submit.group(1)) < 1:
        fail("/metrics lacks the SubmitTx calls in noded_rpc_handled_total")


def promtool_check(promtool, metrics):
    """`promtool check metrics` (Debian's prometheus package) on the live scrape: Prometheus'
    own linter for names, units, types and help."""
    r = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail(f"promtool check metrics (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    log("promtool check metrics: clean")


def run(args, tmp):
    generate_stubs(args.repo, os.path.join(tmp, "gen"))
    import grpc
    from proto import admin_pb2, admin_pb2_grpc, chain_pb2, client_pb2, client_pb2_grpc

    log("stubs generated")
    config = write_config(tmp)
    log_path = os.path.join(tmp, "noded.log")
    log_file = open(log_path, "w")
    proc = subprocess.Popen([args.noded, "--config", config], stdout=log_file,
                            stderr=subprocess.STDOUT)
    try:
        ports = bound_ports(log_path, proc)
        # Wait until both API ports accept TCP connections before opening gRPC channels: a channel
        # whose first connects were refused may sit in reconnect backoff for seconds.
        deadline = time.monotonic() + READY_TIMEOUT_S
        for port in (ports[1], ports[2]):
            while True:
                if proc.poll() is not None:
                    fail(f"noded exited early with {proc.returncode}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        fail(f"port {port} not listening after {READY_TIMEOUT_S}s")
                    time.sleep(0.05)
        client_ch = grpc.insecure_channel(f"127.0.0.1:{ports[1]}")
        admin_ch = grpc.insecure_channel(f"127.0.0.1:{ports[2]}")
        client = client_pb2_grpc.ClientServiceStub(client_ch)
        admin = admin_pb2_grpc.AdminServiceStub(admin_ch)
        auth = [("authorization", "Bearer " + TOKEN)]

        # Readiness: the admin API answers (bounded).
        deadline = time.monotonic() + READY_TIMEOUT_S
        status = None
        while status is None:
            if proc.poll() is not None:
                fail(f"noded exited early with {proc.returncode}")
            try:
                status = admin.GetNodeStatus(admin_pb2.GetNodeStatusRequest(), metadata=auth,
                                             timeout=5, wait_for_ready=True)
            except grpc.RpcError as e:
                if time.monotonic() > deadline:
                    fail(f"noded not ready after {READY_TIMEOUT_S}s: {e.code()} {e.details()}")
                time.sleep(0.2)
        log("noded ready")
        if not status.node_id or not status.version:
            fail(f"bad node status: {status}")
        if [p.name for p in status.partitions] != ["hot", "steady"]:
            fail(f"partitions: {status.partitions}")

        listed = admin.ListPartitions(admin_pb2.ListPartitionsRequest(), metadata=auth, timeout=5)
        if [c.name for c in listed.configs] != ["hot", "steady"]:
            fail(f"ListPartitions configs: {listed.configs}")

        ref = client_pb2.PartitionRef(name="hot")
        before = client.GetChainStatus(client_pb2.GetChainStatusRequest(partition=ref), timeout=5)

        signed, sender = sign_put(chain_pb2, 1, bytes([7]) * 32, 1, b"py-key", b"py-value")
        submitted = client.SubmitTx(client_pb2.SubmitTxRequest(partition=ref, signed_tx=signed),
                                    timeout=10)
        log("SubmitTx answered")
        if submitted.tx_hash != hashlib.sha256(signed).digest():
            fail("tx_hash is not SHA-256 of the signed bytes")

        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while True:
            got = client.GetTx(client_pb2.GetTxRequest(partition=ref, tx_hash=submitted.tx_hash),
                               timeout=5)
            if got.state == client_pb2.GetTxResponse.COMMITTED:
                break
            if time.monotonic() > deadline:
                fail(f"tx not committed after {COMMIT_TIMEOUT_S}s: state {got.state}")
            time.sleep(0.05)
        log(f"committed at height {got.receipt.block_height}")
        if got.receipt.status != chain_pb2.Receipt.SUCCESS:
            fail(f"receipt: {got.receipt}")

        after = client.GetChainStatus(client_pb2.GetChainStatusRequest(partition=ref), timeout=5)
        if after.height <= before.height or after.height < got.receipt.block_height:
            fail(f"height did not advance: {before.height} -> {after.height}")
        account = client.GetAccount(client_pb2.GetAccountRequest(partition=ref, address=sender),
                                    timeout=5)
        if account.account.nonce != 1:
            fail(f"account: {account}")

        try:
            admin.GetNodeStatus(admin_pb2.GetNodeStatusRequest(), timeout=5)
            fail("admin call without token succeeded")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAUTHENTICATED:
                fail(f"admin call without token: {e.code()} {e.details()}")
        try:
            admin_pb2_grpc.AdminServiceStub(client_ch).GetNodeStatus(
                admin_pb2.GetNodeStatusRequest(), metadata=auth, timeout=5)
            fail("client port served an admin method")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                fail(f"admin method on the client port: {e.code()} {e.details()}")

        with urllib.request.urlopen(f"http://127.0.0.1:{ports[3]}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        for name in ['noded_partition_height{partition="hot"}', "noded_committed_txs_total",
                     "noded_stage_admitted_total", "noded_lane_depth_messages",
                     "noded_pool_txs", "noded_consensus_state", "noded_peers_connected"]:
            if name not in metrics:
                fail(f"/metrics lacks {name}")
        check_histograms(metrics)
        if args.promtool:
            promtool_check(args.promtool, metrics)

        log("metrics scraped")
        client_ch.close()
        admin_ch.close()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail(f"noded did not exit within {EXIT_TIMEOUT_S}s of SIGTERM")
        log(f"noded exited with {code}")
        if code != 0:
            fail(f"noded exited with {code} after SIGTERM")
    finally:
        if os.environ.get("PYTHON_CLIENT_TEST_SHOW_LOG"):
            log_file.flush()
            with open(os.path.join(tmp, "noded.log")) as f:
                print(f.read())
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--noded", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--promtool", action="store_true",
                        help="also lint the scrape with `promtool check metrics`")
    args = parser.parse_args()
    if args.promtool:
        args.promtool = shutil.which("promtool")
        if not args.promtool:
            print("SKIP: promtool not found (Debian package prometheus; tools/install-deps.sh)")
            return e2e.SKIP
    why = e2e.missing(binaries=[args.noded])
    if why:
        print(f"SKIP: {why}")
        return e2e.SKIP
    return e2e.run_in_tmp("python_client_test_", lambda tmp: run(args, tmp), logs=["noded.log"])


if __name__ == "__main__":
    sys.exit(main())
