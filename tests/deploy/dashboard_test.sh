#!/usr/bin/env bash
# Every PromQL expression of deploy/grafana/dashboards/gpucompute.json returns
# data against a live CPU-backend server that has had traffic.
#
#   tests/deploy/dashboard_test.sh BUILD_DIR      (e.g. tests/deploy/dashboard_test.sh build)
#
# Starts BUILD_DIR's gpucompute-server (--backend=cpu) and Debian's prometheus
# (deploy/prometheus/prometheus.yml rewritten to the test's loopback ports,
# 1 s scrapes, temporary storage), sends every operation a few times with
# gpucompute-cli plus requests that must fail (a zero row for normalize, an
# upload over the buffer quota), waits until Prometheus has scraped them, and
# evaluates every panel's and template variable's query through /api/v1/query
# (tests/deploy/check_dashboard.py). GPU-only panels (DCGM) need only be valid.
# Installs nothing: needs the Debian package prometheus and /usr/bin/python3.
# Prints "N passed, M failed" last; exits non-zero on any failure.
set -uo pipefail

usage() { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "no build dir $1" >&2; exit 2; }
PY=/usr/bin/python3
DASH=${DASHBOARD:-$ROOT/deploy/grafana/dashboards/gpucompute.json}  # DASHBOARD: test another file
CHECK=$ROOT/tests/deploy/check_dashboard.py

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "$passed passed, $failed failed"; [[ $failed -eq 0 ]]; exit $?; }

find_bin() {  # find_bin NAME: the newest executable NAME under BUILD
  find "$BUILD" -type f -name "$1" -perm -u+x -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-
}
SERVER=$(find_bin gpucompute-server)
CLI=$(find_bin gpucompute-cli)
PROMETHEUS=$(command -v prometheus || true)
[[ -n "$SERVER" ]] && pass "found $SERVER" || fail "no gpucompute-server under $BUILD"
[[ -n "$CLI" ]] && pass "found $CLI" || fail "no gpucompute-cli under $BUILD"
[[ -n "$PROMETHEUS" ]] && pass "found $PROMETHEUS ($($PROMETHEUS --version 2>&1 | head -n 1))" \
  || fail "no prometheus binary (apt-get install prometheus)"
