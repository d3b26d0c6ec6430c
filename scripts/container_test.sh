#!/usr/bin/env bash
# Builds the Dockerfile with buildah, as a CPU-only image and as the CUDA image,
# and runs each image's server on the CPU backend: health check and one request
# with the image's own gpucompute-cli; reports both images' sizes.
#
#   sudo scripts/container_test.sh
#
# No Docker engine and no registry are needed: the two base images are local
# stand-ins made here, passed through the Dockerfile's build args:
#   build stage    a debootstrap Debian bookworm root plus the CUDA toolkit
#                  copied from $CUDA_HOME (like nvidia/cuda:*-devel)
#   runtime stage  the same root plus libcudart only (like nvidia/cuda:*-base), so
#                  a CUDA library the server loads and the image does not carry
#                  fails the image's ldd check here as it would on NVIDIA's base
# buildah runs with --isolation chroot and the vfs storage driver, in its own
# storage under $WORK, so it needs root but no daemon, overlayfs or user
# namespaces. Slow (a full Release build with nvcc, and vfs copies every layer):
# run by hand, not in CI. Installs buildah and debootstrap with apt-get if
# missing. Network: Debian's package mirror only (debootstrap, apt in the build).
# The CUDA image's binaries and the libraries they load are extracted to
# $EXTRACT_DIR (bin/, lib/), to run exactly as the image holds them elsewhere:
#   LD_LIBRARY_PATH=$EXTRACT_DIR/lib $EXTRACT_DIR/bin/gpucompute-server --backend=cuda
#
# Environment:
#   WORK=/var/tmp/gpucompute-container-test  work dir (rootfs cache, storage)
#   CUDA_HOME=/usr/local/cuda                toolkit copied into the build stand-in
#   CUDA_ARCHITECTURES=90                    GPU targets built (the Dockerfile's
#                                            default is 80-real;86-real;89-real;90)
#   BUILD_JOBS=2                             compile jobs inside the build
#   DEBIAN_MIRROR=http://deb.debian.org/debian
#   KEEP=0                                   1: keep buildah storage and images
#   REUSE_IMAGE=0                            1: skip the build, test the image a
#                                            KEEP=1 run left
#   VARIANTS="cpu cuda"                      images built and tested, in order: cpu
#                                            (ENABLE_CUDA=OFF) and cuda (nvcc, cuFFT)
#   EXTRACT_DIR=$ROOT/.device/image          where the cuda image's bin/ and lib/ go
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-/var/tmp/gpucompute-container-test}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}
BUILD_JOBS=${BUILD_JOBS:-2}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEEP=${KEEP:-0}
VARIANTS=${VARIANTS:-cpu cuda}
EXTRACT_DIR=${EXTRACT_DIR:-$ROOT/.device/image}
WITH_CUDA=0
[[ " $VARIANTS " == *" cuda "* ]] && WITH_CUDA=1
SUITE=bookworm
ROOTFS=$WORK/rootfs-$SUITE
RUNTIME_BASE=localhost/gpucompute-standin/cuda-base:$SUITE
BUILD_BASE=localhost/gpucompute-standin/cuda-devel:$SUITE
IMAGE_PREFIX=localhost/gpucompute:container-test

T0=$(date +%s)
log() { printf '[%4ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }
die() { log "FAIL: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (buildah with chroot isolation and debootstrap need it)"
mkdir -p "$WORK"
BUILDAH=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)

containers=()
forget() {  # forget CONTAINER: it was committed with --rm
  local keep=() c
  for c in "${containers[@]}"; do [[ "$c" != "$1" ]] && keep+=("$c"); done
  containers=("${keep[@]}")
}
server_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  for c in "${containers[@]}"; do
    "${BUILDAH[@]}" umount "$c" >/dev/null 2>&1 || true
    "${BUILDAH[@]}" rm "$c" >/dev/null 2>&1 || true
  done
  if [[ "$KEEP" != 1 && -d "$WORK/storage" ]]; then
    "${BUILDAH[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$WORK/storage" "$WORK/run"
  fi
  log "exit $rc (total $(( $(date +%s) - T0 )) s)"
}
trap cleanup EXIT

# ------------------------------------------------------------------ tools
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
log "$(buildah --version); debootstrap $(dpkg-query -W -f '${Version}' debootstrap)"
[[ "$WITH_CUDA" != 1 || -x "$CUDA_HOME/bin/nvcc" ]] || die "no nvcc under $CUDA_HOME (VARIANTS=cpu builds CPU-only)"

reuse=0
if [[ "${REUSE_IMAGE:-0}" == 1 ]]; then
  reuse=1; log "REUSE_IMAGE=1: testing the existing images (KEEP=1 from an earlier run)"
