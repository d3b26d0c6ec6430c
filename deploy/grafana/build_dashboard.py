#!/usr/bin/env python3
"""Writes deploy/grafana/dashboards/gpucompute.json (the "gpucompute overview"
dashboard). Edit the panels here, then run:

    python3 deploy/grafana/build_dashboard.py          # rewrite the JSON
    python3 deploy/grafana/build_dashboard.py --check  # exit 1 if it is stale

Standard library only. Every PromQL expression below is evaluated against a
live CPU server by tests/deploy/dashboard_test.sh; the panels that can only
show data on a GPU host carry GPU_ONLY_MARK at the start of their description
and are listed in GPU_ONLY_PANELS (the test checks both agree).
"""
import json
import pathlib
import sys

UID = "gpucompute-overview"
OUT = pathlib.Path(__file__).resolve().parent / "dashboards" / "gpucompute.json"
GPU_ONLY_MARK = "GPU-only:"
# Panels fed by the NVIDIA DCGM exporter: no data where the service runs on its
# CPU backend (or where no dcgm-exporter is scraped).
GPU_ONLY_PANELS = ["GPU utilisation", "GPU framebuffer memory", "GPU power"]

DS = {"type": "prometheus", "uid": "${datasource}"}
# Selectors shared by the service's panels.
S = 'job=~"$job", instance=~"$instance"'
SO = S + ', operation=~"$operation"'
RI = "$__rate_interval"


def rate(metric, sel, by=None, fn="rate"):
    inner = f"{fn}({metric}{{{sel}}}[{RI}])"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def quantile(q, metric, sel, by):
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate({metric}_bucket{{{sel}}}[{RI}])))")


def mean(metric, sel, by):
    return (f"sum by ({by}) (rate({metric}_sum{{{sel}}}[{RI}])) / "
            f"sum by ({by}) (rate({metric}_count{{{sel}}}[{RI}]))")