[[ -x $PY ]] || fail "no $PY"
if ((failed)); then finish; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucompute-dashboard-test.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [[ "${KEEP_TMP:-0}" == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); MPORT=$(free_port); PPORT=$(free_port)
TARGET=127.0.0.1:$PORT
QUOTA=65536

# ------------------------------------------------------------------ server
"$SERVER" --backend=cpu --address="$TARGET" --metrics_address="127.0.0.1:$MPORT" \
  --buffer_quota_bytes=$QUOTA --grace_period=1s > "$TMP/server.log" 2>&1 &
pids+=($!)
cli() { timeout 30 "$CLI" --target="$TARGET" --timeout=20s "$@"; }
up=0
for _ in $(seq 1 100); do  # 20 s
  if cli health > /dev/null 2>&1; then up=1; break; fi
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.2
done
if [[ $up == 1 ]]; then
  pass "server healthy on $TARGET (metrics :$MPORT)"
else
  fail "server did not become healthy"; sed 's/^/    /' "$TMP/server.log"; finish
fi

# ------------------------------------------------------------------ prometheus
# The deploy config with the test's targets, 1 s scrapes and its rule files.
mkdir -p "$TMP/prom"
cp -r "$ROOT/deploy/prometheus/." "$TMP/prom/"
sed -e "s#^\(\s*scrape_interval:\).*#\1 1s#" \
    -e "s#^\(\s*scrape_timeout:\).*#\1 1s#" \
    -e "s#^\(\s*evaluation_interval:\).*#\1 1s#" \
    -e "s#gpucompute:9464#127.0.0.1:$MPORT#" \
    -e "s#dcgm-exporter:9400#127.0.0.1:$(free_port)#" \
    "$ROOT/deploy/prometheus/prometheus.yml" > "$TMP/prom/prometheus.yml"
if grep -q "127.0.0.1:$MPORT" "$TMP/prom/prometheus.yml" && grep -q "scrape_interval: 1s" "$TMP/prom/prometheus.yml"; then
  pass "prometheus.yml rewritten to the test ports"
else
  fail "could not rewrite prometheus.yml (targets or scrape_interval moved?)"; finish
fi
"$PROMETHEUS" --config.file="$TMP/prom/prometheus.yml" --storage.tsdb.path="$TMP/prom-data" \
  --web.listen-address="127.0.0.1:$PPORT" --log.level=warn > "$TMP/prometheus.log" 2>&1 &
pids+=($!)
PROM=http://127.0.0.1:$PPORT
ready=0
for _ in $(seq 1 150); do  # 30 s
  if "$PY" -c "import urllib.request,sys; urllib.request.urlopen('$PROM/-/ready', timeout=2)" 2>/dev/null; then
    ready=1; break
  fi
  kill -0 "${pids[1]}" 2>/dev/null || break
  sleep 0.2
done
if [[ $ready == 1 ]]; then pass "prometheus ready on $PROM"; else
  fail "prometheus not ready"; sed 's/^/    /' "$TMP/prometheus.log"; finish
fi

# Prometheus' first scrape comes seconds after it is ready: wait for two
# scrapes of the idle server, so rate() sees the counters before the traffic.
if "$PY" "$CHECK" wait-scraped --metrics-url="http://127.0.0.1:$MPORT/metrics" --prometheus="$PROM" \
     --job=gpucompute --timeout=30 --scrape-interval=1 > "$TMP/wait0.log" 2>&1; then
  pass "prometheus scrapes the idle server"
else
  fail "prometheus did not scrape the server"; cat "$TMP/wait0.log"; tail -n 20 "$TMP/prometheus.log"; finish
fi

# ------------------------------------------------------------------ traffic
"$PY" "$ROOT/tests/deploy/make_inputs.py" "$TMP/in"
I=$TMP/in
expect_ok() {  # expect_ok DESCRIPTION CLI-ARGS...
  local what=$1; shift
  if cli "$@" > "$TMP/last.out" 2>&1; then pass "$what"; else
    fail "$what (exit $?)"; sed 's/^/    /' "$TMP/last.out" | head -n 20
  fi
}
expect_fail() {  # expect_fail DESCRIPTION PATTERN CLI-ARGS...
  local what=$1 pattern=$2; shift 2
  if cli "$@" > "$TMP/last.out" 2>&1; then
    fail "$what: succeeded, expected a failure"
  elif grep -qi -- "$pattern" "$TMP/last.out"; then pass "$what"
  else fail "$what: no '$pattern' in:"; sed 's/^/    /' "$TMP/last.out" | head -n 20
  fi
}
expect_ok "health" health
expect_ok "info" info
for i in 1 2 3; do
  expect_ok "normalize #$i" normalize --input="$I/rows.npy" --out="$TMP/norm$i.npy"
  expect_ok "haversine mesh #$i" haversine --lat=-60:60:7 --lon=-120:120:9 --ref="0,0;45,90"
  expect_ok "haversine points #$i" haversine --lat_points="$I/lat.npy" --lon_points="$I/lon.npy" --ref=10,10
  expect_ok "discount-product #$i" discount-product --factors="$I/factors.npy" --values="$I/values.npy"
  expect_ok "lombscargle #$i" lombscargle --x="$I/x.npy" --y="$I/y.npy" --freq_grid=0.1:5:64 --normalize
done
expect_ok "normalize l2" normalize --input="$I/rows.npy" --norm=l2
expect_ok "normalize 1 MiB (counts transfer bytes and seconds)" normalize --input="$I/rows_1mib.npy" --norm=max_abs
expect_fail "normalize of a zero row fails with INVALID_ARGUMENT" "INVALID_ARGUMENT" \
  normalize --input="$I/zero_row.npy"
expect_ok "upload" upload "$I/rows.npy" --name=rows
BUF=$(awk '$1 == "id" { print $2 }' "$TMP/last.out")
if [[ -n "$BUF" ]]; then
  pass "upload printed buffer id $BUF"
  expect_ok "download" download "$BUF" "$TMP/rows-back.npy"
  expect_ok "normalize buffer:ID" normalize --input="buffer:$BUF"
  expect_ok "normalize --keep_on_device" normalize --input="buffer:$BUF" --keep_on_device --name=kept
else
  fail "upload printed no buffer id"
fi
expect_fail "upload over --buffer_quota_bytes=$QUOTA is refused" "RESOURCE_EXHAUSTED\|quota" \
  upload "$I/big.npy" --name=big
expect_ok "bench --count=40" bench --count=40 --concurrency=4 --size=4096

# ------------------------------------------------------------------ dashboard
if "$PY" "$CHECK" wait-scraped --metrics-url="http://127.0.0.1:$MPORT/metrics" --prometheus="$PROM" \
     --job=gpucompute --timeout=30 --scrape-interval=1; then
  pass "prometheus scraped the traffic"
else
  fail "prometheus did not scrape the traffic in time"
fi
out=$("$PY" "$CHECK" live "$DASH" --prometheus="$PROM" --job=gpucompute --rate-interval=2m 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^checker: '
read -r p f < <(printf '%s\n' "$out" | sed -n 's/^checker: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n 1)
if [[ -n "${p:-}" ]]; then
  passed=$((passed + p)); failed=$((failed + f))
  [[ $rc -eq 0 || $f -gt 0 ]] || fail "check_dashboard.py live exited $rc"
else
  fail "check_dashboard.py live did not finish (exit $rc)"
fi
if ! kill -0 "${pids[0]}" 2>/dev/null; then fail "server died"; sed 's/^/    /' "$TMP/server.log" | tail -n 20; fi
if ((failed)); then
  echo "--- server log (tail)"; tail -n 20 "$TMP/server.log"
  echo "--- prometheus log (tail)"; tail -n 20 "$TMP/prometheus.log"
fi
finish
