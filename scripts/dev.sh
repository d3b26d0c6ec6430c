#!/usr/bin/env bash
# The README's two commands:
#   scripts/dev.sh serve   install what is missing, build (Release), start the server
#   scripts/dev.sh test    install what is missing, build, run every test
# Both are idempotent: packages already present are skipped, builds are incremental.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPUCOMPUTE_BUILD_DIR:-$repo/build}
jobs=${GPUCOMPUTE_JOBS:-$(nproc)}

# Debian 12 / Ubuntu 24.04 package names.
packages=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libfftw3-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-grpcio python3-protobuf python3-numpy python3-scipy python3-pytest
  python3-venv python3-pip python3-setuptools python3-wheel mypy
  python3-yaml yamllint prometheus curl libssl-dev openssl nodejs
  python3-dask python3-distributed haproxy dnsmasq-base
)
# The Go client test (tests/go) builds against Debian 12's grpc-go 1.33 and its
# protoc-gen-go 1.3 (whose grpc plugin makes the stubs); elsewhere it is skipped.
if grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  packages+=(golang-go golang-google-grpc-dev protoc-gen-go-1-3)
fi

# shellcheck source=scripts/packages.sh
source "$repo/scripts/packages.sh"
install_packages() { install_missing_packages dev.sh "${packages[@]}"; }

# The reflection test's client (tests/reflection) from the npm registry; skipped
# while the installed tree matches the lock file, so a rerun needs no network.
install_node_packages() {
  command -v npm >/dev/null || install_missing_packages dev.sh npm
  local dir=$repo/tests/reflection
  if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed-package-lock.json"; then
    (cd "$dir" && npm ci --prefer-offline --no-audit --no-fund)
    cp "$dir/package-lock.json" "$dir/node_modules/.installed-package-lock.json"
  fi
}

# Kernels for the GPUs this machine has, so nothing else compiles and nothing is
# JIT-compiled at run time; with no GPU the CPU backend serves, and PTX for the
# oldest and newest supported architectures still compiles every kernel path
# without generating machine code for each GPU. The container image builds the
# full set (Dockerfile); GPUCOMPUTE_CUDA_ARCHITECTURES overrides.
cuda_architectures() {
  if [ -n "${GPUCOMPUTE_CUDA_ARCHITECTURES:-}" ]; then
    echo "$GPUCOMPUTE_CUDA_ARCHITECTURES"
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo native
  else
    echo "80-virtual;90-virtual"
  fi
}

build_all() {
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_CUDA_ARCHITECTURES=$(cuda_architectures)"
  fi
  cmake --build "$build" -j "$jobs"
}

case "${1:-}" in
  serve)
    shift
    install_packages
    build_all
    exec "$build/server/gpucompute-server" "$@"
    ;;
  test)
    install_packages
    install_node_packages
    build_all
    status=0
    (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900) || status=1
    GPUCOMPUTE_SERVER="$build/server/gpucompute-server" GPUCOMPUTE_CLI="$build/client/gpucompute-cli" \
      /usr/bin/python3 -m pytest -q "$repo/tests/python" || status=1
    for t in "$repo"/tests/deploy/*.sh; do
      [ -x "$t" ] || continue
      echo "== $t"
      "$t" "$build" || status=1
    done
    # Request validation and CPU execution under libFuzzer + ASan + UBSan.
    "$repo/scripts/fuzz.sh" "${GPUCOMPUTE_FUZZ_SECONDS:-60}" || status=1
    exit $status
    ;;
  *)
    echo "usage: scripts/dev.sh serve [server flags] | scripts/dev.sh test" >&2
    exit 2
    ;;
esac
