#!/usr/bin/env bash
# The shipped HAProxy configuration (deploy/haproxy/haproxy.cfg) in front of three CPU
# replicas, found through DNS SRV records, with a @grpc/grpc-js client (tests/deploy/
# haproxy.test.js). Needs haproxy, dnsmasq-base, nodejs and tests/reflection's
# node_modules (scripts/dev.sh installs them all).
#   tests/deploy/haproxy_test.sh BUILD_DIR
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:?usage: haproxy_test.sh BUILD_DIR}
GPUCOMPUTE_SERVER=$(cd "$build" && pwd)/server/gpucompute-server \
  exec node --test "$root/tests/deploy/haproxy.test.js"
