#!/usr/bin/env python3
"""Small requests, measured from Python: the client's round trip and
where a request spends its time on the server.

  python-latency  1 in flight normalize of ROWSx256 float32 through gpucompute.Client:
                  p50/p99 of the call (on its Compute.Session, and as unary calls),
                  next to a bare gRPC health check (the floor of any call) and the
                  client's own per-call work (request building and result assembly,
                  no RPC).
  python-floor    why the Python client's floor differs from the C++ one: a bare
                  gRPC health check (no gpucompute code) in fresh processes under
                  variants of gRPC's environment and channel options, with the
                  grpcio and Python versions.
  stages          the server's per-stage means (gpucompute_stage_duration_seconds)
                  between two scrapes of /metrics, for each operation seen: where a
                  request's server time goes (prepare, queue = the executor hop,
                  transfer_in, compute, transfer_out, stream_write).
  batches         the dynamic batcher's batch sizes from /metrics.

  python3 bench/small_requests.py python-latency --target 127.0.0.1:50051 --seconds 4
  python3 bench/small_requests.py stages --metrics http://127.0.0.1:9464/metrics -- CMD...
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from typing import Dict, List, Tuple

import numpy as np


def percentile(sorted_values: List[float], p: float) -> float:
    rank = max(1, int(np.ceil(p * len(sorted_values))))
    return sorted_values[rank - 1]


def time_calls(call, seconds: float) -> List[float]:
    for _ in range(200):  # warm the channel, the server and the caches
        call()
    out: List[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    out.sort()
    return out


def python_latency(args: argparse.Namespace) -> int:
    import gpucompute
    from gpucompute._pb import pb

    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.5, size=(args.rows, 256)).astype(np.float32)
    expected = a / np.linalg.norm(a.astype(np.float64), axis=1, keepdims=True)
    with gpucompute.Client(args.target, timeout=30) as client:
        got = client.normalize(a, norm="l2")
        np.testing.assert_allclose(got, expected, rtol=1e-5)
        health = time_calls(lambda: client.health(), args.seconds / 2)
        calls = time_calls(lambda: client.normalize(a, norm="l2"), args.seconds)

        # The client's own work per call: the whole call with the RPC answered
        # from memory (a client that predates one-message results: none).
        if "complete" not in pb.ResultChunk.DESCRIPTOR.fields_by_name:
            own = []
        else:
            own = client_work(client, a, args.seconds / 4)
        around = time_around_rpc(client, a, args.seconds / 4)
    with gpucompute.Client(args.target, timeout=30, session=False) as client:
        client.normalize(a, norm="l2")
        unary = time_calls(lambda: client.normalize(a, norm="l2"), args.seconds / 2)
    report(args, calls, health, own, around, unary)
    return 0


def _session_of(client):
    """The client's Compute.Session, through which its small calls go (normalize has
    run once, so it is open)."""
    session = client._session
    assert session is not None, "small calls no longer go through Compute.Session"
    return session


def time_around_rpc(client, a: np.ndarray, seconds: float) -> List[float]:
    """Real calls of client.normalize, each less the time inside its session's run
    (sending the request, the round trip, receiving the answer): the client's own work
    as it runs between RPCs (caches and clocks as they are then, which the recorded
    reply of client_work does not see)."""
    session = _session_of(client)
    real = session.run
    inside: List[float] = []

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - t0)

    session.run = timed
    try:
        outside: List[float] = []
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            client.normalize(a, norm="l2")
            outside.append(time.perf_counter() - t0 - inside[-1])
        assert len(inside) == len(outside), "a call went around the session"
        return sorted(outside)
    finally:
        del session.run


def client_work(client, a: np.ndarray, seconds: float) -> List[float]:
    """Times client.normalize with its session answering a recorded result: everything
    the client does per call but the RPC (the request still serialized)."""
    session = _session_of(client)
    recorded = session.run("Compute.Normalize", _normalize_request(a), 30)

    def answered(rpc, request, timeout):
        request.SerializeToString()
        return recorded

    session.run = answered
    try:
        return time_calls(lambda: client.normalize(a, norm="l2"), seconds)
    finally:
        del session.run


def _normalize_request(a: np.ndarray):
    from gpucompute._pb import pb
    request = pb.NormalizeRequest(norm=pb.NORM_L2)
    request.input.tensor.dtype = pb.FLOAT32
    request.input.tensor.shape.extend(a.shape)
    request.input.tensor.data = a.tobytes()
    request.output.accept_complete_result = True
    return request


def report(args: argparse.Namespace, calls: List[float], health: List[float],
           own: List[float], around: List[float], unary: List[float]) -> None:
    us = 1e6
    print(f"python client, {args.rows}x256 float32 normalize, 1 in flight, {len(calls)} calls")
    print(f"  normalize      p50 {percentile(calls, .5) * us:7.0f} us  p99 {percentile(calls, .99) * us:7.0f} us")
    print(f"  as unary calls p50 {percentile(unary, .5) * us:7.0f} us  p99 {percentile(unary, .99) * us:7.0f} us"
          "  (Client(session=False))")
    print(f"  health check   p50 {percentile(health, .5) * us:7.0f} us  p99 {percentile(health, .99) * us:7.0f} us")
    if own:
        print(f"  client's work  p50 {percentile(own, .5) * us:7.0f} us  "
              "(the whole call but the RPC)")
    if around:
        print(f"  around the RPC p50 {percentile(around, .5) * us:7.0f} us  "
              "(real calls less the time in the session)")


# name, environment, channel options: what a bare health check may pay for.
FLOOR_VARIANTS = [
    ("default", {}, []),
    ("client options", {}, [("grpc.max_receive_message_length", -1),
                            ("grpc.max_send_message_length", -1),
                            ("grpc.experimental.single_threaded_unary_stream", 1)]),
    ("no retries", {}, [("grpc.enable_retries", 0)]),
    ("poll strategy poll", {"GRPC_POLL_STRATEGY": "poll"}, []),
    ("fork support off", {"GRPC_ENABLE_FORK_SUPPORT": "0"}, []),
    # Recent grpcio polls through EventEngine's threads, a thread hop per completion
    # (grpc/grpc#42828); where these are still experiments this turns them off.
    ("no event engine", {"GRPC_EXPERIMENTS": "-event_engine_client,-event_engine_listener,"
                                             "-event_engine_dns,-event_engine_poller_for_python,"
                                             "-event_engine_callback_cq,"
                                             "-event_engine_for_all_other_endpoints"}, []),
]


def python_floor(args: argparse.Namespace) -> int:
    import os
    import grpc
    print(f"python floor: grpcio {grpc.__version__}, Python {sys.version.split()[0]}, "
          f"GRPC_* set: {sorted(k for k in os.environ if k.startswith('GRPC_')) or 'none'}")
    for name, env, _ in FLOOR_VARIANTS:
        out = subprocess.run([sys.executable, __file__, "python-floor-one", "--target", args.target,
                              "--seconds", str(args.seconds / len(FLOOR_VARIANTS)),
                              "--variant", name],
                             env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
        line = out.stdout.strip().splitlines()[-1:] or [f"failed: {out.stderr.strip()[-200:]}"]
        print(f"  {name:<20} {line[0]}")
    return 0


def python_floor_one(args: argparse.Namespace) -> int:
    import grpc
    options = dict((name, opts) for name, _, opts in FLOOR_VARIANTS)[args.variant]
    channel = grpc.insecure_channel(args.target, options=options)
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda _: b"", response_deserializer=bytes)
    blocking = time_calls(lambda: check(None, timeout=30), args.seconds / 3)
    future = time_calls(lambda: check.future(None, timeout=30).result(), args.seconds / 3)
    channel.close()
    us = 1e6
    print(f"health check p50 {percentile(blocking, .5) * us:5.0f} us  p99 "
          f"{percentile(blocking, .99) * us:6.0f} us;  as a future p50 "
          f"{percentile(future, .5) * us:5.0f} us;  grpc.aio p50 "
          f"{percentile(aio_calls(args.target, options, args.seconds / 3), .5) * us:5.0f} us")
    return 0


def aio_calls(target: str, options, seconds: float) -> List[float]:
    """time_calls of a bare health check through grpc.aio, awaited one at a time."""
    import asyncio
    from grpc import aio

    async def run() -> List[float]:
        async with aio.insecure_channel(target, options=options) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda _: b"",
                                        response_deserializer=bytes)
            for _ in range(200):
                await check(None, timeout=30)
            out: List[float] = []
            stop = time.perf_counter() + seconds
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                await check(None, timeout=30)
                out.append(time.perf_counter() - t0)
            return sorted(out)

    return asyncio.run(run())


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} ([0-9.eE+-]+)$')


def families(text: str, name: str) -> Dict[Tuple[str, ...], float]:
    out: Dict[Tuple[str, ...], float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            labels = tuple(sorted(kv for kv in m.group(2).split(",") if not kv.startswith("le=")))
            out[labels] = float(m.group(3))
    return out


def stages(args: argparse.Namespace) -> int:
    before = scrape(args.metrics)
    rc = subprocess.call(args.command) if args.command else 0
    after = scrape(args.metrics)
    name = "gpucompute_stage_duration_seconds"
    sums = {k: v - families(before, name + "_sum").get(k, 0)
            for k, v in families(after, name + "_sum").items()}
    counts = {k: v - families(before, name + "_count").get(k, 0)
              for k, v in families(after, name + "_count").items()}
    table: Dict[str, Dict[str, float]] = defaultdict(dict)
    for k, n in counts.items():
        if n <= 0:
            continue
        labels = dict(kv.split("=", 1) for kv in k)
        table[labels["operation"].strip('"')][labels["stage"].strip('"')] = sums[k] / n * 1e6
    order = ["prepare", "queue", "transfer_in", "compute", "transfer_out", "stream_write"]
    print("server stage means, us per request  " + " ".join(f"{s:>12}" for s in order))
    for op, row in sorted(table.items()):
        print(f"  {op:<34}" + " ".join(f"{row.get(s, 0):12.1f}" for s in order))
    return rc


def batches(args: argparse.Namespace) -> int:
    """Per operation that batched: launches, requests and the mean batch size."""
    text = scrape(args.metrics)
    sums = families(text, "gpucompute_batch_size_sum")
    for labels, count in sorted(families(text, "gpucompute_batch_size_count").items()):
        if count > 0:
            op = dict(kv.split("=", 1) for kv in labels)["operation"].strip('"')
            requests = sums.get(labels, 0)
            print(f"batches  {op:<17} {count:8.0f} launches {requests:8.0f} requests  "
                  f"mean {requests / count:5.2f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("python-latency")
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rows", type=int, default=4, help="rows of 256: 4 makes 1024 elements")
    p.set_defaults(run=python_latency)
    f = sub.add_parser("python-floor")
    f.add_argument("--target", default="127.0.0.1:50051")
    f.add_argument("--seconds", type=float, default=5.0)
    f.set_defaults(run=python_floor)
    one = sub.add_parser("python-floor-one")  # one variant, in its own process
    one.add_argument("--target", default="127.0.0.1:50051")
    one.add_argument("--seconds", type=float, default=1.0)
    one.add_argument("--variant", choices=[name for name, _, _ in FLOOR_VARIANTS])
    one.set_defaults(run=python_floor_one)
    s = sub.add_parser("stages")
    s.add_argument("--metrics", default="http://127.0.0.1:9464/metrics")
    s.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS: the load to measure")
    s.set_defaults(run=stages)
    b = sub.add_parser("batches")
    b.add_argument("--metrics", default="http://127.0.0.1:9464/metrics")
    b.set_defaults(run=batches)
    args = parser.parse_args()
    if getattr(args, "command", None) and args.command[0] == "--":
        args.command = args.command[1:]
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