class Builder:
    def __init__(self):
        self.panels = []
        self.next_id = 1
        self.y = 0
        self.x = 0
        self.row_h = 0

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def row(self, title):
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0
        self.panels.append({
            "type": "row", "id": self._id(), "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": [],
        })
        self.y += 1

    def panel(self, title, targets, unit="short", description="", kind="timeseries",
              w=8, h=8, stack=False, min0=True):
        if self.x + w > 24:
            self.y += self.row_h
            self.x, self.row_h = 0, 0
        refs = "ABCDEFGH"
        tgts = []
        for i, (expr, legend) in enumerate(targets):
            t = {"datasource": DS, "refId": refs[i], "expr": expr,
                 "legendFormat": legend, "range": True,
                 "instant": kind in ("stat", "table")}
            if kind in ("stat", "table"):
                t["range"] = False
            tgts.append(t)
        defaults = {"unit": unit}
        if min0 and kind == "timeseries":
            defaults["min"] = 0
        if kind == "timeseries":
            defaults["custom"] = {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if not stack else 40,
                "showPoints": "never", "spanNulls": False,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            }
        p = {
            "type": kind, "id": self._id(), "title": title, "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "targets": tgts,
        }
        if kind == "timeseries":
            p["options"] = {
                "legend": {"displayMode": "table", "placement": "bottom",
                           "calcs": ["lastNotNull", "max"], "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            }
        elif kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                              "values": False},
                            "colorMode": "value", "graphMode": "none",
                            "textMode": "value_and_name", "justifyMode": "auto"}
        elif kind == "table":
            p["options"] = {"showHeader": True}
            p["transformations"] = [
                {"id": "labelsToFields", "options": {"mode": "columns"}},
                {"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True}}},
            ]
        self.panels.append(p)
        self.x += w
        self.row_h = max(self.row_h, h)
        return p


def build():
    b = Builder()

    # ------------------------------------------------------------------ Overview
    b.row("Overview")
    b.panel("Build", [(f"gpucompute_build_info{{{S}}}", "{{instance}}")], kind="table",
            w=8, h=5, description="gpucompute_build_info: version, git commit, CUDA "
            "version and backend of each instance.")
    b.panel("Targets up", [(f'up{{{S}}}', "{{instance}}")], kind="stat", w=4, h=5,
            description="1 when Prometheus scraped the instance's /metrics.")
    b.panel("Device healthy", [(f"gpucompute_device_healthy{{{S}}}", "{{instance}} {{device}}")],
            kind="stat", w=4, h=5, description="gpucompute_device_healthy: 1 healthy, 0 not.")
    b.panel("Warm-up", [(f"gpucompute_warmup_duration_seconds{{{S}}}", "{{instance}}"),
                        (f"gpucompute_kernels_loaded{{{S}}}", "kernels {{instance}}")],
            kind="stat", w=4, h=5, unit="none",
            description="Start-up warm-up duration (s) and number of kernels loaded.")
    b.panel("Devices", [(f"gpucompute_device_info{{{S}}}", "{{instance}}")], kind="table",
            w=4, h=5, description="gpucompute_device_info: the devices each instance uses.")
    b.panel("First request duration", [
        (f'gpucompute_first_request_duration_seconds{{{SO}}}', "{{instance}} {{operation}}")],
        kind="stat", unit="s", w=24, h=4,
        description="Latency of the first request of each operation after start "
                    "(a cold-start / JIT indicator).")

    # ------------------------------------------------------------------ RED
    b.row("Requests (rate, errors, duration)")
    b.panel("Request rate by operation",
            [(rate("gpucompute_requests_total", SO, "operation"), "{{operation}}")],
            unit="reqps", description="Completed requests per second, every result code.")
    b.panel("Errors by code",
            [(rate("gpucompute_requests_total", SO + ', grpc_code!="OK"', "operation, grpc_code") + " > 0",
              "{{operation}} {{grpc_code}}")],
            unit="reqps", description="Requests per second that ended with a gRPC status "
            "other than OK, by operation and code (codes with no errors in the window are "
            "hidden: no data means no errors).")
    b.panel("Error ratio by operation",
            [(rate("gpucompute_requests_total", SO + ', grpc_code!="OK"', "operation") + " / "
              + rate("gpucompute_requests_total", SO, "operation"), "{{operation}}")],
            unit="percentunit", description="Share of requests that did not end OK "
            "(only operations with errors have a series).")
    for q, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        b.panel(f"Request duration {name} by operation",
                [(quantile(q, "gpucompute_request_duration_seconds", SO, "operation"),
                  "{{operation}}")],
                unit="s", description=f"{name} of accepted -> trailer sent, from the "
                "gpucompute_request_duration_seconds histogram.")
    b.panel("gRPC calls by method and code",
            [(rate("grpc_server_handled_total", S, "grpc_method, grpc_code") + " > 0",
              "{{grpc_method}} {{grpc_code}}"),
             (rate("grpc_server_started_total", S), "started (all methods)")],
            unit="reqps", w=12,
            description="Every RPC the server implements (compute, buffers, info) by "
            "method and status code, from the grpc_server_* metrics; pairs with no calls in "
            "the window are hidden.")
    b.panel("gRPC handling p99 by method",
            [(quantile(0.99, "grpc_server_handling_seconds", S, "grpc_method"),
              "{{grpc_method}}")],
            unit="s", w=12, description="p99 of grpc_server_handling_seconds per method.")

    # ------------------------------------------------------------------ Stages
    b.row("Stage breakdown")
    b.panel("Stage duration p95",
            [(quantile(0.95, "gpucompute_stage_duration_seconds", SO, "stage"), "{{stage}}")],
            unit="s", description="p95 of each stage (queue, transfer_in, compute, "
            "transfer_out, stream_write, prepare) over the selected operations.")
    b.panel("Stage duration mean",
            [(mean("gpucompute_stage_duration_seconds", SO, "stage"), "{{stage}}")],
            unit="s", description="Mean time per request spent in each stage.")
    b.panel("Time spent per stage",
            [(rate("gpucompute_stage_duration_seconds_sum", SO, "stage"), "{{stage}}")],
            unit="s", stack=True, description="Seconds spent in each stage per second of "
            "wall time (stacked): where the server's time goes.")
    b.panel("Stage p95 by operation",
            [(quantile(0.95, "gpucompute_stage_duration_seconds", SO, "operation, stage"),
              "{{operation}} {{stage}}")],
            unit="s", w=24, description="p95 of each (operation, stage) pair.")

    # ------------------------------------------------------------------ Transfers
    b.row("Transfers")
    b.panel("Host <-> device throughput",
            [(rate("gpucompute_transfer_bytes_total", S, "direction"), "{{direction}}")],
            unit="Bps", description="Bytes per second copied between host and device, "
            "each direction.")
    b.panel("Transfer bandwidth",
            [(f"{rate('gpucompute_transfer_bytes_total', S, 'direction')} / "
              f"{rate('gpucompute_transfer_duration_seconds_sum', S, 'direction')}",
              "{{direction}}")],
            unit="Bps", description="Bandwidth while copying: bytes over the seconds spent "
            "copying (both counters), each direction.")
    b.panel("Transfer duration p95",
            [(quantile(0.95, "gpucompute_transfer_duration_seconds", S, "direction"),
              "{{direction}}")],
            unit="s", description="p95 duration of one host <-> device copy.")
    b.panel("Network throughput (clients)",
            [(rate("gpucompute_network_received_bytes_total", S), "received"),
             (rate("gpucompute_network_sent_bytes_total", S), "sent")],
            unit="Bps", w=24, h=6, description="Payload bytes per second from and to "
            "clients.")

    # ------------------------------------------------------------------ Saturation
    b.row("Saturation")
    b.panel("Requests in flight",
            [(f"sum by (operation) (gpucompute_requests_in_flight{{{SO}}})", "{{operation}}")],
            stack=True, description="Requests accepted and not yet finished (the HPA "
            "scales on the per-pod sum).")
    b.panel("Queue depth",
            [(f"sum by (instance, device) (gpucompute_queue_depth{{{S}}})",
              "{{instance}} {{device}}")],
            description="Work items waiting for each device's executor.")
    b.panel("Rejections by reason",
            [(rate("gpucompute_rejections_total", S, "reason"), "{{reason}}")],
            unit="reqps", description="Requests refused before running: queue_full, "
            "device_queue_full, in_flight_limit, deadline_exceeded, quota, unavailable.")
    b.panel("Device pool memory",
            [(f"sum by (instance, device) (gpucompute_device_pool_reserved_bytes{{{S}}})",
              "reserved {{instance}} {{device}}"),
             (f"sum by (instance, device) (gpucompute_device_pool_used_bytes{{{S}}})",
              "used {{instance}} {{device}}")],
            unit="bytes", description="Memory the device pool holds (reserved) and hands "
            "out (used), per device.")
    b.panel("Stored buffers",
            [(f"sum by (instance) (gpucompute_stored_buffers{{{S}}})", "{{instance}}")],
            description="Buffers kept on the server (Buffers.Upload, keep_on_device).")
    b.panel("Stored and pinned bytes",
            [(f"sum by (instance) (gpucompute_stored_buffer_bytes{{{S}}})",
              "stored {{instance}}"),
             (f"sum by (instance) (gpucompute_pinned_pool_bytes{{{S}}})",
              "pinned host pool {{instance}}")],
            unit="bytes", description="Bytes held by stored buffers, and the pinned host "
            "staging pool.")

    # ------------------------------------------------------------------ GPU
    b.row("GPU (DCGM exporter)")
    b.panel("GPU utilisation",
            [("avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}} gpu {{gpu}}")],
            unit="percent", description=GPU_ONLY_MARK + " DCGM_FI_DEV_GPU_UTIL from the "
            "dcgm-exporter job; empty on CPU-only hosts.")
    b.panel("GPU framebuffer memory",
            [("avg by (Hostname, gpu) (DCGM_FI_DEV_FB_USED)", "used {{Hostname}} gpu {{gpu}}"),
             ("avg by (Hostname, gpu) (DCGM_FI_DEV_FB_FREE)", "free {{Hostname}} gpu {{gpu}}")],
            unit="decmbytes", stack=True, description=GPU_ONLY_MARK + " DCGM_FI_DEV_FB_USED "
            "and DCGM_FI_DEV_FB_FREE (MiB); empty on CPU-only hosts.")
    b.panel("GPU power",
            [("avg by (Hostname, gpu) (DCGM_FI_DEV_POWER_USAGE)", "{{Hostname}} gpu {{gpu}}")],
            unit="watt", description=GPU_ONLY_MARK + " DCGM_FI_DEV_POWER_USAGE; empty on "
            "CPU-only hosts.")

    def var(name, label, query, multi, include_all, all_value=None):
        v = {
            "type": "query", "name": name, "label": label, "datasource": DS,
            "definition": query, "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2, "sort": 1, "multi": multi, "includeAll": include_all,
            "current": {}, "options": [], "hide": 0, "regex": "",
        }
        if all_value is not None:
            v["allValue"] = all_value
        return v

    templating = [
        {"type": "datasource", "name": "datasource", "label": "Data source",
         "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
         "options": []},
        var("job", "Job", "label_values(gpucompute_build_info, job)", False, True, ".+"),
        var("instance", "Instance", 'label_values(gpucompute_build_info{job=~"$job"}, instance)',
            True, True, ".+"),
        var("operation", "Operation",
            'label_values(gpucompute_requests_total{job=~"$job"}, operation)', True, True, ".+"),
    ]

    return {
        "uid": UID,
        "title": "gpucompute overview",
        "description": "RED, stage breakdown, transfers, saturation and GPU metrics of "
                       "the gpucompute service. GPU-only panels: " + ", ".join(GPU_ONLY_PANELS),
        "tags": ["gpucompute", "grpc", "gpu"],
        "timezone": "",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": templating},
        "panels": b.panels,
    }


def render():
    return json.dumps(build(), indent=2) + "\n"


def main(argv):
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python3 {pathlib.Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"{OUT.name} is up to date")
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
