# shellcheck shell=bash
# Sourced by each bench/run_gpu_*.sh (not a runner): what every runner shares. The
# runner sets BUNDLE's default and defines its sections as functions section_NAME, then
# calls run_sections "DEFAULT SECTIONS" "$@".
set -u
OUT=${OUT:-gpu-out}
export PYTHON=${PYTHON:-python3}
BACKEND=${BACKEND:-cuda}  # cpu: a dry run of a section without a GPU, where it can run there
mkdir -p "$OUT"
# A bundle too large to carry as files travels packed as BUNDLE.txz.
if [ ! -d "$BUNDLE" ] && [ -f "$BUNDLE.txz" ]; then
  tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.txz" || exit 1
fi
# device-bundle leaves the CUDA Toolkit's libraries (cuFFT) to the machine's /usr/local/cuda.
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

step() { echo; echo "=== $* ($(date +%T))"; }

# await_health PORT [TENTHS]: whether the server on 127.0.0.1:PORT answers health within
# TENTHS tenths of a second (default 150).
await_health() {
  local cli
  cli=$(find_bin gpucompute-cli)
  for _ in $(seq "${2:-150}"); do
    "$cli" --target=127.0.0.1:"$1" --timeout=1s health > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# A program of the bundle: BUNDLE/NAME, or one folder down when BUNDLE is a build folder.
find_bin() {
  local p
  for p in "$BUNDLE/$1" "$BUNDLE"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done
  echo "$BUNDLE/$1"
}

# run_sections "DEFAULTS" [NAME...]: the named sections in order, else the defaults; -h
# prints the runner's header.
run_sections() {
  local defaults=$1 s
  shift
  local names=("$@")
  if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
  fi
  [ $# -gt 0 ] || read -ra names <<< "$defaults"
  for s in "${names[@]}"; do
    declare -F "section_$s" > /dev/null && continue
    echo "no section '$s'; sections: $(declare -F | sed -n 's/^declare -f section_//p' | tr '\n' ' ')" >&2
    exit 2
  done
  echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv,noheader 2>/dev/null | head -1); $(nproc) CPUs:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "bundle: $BUNDLE, backend: $BACKEND, sections: ${names[*]}, logs under $OUT"
  for s in "${names[@]}"; do
    echo; echo "##### $s ($(date +%T))"
    "section_$s"
  done
}
