#!/usr/bin/python3
"""End to end through a real Prometheus: a 4-node localnet, `tools/localnet monitor` (Debian's
prometheus with tools/monitoring/noded_rules.yml, 1 s scrapes), then SIGSTOP of node 2. The
NodedDown alert must fire for node 2 alone, through Prometheus' HTTP API, no sooner than its
`for: 10s`, and resolve after SIGCONT. `localnet down` must stop prometheus too.

Usage: monitoring_alert_test.py LOCALNET BUILD_DIR
Exit 0 pass, 1 fail, 77 skipped (prometheus or noded missing; under CI=true ctest counts 77 as a
failure).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import e2e  # noqa: E402  (tests/e2e.py)

T0 = time.monotonic()
FOR_S = 10  # NodedDown's `for:` in noded_rules.yml


def log(msg):
    print("[%6.2fs] %s" % (time.monotonic() - T0, msg), flush=True)


def api(url, path):
    with urllib.request.urlopen(url + path, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise AssertionError("%s: %s" % (path, body))
    return body["data"]


def wait(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %g s" % (what, timeout))
        time.sleep(0.5)


def alerts(url, name, state="firing"):
    return [a for a in api(url, "/api/v1/alerts")["alerts"]
            if a["labels"].get("alertname") == name and a["state"] == state]


def run(localnet, build, tmp):
    d = os.path.join(tmp, "net")
    subprocess.run([localnet, "up", "4", "--partitions", "1", "--base-port", "0", "--dir", d,
                    "--noded", os.path.join(build, "runtime", "noded"),
                    "--nodectl", os.path.join(build, "tools", "nodectl"), "--timeout", "90"],
                   check=True, timeout=150)
    url = subprocess.run([localnet, "monitor", "--dir", d, "--interval", "1"], check=True,
                         capture_output=True, text=True, timeout=90).stdout.strip()
    log("prometheus at %s" % url)
    try:
        wait("4 targets up",
             lambda: sum(t["health"] == "up" for t in api(url, "/api/v1/targets")["activeTargets"])
             == 4, 60)
        rules = {r["name"] for g in api(url, "/api/v1/rules")["groups"] for r in g["rules"]}
        for name in ("NodedDown", "NodedPartitionNotNormal", "NodedPeersBelowQuorum",
                     "partition:noded_committed_txs:rate1m"):
            if name not in rules:
                raise AssertionError("rule %s not loaded (have %s)" % (name, sorted(rules)))
        if alerts(url, "NodedDown") or alerts(url, "NodedDown", "pending"):
            raise AssertionError("NodedDown before any fault: %s" % alerts(url, "NodedDown"))

        with open(os.path.join(d, "node2", "noded.pid")) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGSTOP)
        t = time.monotonic()
        log("SIGSTOP node 2 (pid %d)" % pid)
        try:
            fired = wait("NodedDown firing", lambda: alerts(url, "NodedDown"), 60)
            took = time.monotonic() - t
        finally:
            os.kill(pid, signal.SIGCONT)
        log("NodedDown fired %.1f s after SIGSTOP: %s" % (took, [
            (a["labels"].get("node"), a["annotations"]["summary"]) for a in fired]))
        if [a["labels"].get("node") for a in fired] != ["2"]:
            raise AssertionError("NodedDown should fire for node 2 alone: %s" % fired)
        if took < FOR_S:
            raise AssertionError("NodedDown fired after %.1f s, before its for: %d s" % (took, FOR_S))
        wait("NodedDown resolved after SIGCONT", lambda: not alerts(url, "NodedDown"), 60)
        log("NodedDown resolved after SIGCONT")
    finally:
        mon_pid_file = os.path.join(d, "prometheus", "prometheus.pid")
        mon_pid = int(open(mon_pid_file).read()) if os.path.exists(mon_pid_file) else None
        subprocess.run([localnet, "down", "--dir", d, "--timeout", "10"], timeout=60)
    if mon_pid and os.path.exists("/proc/%d" % mon_pid):
        with open("/proc/%d/stat" % mon_pid) as f:
            if f.read().split(")")[-1].split()[0] not in "ZX":
                raise AssertionError("prometheus (pid %d) still runs after `down`" % mon_pid)


def main():
    localnet, build = sys.argv[1], sys.argv[2]
    if not shutil.which("prometheus"):
        print("SKIP: prometheus not installed (Debian package prometheus; tools/install-deps.sh)")
        return e2e.SKIP
    why = e2e.missing(build, ["runtime/noded", "tools/nodectl"], grpc_modules=False)
    if why:
        print("SKIP: %s" % why)
        return e2e.SKIP
    return e2e.run_in_tmp("monitoring_alert_test_", lambda tmp: run(localnet, build, tmp),
                          logs=["net/prometheus/prometheus.log"])


if __name__ == "__main__":
    sys.exit(main())
