"""Stateless throughput through gpucompute.ReplicatedClient against one target.

    python3 bench/replicas_bench.py --target ipv4:127.0.0.2:50161,127.0.0.3:50161 \
        --workload lombscargle --seconds 10 --processes 8 --threads 4

Client processes (each a ReplicatedClient with its own threads, so that Python's GIL does
not cap the rate) send the same request back to back for --seconds; prints one line:
calls/s, latency p50/p99, errors, and the first result checked against NumPy.
Workloads: "lombscargle" (GPU-bound: 2^14 samples x 2^18 frequencies, float32, 1 MiB
back) and "normalize" (per-call overhead: 256 x 256 float32 inline, 256 KiB back).
"""
from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any, Dict, List, Tuple

import numpy as np

import gpucompute


def _inputs(workload: str) -> Dict[str, Any]:
    rng = np.random.default_rng(0)
    if workload == "lombscargle":
        x = np.sort(rng.uniform(0, 100, 1 << 14)).astype(np.float32)
        y = np.sin(1.7 * x).astype(np.float32)
        return {"x": x, "y": y, "freqs": gpucompute.FrequencyGrid(0.1, 3.0, 1 << 18)}
    return {"a": rng.random((256, 256), dtype=np.float32) + 0.1}


def _call(client: Any, workload: str, inputs: Dict[str, Any]) -> np.ndarray:
    if workload == "lombscargle":
        return np.asarray(client.lombscargle(inputs["x"], inputs["y"], inputs["freqs"]))
    return np.asarray(client.normalize(inputs["a"]))


def _check(workload: str, inputs: Dict[str, Any], out: np.ndarray) -> str:
    if workload == "lombscargle":
        freqs = np.linspace(0.1, 3.0, 1 << 18)
        peak = freqs[int(out.argmax())]
        return f"peak at {peak:.3f} rad/s (want 1.700)"
    a = inputs["a"].astype(np.float64)
    ref = a / a.sum(-1, keepdims=True)
    return f"max rel err {float(np.max(np.abs(out - ref) / ref)):.1e}"


def _worker(args: Tuple[str, str, float, int]) -> Tuple[List[float], int, str]:
    target, workload, seconds, threads = args
    import threading
    inputs = _inputs(workload)
    latencies: List[float] = []
    errors = [0]
    checked = [""]
    lock = threading.Lock()
    with gpucompute.ReplicatedClient(target, timeout=120) as client:
        checked[0] = _check(workload, inputs, _call(client, workload, inputs))  # and warm-up
        deadline = time.monotonic() + seconds

        def loop() -> None:
            mine: List[float] = []
            failed = 0
            while time.monotonic() < deadline:
                start = time.perf_counter()
                try:
                    _call(client, workload, inputs)
                except gpucompute.GpuComputeError:
                    failed += 1
                    continue
                mine.append(time.perf_counter() - start)
            with lock:
                latencies.extend(mine)
                errors[0] += failed

        pool = [threading.Thread(target=loop) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    return latencies, errors[0], checked[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--workload", choices=("lombscargle", "normalize"), default="lombscargle")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--label", default="")
    a = parser.parse_args()
    with multiprocessing.get_context("spawn").Pool(a.processes) as pool:
        results = pool.map(_worker, [(a.target, a.workload, a.seconds, a.threads)] * a.processes)
    latencies = np.array([x for r in results for x in r[0]])
    errors = sum(r[1] for r in results)
    p50, p99 = (np.percentile(latencies, q) * 1e3 for q in (50, 99)) if len(latencies) else (0, 0)
    print(f"{a.label:>10} {a.workload:>12} calls/s {len(latencies) / a.seconds:9.1f}  "
          f"p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  errors {errors}  check: {results[0][2]}",
          flush=True)


if __name__ == "__main__":
    main()
