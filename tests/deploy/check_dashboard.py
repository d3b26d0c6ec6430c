#!/usr/bin/python3
"""Checks deploy/grafana/dashboards/gpucompute.json. Standard library only.

  check_dashboard.py static DASHBOARD
      Structure: fixed uid, unique panel ids, every panel has a grid position,
      a Prometheus data source and PromQL targets, the GPU-only panels are the
      expected ones, and every metric named is one the server (or DCGM) exports.

  check_dashboard.py wait-scraped --metrics-url URL --prometheus URL [--job J] [--timeout S]
      Reads the server's /metrics, sums gpucompute_requests_total there, and waits
      until Prometheus has scraped at least that many requests (then two more
      scrape intervals), so every panel sees the traffic that was sent.

  check_dashboard.py live DASHBOARD --prometheus URL [--job J] [--rate-interval 2m]
      Evaluates every PromQL expression of every panel (and every template
      variable's label_values query) through /api/v1/query after replacing the
      Grafana variables with concrete values; each must succeed and return data
      (at least one series with a number, not only NaN), except GPU-only
      panels, which must only be valid PromQL.

Each check prints PASS/FAIL/SKIP; the last line is "checker: N passed, M failed".
"""
import argparse
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

EXPECTED_UID = "gpucompute-overview"
GPU_ONLY_MARK = "GPU-only:"
# The panels that return data only on a GPU host scraped with dcgm-exporter.
EXPECTED_GPU_ONLY = {"GPU utilisation", "GPU framebuffer memory", "GPU power"}

# Metric families the server exports (histograms also as _bucket/_sum/_count),
# and the DCGM exporter fields the GPU row uses.
SERVER_METRICS = {
    "grpc_server_started_total", "grpc_server_handled_total", "grpc_server_handling_seconds",
    "gpucompute_requests_total", "gpucompute_request_duration_seconds",
    "gpucompute_stage_duration_seconds", "gpucompute_requests_in_flight",
    "gpucompute_queue_depth", "gpucompute_rejections_total",
    "gpucompute_transfer_bytes_total", "gpucompute_transfer_duration_seconds",
    "gpucompute_network_received_bytes_total", "gpucompute_network_sent_bytes_total",
    "gpucompute_device_pool_reserved_bytes", "gpucompute_device_pool_used_bytes",
    "gpucompute_stored_buffers", "gpucompute_stored_buffer_bytes", "gpucompute_pinned_pool_bytes",
    "gpucompute_kernels_loaded", "gpucompute_warmup_duration_seconds",
    "gpucompute_first_request_duration_seconds", "gpucompute_build_info",
    "gpucompute_device_info", "gpucompute_device_healthy",
}
DCGM_METRICS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                "DCGM_FI_DEV_POWER_USAGE"}
KNOWN_METRICS = SERVER_METRICS | DCGM_METRICS | {"up"}
METRIC_RE = re.compile(r'(?<![\w"])(gpucompute_\w+|grpc_server_\w+|DCGM_\w+|up)(?=\s*[{\[)])')
LABEL_VALUES_RE = re.compile(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", re.S)


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, msg):
        self.passed += 1
        print(f"PASS {msg}")

    def fail(self, msg):
        self.failed += 1
        print(f"FAIL {msg}")

    def check(self, cond, msg, why=""):
        if cond:
            self.ok(msg)
        else:
            self.fail(msg + (f": {why}" if why else ""))
        return cond

    def finish(self):
        print(f"checker: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1


def all_panels(dash):
    """Every panel, rows' nested panels included (collapsed rows keep theirs inside)."""
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []) or []:
            yield q


def is_gpu_only(panel):
    return (panel.get("description") or "").startswith(GPU_ONLY_MARK)


