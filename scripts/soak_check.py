#!/usr/bin/python3
"""Helpers for scripts/soak.sh (standard library only).

Subcommands:
  make-npy OUT --dtype=<f4|f8> --shape=A,B,... --seed=N
      writes an .npy file of uniform random values.
  npy-sum FILE
      prints "DTYPE SHAPE SHA256" of the file's data payload (the bytes after the header).
  sample --pid=P --out=CSV [--interval=S] [--metrics=URL] [--deadline=S]
      appends one CSV row every interval seconds until the process is gone, the deadline
      passes or SIGTERM: time, VmRSS, VmHWM, threads, CPU seconds and (with --metrics)
      stored buffer bytes and completed compute requests from /metrics.
  scrape URL OUT
      saves one /metrics scrape.
  analyze --bench=TXT --rss=CSV --metrics=TXT --bench-start=EPOCH --bench-end=EPOCH ...
      prints the summary and writes one "PASS|FAIL<TAB>name<TAB>detail" line per check to
      --checks (appended).
"""

import argparse
import array
import ast
import hashlib
import os
import random
import re
import signal
import statistics
import sys
import time
import urllib.request

# Bench operation names (client/cli_parse.cc) -> /metrics operation labels (server/metrics.cc).
BENCH_TO_METRIC_OP = {
    "normalize": "normalize",
    "haversine": "haversine_grid",
    "discount": "discount_product",
    "lombscargle": "lombscargle",
}
COMPUTE_OPS = set(BENCH_TO_METRIC_OP.values())


# ----------------------------------------------------------------------------- .npy


def write_npy(path, dtype, shape, seed):
    if dtype not in ("f4", "f8"):
        raise SystemExit(f"make-npy: dtype {dtype!r} is not f4 or f8")
    count = 1
    for extent in shape:
        count *= extent
    rng = random.Random(seed)
    values = array.array("f" if dtype == "f4" else "d", (rng.uniform(-1e3, 1e3) for _ in range(count)))
    if sys.byteorder != "little":
        values.byteswap()
    shape_text = "(" + ", ".join(str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '<%s', 'fortran_order': False, 'shape': %s, }" % (dtype, shape_text)
    # Version 1.0: magic, version, uint16 header length; header padded to 64 bytes with '\n'.
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        values.tofile(f)


def read_npy(path):
    """Returns (descr, shape, payload sha256, payload bytes)."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic[:6] != b"\x93NUMPY":
            raise ValueError(f"{path}: not an .npy file")
        major = magic[6]
        length = int.from_bytes(f.read(2 if major == 1 else 4), "little")
        header = ast.literal_eval(f.read(length).decode("latin1"))
        digest = hashlib.sha256()
        size = 0
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            digest.update(block)
            size += len(block)
    return header["descr"], tuple(header["shape"]), digest.hexdigest(), size


# ----------------------------------------------------------------------------- /metrics

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        samples.append((m.group(1), dict(LABEL_RE.findall(m.group(2) or "")), value))
    return samples


def fetch(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8", "replace")


# ----------------------------------------------------------------------------- sampler


def read_proc(pid):
    """(rss_kib, hwm_kib, threads, cpu_seconds) or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    if "VmRSS" not in fields:  # a zombie
        return None
    after_comm = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(after_comm[11]) + int(after_comm[12])) / ticks  # utime, stime
    return (int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0]),
            int(fields["Threads"]), cpu)


