#!/usr/bin/python3
"""A good client next to hostile ones, against the real CPU-backend server.

    soak.py [--build=build] [--duration=180] [--idle=1000] [--stalled=200] ...

1. starts BUILD/server/gpucompute-server --backend=cpu on free 127.0.0.1 ports with a host
   memory budget (--budget, default 4 GiB) and waits for health;
2. uploads a few stored buffers and records the SHA-256 of their bytes;
3. runs the good client (the four-op mix through the project's Python client, small to
   medium sizes, --good-threads calls at once) for --unloaded requests alone: p50/p99;
4. starts the hostile processes (hostile.py, each with its own channels): --idle idle
   streams, --stalled stalled readers of 8 MiB results, 16 KiB metadata at --metadata-rate,
   reset floods at --reset-rate, --meshes unread 2 GiB mesh requests; after --ramp seconds
   runs the good client for --duration seconds next to them, sampling the server's VmRSS;
5. scrapes /metrics, downloads every stored buffer and compares SHA-256, stops the server
   with SIGTERM and prints one table; exits 1 when a goal is missed: the good client saw an
   error, its loaded p99 is over --p99-limit x the unloaded one, the server's peak RSS
   (VmHWM) reached the budget, a buffer changed, the server died or did not exit 0.
Every process it starts is stopped by pid at the end (SIGKILL after a bounded wait).
"""

import argparse
import collections
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import numpy as np  # noqa: E402

import gpucompute  # noqa: E402
from gpucompute._pb import pb  # noqa: E402

GIB = 1 << 30
HOSTILE_KINDS = ("idle", "stalled", "metadata", "resets", "mesh")


# ----------------------------------------------------------------------------- server


class Server:
    """The gpucompute-server child on 127.0.0.1 port 0, its log in OUT/server.log."""

    def __init__(self, binary, flags, out):
        self.log_path = os.path.join(out, "server.log")
        self.log = open(self.log_path, "wb")
        self.args = [binary, "--backend=cpu", "--address=127.0.0.1:0",
                     "--metrics_address=127.0.0.1:0", *flags]
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.port = self.metrics_port = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"serving gRPC on \S+ \(port (\d+)\).*\(port (\d+)\)", self.text())
            if m:
                self.port, self.metrics_port = int(m[1]), int(m[2])
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop(grace=1)
            raise SystemExit(f"soak.py: {' '.join(self.args)} did not start:\n{self.text()}")
        self.target = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def memory_kib(self):
        """(VmRSS, VmHWM) in KiB, or None once the process is gone."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
        except (OSError, KeyError, ValueError):
            return None

    def cpu_seconds(self):
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self, grace):
        """SIGTERM, SIGKILL after grace + 30 s; returns (exit status, seconds)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace + 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode, time.monotonic() - start


class RssSampler(threading.Thread):
    def __init__(self, server, interval):
        super().__init__(daemon=True)
        self.server, self.interval = server, interval
        self.samples = []  # (epoch, rss KiB)
        self.hwm_kib = 0
        self.budget_used_max = 0  # gpucompute_memory_budget_used_bytes{memory="host"}
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            mem = self.server.memory_kib()
            if mem is None:
                return
            self.samples.append((time.time(), mem[0]))
            self.hwm_kib = max(self.hwm_kib, mem[1])
            if len(self.samples) % 4 == 0:  # what the server counts against its budget
                try:
                    used = metric_counts(scrape(self.server.metrics_url, 1),
                                         "gpucompute_memory_budget_used_bytes", "memory")
                    self.budget_used_max = max(self.budget_used_max, used.get("host", 0))
                except OSError:
                    pass
            self.halt.wait(self.interval)


def scrape(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def metric_counts(text, name, label):
    """{label value: count} of a Prometheus counter, summed over the other labels."""
    counts = collections.Counter()
    pattern = re.compile(r"^" + name + r"\{(.*)\}\s+(\S+)")
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[1]))
            counts[labels.get(label, "")] += float(m[2])
    return counts


# ----------------------------------------------------------------------------- good client


