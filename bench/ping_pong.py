#!/usr/bin/env python3
"""Where a small Python request's time goes: the same 1024-element float32
normalize as a unary call (Client.normalize with session=False), as a request of the
client's open Compute.Session (Client.normalize, the default), as one chunk of an open
StreamingCompute stream (the next chunk sent once the last result came back: no call
set-up per request), and the health check, p50/p99 over --count requests each.

    python3 bench/ping_pong.py --target 127.0.0.1:50051 [--count 3000]
"""
import argparse
import queue
import threading
import time

import numpy as np

import gpucompute
from gpucompute import _pb, _wire

pb = _pb.pb


def percentiles(samples):
    s = sorted(samples)
    return s[len(s) // 2] * 1e6, s[int(len(s) * 0.99)] * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--count", type=int, default=3000)
    args = p.parse_args()
    row = (np.random.default_rng(1).random(1024) + 0.1).astype(np.float32)
    client = gpucompute.Client(args.target, session=False)
    session_client = gpucompute.Client(args.target)
    for _ in range(200):
        client.normalize(row)
        session_client.normalize(row)
        client.health()

    def timed(f):
        out = []
        for _ in range(args.count):
            t = time.perf_counter()
            f()
            out.append(time.perf_counter() - t)
        return out

    unary = timed(lambda: client.normalize(row))
    session = timed(lambda: session_client.normalize(row))
    health = timed(lambda: client.health())

    # One StreamingCompute call for all the requests: rows as chunks, one at a time.
    import grpc
    channel = grpc.insecure_channel(args.target)
    call = channel.stream_stream("/gpucompute.v1.Compute/StreamingCompute",
                                 request_serializer=lambda m: m if isinstance(m, bytes)
                                 else m.SerializeToString(),
                                 response_deserializer=_wire.decode_result_chunk)
    rows = 200 + args.count
    requests = queue.Queue()
    header = pb.StreamingComputeRequest(header=pb.StreamingComputeHeader(
        operation=pb.STREAMING_NORMALIZE, dtype=pb.FLOAT32, shape=[rows, 1024]))
    requests.put(header)
    data = pb.StreamingComputeRequest(data=row.tobytes()).SerializeToString()

    def feed():
        while True:
            item = requests.get()
            if item is None:
                return
            yield item

    responses = call(feed())
    first = next(responses)  # the result header
    assert first.WhichOneof("kind") == "header", first
    streamed = []
    for k in range(rows):
        t = time.perf_counter()
        requests.put(data)
        chunk = next(responses)
        if k >= 200:
            streamed.append(time.perf_counter() - t)
        assert isinstance(chunk, _wire.DataChunk), chunk
        got = np.frombuffer(chunk.data, np.float32)
        assert np.allclose(got, row / row.sum(dtype=np.float64), rtol=1e-6)
    requests.put(None)
    for _ in responses:
        pass
    for name, samples in (("unary normalize", unary), ("session normalize", session),
                          ("streamed normalize chunk", streamed),
                          ("health check", health)):
        p50, p99 = percentiles(samples)
        print(f"python {name:26s} p50 {p50:7.1f} us  p99 {p99:7.1f} us  ({len(samples)} requests)")


if __name__ == "__main__":
    main()
