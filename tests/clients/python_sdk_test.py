#!/usr/bin/python3
"""clients/python (noded_client) against a real 4-node localnet: submit and wait, reads, typed
errors, the README example, nonces kept in order across shed-and-retried submits, a flood in
which the SDK's retries (honouring retry-after-ms) must commit at least 0.9x what the same flood
commits without retries, and failover when the first node is down.

Partition "hot" is rate-limited to RATE tx/s per node (burst BURST); "steady" is not.

Usage: python_sdk_test.py REPO BUILD_DIR
Exit 0 pass, 1 fail, 77 skipped (python modules or binaries missing).
"""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import e2e  # noqa: E402  (tests/e2e.py)

RATE, BURST = 40, 10
FLOOD_S, FLOOD_THREADS = 8.0, 6
T0 = time.monotonic()


def log(msg):
    print("[%6.2fs] %s" % (time.monotonic() - T0, msg), flush=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def flood(nc, addr, retry, seed):
    """FLOOD_THREADS senders on hot, each as fast as it can for FLOOD_S, one node only. Returns
    (admitted, calls, {address: last admitted nonce})."""
    client = nc.Client([addr], retry=retry, seed=seed, deadline=5.0)
    admitted, last = [0], {}
    lock = threading.Lock()
    end = time.monotonic() + FLOOD_S

    def run(k):
        sender = client.sender("hot", nc.Key.from_seed("flood-%s-%d-%d" % (retry, seed, k)))
        while time.monotonic() < end:
            try:
                sender.put("k%d" % sender.next_nonce, "v")
            except nc.Overloaded:
                continue  # retry=False: dropped; the nonce stays for the next tx
            with lock:
                admitted[0] += 1
                last[sender.key.address] = sender.next_nonce - 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(FLOOD_S + 30)
    return admitted[0], client.stats["calls"], last


def committed_by(nc, client, last, timeout):
    """Waits until every sender's last admitted nonce executed; the count of txs committed."""
    end = time.monotonic() + timeout
    while True:
        done = sum(min(client.get_account("hot", a).nonce, n) for a, n in last.items())
        if done == sum(last.values()) or time.monotonic() > end:
            return done
        time.sleep(0.2)


def run(repo, build, tmp):
    localnet = os.path.join(repo, "tools", "localnet")
    d = os.path.join(tmp, "net")
    extra = os.path.join(tmp, "extra.conf")
    with open(extra, "w") as f:
        f.write("[partition hot]\ninterceptor { stages { name: \"rate\" rate { rate_per_second: "
                "%d burst: %d } } }\n" % (RATE, BURST))
    subprocess.run([localnet, "up", "4", "--base-port", "0", "--dir", d, "--config-extra", extra,
                    "--noded", os.path.join(build, "runtime", "noded"),
                    "--nodectl", os.path.join(build, "tools", "nodectl"), "--timeout", "90"],
                   check=True, timeout=150)
    try:
        addrs = subprocess.run([localnet, "addrs", "client", "--dir", d], check=True,
                               capture_output=True, text=True).stdout.strip().split(",")
        os.environ["NODED_STUBS_DIR"] = os.path.join(tmp, "stubs")  # generated on first use
        sys.path.insert(0, os.path.join(repo, "clients", "python"))
        import noded_client as nc

        # Submit and wait, then every read.
        client = nc.Client(addrs, seed=1)
        alice = nc.Key.from_seed("sdk-test-alice")
        sender = client.sender("steady", alice)
        r = sender.put("greeting", "hello", wait=True)
        check(r.receipt is not None and r.receipt.block_height >= 1, "no receipt: %r" % r)
        check(r.receipt.status == client.chain_pb2.Receipt.SUCCESS, "receipt %s" % r.receipt)
        tx = client.get_tx("steady", r.tx_hash)
        check(tx.state == client.client_pb2.GetTxResponse.COMMITTED, "GetTx %s" % tx)
        check(client.get_account("steady", alice.address).nonce == 1, "nonce after one tx")
        block = client.get_block("steady", r.receipt.block_height)
        check(r.tx_hash in block.block.tx_hashes, "the tx is not in its block")
        check(client.chain_status("steady").consensus_state == "NORMAL", "not NORMAL")
        log("submit + wait, GetTx, GetAccount, GetBlock, GetChainStatus: ok (height %d)"
            % r.receipt.block_height)

        # Typed errors.
        for what, fn, cls in [
                ("garbage tx", lambda: client.submit("steady", b"garbage"), nc.InvalidTransaction),
                ("unknown partition", lambda: client.chain_status("nope"), nc.NotFound),
                ("unknown tx", lambda: client.get_tx("steady", b"\0" * 32), nc.NotFound)]:
            try:
                fn()
                raise AssertionError("%s: no error" % what)
            except cls as e:
                log("%s -> %s" % (what, type(e).__name__))

        # The README example, as a user would run it.
        out = subprocess.run([sys.executable, os.path.join(repo, "clients", "python",
                                                           "example.py"), ",".join(addrs)],
                             capture_output=True, text=True, timeout=60)
        check(out.returncode == 0 and "block_height" in out.stdout,
              "example.py: %s %s" % (out.stdout, out.stderr))
        log("example.py printed a receipt")

        # Nonces in order across retries: 60 puts as fast as possible through one node whose
        # hot takes 40/s, burst 10: many are shed and retried; every one commits in nonce order.
        one = nc.Client([addrs[0]], seed=2)
        bob = one.sender("hot", nc.Key.from_seed("sdk-test-bob"))
        hashes = [bob.put("n%d" % k, "v").tx_hash for k in range(60)]
        check(one.stats["shed"] > 0, "no submit was shed: the rate stage did not bite")
        receipts = [one.wait_for_commit("hot", h, timeout=30) for h in hashes]
        order = [(x.block_height, x.tx_index) for x in receipts]
        check(order == sorted(order), "commits out of nonce order: %s" % order)
        check(all(x.status == one.chain_pb2.Receipt.SUCCESS for x in receipts), "a put failed")
        check(one.get_account("hot", bob.key.address).nonce == 60, "bob's nonce")
        log("60 puts, %d shed and retried, committed in nonce order" % one.stats["shed"])

        # Flood: retries honour retry-after-ms and must not commit less than no retries.
        results = {}
        for retry in (False, True):
            t = time.monotonic()
            admitted, calls, last = flood(nc, addrs[1], retry, seed=3)
            done = committed_by(nc, client, last, 30)
            results[retry] = (done / FLOOD_S, calls)
            log("flood, retry=%s: %d admitted, %d committed (%.1f tx/s) in %d calls (%.1f per "
                "committed tx); %.1fs" % (retry, admitted, done, done / FLOOD_S, calls,
                                          calls / max(done, 1), time.monotonic() - t))
        check(results[True][0] >= 0.9 * results[False][0],
              "retries made goodput worse: %.1f vs %.1f tx/s" % (results[True][0],
                                                                results[False][0]))

        # Failover: the first node is down; the client moves on.
        subprocess.run([localnet, "kill", "1", "--dir", d], check=True, timeout=30)
        fo = nc.Client(addrs, seed=4)
        fo._current = 0  # start at the dead node
        r = fo.sender("steady", nc.Key.from_seed("sdk-test-carol")).put("x", "y", wait=True)
        check(r.receipt is not None and fo.stats["failovers"] >= 1,
              "failover: %r %s" % (r, fo.stats))
        log("node 1 down: committed through %s after %d failover(s)"
            % (r.node, fo.stats["failovers"]))
        return results
    finally:
        subprocess.run([localnet, "down", "--dir", d, "--timeout", "10"], timeout=60)


def main():
    repo, build = sys.argv[1], sys.argv[2]
    why = e2e.missing(build, ["runtime/noded", "tools/nodectl"])
    if why:
        print("SKIP: %s" % why)
        return e2e.SKIP
    return e2e.run_in_tmp("python_sdk_test_", lambda tmp: run(repo, build, tmp))


if __name__ == "__main__":
    sys.exit(main())