fi
if [[ $reuse == 0 ]]; then
# ------------------------------------------------------------------ rootfs
if [[ ! -f "$ROOTFS/.complete" ]]; then
  log "debootstrap $SUITE (minbase) into $ROOTFS from $DEBIAN_MIRROR"
  rm -rf "$ROOTFS" "$ROOTFS.tmp"
  debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOTFS.tmp" "$DEBIAN_MIRROR" \
    > "$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log"; die "debootstrap failed"; }
  # Like the official images: no apt cache, apt lists fetched by each build.
  rm -rf "$ROOTFS.tmp"/var/lib/apt/lists/* "$ROOTFS.tmp"/var/cache/apt/archives/*.deb
  printf 'deb %s %s main\ndeb %s %s-updates main\n' "$DEBIAN_MIRROR" "$SUITE" "$DEBIAN_MIRROR" "$SUITE" \
    > "$ROOTFS.tmp/etc/apt/sources.list"
  mv "$ROOTFS.tmp" "$ROOTFS"
  touch "$ROOTFS/.complete"
else
  log "reusing $ROOTFS"
fi
log "rootfs: $(du -sh --exclude=.complete "$ROOTFS" | cut -f1)"

# ------------------------------------------------------------------ stand-in bases
# Copies a directory tree into a working container.
copy_tree() {  # copy_tree CONTAINER SRC DEST [tar options...]
  local ctr=$1 src=$2 dest=$3; shift 3
  local mnt
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  mkdir -p "$mnt$dest"
  tar -C "$src" "$@" -cf - . | tar -C "$mnt$dest" -xpf -
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
}

cuda_real=$(readlink -f "$CUDA_HOME" || echo /nonexistent/cuda)
cuda_ver=$(basename "$cuda_real")   # cuda-13.0
NV_ENV=(--env "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        --env "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
        --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=compute,utility)

log "stand-in runtime base $RUNTIME_BASE (rootfs + libcudart from $cuda_real)"
ctr=$("${BUILDAH[@]}" from scratch); containers+=("$ctr")
copy_tree "$ctr" "$ROOTFS" / --exclude=./.complete
if [[ -d "$cuda_real/lib" ]]; then
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  mkdir -p "$mnt/usr/local/$cuda_ver/lib"
  cp -a "$cuda_real"/lib/libcudart.so* "$mnt/usr/local/$cuda_ver/lib/" 2>/dev/null || true
  ln -sfn "$cuda_ver" "$mnt/usr/local/cuda"
  echo "/usr/local/cuda/lib" > "$mnt/etc/ld.so.conf.d/000-cuda.conf"
  ldconfig -r "$mnt"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
fi
"${BUILDAH[@]}" config "${NV_ENV[@]}" --cmd /bin/bash "$ctr"
"${BUILDAH[@]}" commit --quiet --rm "$ctr" "$RUNTIME_BASE" >/dev/null
forget "$ctr"

log "stand-in build base $BUILD_BASE (runtime base + CUDA toolkit)"
ctr=$("${BUILDAH[@]}" from --pull=never "$RUNTIME_BASE"); containers+=("$ctr")
if [[ "$WITH_CUDA" == 1 ]]; then
  # The compiler, headers, the static runtime, cuFFT and the driver stubs; not the
  # large math / DL libraries the project does not link (CUDA_FULL=1 copies all).
  excludes=()
  if [[ "${CUDA_FULL:-0}" != 1 ]]; then
    for pat in 'libcublas*' 'libcudnn*' 'libcurand*' 'libcusolver*' 'libcusparse*' \
               'libnccl*' 'libnvblas*' 'libcupti*' 'libnvperf*' 'libpcsampling*' 'libcheckpoint*' \
               'libnvrtc*' 'libnvJitLink*' 'libnvtx3interop*'; do
      excludes+=("--exclude=./lib/$pat")
    done
  fi
  copy_tree "$ctr" "$cuda_real" "/usr/local/$cuda_ver" "${excludes[@]}"
  log "  toolkit copied: $(du -sh "$("${BUILDAH[@]}" mount "$ctr")/usr/local/$cuda_ver" | cut -f1)"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
fi
if true; then
  # Debian 12's CMake 3.25.1 FindCUDAToolkit fails with CUDA 13, which has no
  # libnvToolsExt ("set_property could not find TARGET CUDA::nvToolsExt"); the
  # nvidia/cuda Ubuntu 24.04 images get CMake 3.28, which is fixed. So the build
  # stand-in comes with the Dockerfile's build packages installed and the
  # module's one-line fix (as on this project's build machines); the
  # Dockerfile's own apt-get install then finds them present.
  log "  installing the build packages into the build stand-in"
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- sh -c 'apt-get update -q > /dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      ca-certificates cmake make g++ pkg-config libgrpc++-dev protobuf-compiler-grpc \
      libprotobuf-dev protobuf-compiler libabsl-dev prometheus-cpp-dev libfftw3-dev > /dev/null &&
    rm -rf /var/lib/apt/lists/*' || die "apt-get install in the build stand-in failed"
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  for f in "$mnt"/usr/share/cmake-*/Modules/FindCUDAToolkit.cmake; do
    if grep -q '^ *if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)$' "$f"; then
      sed -i 's/^\( *\)if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)$/\1if(TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)/' "$f"
      log "  patched ${f#"$mnt"} (nvToolsExt guard)"
    fi
  done
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
fi
"${BUILDAH[@]}" config --env CUDA_HOME=/usr/local/cuda "$ctr"
"${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BUILD_BASE" >/dev/null
forget "$ctr"
"${BUILDAH[@]}" images
fi  # reuse

failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then log "PASS $what"; else log "FAIL $what"; failures=$((failures + 1)); fi
}
sizes=()

# Builds (unless REUSE_IMAGE=1), inspects and runs one image: cpu or cuda.
test_image() {
local variant=$1
IMAGE=$IMAGE_PREFIX-$variant
if [[ $variant == cuda ]]; then ENABLE_CUDA=ON; REQUIRE_CUDA=1; else ENABLE_CUDA=OFF; REQUIRE_CUDA=0; fi
if [[ $reuse == 0 ]]; then
# ------------------------------------------------------------------ build
commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
log "buildah bud (chroot isolation, vfs) -> $IMAGE; ENABLE_CUDA=$ENABLE_CUDA CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES BUILD_JOBS=$BUILD_JOBS"
tb=$(date +%s)
if ! "${BUILDAH[@]}" bud --isolation chroot --format docker --pull=never --layers=false \
      --build-arg "BASE_BUILD_IMAGE=$BUILD_BASE" \
      --build-arg "BASE_RUNTIME_IMAGE=$RUNTIME_BASE" \
      --build-arg "CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES" \
      --build-arg "BUILD_JOBS=$BUILD_JOBS" \
      --build-arg "ENABLE_CUDA=$ENABLE_CUDA" \
      --build-arg "REQUIRE_CUDA=$REQUIRE_CUDA" \
      --build-arg "GIT_COMMIT=$commit" \
      -f "$ROOT/Dockerfile" -t "$IMAGE" "$ROOT" > "$WORK/bud-$variant.log" 2>&1; then
  tail -n 60 "$WORK/bud-$variant.log"
  die "buildah bud failed (full log: $WORK/bud-$variant.log)"
fi
grep -E '^(STEP|runtime packages:|CUDA libraries carried:|-- gpucompute|gpucompute:)' "$WORK/bud-$variant.log" || true
log "image built in $(( $(date +%s) - tb )) s"
"${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E "gpucompute" || true

fi  # reuse

# ------------------------------------------------------------------ inspect
"${BUILDAH[@]}" inspect --type image "$IMAGE" > "$WORK/image-inspect.json"
/usr/bin/python3 -c "
import json, sys
d = json.load(open('$WORK/image-inspect.json'))
c = (d.get('Docker') or {}).get('config') or {}
json.dump(c, open('$WORK/image-config.json', 'w'), indent=1)
print('image config:', json.dumps({k: c.get(k) for k in ('User', 'Entrypoint', 'Cmd', 'ExposedPorts', 'Healthcheck', 'WorkingDir')}))"
py_cfg() { /usr/bin/python3 -c "import json,sys; c=json.load(open('$WORK/image-config.json')); $1"; }
check "entrypoint is gpucompute-server on 0.0.0.0:50051 / :9464" py_cfg \
  "sys.exit(c['Entrypoint'] != ['gpucompute-server','--address=0.0.0.0:50051','--metrics_address=0.0.0.0:9464'])"
check "runs as non-root user 10001" py_cfg "sys.exit(c.get('User') != '10001:10001')"
check "exposes 50051 and 9464" py_cfg \
  "sys.exit(not {'50051/tcp','9464/tcp'} <= set((c.get('ExposedPorts') or {}).keys()))"
check "healthcheck runs gpucompute-cli health" py_cfg \
  "hc=(c.get('Healthcheck') or {}).get('Test') or []; sys.exit(not ('gpucompute-cli' in hc and 'health' in hc))"
size_of() { "${BUILDAH[@]}" images --json "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["size"])'; }
# What a registry would hold: the image as a compressed OCI archive.
"${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$WORK/image.oci.tar" >/dev/null
sizes+=("$variant image: $(size_of "$IMAGE") unpacked, $(( $(stat -c %s "$WORK/image.oci.tar") / 1024 / 1024 )) MiB compressed (runtime stand-in base: $(size_of "$RUNTIME_BASE"))")
log "${sizes[-1]}"
rm -f "$WORK/image.oci.tar"

# ------------------------------------------------------------------ run
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); MPORT=$(free_port)
ctr=$("${BUILDAH[@]}" from --pull=never "$IMAGE"); containers+=("$ctr")
run_in() { "${BUILDAH[@]}" run --isolation chroot "$ctr" -- "$@"; }
uid=$(run_in id -u 2>/dev/null || true)
check "processes in the container run as uid 10001 (got '$uid')" test "$uid" = 10001
log "starting the image's server: --backend=cpu on 127.0.0.1:$PORT, metrics :$MPORT"
"${BUILDAH[@]}" run --isolation chroot "$ctr" -- gpucompute-server --address="127.0.0.1:$PORT" \
  --metrics_address="127.0.0.1:$MPORT" --backend=cpu --grace_period=2s > "$WORK/server.log" 2>&1 &
server_pid=$!
healthy=0
for _ in $(seq 1 60); do
  if run_in gpucompute-cli --target="127.0.0.1:$PORT" health > "$WORK/health.out" 2>&1; then healthy=1; break; fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 1
done
check "gpucompute-cli health (from the image) succeeds" test "$healthy" = 1
cat "$WORK/health.out"
if [[ $healthy != 1 ]]; then tail -n 30 "$WORK/server.log"; fi
if run_in gpucompute-cli --target="127.0.0.1:$PORT" info > "$WORK/info.out" 2>&1; then
  check "gpucompute-cli info reports the cpu backend" grep -qi "cpu" "$WORK/info.out"
else
  check "gpucompute-cli info succeeds" false
fi
cat "$WORK/info.out"
# One compute request that needs no input files: a haversine mesh.
if run_in gpucompute-cli --target="127.0.0.1:$PORT" haversine --lat=-10:10:5 --lon=0:20:5 \
     --ref="0,0;10,10" > "$WORK/request.out" 2>&1; then
  check "haversine request through the image's CLI" true
else
  check "haversine request through the image's CLI" false
fi
head -c 2000 "$WORK/request.out"; echo
check "/metrics serves gpucompute_build_info" /usr/bin/python3 -c "
import sys, urllib.request
t = urllib.request.urlopen('http://127.0.0.1:$MPORT/metrics', timeout=5).read().decode()
print(next((l for l in t.splitlines() if l.startswith('gpucompute_build_info')), 'gpucompute_build_info missing'))
sys.exit('gpucompute_build_info{' not in t)"

# SIGTERM to the server process itself (buildah run would SIGKILL its child):
# with chroot isolation it is a plain process of this host.
spid=""
for p in $(pgrep -f -- "--metrics_address=127.0.0.1:$MPORT" || true); do
  [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == */gpucompute-server ]] && spid=$p
