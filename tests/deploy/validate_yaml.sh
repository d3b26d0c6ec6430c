#!/usr/bin/env bash
# Static checks of deploy/ and the Dockerfile; no server, no network.
#   tests/deploy/validate_yaml.sh
# Needs (Debian packages): yamllint, python3-yaml, prometheus (for promtool).
# Prints "N passed, M failed" last and exits non-zero on any failure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=/usr/bin/python3
cd "$ROOT"
passed=0
failed=0

step() {  # step NAME COMMAND...
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); echo "PASS $name"
  else
    failed=$((failed + 1)); echo "FAIL $name"; printf '%s\n' "$out" | sed 's/^/    /'
  fi
}

# Runs a checker that prints "checker: N passed, M failed" and adds its counts.
checker() {  # checker NAME COMMAND...
  local name=$1; shift
  local out rc p f
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -v '^PASS ' | grep -v '^checker: ' | sed "s/^/[$name] /"
  read -r p f < <(printf '%s\n' "$out" | sed -n 's/^checker: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n 1)
  if [[ -z "${p:-}" ]]; then
    failed=$((failed + 1)); echo "FAIL $name did not finish (exit $rc)"; printf '%s\n' "$out" | tail -n 20
    return
  fi
  echo "$name: $p passed, $f failed"
  passed=$((passed + p)); failed=$((failed + f))
  if [[ $rc -ne 0 && $f -eq 0 ]]; then failed=$((failed + 1)); echo "FAIL $name exited $rc"; fi
}

need() {  # need PROGRAM PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 && [[ ! -x "$1" ]]; then
    failed=$((failed + 1)); echo "FAIL $1 not found (apt-get install $2)"; return 1
  fi
}

if need yamllint yamllint; then
  step "yamllint deploy/" yamllint -c deploy/.yamllint.yaml --strict deploy/ tests/deploy/
fi
if need "$PY" python3 && step "python3-yaml importable" "$PY" -c "import yaml"; then
  checker manifests "$PY" tests/deploy/check_manifests.py "$ROOT"
fi
if need promtool prometheus; then
  step "promtool check config deploy/prometheus/prometheus.yml" \
    promtool check config deploy/prometheus/prometheus.yml
  step "promtool check rules" promtool check rules deploy/prometheus/rules/*.yml
  step "promtool test rules tests/deploy/rules_test.yml" promtool test rules tests/deploy/rules_test.yml
fi
step "dashboard JSON matches deploy/grafana/build_dashboard.py" \
  "$PY" deploy/grafana/build_dashboard.py --check
checker dashboard "$PY" tests/deploy/check_dashboard.py static deploy/grafana/dashboards/gpucompute.json
step "shell scripts parse" bash -n tests/deploy/dashboard_test.sh tests/deploy/validate_yaml.sh \
  scripts/container_test.sh
step "deploy/docker/runtime-packages.sh parses" sh -n deploy/docker/runtime-packages.sh

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