class GoodClient:
    """The four-op mix, small to medium sizes; records latency and errors per call."""

    def __init__(self, target):
        self.client = gpucompute.Client(target, timeout=60)
        rng = np.random.default_rng(19)
        self.rows = rng.random((64, 1024), dtype=np.float32)           # 256 KiB
        self.factors = rng.random((64, 256), dtype=np.float32)
        self.values = rng.random((4, 64, 256), dtype=np.float32)       # 256 KiB
        self.x = np.sort(rng.random(2000) * 100.0)
        self.y = np.sin(self.x) + rng.random(2000)
        self.freqs = gpucompute.FrequencyGrid(0.01, 10.0, 1000)
        self.mesh = gpucompute.LatLonMesh(-60, 60, 256, -180, 180, 256)  # 512 KiB result
        self.refs = np.array([[48.85, 2.35], [40.71, -74.0]])

    def call(self, op):
        if op == 0:
            out = self.client.normalize(self.rows, norm="l2")
            return out.shape == self.rows.shape
        if op == 1:
            out = self.client.haversine_grid(self.mesh, self.refs)
            return out.shape == (2, 256, 256)
        if op == 2:
            out = self.client.discount_product(self.factors, self.values)
            return out.shape == self.values.shape
        out = self.client.lombscargle(self.x, self.y, self.freqs)
        return out.shape == (1000,)

    def run(self, threads, *, count=None, until=None):
        """`count` calls, or calls until the monotonic time `until`, from `threads`
        threads; returns ([latency ms of the OK calls], Counter of error codes, examples)."""
        latencies, errors, examples = [], collections.Counter(), {}
        lock = threading.Lock()
        issued = [0]

        def worker(index):
            op = index % 4
            while True:
                with lock:
                    if (count is not None and issued[0] >= count) or \
                            (until is not None and time.monotonic() >= until):
                        return
                    issued[0] += 1
                start = time.perf_counter()
                try:
                    ok = self.call(op)
                    code = None if ok else "WRONG_SHAPE"
                except gpucompute.GpuComputeError as e:
                    ok, code = False, e.code.name
                    examples.setdefault(code, str(e)[:160])
                elapsed = (time.perf_counter() - start) * 1e3
                with lock:
                    if ok:
                        latencies.append(elapsed)
                    else:
                        errors[code] += 1
                op = (op + 1) % 4

        pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return latencies, errors, examples


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


# ----------------------------------------------------------------------------- hostiles


def start_hostiles(args, target, out, duration, hold):
    hold_flag = ["--hold", f"{hold:g}"]
    plan = {
        "idle": ["--count", str(args.idle)],
        "stalled": ["--count", str(args.stalled), *hold_flag],
        "metadata": ["--rate", str(args.metadata_rate)],
        "resets": ["--rate", str(args.reset_rate)],
        "mesh": ["--count", str(args.meshes), "--mesh", args.mesh, *hold_flag],
    }
    procs = {}
    for kind in HOSTILE_KINDS:
        if plan[kind][1] in ("0", "0.0"):
            continue
        result = os.path.join(out, f"hostile-{kind}.json")
        log = open(os.path.join(out, f"hostile-{kind}.log"), "wb")
        procs[kind] = (subprocess.Popen(
            [sys.executable, os.path.join(HERE, "hostile.py"), kind, "--target", target,
             "--duration", f"{duration:.1f}", "--out", result, *plan[kind]],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), result, log)
    return procs


def collect_hostiles(procs, deadline):
    """Waits for each hostile process until `deadline` (monotonic), kills the late ones;
    returns {kind: report}."""
    reports = {}
    for kind, (proc, result, log) in procs.items():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        try:
            with open(result) as f:
                reports[kind] = json.load(f)
        except (OSError, ValueError):
            reports[kind] = {"attempted": 0, "codes": {}, "open_at_end": {},
                             "note": f"no report (exit status {proc.returncode})"}
    return reports


# ----------------------------------------------------------------------------- buffers

STORED = [("soak-tiny", np.float32, (3,)), ("soak-row", np.float64, (1000,)),
          ("soak-matrix", np.float32, (512, 1024)), ("soak-cube", np.float64, (4, 500, 512))]


