"""Scaffolding shared by the end-to-end Python tests (tests/runtime/python_client_test.py,
tests/tools/monitoring_alert_test.py, tests/clients/python_sdk_test.py): the prerequisite check
whose answer becomes exit 77 (ctest: skipped; under CI=true a failure), and the run in a fresh
temp dir that ends in PASS or in FAIL with the traceback and the tails of the run's logs."""

import os
import shutil
import tempfile
import traceback

SKIP = 77


def missing(build=None, binaries=(), grpc_modules=True):
    """Why the test cannot run here (printed after "SKIP: "), or None. `binaries` are paths
    under `build` (or absolute when build is None) that must be executable."""
    if grpc_modules:
        try:
            import grpc  # noqa: F401
            import google.protobuf  # noqa: F401
            import cryptography  # noqa: F401
        except ImportError as e:
            return "%s (install python3-grpcio python3-protobuf python3-cryptography)" % e
    for b in binaries:
        path = b if build is None else os.path.join(build, b)
        if not os.access(path, os.X_OK):
            return "%s not built" % path
    return None


def run_in_tmp(prefix, body, logs=()):
    """Runs body(tmp) in a fresh temp dir, removed afterwards. Prints PASS and returns 0, or
    prints FAIL, the traceback and the last 40 lines of each of `logs` (paths relative to tmp)
    and returns 1."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        body(tmp)
    except Exception as e:
        print("FAIL: %r" % e, flush=True)
        traceback.print_exc()
        for rel in logs:
            path = os.path.join(tmp, rel)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    print("---- %s (tail) ----\n%s" % (rel, "".join(f.readlines()[-40:])))
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0
