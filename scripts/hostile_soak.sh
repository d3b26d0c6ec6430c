#!/usr/bin/env bash
# Hostile soak: a well-behaved client runs the four-op mix against the CPU-backend
# server on loopback while hostile clients hold 1000 idle streams, stall 200 readers of 8 MiB
# results, send 16 KiB metadata, flood resets and ask for 2 GiB meshes.
#
#   scripts/hostile_soak.sh [DURATION_SECONDS=180] [BUILD_DIR=build] [soak.py options...]
#
# Goals (exit status 1 when one is missed): the good client sees 0 errors and a loaded p99
# within 2x of its unloaded p99, the server's peak RSS stays under its host memory budget
# (4 GiB by default), every stored buffer downloads intact, the server exits 0 on SIGTERM.
# Prints one table; the artifacts (server.log, rss.csv, metrics.txt, hostile-*.json) stay in
# a new /tmp/gpucompute-hostile-soak.* directory. Options: scripts/hostile_soak/soak.py --help
# (scale: --idle, --stalled, --metadata-rate, --reset-rate, --meshes, --mesh, --budget, ...).
# Needs /usr/bin/python3 with grpcio and numpy (the Python client runs from client/python).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
duration=${1:-180}
build=${2:-build}
shift $(($# < 2 ? $# : 2))
exec /usr/bin/python3 "$repo/scripts/hostile_soak/soak.py" --duration="$duration" \
  --build="$build" "$@"