def sha256(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def upload_buffers(client):
    rng = np.random.default_rng(1919)
    stored = []
    for name, dtype, shape in STORED:
        array = (rng.random(shape) * 2e3 - 1e3).astype(dtype)
        handle = client.upload(array, name)
        stored.append((name, handle.id, array.dtype, shape, sha256(array)))
    return stored


def check_buffers(client, stored):
    intact, notes = 0, []
    for name, buffer_id, dtype, shape, want in stored:
        try:
            got = client.download(buffer_id)
            if got.dtype == dtype and tuple(got.shape) == shape and sha256(got) == want:
                intact += 1
            else:
                notes.append(f"{name}: {got.dtype} {got.shape} sha256 {sha256(got)[:16]} "
                             f"!= {want[:16]}")
        except gpucompute.GpuComputeError as e:
            notes.append(f"{name}: {e}")
    return intact, notes


# ----------------------------------------------------------------------------- main


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build directory (default: build)")
    p.add_argument("--server", default="",
                   help="server binary (default: BUILD/server/gpucompute-server)")
    p.add_argument("--duration", type=float, default=180, help="loaded seconds (180)")
    p.add_argument("--ramp", type=float, default=5,
                   help="seconds the hostiles run before the good client's loaded phase (5)")
    p.add_argument("--unloaded", type=int, default=400, help="unloaded good requests (400)")
    p.add_argument("--good-threads", type=int, default=2, help="good calls at once (2)")
    p.add_argument("--idle", type=int, default=1000, help="idle streams held open (1000)")
    p.add_argument("--stalled", type=int, default=200, help="stalled 8 MiB readers (200)")
    p.add_argument("--metadata-rate", type=float, default=50,
                   help="16 KiB-metadata calls per second (50)")
    p.add_argument("--reset-rate", type=float, default=200,
                   help="calls started and reset per second (200)")
    p.add_argument("--meshes", type=int, default=2, help="unread mesh requests held (2)")
    p.add_argument("--mesh", default="16384,16384",
                   help="n_lat,n_lon of the hostile float64 mesh (16384,16384: 2 GiB)")
    p.add_argument("--budget", type=int, default=4 * GIB,
                   help="--host_memory_budget_bytes of the server, and the RSS goal (4 GiB)")
    p.add_argument("--p99-limit", type=float, default=2.0,
                   help="goal: loaded p99 <= this x unloaded p99 (2.0)")
    p.add_argument("--grace", type=int, default=10, help="server --grace_period seconds (10)")
    p.add_argument("--server-flag", action="append", default=[],
                   help="extra server flag, e.g. --server-flag=--stream_idle_timeout=5s")
    p.add_argument("--out", default="", help="artifact directory (default: a new /tmp dir)")
    return p.parse_args()


def main():
    args = parse_args()
    build = args.build if os.path.isabs(args.build) else os.path.join(REPO, args.build)
    binary = args.server or os.path.join(build, "server", "gpucompute-server")
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"soak.py: {binary} not found; build gpucompute-server first")
    out = args.out or tempfile.mkdtemp(prefix="gpucompute-hostile-soak.")
    os.makedirs(out, exist_ok=True)
    flags = [f"--host_memory_budget_bytes={args.budget}", f"--grace_period={args.grace}s",
             *args.server_flag]
    print(f"hostile_soak: server {binary} {' '.join(flags)}; artifacts in {out}", flush=True)
    with open(os.path.join(out, "load.txt"), "w") as f:
        f.write(f"loadavg at start: {open('/proc/loadavg').read()}")

    server = Server(binary, flags, out)
    procs = {}
    try:
        return soak(args, server, out, procs)
    finally:
        for proc, _, log in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        if server.alive():
            server.stop(args.grace)