done
log "stopping the server (SIGTERM to pid ${spid:-?})"
kill -TERM "${spid:-$server_pid}" 2>/dev/null || true
stopped=0
for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || { stopped=1; break; }; sleep 0.2; done
check "server exits within 10 s of SIGTERM (--grace_period=2s)" test "$stopped" = 1
wait "$server_pid" 2>/dev/null || true
server_pid=""
check "server logged its drain" grep -q "draining" "$WORK/server.log"
tail -n 5 "$WORK/server.log"
if [[ $variant == cuda ]]; then extract_image; fi
"${BUILDAH[@]}" rm "$ctr" >/dev/null; forget "$ctr"
}

# The image's /usr/local/bin and every library its binaries load from the image
# (libcuda.so.1 excepted: the driver's, on the GPU machine) into $EXTRACT_DIR.
extract_image() {
  local mnt
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  rm -rf "$EXTRACT_DIR"; mkdir -p "$EXTRACT_DIR/bin" "$EXTRACT_DIR/lib"
  cp -a "$mnt/usr/local/bin/." "$EXTRACT_DIR/bin/"
  chroot "$mnt" ldd /usr/local/bin/gpucompute-server /usr/local/bin/gpucompute-cli |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | grep -v -e libcuda.so -e '/libc\.so' \
      -e '/libm\.so' -e libpthread -e '/libdl\.' -e '/librt\.' -e ld-linux |
    while read -r lib; do cp -L "$mnt$lib" "$EXTRACT_DIR/lib/"; done
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  log "extracted the cuda image's bin/ and lib/ to $EXTRACT_DIR ($(du -sh "$EXTRACT_DIR" | cut -f1))"
}

for variant in $VARIANTS; do test_image "$variant"; done
printf '%s\n' "${sizes[@]}"

if ((failures)); then die "$failures check(s) failed"; fi
log "OK: images ($VARIANTS) built and served requests on the CPU backend"