def base_metric(name):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in KNOWN_METRICS:
            return name[: -len(suffix)]
    return name


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ----------------------------------------------------------------------- static
def cmd_static(args):
    r = Results()
    dash = load(args.dashboard)
    r.check(dash.get("uid") == EXPECTED_UID, f"dashboard uid is {EXPECTED_UID!r}",
            f"got {dash.get('uid')!r}")
    r.check(dash.get("id") in (None,), "dashboard has no fixed numeric id (provisioning-safe)")
    panels = list(all_panels(dash))
    ids = [p.get("id") for p in panels]
    r.check(len(ids) == len(set(ids)) and None not in ids, "panel ids are unique and set",
            f"ids {ids}")
    rows = [p["title"] for p in panels if p.get("type") == "row"]
    for want in ("Requests", "Stage", "Transfers", "Saturation", "GPU"):
        r.check(any(t.startswith(want) for t in rows), f"row starting {want!r} exists",
                f"rows: {rows}")
    gpu_only = set()
    for p in panels:
        if p.get("type") == "row":
            continue
        title = p.get("title", "?")
        gp = p.get("gridPos", {})
        problems = []
        if not all(k in gp for k in ("h", "w", "x", "y")):
            problems.append("gridPos incomplete")
        elif gp["x"] + gp["w"] > 24:
            problems.append("gridPos wider than 24")
        if (p.get("datasource") or {}).get("type") != "prometheus":
            problems.append("panel data source is not prometheus")
        targets = p.get("targets") or []
        if not targets:
            problems.append("no targets")
        refids = [t.get("refId") for t in targets]
        if len(refids) != len(set(refids)):
            problems.append("duplicate refIds")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                problems.append(f"target {t.get('refId')} has no expr")
                continue
            if (t.get("datasource") or {}).get("type") != "prometheus":
                problems.append(f"target {t.get('refId')} data source is not prometheus")
            names = METRIC_RE.findall(expr)
            if not names:
                problems.append(f"target {t.get('refId')} names no known metric")
            for n in names:
                if base_metric(n) not in KNOWN_METRICS:
                    problems.append(f"unknown metric {n}")
            if is_gpu_only(p) != any(n.startswith("DCGM_") for n in names):
                problems.append("GPU-only mark does not match use of DCGM metrics")
        if not p.get("description"):
            problems.append("no description")
        if is_gpu_only(p):
            gpu_only.add(title)
        r.check(not problems, f"panel {title!r} is well-formed", "; ".join(problems))
    r.check(gpu_only == EXPECTED_GPU_ONLY, "GPU-only panels are exactly "
            + ", ".join(sorted(EXPECTED_GPU_ONLY)), f"marked: {sorted(gpu_only)}")
    used = set()
    for p in panels:
        for t in p.get("targets") or []:
            used.update(base_metric(n) for n in METRIC_RE.findall(t.get("expr", "")))
    missing = sorted((SERVER_METRICS | DCGM_METRICS) - used)
    r.check(not missing, "every exported metric family appears on some panel",
            f"unused: {missing}")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            r.check(bool(LABEL_VALUES_RE.match(q or "")), f"variable ${v.get('name')} "
                    "is a label_values query", repr(q))
    return r.finish()


# ----------------------------------------------------------------------- Prometheus
def prom_query(base, expr, timeout=10):
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:  # 400/422 carry a JSON error body
        try:
            body = json.load(e)
        except Exception:  # noqa: BLE001
            return None, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)
    if body.get("status") != "success":
        return None, f"{body.get('errorType')}: {body.get('error')}"
    return body["data"], None


def sample_values(data):
    out = []
    if data["resultType"] == "vector":
        out = [float(s["value"][1]) for s in data["result"]]
    elif data["resultType"] == "matrix":
        out = [float(v[1]) for s in data["result"] for v in s["values"]]
    elif data["resultType"] == "scalar":
        out = [float(data["result"][1])]
    return out


