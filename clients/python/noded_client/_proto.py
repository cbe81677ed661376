"""The gRPC stubs of proto/*.proto, generated on first use with Debian's protoc and
grpc_python_plugin (packages protobuf-compiler, protobuf-compiler-grpc) into a cache directory
keyed by the protos' contents, so a changed proto regenerates them.

  NODED_PROTO_DIR   the directory holding proto/*.proto (default: the repository this package
                    sits in, ../../.. from here)
  NODED_STUBS_DIR   where to put the generated modules (default $XDG_CACHE_HOME/noded_client or
                    ~/.cache/noded_client)
"""

import glob
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading

_lock = threading.Lock()
_modules = None


def _proto_root():
    root = os.environ.get("NODED_PROTO_DIR")
    if root:
        return root
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))


def _cache_root():
    if os.environ.get("NODED_STUBS_DIR"):
        return os.environ["NODED_STUBS_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "noded_client")


def _generate(root, out):
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    if protoc is None or not os.access(plugin, os.X_OK):
        raise RuntimeError("noded_client: protoc or grpc_python_plugin missing (Debian packages "
                           "protobuf-compiler and protobuf-compiler-grpc)")
    protos = sorted(glob.glob(os.path.join(root, "proto", "*.proto")))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gen-", dir=os.path.dirname(out))
    try:
        subprocess.run([protoc, "--python_out=" + tmp, "--grpc_out=" + tmp,
                        "--plugin=protoc-gen-grpc=" + plugin, "-I", root] + protos,
                       check=True, capture_output=True, text=True)
        open(os.path.join(tmp, "proto", "__init__.py"), "w").close()
        try:
            os.rename(tmp, out)  # atomic: another process may have won the race
        except OSError:
            if not os.path.isdir(out):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def modules():
    """(chain_pb2, client_pb2, client_pb2_grpc), generated and imported once per process."""
    global _modules
    with _lock:
        if _modules is not None:
            return _modules
        root = _proto_root()
        protos = sorted(glob.glob(os.path.join(root, "proto", "*.proto")))
        if not protos:
            raise RuntimeError("noded_client: no proto/*.proto under %s (set NODED_PROTO_DIR)"
                               % root)
        digest = hashlib.sha256()
        for path in protos:
            with open(path, "rb") as f:
                digest.update(os.path.basename(path).encode() + b"\0" + f.read())
        out = os.path.join(_cache_root(), digest.hexdigest()[:16])
        if not os.path.isdir(os.path.join(out, "proto")):
            _generate(root, out)
        if out not in sys.path:
            sys.path.insert(0, out)
        _modules = tuple(importlib.import_module("proto." + name)
                         for name in ("chain_pb2", "client_pb2", "client_pb2_grpc"))
        return _modules
