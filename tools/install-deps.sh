#!/usr/bin/env bash
# Installs, from Debian's packages, whatever the build and tests need and is not yet installed.
# Idempotent: runs `apt-get update` and `apt-get install` only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev libbenchmark-dev
  librocksdb-dev libssl-dev prometheus-cpp-dev
  libgoogle-perftools-dev  # tcmalloc: noded's allocator
  python3 python3-grpcio python3-protobuf python3-cryptography
  procps iproute2 curl clang-format
  prometheus  # promtool: the metrics and alert-rule tests; prometheus: tools/localnet monitor
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