def substitute(expr, job, rate_interval):
    values = {
        "__rate_interval": rate_interval, "__interval": "15s", "__range": "5m",
        "__range_s": "300", "__interval_ms": "15000",
        "job": job, "instance": ".+", "operation": ".+",
    }
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(name)
        return values[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", repl, expr)


def cmd_wait_scraped(args):
    deadline = time.monotonic() + args.timeout
    total = None
    while total is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(args.metrics_url, timeout=5) as resp:
                text = resp.read().decode()
            total = 0.0
            for line in text.splitlines():
                if line.startswith("gpucompute_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    if total is None:
        print(f"wait-scraped: could not read {args.metrics_url}")
        return 1
    print(f"wait-scraped: server reports {total:g} requests; waiting for Prometheus")
    expr = f'sum(gpucompute_requests_total{{job="{args.job}"}})'
    seen = None
    while time.monotonic() < deadline:
        data, err = prom_query(args.prometheus, expr)
        if data and data["result"]:
            seen = float(data["result"][0]["value"][1])
            if seen >= total:
                time.sleep(2 * args.scrape_interval)  # fresh samples for rate()
                print(f"wait-scraped: Prometheus has {seen:g} requests")
                return 0
        time.sleep(0.5)
    print(f"wait-scraped: timed out after {args.timeout}s (Prometheus has {seen})")
    return 1


def cmd_live(args):
    r = Results()
    dash = load(args.dashboard)
    for p in all_panels(dash):
        if p.get("type") == "row":
            continue
        gpu = is_gpu_only(p)
        for t in p.get("targets") or []:
            label = f"panel {p.get('title')!r} [{t.get('refId')}]"
            try:
                expr = substitute(t["expr"], args.job, args.rate_interval)
            except KeyError as e:
                r.fail(f"{label}: unknown variable ${e.args[0]}")
                continue
            data, err = prom_query(args.prometheus, expr)
            if err:
                r.fail(f"{label}: query failed: {err}\n     {expr}")
                continue
            n = len(data["result"]) if data["resultType"] in ("vector", "matrix") else 1
            if gpu:
                if n:
                    r.ok(f"{label}: {n} series (GPU-only panel has data)")
                else:
                    r.ok(f"{label}: valid PromQL")
                    print(f"SKIP {label}: GPU-only, no data expected without dcgm-exporter")
                continue
            if n == 0:
                r.fail(f"{label}: empty result\n     {expr}")
                continue
            vals = [v for v in sample_values(data) if not math.isnan(v)]
            if not vals:
                # histogram_quantile / ratios of zero rates: series but no number.
                r.fail(f"{label}: {n} series, all NaN (no observations in the window)\n     {expr}")
                continue
            r.ok(f"{label}: {n} series, max {max(vals):.6g}")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        label = f"variable ${v.get('name')}"
        m = LABEL_VALUES_RE.match(q or "")
        if not r.check(bool(m), f"{label} is label_values(...)", repr(q)):
            continue
        selector = substitute(m.group(1), args.job, args.rate_interval)
        data, err = prom_query(args.prometheus, f"count by ({m.group(2)}) ({selector})")
        if err:
            r.fail(f"{label}: query failed: {err}")
            continue
        vals = sorted(s["metric"].get(m.group(2), "") for s in data["result"])
        r.check(bool(vals) and all(vals), f"{label}: values {vals}", "no values")
    return r.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("static")
    s.add_argument("dashboard")
    w = sub.add_parser("wait-scraped")
    w.add_argument("--metrics-url", required=True)
    w.add_argument("--prometheus", required=True)
    w.add_argument("--job", default="gpucompute")
    w.add_argument("--timeout", type=float, default=60)
    w.add_argument("--scrape-interval", type=float, default=1.0)
    lv = sub.add_parser("live")
    lv.add_argument("dashboard")
    lv.add_argument("--prometheus", required=True)
    lv.add_argument("--job", default="gpucompute")
    lv.add_argument("--rate-interval", default="2m")
    args = ap.parse_args()
    return {"static": cmd_static, "wait-scraped": cmd_wait_scraped, "live": cmd_live}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
