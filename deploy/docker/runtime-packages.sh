#!/bin/sh
# Prints the Debian/Ubuntu packages that provide the shared libraries the given
# binaries load, one per line: the runtime stage of the Dockerfile installs
# exactly these, whatever the base distribution names them (libgrpc++1.51 on
# Debian 12, libgrpc++1.51t64 on Ubuntu 24.04, ...).
# Skipped: the CUDA toolkit under /usr/local/cuda (the nvidia/cuda runtime
# base image has it) and the driver's libcuda.so.1 (mounted by the NVIDIA
# container toolkit at run time).
set -eu
[ "$#" -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
libs=$(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
for lib in $libs; do
  case "$lib" in
    /usr/local/cuda*|*/libcuda.so*|*/libnvidia-*) continue ;;
  esac
  real=$(readlink -f "$lib")
  # dpkg knows each file by the path its package ships (/lib or /usr/lib
  # depending on the distribution's usr-merge state): try the ldd path, the
  # resolved path, then any path ending in the file name.
  owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null ||
          dpkg -S "*/$(basename "$real")" 2>/dev/null || true)
  if [ -z "$owner" ]; then
    echo "runtime-packages.sh: no package owns $lib" >&2
    exit 1
  fi
  # "pkg1:amd64, pkg2: /path" -> pkg1 pkg2 (without -dev packages' symlinks)
  printf '%s\n' "$owner" | sed 's/: \/.*$//' | tr ',' '\n' | sed 's/^ *//; s/:.*$//' |
    grep -v -- '-dev$' || true
done | sort -u