def soak(args, server, out, procs):
    sampler = RssSampler(server, 0.25)
    sampler.start()
    admin = gpucompute.Client(server.target, timeout=60)
    deadline = time.monotonic() + 30
    while True:
        try:
            if admin.health(timeout=2) == "SERVING":
                break
        except gpucompute.GpuComputeError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("hostile_soak: the server never answered SERVING")
        time.sleep(0.2)
    # The raw GetInfo reply: the host memory budget the server took (not in the client's
    # Limits type).
    limits = admin._stubs["Server.GetInfo"](pb.GetInfoRequest(), timeout=10).limits
    stored = upload_buffers(admin)
    print(f"hostile_soak: server pid {server.proc.pid} on {server.target}; "
          f"{len(stored)} buffers stored", flush=True)

    good = GoodClient(server.target)
    good.run(args.good_threads, count=20)  # warm-up: connection, first allocations
    idle_lat, idle_err, _ = good.run(args.good_threads, count=args.unloaded)
    print(f"hostile_soak: unloaded p50 {percentile(idle_lat, 50):.2f} ms, "
          f"p99 {percentile(idle_lat, 99):.2f} ms over {len(idle_lat)} calls", flush=True)

    hostile_seconds = args.ramp + args.duration + 1
    # Unread calls stay unread past the server's stream_idle_timeout, then learn its answer.
    hold = limits.stream_idle_timeout_ms / 1e3 + 5
    procs.update(start_hostiles(args, server.target, out, hostile_seconds, hold))
    time.sleep(args.ramp)
    load_start = time.time()
    lat, err, examples = good.run(args.good_threads,
                                  until=time.monotonic() + args.duration)
    load_end = time.time()
    print(f"hostile_soak: loaded phase done ({len(lat)} ok, {sum(err.values())} errors); "
          f"waiting for the hostiles", flush=True)
    reports = collect_hostiles(procs, time.monotonic() + 60)
    procs.clear()
    # The server is not reaped yet: the children's CPU time is the hostiles' alone.
    hostile_cpu = sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])
    server_cpu = server.cpu_seconds()
    server_alive = server.alive()

    metrics = ""
    try:
        metrics = scrape(server.metrics_url)
        with open(os.path.join(out, "metrics.txt"), "w") as f:
            f.write(metrics)
    except OSError as e:
        print(f"hostile_soak: /metrics scrape failed: {e}")
    intact, buffer_notes = check_buffers(admin, stored) if server_alive else (0, ["server gone"])
    sampler.halt.set()
    sampler.join()
    with open(os.path.join(out, "rss.csv"), "w") as f:
        f.write("epoch_s,rss_kib\n")
        f.writelines(f"{t:.3f},{k}\n" for t, k in sampler.samples)
    admin.close()
    good.client.close()
    rc, stop_s = server.stop(args.grace)

    loaded_rss = [k for t, k in sampler.samples if load_start <= t <= load_end]
    table = Table()
    good_total = len(lat) + sum(err.values())
    p99_idle, p99_load = percentile(idle_lat, 99), percentile(lat, 99)
    ratio = p99_load / p99_idle if p99_idle > 0 else float("inf")
    table.row("good client", f"{good_total} requests in {args.duration:.0f} s next to the "
              f"hostiles ({args.good_threads} at once; {len(idle_lat)} unloaded)")
    table.goal("good-client errors", not err and not idle_err,
               ", ".join(f"{c}={n}" for c, n in sorted((err + idle_err).items())) or "0")
    for code, text in sorted(examples.items()):
        table.row(f"  e.g. {code}", text)
    table.row("latency p50", f"{percentile(idle_lat, 50):.2f} ms unloaded, "
              f"{percentile(lat, 50):.2f} ms loaded")
    table.goal(f"latency p99 (<= {args.p99_limit:g}x)", ratio <= args.p99_limit,
               f"{p99_idle:.2f} ms unloaded, {p99_load:.2f} ms loaded: {ratio:.2f}x")
    peak_kib = sampler.hwm_kib
    table.goal("server RSS < budget", 0 < peak_kib * 1024 < args.budget,
               f"peak (VmHWM) {peak_kib / 1024:.0f} MiB, max sampled while loaded "
               f"{max(loaded_rss, default=0) / 1024:.0f} MiB; budget "
               f"{args.budget / 2**20:.0f} MiB, of which the server counted at most "
               f"{sampler.budget_used_max / 2**20:.0f} MiB used (limits: host budget "
               f"{limits.host_memory_budget_bytes / 2**20:.0f} MiB)")
    for kind in HOSTILE_KINDS:
        if kind in reports:
            r = reports[kind]
            codes = ", ".join(f"{c}={n}" for c, n in sorted(r["codes"].items())) or "none"
            still = ", ".join(f"{n} {c}" for c, n in sorted(r["open_at_end"].items())) or "0"
            table.row(f"hostile {kind}", f"{r['attempted']} attempted; answers: {codes}; "
                      f"still open at the end: {still}{'; ' + r['note'] if 'note' in r else ''}")
    rejections = metric_counts(metrics, "gpucompute_rejections_total", "reason")
    table.row("/metrics rejections", ", ".join(
        f"{k}={v:.0f}" for k, v in sorted(rejections.items()) if v) or "none")
    codes = metric_counts(metrics, "gpucompute_requests_total", "code")
    table.row("/metrics requests", ", ".join(
        f"{k}={v:.0f}" for k, v in sorted(codes.items()) if v) or "none")
    table.goal("server alive throughout", server_alive, f"pid {server.proc.pid}")
    table.goal("stored buffers intact", intact == len(stored),
               f"{intact}/{len(stored)} (dtype, shape, SHA-256)"
               + ("; " + "; ".join(buffer_notes) if buffer_notes else ""))
    table.goal("SIGTERM exit 0", rc == 0, f"exit status {rc} {stop_s:.1f} s after SIGTERM")
    with open("/proc/loadavg") as f:
        table.row("host load", f"{f.read().split()[0]} (1-min loadavg at the end, "
                  f"{os.cpu_count()} cores); CPU seconds: server {server_cpu:.0f}, hostile "
                  f"processes {hostile_cpu:.0f}")
    print(table.render())
    print(f"artifacts in {out}")
    return 0 if table.all_met() else 1


class Table:
    def __init__(self):
        self.rows = []
        self.missed = []

    def row(self, name, value, mark=""):
        self.rows.append((mark, name, value))

    def goal(self, name, met, value):
        self.row(name, value, "PASS" if met else "FAIL")
        if not met:
            self.missed.append(name)

    def all_met(self):
        return not self.missed

    def render(self):
        width = max(len(name) for _, name, _ in self.rows)
        lines = ["", "== hostile soak"]
        lines += [f"{mark:<4}  {name:<{width}}  {value}" for mark, name, value in self.rows]
        lines.append(f"goals missed: {', '.join(self.missed)}" if self.missed
                     else "all goals met")
        return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