def host_busy_seconds():
    """CPU seconds all cores of the host spent busy (not idle or iowait) since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def sample(args):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    deadline = time.time() + args.deadline
    with open(args.out, "w", buffering=1) as out:
        out.write("epoch_s,rss_kib,hwm_kib,threads,cpu_s,host_busy_s,stored_buffer_bytes,compute_requests\n")
        next_time = time.time()
        while not stop and time.time() < deadline:
            proc = read_proc(args.pid)
            if proc is None:
                break
            stored, completed = "", ""
            if args.metrics:
                try:
                    samples = parse_metrics(fetch(args.metrics, timeout=args.interval))
                    stored = sum(v for n, _, v in samples if n == "gpucompute_stored_buffer_bytes")
                    completed = sum(v for n, l, v in samples
                                    if n == "gpucompute_requests_total" and l.get("operation") in COMPUTE_OPS)
                    stored, completed = f"{stored:.0f}", f"{completed:.0f}"
                except Exception:  # a missed scrape leaves the columns empty
                    pass
            out.write(f"{time.time():.3f},{proc[0]},{proc[1]},{proc[2]},{proc[3]:.2f},{host_busy_seconds():.2f},{stored},{completed}\n")
            next_time += args.interval
            while not stop and time.time() < next_time:
                time.sleep(min(0.2, max(0.0, next_time - time.time())))
    return 0


# ----------------------------------------------------------------------------- bench report

LAT = r"p50 ([\d.]+) ms, p90 ([\d.]+) ms, p99 ([\d.]+) ms, max ([\d.]+) ms"


def parse_bench(text):
    """The numbers of client/bench.cc FormatBenchReport."""
    report = {"ops": {}, "errors": {}, "error_examples": {}}
    in_errors = False
    for line in text.splitlines():
        m = re.match(r"requests\s+(\d+) in ([\d.]+) s \((\d+) ok, (\d+) failed\)", line)
        if m:
            report.update(requests=int(m[1]), elapsed=float(m[2]), ok=int(m[3]), failed=int(m[4]))
            continue
        m = re.match(r"throughput\s+([\d.]+) req/s, (.*) of results", line)
        if m:
            report.update(throughput=float(m[1]), result_rate=m[2])
            continue
        m = re.match(r"latency\s+" + LAT, line)
        if m:
            report["latency"] = tuple(float(x) for x in m.groups())
            continue
        if line.startswith("errors"):
            in_errors = True
            continue
        if in_errors:
            m = re.match(r"\s+([A-Z_]+)\s+(\d+)\s+e\.g\. ?(.*)", line)
            if m:
                report["errors"][m[1]] = int(m[2])
                report["error_examples"][m[1]] = m[3]
            continue
        m = re.match(r"\s+(\w+)\s+(\d+) ok\s+" + LAT, line)
        if m:
            report["ops"][m[1]] = (int(m[2]),) + tuple(float(x) for x in m.groups()[2:])
    return report


# ----------------------------------------------------------------------------- analysis


def read_rss(path):
    rows = []
    with open(path) as f:
        header = f.readline().strip().split(",")
        for line in f:
            parts = line.strip().split(",")
            if len(parts) != len(header):
                continue
            row = dict(zip(header, parts))
            rows.append({k: (float(v) if v != "" else None) for k, v in row.items()})
    return rows


def mib(kib):
    return kib / 1024.0


def analyze(args):
    checks = []

    def check(ok, name, detail):
        checks.append(("PASS" if ok else "FAIL", name, detail))

    expected_codes = {c.strip().upper() for c in args.expected_codes.split(",") if c.strip()}
    out = []
    p = out.append

    # Bench.
    with open(args.bench) as f:
        bench_text = f.read()
    bench = parse_bench(bench_text)
    if "requests" not in bench:
        check(False, "bench report", f"no report in {args.bench}")
        bench.update(requests=0, ok=0, failed=0, elapsed=0.0, throughput=0.0, result_rate="?")
    for line in bench_text.splitlines():
        if line.startswith("bench "):
            p(re.sub(r"^bench\s+", "bench        ", line))
    p(f"requests     {bench['requests']} in {bench['elapsed']:.1f} s ({bench['ok']} ok, {bench['failed']} failed)")
    p(f"throughput   {bench['throughput']:.1f} req/s, {bench['result_rate']} of results")
    if "latency" in bench:
        p("latency      p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms" % bench["latency"])
    for op, (count, p50, p90, p99, mx) in sorted(bench["ops"].items()):
        flag = "" if 1.0 <= p50 <= 50.0 else "   (p50 outside 1-50 ms)"
        p(f"  {op:<12} {count:>8} ok  p50 {p50:.2f} ms, p90 {p90:.2f} ms, p99 {p99:.2f} ms, max {mx:.2f} ms{flag}")
    if bench["errors"]:
        p("errors by code")
        for code, count in sorted(bench["errors"].items()):
            kind = "expected" if code in expected_codes else "UNEXPECTED"
            p(f"  {code:<20} {count:>8}  {kind}, e.g. {bench['error_examples'].get(code, '')}")
    else:
        p("errors by code  none")
    p(f"expected codes {', '.join(sorted(expected_codes)) or '(none)'}")
    unexpected = {c: n for c, n in bench["errors"].items() if c not in expected_codes}
    check(bench["requests"] > 0 and args.bench_rc == 0, "bench ran",
          f"exit {args.bench_rc}, {bench['requests']} requests in {bench['elapsed']:.1f} s")
    check(not unexpected, "zero unexpected errors",
          "none" if not unexpected else ", ".join(f"{c}={n}" for c, n in sorted(unexpected.items())))
    counted = sum(n for n, *_ in bench["ops"].values()) + sum(bench["errors"].values())
    check(counted == bench["requests"] and bench["ok"] + bench["failed"] == bench["requests"],
          "bench report consistent", f"per-op ok + errors = {counted}, requests = {bench['requests']}")

    # RSS.
    rows = [r for r in read_rss(args.rss) if r.get("rss_kib") is not None]
    start, end = args.bench_start, args.bench_end
    during = [r for r in rows if start <= r["epoch_s"] <= end]
    duration = end - start
    warmup, window = args.warmup, args.window
    if duration < warmup + 2 * window:  # short runs: quarter the run for each part
        warmup = window = duration / 4.0
    first = [r["rss_kib"] for r in during if start + warmup <= r["epoch_s"] < start + warmup + window]
    last = [r["rss_kib"] for r in during if end - window <= r["epoch_s"] <= end]
    before = [r["rss_kib"] for r in rows if r["epoch_s"] < start]
    p(f"rss samples  {len(rows)} every {args.interval:g} s ({len(during)} during the bench) in {args.rss}")
    if before:
        p(f"rss idle     {mib(before[-1]):.1f} MiB before the bench (after the uploads)")
    if first and last:
        m_first, m_last = statistics.median(first), statistics.median(last)
        growth = 100.0 * (m_last - m_first) / m_first
        post = [r["rss_kib"] for r in during if r["epoch_s"] >= start + warmup]
        p(f"rss start    {mib(m_first):.1f} MiB (median of {start + warmup - start:.0f}-{warmup + window:.0f} s, {len(first)} samples)")
        p(f"rss end      {mib(m_last):.1f} MiB (median of the last {window:.0f} s, {len(last)} samples)")
        p(f"rss range    {mib(min(post)):.1f}-{mib(max(post)):.1f} MiB after warm-up; peak (VmHWM) "
          f"{mib(max(r['hwm_kib'] for r in rows)):.1f} MiB")
        # Least-squares slope after warm-up, for the record.
        ts = [r["epoch_s"] - start for r in during if r["epoch_s"] >= start + warmup]
        if len(ts) >= 3:
            slope = statistics.linear_regression(ts, post).slope if hasattr(statistics, "linear_regression") else 0
            p(f"rss trend    {slope * 60 / 1024:+.3f} MiB/min after warm-up (least squares)")
        p(f"rss growth   {growth:+.2f} %")
        check(growth < args.max_growth, f"rss growth < {args.max_growth:g}% after warm-up", f"{growth:+.2f} %")
    else:
        check(False, f"rss growth < {args.max_growth:g}% after warm-up", "not enough samples")
    if len(during) >= 2:
        cpu = (during[-1]["cpu_s"] - during[0]["cpu_s"]) / max(1e-9, during[-1]["epoch_s"] - during[0]["epoch_s"])
        host = (during[-1]["host_busy_s"] - during[0]["host_busy_s"]) / max(1e-9, during[-1]["epoch_s"] - during[0]["epoch_s"])
        p(f"cpu          server {cpu:.2f} cores, whole host {host:.2f} of {os.cpu_count()} cores busy on average")
        threads = sorted({int(r["threads"]) for r in during})
        p(f"threads      {threads[0]}-{threads[-1]}")
        # Throughput per window from the /metrics column: steady or degrading?
        done = [(r["epoch_s"], r["compute_requests"]) for r in during if r.get("compute_requests") is not None]
        if len(done) >= 4:
            def rate(points):
                return (points[-1][1] - points[0][1]) / max(1e-9, points[-1][0] - points[0][0])
            head = [d for d in done if start + warmup <= d[0] < start + warmup + window]
            tail = [d for d in done if end - window <= d[0]]
            if len(head) >= 2 and len(tail) >= 2:
                p(f"rate         {rate(head):.1f} req/s after warm-up, {rate(tail):.1f} req/s in the last {window:.0f} s")

    # Checksums.
    ok_sums = 0
    with open(args.sums) as f:
        sums = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for name, want, got in sums:
        ok_sums += want == got
        if want != got:
            p(f"checksum     {name}: uploaded {want}, downloaded {got}")
    p(f"checksums    {ok_sums}/{len(sums)} stored buffers intact (dtype, shape, SHA-256 of the payload)")
    check(len(sums) > 0 and ok_sums == len(sums), "stored buffers intact", f"{ok_sums}/{len(sums)}")

    # /metrics cross-check.
    with open(args.metrics) as f:
        samples = parse_metrics(f.read())
    by_op_code = {}
    for name, labels, value in samples:
        if name == "gpucompute_requests_total":
            key = (labels.get("operation"), labels.get("code"))
            by_op_code[key] = by_op_code.get(key, 0) + value
    metric_compute = sum(v for (op, _), v in by_op_code.items() if op in COMPUTE_OPS)
    metric_ok = sum(v for (op, code), v in by_op_code.items() if op in COMPUTE_OPS and code == "OK")
    p(f"/metrics     {metric_compute:.0f} compute requests ({metric_ok:.0f} OK); bench {bench['requests']} ({bench['ok']} ok)")
    check(metric_compute == bench["requests"] and metric_ok == bench["ok"],
          "/metrics request count = bench count",
          f"{metric_compute:.0f} (ok {metric_ok:.0f}) vs {bench['requests']} (ok {bench['ok']})")
    per_op_bad = []
    for bop, (count, *_) in bench["ops"].items():
        mop = BENCH_TO_METRIC_OP.get(bop, bop)
        if by_op_code.get((mop, "OK"), 0) != count:
            per_op_bad.append(f"{bop}: bench {count}, /metrics {by_op_code.get((mop, 'OK'), 0):.0f}")
    check(not per_op_bad, "/metrics per-operation OK counts = bench", "; ".join(per_op_bad) or "all four match")
    uploads = by_op_code.get(("upload", "OK"), 0)
    downloads = by_op_code.get(("download", "OK"), 0)
    stored = sum(v for n, _, v in samples if n == "gpucompute_stored_buffer_bytes")
    nbuf = sum(v for n, _, v in samples if n == "gpucompute_stored_buffers")
    p(f"/metrics     uploads OK {uploads:.0f}, downloads OK {downloads:.0f}, stored buffers {nbuf:.0f} "
      f"({stored:.0f} bytes; uploaded {args.stored_bytes} bytes)")
    check(nbuf == len(sums) and stored == args.stored_bytes, "/metrics stored buffers = uploaded",
          f"{nbuf:.0f} buffers, {stored:.0f} bytes")
    rejections = {l.get("reason"): v for n, l, v in samples if n == "gpucompute_rejections_total" and v}
    p(f"rejections   {', '.join(f'{k}={v:.0f}' for k, v in sorted(rejections.items())) or 'none'}")

    print("\n".join(out))
    with open(args.checks, "a") as f:
        for status, name, detail in checks:
            f.write(f"{status}\t{name}\t{detail}\n")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("make-npy")
    a.add_argument("out")
    a.add_argument("--dtype", default="f4")
    a.add_argument("--shape", required=True)
    a.add_argument("--seed", type=int, default=1)
    a = sub.add_parser("npy-sum")
    a.add_argument("file")
    a = sub.add_parser("sample")
    a.add_argument("--pid", type=int, required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--interval", type=float, default=2.0)
    a.add_argument("--metrics", default="")
    a.add_argument("--deadline", type=float, default=3600.0)
    a = sub.add_parser("scrape")
    a.add_argument("url")
    a.add_argument("out")
    a = sub.add_parser("analyze")
    a.add_argument("--bench", required=True)
    a.add_argument("--bench-rc", type=int, default=0)
    a.add_argument("--rss", required=True)
    a.add_argument("--metrics", required=True)
    a.add_argument("--sums", required=True)
    a.add_argument("--checks", required=True)
    a.add_argument("--bench-start", type=float, required=True)
    a.add_argument("--bench-end", type=float, required=True)
    a.add_argument("--warmup", type=float, default=60.0)
    a.add_argument("--window", type=float, default=60.0)
    a.add_argument("--interval", type=float, default=2.0)
    a.add_argument("--max-growth", type=float, default=5.0)
    a.add_argument("--expected-codes", default="")
    a.add_argument("--stored-bytes", type=int, default=0)
    args = parser.parse_args()

    if args.command == "make-npy":
        write_npy(args.out, args.dtype, [int(x) for x in args.shape.split(",")], args.seed)
    elif args.command == "npy-sum":
        descr, shape, digest, _ = read_npy(args.file)
        print(f"{descr} {','.join(str(e) for e in shape)} {digest}")
    elif args.command == "sample":
        return sample(args)
    elif args.command == "scrape":
        with open(args.out, "w") as f:
            f.write(fetch(args.url))
    elif args.command == "analyze":
        return analyze(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
